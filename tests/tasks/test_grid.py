"""The grid games' shared adapter (masrl/tasks/grid.py) on a toy game worked by hand: walk right
along a line from 0 to the item's goal; an action is a number of steps."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from masrl.tasks.base import TurnTask
from masrl.tasks.grid import GameRules, GridGame
from masrl.tasks.planpath import PlanPathTask
from masrl.tasks.procedural import Instance, ProceduralSplits
from masrl.tasks.sokoban import SokobanTask
from masrl.tasks.sudoku import SudokuTask
from masrl.tasks.team import RewardDesign, RewardParts


@dataclass(frozen=True)
class Moved:
    state: int


def walk_rules(goal: int) -> GameRules:
    def parse(text: str) -> int | None:
        found = re.fullmatch(r"\s*walk (\d+)\s*", text)
        return int(found.group(1)) if found else None

    return GameRules(
        parse=parse,
        answer_text=str,
        reset=lambda item: 0,
        step=lambda pos, steps: Moved(pos if steps is None else pos + steps),
        solved=lambda pos: pos == goal,
        describe=lambda pos: f"at {pos}, goal {goal}",
        reward_parts=lambda role, before, out: RewardParts(team=float(out.state == goal), scores={role: 1.0}),
    )


class Walk(GridGame):
    design = RewardDesign(lam=0.5, coefficients={"tool": {"tool": 1.0}, "planner": {"planner": 1.0}})

    def __init__(self, goal: int = 3):
        splits = ProceduralSplits("walk", lambda rng: Instance(f"walk to {rng.randint(1, 99)}", "", {}), 0, 0.5)
        super().__init__(f"walk{goal}", splits, walk_rules(goal))


def test_the_adapter_forwards_to_the_rules():
    game = Walk(goal=3)
    assert isinstance(game, TurnTask) and game.roles == ("tool", "planner") and game.commits == ("planner",)
    item = game.items("train", 0, 1)[0]
    assert game.extract_answer("walk 3") == "3" and game.extract_answer("run 3") is None
    assert game.score(item, "walk 3") == 1.0 and game.score(item, "walk 2") == 0.0
    assert game.score(item, "no action") == 0.0  # a None action leaves the start state
    start = game.reset(item)
    out = game.step(start, "planner", game.parse("walk 2"))
    assert out.state == 2 and not game.done(out.state) and game.observe(out.state) == "at 2, goal 3"
    out = game.step(out.state, "tool", game.parse("walk 1"))
    assert game.done(out.state) and game.solved(out.state)
    assert game.reward_parts("tool", 2, out) == RewardParts(team=1.0, scores={"tool": 1.0})


def test_items_are_seeded_and_the_splits_disjoint():
    game = Walk()
    train, held = game.items("train", 0, 20), game.items("eval", 0, 20)
    assert game.items("train", 5, 3) == train[5:8]
    assert not {i.question for i in train} & {i.question for i in held}
    with pytest.raises(ValueError, match="split"):
        game.items("test", 0, 1)


@pytest.mark.parametrize("make", [lambda: SudokuTask(seed=2), lambda: SokobanTask(seed=2), lambda: PlanPathTask(seed=2)])
def test_the_three_games_are_grid_games_whose_gold_answers_solve_their_items(make):
    game = make()
    assert isinstance(game, GridGame) and isinstance(game.rules, GameRules) and game.design is not None
    for item in game.items("eval", 0, 3):
        assert game.score(item, item.answer) == 1.0 and not game.solved(game.reset(item))
