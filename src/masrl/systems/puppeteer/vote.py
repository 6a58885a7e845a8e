"""Majority vote over the final answers of W parallel paths (Puppeteer (arXiv:2505.19591),
section 3 "Implementation Details": "dynamic collaboration uses majority voting for output
aggregation").

Answers are compared after `normalise` (a task's own notion of sameness can be passed
in, e.g. numeric equality). Paths with no answer do not vote. A tie goes to the tied
answer that a path reached first (lowest path index): deterministic, and with greedy
paths ordered by sampling it is the earliest sample.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence


def majority_vote(answers: Sequence[str | None], same: Callable[[str, str], bool] | None = None) -> str | None:
    """The most common answer (first-reached among ties); None when no path answered."""
    same = same or (lambda a, b: a.strip() == b.strip())
    classes: list[list[str]] = []  # each class: answers judged the same, in path order
    for a in answers:
        if a is None:
            continue
        for cls in classes:
            if same(cls[0], a):
                cls.append(a)
                break
        else:
            classes.append([a])
    if not classes:
        return None
    best = max(len(c) for c in classes)
    return next(c[0] for c in classes if len(c) == best)  # classes are in first-reached order
