"""Math with a reasoner and a Python tool, turn by turn: parsing, numeric equality, the reasoner's and the tool's rewards by hand, items from reasoning-gym."""

from __future__ import annotations

import pytest

from masrl.tasks import TurnTask
from masrl.tasks.mathturn import MathReply, MathState, MathTurnTask, num_eq, parse_math
from masrl.tasks.team import mixed_reward
from masrl.tasks.tools import ToolRun
from masrl.types import TaskItem


# ---------------------------------------------------------------- math
@pytest.mark.parametrize(
    "text,reply",
    [
        ("Steps: 6 * 7.\n#### 42", MathReply("42", True)),
        ("so the answer is \\boxed{7}.", MathReply("7", True)),
        ("#### \\boxed{3/4}", MathReply("3/4", True)),
        ("I think it is 12", MathReply("12", False)),  # a last number, not the schema
        ("42\n", MathReply("42", False)),  # a tool's printed output
        ("no idea", None),
    ],
)
def test_parse_math(text, reply):
    assert parse_math(text) == reply


def test_num_eq():
    assert num_eq("0.3333333", "1/3")  # within 1e-6
    assert not num_eq("0.333", "1/3")
    assert num_eq("1,000", "1000") and num_eq("2e6", "2000001")  # relative tolerance on large numbers
    assert not num_eq("banana", "3")


ITEM = TaskItem("m/0", "What is 6 * 7?", "42")


@pytest.mark.parametrize(
    "role,text,run,team,scores",
    [
        # the tool already said 42: agreement on the right answer
        ("reasoner", "6 * 7 = 42\n#### 42", None, 1.0, {"fmt": 1, "tool": 0, "step": 1}),
        ("reasoner", "it is 41", None, 0.0, {"fmt": 0, "tool": 0, "step": 0}),
        ("reasoner", "#### 41", None, 0.0, {"fmt": 1, "tool": 0, "step": 0}),
    ],
)
def test_math_reasoner_rewards(role, text, run, team, scores):
    task = MathTurnTask.__new__(MathTurnTask)  # no reasoning-gym draw needed for the environment
    before = MathState(ITEM, {"tool": "42"})
    out = task.step(before, role, task.parse(text))
    parts = task.reward_parts(role, before, out, run)
    assert parts.team == team and parts.scores == scores


def test_math_tool_rewards_and_mix_by_hand():
    task = MathTurnTask.__new__(MathTurnTask)
    before = MathState(ITEM, {"reasoner": "42"})
    ok = ToolRun("print(6*7)", "ok", "42\n", "")
    out = task.step(before, "tool", task.parse(ok.stdout))
    parts = task.reward_parts("tool", before, out, ok)
    assert parts.team == 1.0 and parts.scores == {"fmt": 1, "tool": 1, "step": 1}
    assert task.done(out.state) and task.solved(out.state)
    crashed = ToolRun("print(x)", "error", "", "NameError")
    out = task.step(before, "tool", task.parse(crashed.stdout))
    parts = task.reward_parts("tool", before, out, crashed)
    assert parts.scores == {"fmt": 1, "tool": 0, "step": 0} and parts.team == 0.0
    assert not task.done(out.state)  # the tool withdrew its answer
    # a tool that answered without code: no fmt, no tool score, but the right number
    out = task.step(before, "tool", task.parse("42"))
    parts = task.reward_parts("tool", before, out, None)
    assert parts.scores == {"fmt": 0, "tool": 0, "step": 1}
    reward, comps = mixed_reward(task.design, "tool", parts)  # lambda .7: .7 * 1 + .3 * .8
    assert reward == pytest.approx(0.94) and comps["local"] == pytest.approx(0.8)


def test_math_turn_task_items_come_from_reasoning_gym():
    task = MathTurnTask("basic_arithmetic", seed=1, difficulty="easy")
    assert isinstance(task, TurnTask)
    item = task.items("train", 0, 1)[0]
    assert task.score(item, item.answer) == 1.0
    assert not task.done(task.reset(item))


def test_the_episode_is_solved_by_the_answer_roles_answer():
    """The reasoner's answer decides a team's episode; `answered_by("tool")` makes the tool agent's decide it (one
    agent holding the Python tool, alone) and leaves the original alone; a role the task lacks is refused."""
    team = MathTurnTask("basic_arithmetic", seed=1)
    single_tool = team.answered_by("tool")
    item = team.items("train", 0, 1)[0]
    wrong = str(float(item.answer) + 1)
    tool_right = single_tool.step(single_tool.reset(item), "tool", MathReply(item.answer, True)).state
    assert single_tool.solved(tool_right) and not team.solved(tool_right)  # the reasoner has said nothing
    both = team.step(tool_right, "reasoner", MathReply(wrong, True)).state
    assert not team.solved(both) and single_tool.solved(both)
    assert team.answer_role == "reasoner" and single_tool.items("train", 0, 1) == [item]
    with pytest.raises(ValueError, match="math_turns answers come from"):
        team.answered_by("judge")
