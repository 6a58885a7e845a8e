"""Grid-game task families of the turn-based agents (AT-GRPO): generators, splits, parsers,
environment steps and reward components against hand-checked states."""

from __future__ import annotations

import pytest

from masrl.config import ConfigError, TaskConfig
from masrl.registry import build_task
from masrl.tasks import BUILTIN, Task, TurnTask
from masrl.tasks.moves import parse_moves
from masrl.tasks.planpath import Maze, PathState, PlanPathTask
from masrl.tasks.planpath import reward_parts as path_parts
from masrl.tasks.planpath import step as path_step
from masrl.tasks.sokoban import (
    Room,
    SokobanState,
    SokobanTask,
    deadlocked,
    potential,
    shortest_solution,
)
from masrl.tasks.sokoban import reward_parts as sok_parts
from masrl.tasks.sokoban import step as sok_step
from masrl.tasks.sudoku import SudokuState, SudokuTask, _solutions, parse_fills
from masrl.tasks.sudoku import reward_parts as sudoku_parts
from masrl.tasks.sudoku import step as sudoku_step
from masrl.tasks.team import (
    RewardDesign,
    RewardParts,
    mix_alpha,
    mix_lambda,
    mixed_reward,
)

GAMES = [
    (SudokuTask, {}),
    (SokobanTask, {}),
    (PlanPathTask, {}),
]


# ---------------------------------------------------------------- shared: registry, splits, answers
@pytest.mark.parametrize("cls,kw", GAMES)
def test_generated_items_are_seeded_disjoint_and_solved_by_their_answer(cls, kw):
    a, b = cls(seed=3, **kw), cls(seed=3, **kw)
    train = a.items("train", 0, 120)
    assert b.items("train", 100, 20) == train[100:]  # b never drew 0..99: item i does not depend on history
    assert a.items("eval", 0, 10) == b.items("eval", 0, 10)
    evals = a.items("eval", 0, 60)
    assert not {i.question for i in train} & {i.question for i in evals}
    assert len({i.question for i in train}) >= 115  # a varied space, not a handful repeated
    assert [i.question for i in cls(seed=4, **kw).items("train", 0, 10)] != [i.question for i in train[:10]]
    assert isinstance(a, Task) and isinstance(a, TurnTask)
    for item in train[:40] + evals[:20]:
        assert a.score(item, a.extract_answer(item.answer)) == 1.0
        assert not a.solved(a.reset(item))  # never already solved
    assert a.extract_answer("I am not sure.") is None


def test_registry_builds_the_games():
    assert {"sudoku", "sokoban", "planpath"} <= set(BUILTIN)
    task = build_task(TaskConfig(kind="sudoku", seed=1, config={"blanks": 6}))
    assert isinstance(task, SudokuTask) and task.items("train", 0, 2) == SudokuTask(seed=1, blanks=6).items("train", 0, 2)
    with pytest.raises(ConfigError, match="task.config for sudoku: .*colour"):
        build_task(TaskConfig(kind="sudoku", config={"colour": 1}))
    with pytest.raises(ValueError, match="blanks"):
        SudokuTask(blanks=16)
    with pytest.raises(ValueError, match="square"):
        SudokuTask(size=5)
    with pytest.raises(ValueError, match="min_distance"):
        PlanPathTask(height=3, width=3, min_distance=9)
    with pytest.raises(ValueError, match="do not fit"):
        SokobanTask(size=4, boxes=3, inner_walls=1)


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


# ---------------------------------------------------------------- Plan-Path
#   ....      start (0,0), goal (2,3); BFS distances to the goal:
#   .##.      5 4 3 2 / 4 # # 1 / 3 2 1 0 ; Manhattan d0 = 5
#   ....
MAZE = Maze(("....", ".##.", "...."), (0, 0), (2, 3))
START = PathState(MAZE, (0, 0))


def test_maze_bfs_distance():
    assert MAZE.distance[(0, 0)] == 5 and MAZE.distance[(1, 0)] == 4 and (1, 1) not in MAZE.distance
    assert len(MAZE.shortest_path((0, 0))) == 5


