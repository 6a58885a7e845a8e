"""Seeded train/eval splits for task families that generate their own instances.

A generator is a function `make(rng) -> TaskItem-like (question, answer, metadata)`.
`ProceduralSplits` draws instance j of a split from `random.Random(f"{seed}/{split}/{j}")`
(one independent stream per split and position, so item i never depends on how
many items were asked for before) and keeps it only if `held_out(question)`
(base.py) sends it to that split. So the splits are disjoint by question text
whatever the seed, and item i of a split is the i-th kept instance.

Used by the grid games (Sudoku, Sokoban, Plan-Path) and the code task.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from random import Random
from typing import Any

from masrl.tasks.base import SPLITS, check_split, held_out
from masrl.types import TaskItem

# A generator whose whole question space hashes into one split would loop
# forever: give up after this many rejected draws in a row.
MAX_REJECTED = 10_000


@dataclass(frozen=True)
class Instance:
    question: str
    answer: str
    metadata: Mapping[str, Any] = field(default_factory=dict)


class ProceduralSplits:
    def __init__(self, name: str, make: Callable[[Random], Instance], seed: int, eval_fraction: float):
        if not 0.0 < eval_fraction < 1.0:
            raise ValueError(f"eval_fraction must be in (0, 1), got {eval_fraction}")
        self.name, self.make, self.seed, self.eval_fraction = name, make, seed, eval_fraction
        self._items: dict[str, list[TaskItem]] = {s: [] for s in SPLITS}
        self._drawn = {s: 0 for s in SPLITS}
        self._lock = threading.Lock()

    def items(self, split: str, start: int, count: int) -> list[TaskItem]:
        check_split(split)
        with self._lock:
            out = self._items[split]
            rejected = 0
            while len(out) < start + count:
                j = self._drawn[split]
                self._drawn[split] += 1
                inst = self.make(Random(f"{self.seed}/{split}/{j}"))
                if held_out(inst.question, self.eval_fraction) != (split == "eval"):
                    rejected += 1
                    if rejected >= MAX_REJECTED:
                        raise RuntimeError(
                            f"{self.name}: {MAX_REJECTED} draws in a row held none for {split!r};"
                            f" the instance space is too small for eval_fraction={self.eval_fraction}"
                        )
                    continue
                rejected = 0
                out.append(TaskItem(f"{self.name}/{split}/{len(out)}", inst.question, inst.answer, inst.metadata))
            return out[start : start + count]
