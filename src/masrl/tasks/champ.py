"""CHAMP's competition problems as a task, read from a recorded pool file (masrl.pools.champ).

The pool file holds one JSON line per problem: its question, reference answer
and, for each recorded model, the response text and its grade. A response that
ends in one of the recorded summaries (what the pool's replayed agents reply:
solution, `ANSWER_JOINT`, summary) scores that summary's recorded grade; any
other response is graded by the rule (`champ_grading.grade_summary`) on its
final line, 0 where the rule has no verdict. A question goes to eval when
`held_out` says so; train cycles forever.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from masrl.components import CHAMP_DATASET, Component, file_component
from masrl.tasks.base import TaskFamily, check_split, held_out
from masrl.tasks.champ_grading import grade_summary
from masrl.types import TaskItem

# Between a recorded solution and its one-sentence summary in a replayed response.
ANSWER_JOINT = "\n\nFinal answer: "


@dataclass(frozen=True)
class Recorded:
    """One model's recorded response to one problem."""

    text: str
    correct: bool
    tokens_in: int
    tokens_out: int
    cost: float


def read_champ_pool(path: str | Path) -> tuple[list[TaskItem], dict[str, dict[str, Recorded]]]:
    """The pool file's problems as `TaskItem`s, and {model: {problem id: Recorded}} with the models
    ordered weak to strong (by graded accuracy, ties by name).

    Each item's metadata holds its ``category``, the marked-up ``reference`` answer and
    ``correct``: {model: recorded grade}."""
    tasks: list[TaskItem] = []
    per_model: dict[str, dict[str, Recorded]] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            row = json.loads(line)
            grades = {name: bool(r["correct"]) for name, r in row["responses"].items()}
            meta = {"source": "champ", "category": row["category"], "reference": row["reference"], "correct": grades}
            tasks.append(TaskItem(row["id"], row["question"], row["answer"], meta))
            for name, r in row["responses"].items():
                per_model.setdefault(name, {})[row["id"]] = Recorded(
                    r["text"], bool(r["correct"]), int(r["tokens_in"]), int(r["tokens_out"]), float(r["cost"])
                )
    order = sorted(per_model, key=lambda n: (sum(r.correct for r in per_model[n].values()), n))
    return tasks, {n: per_model[n] for n in order}


class ChampTask:
    """CHAMP's problems as a task that owns its reward (`masrl.tasks.base.Task`)."""

    name = "champ"

    def __init__(self, path: str | Path, eval_fraction: float = 0.3):
        self.path = Path(path)
        tasks, recordings = read_champ_pool(path)
        self._split = {
            "train": [t for t in tasks if not held_out(t.question, eval_fraction)],
            "eval": [t for t in tasks if held_out(t.question, eval_fraction)],
        }
        self._recorded: dict[str, Mapping[str, bool]] = {
            t.id: {_final_line(r[t.id].text): r[t.id].correct for r in recordings.values()} for t in tasks
        }

    def items(self, split: str, start: int, count: int) -> list[TaskItem]:
        check_split(split)
        pool = self._split[split]
        if split == "eval":
            return pool[start : start + count]
        return [pool[i % len(pool)] for i in range(start, start + count)]

    def extract_answer(self, text: str) -> str | None:
        return _final_line(text) or None

    def score(self, item: TaskItem, answer: str) -> float:
        recorded = self._recorded.get(item.id, {})
        if answer in recorded:
            return 1.0 if recorded[answer] else 0.0
        verdict = grade_summary(item.metadata.get("reference", item.answer), item.question, answer)
        return 1.0 if verdict else 0.0


def _final_line(text: str) -> str:
    """The summary after ANSWER_JOINT in a recorded response, else the last non-empty line."""
    if ANSWER_JOINT in text:
        return text.rsplit(ANSWER_JOINT, 1)[1].strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _champ_task(spec) -> ChampTask:
    return ChampTask(spec.path)


def _champ_needs(spec) -> tuple[Component, ...]:
    """The pool file task.path names, and how to build it (with the champ-dataset package when it is missing)."""
    build = f"masrl champ-pool {spec.path}"
    get = build if CHAMP_DATASET.find() is not None else f"pip install champ-dataset && {build}"
    return (file_component(spec.path, "the CHAMP pool file task.path names", get),)


# The task family `task.kind: champ` (masrl.tasks.BUILTIN): the pool file's problems.
CHAMP = TaskFamily(
    _champ_task, "CHAMP's competition problems from a built pool file (task.path)", needs_path=True, needs=_champ_needs
)
