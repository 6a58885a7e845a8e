"""The program system's plain pieces (masrl/systems/program/system.py): what a program reads on stdin,
how its answer is checked, and the fault counts of its runs."""

from __future__ import annotations

import json

from masrl.systems.program.system import checked, failed_call, fault_metrics, task_json
from masrl.tasks.math import MathTask
from masrl.types import Call, Episode, TaskItem

ITEM = TaskItem("q1", "What is 20 - 1?", "19", {"level": 1})


def test_the_program_reads_the_task_without_its_answer():
    assert json.loads(task_json(ITEM)) == {"id": "q1", "question": "What is 20 - 1?", "metadata": {"level": 1}}
    assert task_json(ITEM).endswith(b"\n")


def test_the_answer_is_found_by_the_tasks_own_extraction():
    task = MathTask()
    assert checked(task, ITEM, "20 - 1 = 19") == 1.0  # the last number, as any model reply is read
    assert checked(task, ITEM, "<answer>18</answer>") == 0.0
    assert checked(task, ITEM, None) == 0.0 and checked(task, ITEM, "") == 0.0


def test_fault_metrics_count_runs_and_failures_by_reason():
    ran = Call("0", None, "program", "program", 0, (), None, done=True)
    episodes = [Episode(ITEM, (ran,)),
                Episode(ITEM, (failed_call("0", None, 0, "timeout: 120 s"),)),
                Episode(ITEM, (failed_call("0", None, 0, "crash: exit 1"), failed_call("1", None, 0, "crash: exit 2")))]  # fmt: skip
    assert failed_call("0", None, 0, "crash: x").failed
    assert fault_metrics(episodes) == {"program/runs": 4.0, "program/failed": 3.0, "program/failed_crash": 2.0,
                                       "program/failed_timeout": 1.0}  # fmt: skip
