"""Plan-Path: reach the goal on an H x W grid with walls (AT-GRPO (arXiv:2510.11062), sec. 5, appendix A.1.4).

Generator: each interior cell is a wall with probability `wall_density`;
start and goal are two distinct free cells; breadth-first search from the goal
gives every cell's shortest-path distance, and a draw is kept only if the
start reaches the goal in at least `min_distance` moves (else the same rng
draws again). The paper's size is 10 x 10.

Environment: the state is the agent's cell. An action is a list of moves
(U, D, L, R, read by masrl.tasks.moves.parse_moves). Moves run in order; a
move off the grid or into a wall is illegal and stops the list there; moves
after the goal is reached are ignored. `step` never raises: an unparsable
reply is the action None, which changes nothing.

Extra eval set: `evals_mazes` = the path of the `evals` package's
registry/data/mazes/10x10-mazes.jsonl (2,000 mazes; extract the file, the
package itself is not installed) replaces the generated eval split.

Rewards (appendix A.1.4, lambda = 0.5). d = Manhattan distance to the goal,
d0 = max(1, initial distance).
- team: 1 at the goal, else max(0, (d_before - d_after) / d0);
- planner: fmt (a move list was read), leg (no illegal move), sp (every
  executed move lies on a shortest path: its BFS distance drops by one;
  the paper scores one move, we score each move of the list);
- tool: fmt, exec (no illegal move and at least one move executed: "the
  simulation advances"), shape (phi = -d did not decrease).
"""

from __future__ import annotations

import json
import re
from collections import deque
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from random import Random

from masrl.tasks.grid import GameRules, GridGame
from masrl.tasks.moves import MOVES, parse_moves
from masrl.tasks.procedural import Instance, ProceduralSplits
from masrl.tasks.team import RewardDesign, RewardParts
from masrl.types import TaskItem

Cell = tuple[int, int]

DESIGN = RewardDesign(
    lam=0.5,
    coefficients={
        "planner": {"fmt": 0.2, "leg": 0.4, "sp": 0.4},
        "tool": {"fmt": 0.1, "exec": 0.4, "shape": 0.5},
    },
)


@dataclass(frozen=True)
class Maze:
    rows: tuple[str, ...]  # "#" wall, "." free
    start: Cell
    goal: Cell

    @property
    def height(self) -> int:
        return len(self.rows)

    @property
    def width(self) -> int:
        return len(self.rows[0])

    def free(self, cell: Cell) -> bool:
        r, c = cell
        return 0 <= r < self.height and 0 <= c < self.width and self.rows[r][c] != "#"

    @cached_property
    def distance(self) -> dict[Cell, int]:
        """Shortest-path moves from every reachable cell to the goal (BFS from the goal)."""
        dist = {self.goal: 0}
        queue = deque([self.goal])
        while queue:
            r, c = queue.popleft()
            for dr, dc in MOVES.values():
                nxt = (r + dr, c + dc)
                if self.free(nxt) and nxt not in dist:
                    dist[nxt] = dist[(r, c)] + 1
                    queue.append(nxt)
        return dist

    def shortest_path(self, frm: Cell) -> tuple[str, ...]:
        """One shortest move list from `frm` to the goal (moves tried in U, D, L, R order)."""
        out, cell = [], frm
        while cell != self.goal:
            for name, (dr, dc) in MOVES.items():
                nxt = (cell[0] + dr, cell[1] + dc)
                if self.distance.get(nxt, -1) == self.distance[cell] - 1:
                    out.append(name)
                    cell = nxt
                    break
        return tuple(out)


@dataclass(frozen=True)
class PathState:
    maze: Maze
    pos: Cell


@dataclass(frozen=True)
class PathOutcome:
    state: PathState  # after the action
    moves: tuple[str, ...] | None  # None: the reply held no move list
    executed: int  # moves that changed the position
    illegal: bool  # stopped at a move off the grid or into a wall
    shortest: bool  # every executed move lowered the BFS distance by one


def manhattan(a: Cell, b: Cell) -> int:
    return abs(a[0] - b[0]) + abs(a[1] - b[1])


def step(state: PathState, moves: tuple[str, ...] | None) -> PathOutcome:
    maze, pos = state.maze, state.pos
    if moves is None:
        return PathOutcome(state, None, 0, False, False)
    executed, illegal, shortest = 0, False, True
    for m in moves:
        if pos == maze.goal:
            break
        dr, dc = MOVES[m]
        nxt = (pos[0] + dr, pos[1] + dc)
        if not maze.free(nxt):
            illegal = True
            break
        if maze.distance.get(nxt, -1) != maze.distance.get(pos, -2) - 1:
            shortest = False
        pos, executed = nxt, executed + 1
    return PathOutcome(PathState(maze, pos), moves, executed, illegal, shortest and executed > 0)


def reward_parts(role: str, before: PathState, out: PathOutcome) -> RewardParts:
    maze = before.maze
    after = out.state.pos
    d0 = max(1, manhattan(maze.start, maze.goal))
    if after == maze.goal:
        team = 1.0
    else:
        team = max(0.0, (manhattan(before.pos, maze.goal) - manhattan(after, maze.goal)) / d0)
    ok = out.moves is not None
    if role == "planner":
        scores = {"fmt": float(ok), "leg": float(ok and not out.illegal), "sp": float(ok and out.shortest)}
    elif role == "tool":
        scores = {
            "fmt": float(ok),
            "exec": float(ok and not out.illegal and out.executed > 0),
            "shape": float(ok and manhattan(after, maze.goal) <= manhattan(before.pos, maze.goal)),
        }
    else:
        raise ValueError(f"plan-path has roles planner and tool, not {role!r}")
    return RewardParts(team=team, scores=scores)


