"""Plan-Path: the maze's BFS distance, environment steps, reward components and team/local mixes by hand, the packaged eval mazes."""

from __future__ import annotations

import pytest

from masrl.tasks.moves import parse_moves
from masrl.tasks.planpath import Maze, PathState, PlanPathTask, reward_parts as path_parts, step as path_step
from masrl.tasks.team import mixed_reward


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
