"""What every task shares (masrl/tasks/base.py): grading a response into correct, answer and formatted."""

from __future__ import annotations

from masrl.tasks.base import Grade, grade
from masrl.tasks.math import MathTask
from masrl.types import TaskItem


def test_grade():
    task = MathTask()
    item = TaskItem("i", "q", "12")
    assert grade(task, item, "so <answer>12</answer>") == Grade(correct=True, answer="12", formatted=True)
    assert grade(task, item, "I think 3 + 4 = 7") == Grade(correct=False, answer="7", formatted=True)
    assert grade(task, item, "no idea") == Grade(correct=False, answer=None, formatted=False)
