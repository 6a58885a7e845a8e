"""Parsing the grid games' moves (up, down, left, right and their short forms) from a reply."""

from __future__ import annotations

import pytest

from masrl.tasks.moves import parse_moves


# ---------------------------------------------------------------- moves parser
@pytest.mark.parametrize(
    "text,moves",
    [
        ("#### [U, R, R, D]", ("U", "R", "R", "D")),
        ("reasoning [1, 2] ... final: ['U', \"L\"]", ("U", "L")),
        ("Plan:\nup, up, Right\n", ("U", "U", "R")),
        ("Actions: URRD", ("U", "R", "R", "D")),
        ("[U, R] first, then #### [D]", ("D",)),  # after the marker only
        ("U -> R -> D", ("U", "R", "D")),
        ("#### []", ()),
        ("I would go up first", None),
        ("#### [U, X]", None),
        ("", None),
    ],
)
def test_parse_moves(text, moves):
    assert parse_moves(text) == moves
