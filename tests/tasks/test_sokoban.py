"""Sokoban: environment steps, reward components, the mixed reward and the solver against hand-checked states."""

from __future__ import annotations

import pytest

from masrl.tasks.moves import parse_moves
from masrl.tasks.sokoban import (
    Room,
    SokobanState,
    SokobanTask,
    deadlocked,
    potential,
    reward_parts as sok_parts,
    shortest_solution,
    step as sok_step,
)
from masrl.tasks.team import mixed_reward


# ---------------------------------------------------------------- Sokoban
#   ######
#   #____#
#   #_PXO#     player (2,2); boxes (2,3), (3,2); goals (2,4), (4,2)
#   #_X__#
#   #_O__#
#   ######
def _room() -> SokobanState:
    border = {(r, c) for r in range(6) for c in range(6) if r in (0, 5) or c in (0, 5)}
    room = Room(6, frozenset(border), frozenset({(2, 4), (4, 2)}))
    return SokobanState(room, (2, 2), frozenset({(2, 3), (3, 2)}))


@pytest.mark.parametrize(
    "text,player,boxes,team,planner,tool",
    [
        # push box 1 onto its goal: 1 of 2 boxes on goals; psi -2 -> -1
        ("[R]", (2, 3), {(2, 4), (3, 2)}, 0.5, {"fmt": 1, "leg": 1, "dlk": 1}, {"fmt": 1, "exec": 1, "pot": 1}),
        # both pushes: solved
        ("[R, L, D]", (3, 2), {(2, 4), (4, 2)}, 1.0, {"fmt": 1, "leg": 1, "dlk": 1}, {"fmt": 1, "exec": 1, "pot": 1}),
        # second push would shove the box into the wall: illegal, stops
        ("[R, R]", (2, 3), {(2, 4), (3, 2)}, 0.5, {"fmt": 1, "leg": 0, "dlk": 1}, {"fmt": 1, "exec": 0, "pot": 1}),
        # box 1 pushed off its goal into corner (1,4): a static deadlock; psi stays -2
        ("[R, D, R, U]", (2, 4), {(1, 4), (3, 2)}, 0.0, {"fmt": 1, "leg": 1, "dlk": 0}, {"fmt": 1, "exec": 1, "pot": 1}),
        # box 1 pushed up to (1,3), away from every goal: psi -2 -> -3; (1,3) is no corner
        ("L D D R R U U", (2, 3), {(1, 3), (3, 2)}, 0.0, {"fmt": 1, "leg": 1, "dlk": 1}, {"fmt": 1, "exec": 1, "pot": 0}),
        ("no idea", (2, 2), {(2, 3), (3, 2)}, 0.0, {"fmt": 0, "leg": 0, "dlk": 0}, {"fmt": 0, "exec": 0, "pot": 0}),
    ],
)
def test_sokoban_step_and_reward_components(text, player, boxes, team, planner, tool):
    start = _room()
    assert potential(start) == -2
    out = sok_step(start, parse_moves(text))
    assert out.state.player == player and out.state.boxes == boxes
    p, t = sok_parts("planner", start, out), sok_parts("tool", start, out)
    assert p.team == team and p.scores == planner and t.scores == tool


def test_sokoban_mixed_reward_and_solver_by_hand():
    start = _room()
    out = sok_step(start, ("R", "D", "R", "U"))  # team 0; planner local .1 + .45 = .55; tool local 1
    assert deadlocked(out.state)
    r, _ = mixed_reward(SokobanTask.design, "planner", sok_parts("planner", start, out), mix="lambda")
    assert r == pytest.approx(0.6 * 0.55)
    r, _ = mixed_reward(SokobanTask.design, "tool", sok_parts("tool", start, out), mix="lambda")
    assert r == pytest.approx(0.6)
    assert len(shortest_solution(start)) == 3  # R, L, D (or D, U, R)
