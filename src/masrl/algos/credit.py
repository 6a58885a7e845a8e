"""Credit assignment and grouping on episode trees: pure functions on calls.

Credit turns the rewards on a call tree into a return per call. `tree_q` is
the backward recursion Q(c) = r(c) + V(c), V(c) = mean over c's children that
did not fail of gamma^(turns between them) * Q(child) (0 for a call that ended
its trajectory). On a
tree that branches only at the root (parallel sampling) it is the plain
return-to-go of each trajectory; on a full tree it is the critique-and-routing
controller's recursion (critique-routing-controller.txt, appendix E.2).

Grouping decides which calls are compared: `task` compares calls of the same
task, role and turn (GRPO over G parallel episodes); `siblings` compares the
candidates drawn at the same tree node.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from masrl.types import Call, Episode


def tree_q(episode: Episode, gamma: float = 1.0) -> dict[str, float]:
    failed = episode.failed_ids()
    q: dict[str, float] = {}
    for call in reversed(episode.calls):  # children are listed after parents
        if call.id in failed:
            continue
        # Discount per turn, not per call: a frozen agent's answer at the same
        # turn as the action that asked for it is part of that action's outcome.
        kids = [gamma ** (k.turn - call.turn) * q[k.id] for k in episode.children(call.id) if k.id in q]
        value = sum(kids) / len(kids) if kids and not call.done else 0.0
        q[call.id] = call.reward + value
    return q


def group_by_task(calls: Sequence[tuple[int, Call]]) -> list[Hashable]:
    """Same task (episode index), role and turn: GRPO over G parallel episodes."""
    return [(i, c.role, c.turn) for i, c in calls]


def group_by_siblings(calls: Sequence[tuple[int, Call]]) -> list[Hashable]:
    """The candidates drawn at the same tree node."""
    return [(i, c.parent) for i, c in calls]


CREDITS = {"tree_q": tree_q}
# One signature: the batch's trainable calls as (episode index, call) -> one group key per call.
# Batch-level, so a grouping may also regroup across episodes.
GROUPINGS = {"task": group_by_task, "siblings": group_by_siblings}


def trainable_calls(episodes: Sequence[Episode]) -> list[tuple[int, Call]]:
    """(episode index, call) for every trainable call on a trajectory that did not fail."""
    out = []
    for i, ep in enumerate(episodes):
        failed = ep.failed_ids()
        out.extend((i, c) for c in ep.calls if c.id not in failed and c.reply is not None and c.reply.trainable)
    return out
