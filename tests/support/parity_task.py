"""A task family the tiny model scores on about half the time: a reply is correct when its bytes sum to an
even number. Plugged in by dotted path (`task.kind=parity_task:FAMILY`, tests/support/ on the path), so runs in
subprocesses get rewards with spread, non-zero advantages and real updates every step."""

from __future__ import annotations

from masrl.tasks.base import TaskFamily
from masrl.types import TaskItem


class ParityTask:
    name = "parity"

    def items(self, split: str, start: int, count: int) -> list[TaskItem]:
        return [TaskItem(f"{split}-{i}", f"Say something ({split} {i}).", "even") for i in range(start, start + count)]

    def extract_answer(self, text: str) -> str | None:
        return "even" if sum(text.encode()) % 2 == 0 else "odd"

    def score(self, item: TaskItem, answer: str) -> float:
        return float(answer == item.answer)


FAMILY = TaskFamily(build=lambda spec: ParityTask(), summary="byte-sum parity (tests)")