def render(state: PathState) -> str:
    """The grid with A (agent), G (goal), # (wall), . (free), rows numbered from 0."""
    lines = []
    for r, row in enumerate(state.maze.rows):
        cells = list(row)
        for c in range(len(cells)):
            if (r, c) == state.maze.goal:
                cells[c] = "G"
            if (r, c) == state.pos:
                cells[c] = "A"
        lines.append("".join(cells))
    return "\n".join(lines)


def describe(state: PathState) -> str:
    m = state.maze
    return (
        f"Grid ({m.height} rows x {m.width} columns; row 0 is the top). A = you, G = goal, # = wall, . = free.\n"
        f"{render(state)}\n"
        f"You are at (row {state.pos[0]}, column {state.pos[1]}); "
        f"the goal is at (row {m.goal[0]}, column {m.goal[1]}).\n"
        "Moves: U (row - 1), D (row + 1), L (column - 1), R (column + 1)."
    )


def generate(rng: Random, height: int, width: int, wall_density: float, min_distance: int) -> Maze:
    while True:
        rows = tuple(
            "".join("#" if rng.random() < wall_density else "." for _ in range(width)) for _ in range(height)
        )
        free = [(r, c) for r in range(height) for c in range(width) if rows[r][c] == "."]
        if len(free) < 2:
            continue
        start, goal = rng.sample(free, 2)
        maze = Maze(rows, start, goal)
        if maze.distance.get(start, -1) >= min_distance:
            return maze


_EVALS_MAZE = re.compile(r"<maze-to-solve>\s*(.*?)\s*<maze-to-solve-end>", re.DOTALL)


def load_evals_mazes(path: str | Path) -> list[TaskItem]:
    """The `evals` package's maze files (registry/data/mazes/NxN-mazes.jsonl, 2,000 10x10 mazes) as
    Plan-Path eval items. Each line holds the maze as rows of 0 (path), 1 (wall), 2 (start) and
    3 (exit) between <maze-to-solve> tags, and the shortest move list as `ideal`; the item's
    question is our own rendering, its answer the ideal moves as U/D/L/R."""
    path = Path(path)
    items = []
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            row = json.loads(line)
            found = _EVALS_MAZE.search(row["input"][-1]["content"])
            if not found:
                raise ValueError(f"{where}: no <maze-to-solve> block")
            cells = [json.loads(r) for r in found.group(1).split()]
            start = [(r, c) for r, cs in enumerate(cells) for c, v in enumerate(cs) if v == 2]
            goal = [(r, c) for r, cs in enumerate(cells) for c, v in enumerate(cs) if v == 3]
            if len(start) != 1 or len(goal) != 1:
                raise ValueError(f"{where}: a maze needs one start (2) and one exit (3)")
            maze = Maze(tuple("".join("#" if v == 1 else "." for v in cs) for cs in cells), start[0], goal[0])
            moves = parse_moves(str(row.get("ideal", "")).replace("'", ""))
            if maze.distance.get(maze.start) is None or moves is None:
                raise ValueError(f"{where}: the exit cannot be reached, or `ideal` is not a move list")
            md = {"rows": list(maze.rows), "start": list(maze.start), "goal": list(maze.goal)}
            md["shortest"] = maze.distance[maze.start]
            items.append(TaskItem(f"evals-maze/{number}", describe(PathState(maze, maze.start)), " ".join(moves), md))
    return items


def maze_of(item: TaskItem) -> Maze:
    md = item.metadata
    return Maze(tuple(md["rows"]), tuple(md["start"]), tuple(md["goal"]))


def start_state(item: TaskItem) -> PathState:
    maze = maze_of(item)
    return PathState(maze, maze.start)


def at_goal(state: PathState) -> bool:
    return state.pos == state.maze.goal


class PlanPathTask(GridGame):
    """Seeded Plan-Path grids; the answer of an item is one shortest move list."""

    design = DESIGN
    rules = GameRules(
        parse=parse_moves, answer_text=" ".join, reset=start_state, step=step, solved=at_goal, describe=describe,
        reward_parts=reward_parts,
    )  # fmt: skip

    def __init__(
        self, seed: int = 0, height: int = 10, width: int = 10, wall_density: float = 0.25, min_distance: int = 4,
        eval_fraction: float = 0.1, evals_mazes: str | None = None,
    ):
        if height < 2 or width < 2:
            raise ValueError(f"plan-path grid must be at least 2 x 2, got {height} x {width}")
        if not 0.0 <= wall_density < 0.6:
            raise ValueError(f"wall_density must be in [0, 0.6), got {wall_density}")
        if not 1 <= min_distance <= height + width - 2:
            raise ValueError(f"min_distance must be in [1, {height + width - 2}], got {min_distance}")

        def make(rng: Random) -> Instance:
            maze = generate(rng, height, width, wall_density, min_distance)
            state = PathState(maze, maze.start)
            md = {"rows": list(maze.rows), "start": list(maze.start), "goal": list(maze.goal)}
            md["shortest"] = maze.distance[maze.start]
            return Instance(describe(state), " ".join(maze.shortest_path(maze.start)), md)

        name = f"planpath{height}x{width}"
        super().__init__(name, ProceduralSplits(name, make, seed, eval_fraction))
        self.extra_eval = load_evals_mazes(evals_mazes) if evals_mazes else None

    def items(self, split: str, start: int, count: int) -> list[TaskItem]:
        """Train: generated grids. Eval: held-out generated grids, or the `evals` package's mazes
        when `evals_mazes` names their file."""
        if split == "eval" and self.extra_eval is not None:
            return self.extra_eval[start : start + count]
        return super().items(split, start, count)
