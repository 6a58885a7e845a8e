"""A response's reward components: the format reward's three levels and tags, the correct and format terms together."""

from __future__ import annotations

import pytest

from masrl.tasks.rewards import format_reward, reward_terms
from masrl.tasks.math import MathTask
from masrl.types import TaskItem


# ---- rewards ----


@pytest.mark.parametrize(
    "text,expected",
    [
        ("<answer>7</answer>", 1.0),
        ("thinking...\n<answer> 7 </answer>\n  ", 1.0),
        ("<answer>7</answer> and more", 0.5),
        ("<answer></answer>", 0.5),
        ("<answer>  \n</answer>", 0.5),
        ("<answer>1</answer><answer>2</answer>", 0.5),
        ("<answer>1</answer> <answer>", 0.5),
        ("<answer>7", 0.0),
        ("</answer>7<answer>", 0.0),
        ("the answer is 7", 0.0),
        ("", 0.0),
    ],
)
def test_format_reward(text, expected):
    assert format_reward(text) == expected


def test_format_reward_other_tag():
    assert format_reward("<final>3</final>", tag="final") == 1.0
    assert format_reward("<answer>3</answer>", tag="final") == 0.0


def test_reward_terms():
    task = MathTask()
    item = TaskItem("i", "q", "12")
    assert reward_terms(task, item, "<answer>12</answer>") == {"correct": 1.0, "format": 1.0}
    assert reward_terms(task, item, "it is 12") == {"correct": 1.0, "format": 0.0}
    assert reward_terms(task, item, "<answer>11</answer> ok") == {"correct": 0.0, "format": 0.5}