@pytest.mark.parametrize(
    "state,text,pos,team,planner,tool",
    [
        # all four moves on a shortest path; Manhattan 5 -> 1: team (5-1)/5
        (START, "#### [R, R, R, D]", (1, 3), 0.8, {"fmt": 1, "leg": 1, "sp": 1}, {"fmt": 1, "exec": 1, "shape": 1}),
        # D is shortest, then R into a wall stops the list: Manhattan 5 -> 4
        (START, "[D, R]", (1, 0), 0.2, {"fmt": 1, "leg": 0, "sp": 1}, {"fmt": 1, "exec": 0, "shape": 1}),
        # off the grid at once: nothing executed, distance unchanged
        (START, "[L]", (0, 0), 0.0, {"fmt": 1, "leg": 0, "sp": 0}, {"fmt": 1, "exec": 0, "shape": 1}),
        # there and back: the second move leaves the shortest path
        (START, "[R, L]", (0, 0), 0.0, {"fmt": 1, "leg": 1, "sp": 0}, {"fmt": 1, "exec": 1, "shape": 1}),
        # reaches the goal after one move; the rest is ignored
        (PathState(MAZE, (1, 3)), "[D, D, L]", (2, 3), 1.0, {"fmt": 1, "leg": 1, "sp": 1}, {"fmt": 1, "exec": 1, "shape": 1}),
        # moves away from the goal: potential -d drops
        (PathState(MAZE, (1, 3)), "[U]", (0, 3), 0.0, {"fmt": 1, "leg": 1, "sp": 0}, {"fmt": 1, "exec": 1, "shape": 0}),
        # unparsable: a format failure, no move, every local component 0
        (START, "go right a few times", (0, 0), 0.0, {"fmt": 0, "leg": 0, "sp": 0}, {"fmt": 0, "exec": 0, "shape": 0}),
    ],
)
def test_planpath_step_and_reward_components(state, text, pos, team, planner, tool):
    out = path_step(state, parse_moves(text))
    assert out.state.pos == pos
    p, t = path_parts("planner", state, out), path_parts("tool", state, out)
    assert p.team == pytest.approx(team) and t.team == pytest.approx(team)
    assert p.scores == planner and t.scores == tool and p.mask == 1.0


def test_planpath_mixed_rewards_by_hand():
    task = PlanPathTask(seed=0)
    out = path_step(START, ("D", "R"))  # team 0.2; planner local .2 + 0 + .4 = .6; tool local .1 + 0 + .5 = .6
    r, comps = mixed_reward(task.design, "planner", path_parts("planner", START, out), mix="lambda")
    assert r == pytest.approx(0.5 * 0.2 + 0.5 * 0.6)
    assert comps == pytest.approx({"team": 0.2, "local": 0.6, "mask": 1.0, "local/fmt": 1.0, "local/leg": 0.0, "local/sp": 1.0})
    r, _ = mixed_reward(task.design, "tool", path_parts("tool", START, out), mix="alpha", alpha=1.0)
    assert r == pytest.approx(0.2 + 0.6)
    with pytest.raises(ValueError, match="roles planner and tool"):
        path_parts("coder", START, out)


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


# ---------------------------------------------------------------- mixes
def test_mixes_by_hand():
    assert mix_alpha(0.5, 0.8, 0.0, alpha=2.0, lam=0.3) == pytest.approx(1.8)  # mask ignored in eq. 4
    assert mix_lambda(0.5, 0.8, 1.0, alpha=2.0, lam=0.3) == pytest.approx(0.3 * 0.5 + 0.7 * 0.8)
    assert mix_lambda(0.5, 0.8, 0.0, alpha=2.0, lam=0.3) == pytest.approx(0.15)  # masked local
    design = RewardDesign(0.7, {"reasoner": {"fmt": 0.2, "step": 0.8}})
    parts = RewardParts(1.0, {"fmt": 1.0, "step": 0.0})
    assert mixed_reward(design, "reasoner", parts, lam=0.5)[0] == pytest.approx(0.5 + 0.5 * 0.2)
    with pytest.raises(ValueError, match="sum to 1"):
        RewardDesign(0.5, {"x": {"a": 0.5}})
    with pytest.raises(ValueError, match="unknown reward mix"):
        mixed_reward(design, "reasoner", parts, mix="product")
    with pytest.raises(ValueError, match="needs component scores"):
        mixed_reward(design, "reasoner", RewardParts(1.0, {"fmt": 1.0}))


def test_evals_package_mazes_as_eval_set(tmp_path):
    """Two lines in the `evals` maze file format (0 path, 1 wall, 2 start, 3 exit; ideal as a list)."""
    import json

    def line(rows, ideal):
        maze = "\n".join("[" + ",".join(map(str, r)) + "]" for r in rows) + "\n"
        content = f"**Task Description:** ...\n<maze-to-solve>\n{maze}\n<maze-to-solve-end>\n\nYour Solution:\n"
        return json.dumps({"input": [{"role": "user", "content": content}], "ideal": str(ideal)})

    path = tmp_path / "10x10-mazes.jsonl"
    path.write_text(
        line([[2, 0, 0], [1, 1, 0], [3, 0, 0]], ["right", "right", "down", "down", "left", "left"]) + "\n"
        + line([[0, 0, 3], [1, 1, 0], [2, 0, 0]], ["right", "right", "up", "up"]) + "\n"
    )  # fmt: skip
    task = PlanPathTask(seed=0, evals_mazes=str(path))
    first, second = task.items("eval", 0, 10)
    assert first.answer == "R R D D L L" and first.metadata["shortest"] == 6 and first.metadata["rows"] == ["...", "##.", "..."]
    assert task.score(first, first.answer) == 1.0 and task.score(second, "R R U U") == 1.0
    assert task.score(second, "U U R R") == 0.0  # into the wall
    assert task.items("train", 0, 1)[0].id.startswith("planpath10x10/train/")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(line([[0, 0], [0, 0]], ["up"]) + "\n")
    with pytest.raises(ValueError, match="bad.jsonl:1: a maze needs one start"):
        PlanPathTask(evals_mazes=str(bad))
