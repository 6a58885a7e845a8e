"""Sudoku: parsing fills, environment steps, reward components, the mixed reward by hand and unique solutions."""

from __future__ import annotations

import pytest

from masrl.tasks.sudoku import (
    SudokuState,
    SudokuTask,
    _solutions,
    parse_fills,
    reward_parts as sudoku_parts,
    step as sudoku_step,
)
from masrl.tasks.team import mixed_reward


# ---------------------------------------------------------------- Sudoku
PUZZLE = ((1, 0, 3, 0), (0, 4, 0, 2), (2, 0, 4, 0), (0, 3, 0, 1))
SOLUTION = ((1, 2, 3, 4), (3, 4, 1, 2), (2, 1, 4, 3), (4, 3, 2, 1))
SUDOKU = SudokuState(PUZZLE, PUZZLE)


@pytest.mark.parametrize(
    "text,fills",
    [
        ("#### [[1,2,2]]", ((1, 2, 2),)),
        ("steps: [[1, 2, 2], [2, 1, 3]] done", ((1, 2, 2), (2, 1, 3))),
        ("#### [[1,2,3,4],[3,4,1,2],[2,1,4,3],[4,3,2,1]]", tuple((r + 1, c + 1, SOLUTION[r][c]) for r in range(4) for c in range(4))),
        ("Answer:\n1 2 . 4\n3 4 1 2\n2 1 4 3\n4 3 2 1\n", tuple((r + 1, c + 1, SOLUTION[r][c]) for r in range(4) for c in range(4) if (r, c) != (0, 2))),
        ("[[1,2],[3,4]]", None),  # neither a 4x4 grid nor triples
        ("the grid is hard", None),
        ("[[1, 2, " + "9" * 5000 + "]]", None),  # past Python's 4,300-digit int: json's ValueError stopped the run
        ("[[1,2,2]] or [[1, 2, " + "9" * 5000 + "]]", ((1, 2, 2),)),  # the list before it still reads
    ],
)
def test_parse_fills(text, fills):
    assert parse_fills(text, 4) == fills


@pytest.mark.parametrize(
    "fills,team,planner,tool",
    [
        # one correct fill: progress 1/16
        (((1, 2, 2),), 0.0, {"fmt": 1, "legal": 1, "prog": 1 / 16}, {"fmt": 1, "exec": 1, "san": 1}),
        # a 3 next to the given 3 in row 1: illegal grid, applied edit not sane
        (((1, 2, 3),), 0.0, {"fmt": 1, "legal": 0, "prog": 1 / 16}, {"fmt": 1, "exec": 1, "san": 0}),
        # the whole solution: 8 blanks filled, solved
        (tuple((r + 1, c + 1, SOLUTION[r][c]) for r in range(4) for c in range(4)), 1.0,
         {"fmt": 1, "legal": 1, "prog": 0.5}, {"fmt": 1, "exec": 1, "san": 1}),
        # changing a given is rejected; nothing applied
        (((1, 1, 2),), 0.0, {"fmt": 1, "legal": 1, "prog": 0}, {"fmt": 1, "exec": 0, "san": 0}),
        # restating a given is harmless
        (((1, 1, 1), (1, 2, 2)), 0.0, {"fmt": 1, "legal": 1, "prog": 1 / 16}, {"fmt": 1, "exec": 1, "san": 1}),
        # out of range value: tool format fails
        (((5, 1, 1),), 0.0, {"fmt": 1, "legal": 1, "prog": 0}, {"fmt": 0, "exec": 0, "san": 0}),
        (None, 0.0, {"fmt": 0, "legal": 0, "prog": 0}, {"fmt": 0, "exec": 0, "san": 0}),
    ],
)  # fmt: skip
def test_sudoku_step_and_reward_components(fills, team, planner, tool):
    out = sudoku_step(SUDOKU, fills)
    p, t = sudoku_parts("planner", SUDOKU, out), sudoku_parts("tool", SUDOKU, out)
    assert p.team == team and t.team == team
    assert p.scores == pytest.approx(planner) and t.scores == tool


def test_sudoku_mixed_reward_by_hand_and_uniqueness():
    out = sudoku_step(SUDOKU, ((1, 2, 2),))
    r, comps = mixed_reward(SudokuTask.design, "planner", sudoku_parts("planner", SUDOKU, out))
    assert r == pytest.approx(0.4 * (0.15 + 0.55 + 0.3 / 16))  # lambda 0.6, team 0
    assert comps["local/prog"] == pytest.approx(1 / 16)
    for item in SudokuTask(seed=0).items("train", 0, 20):
        assert len(_solutions([list(r) for r in item.metadata["puzzle"]], 2)) == 1
