"""Sudoku: fill an N x N grid (N = 4 by default, boxes of sqrt(N)) (AT-GRPO (arXiv:2510.11062), appendix A.1.3).

Generator (our own; py-sudoku is not installed): a random full grid by
randomised backtracking, then cells are blanked in a random order, each kept
blank only while the puzzle still has exactly one solution, until `blanks`
cells are empty or no more can go. The answer is the solution grid.

Environment: the state is the current grid (0 = empty) and the givens. An
action is a list of fills (row, column, value), 1-based, read from either a
full grid or a list of [r, c, v] triples (JSON after the `####` marker, or a
grid written as N lines of digits with . or 0 for blanks); see `parse_fills`.
A fill outside the grid or with a value outside 1..N, or one that would change
a given, is rejected (not applied); later fills of a cell override earlier
ones. `step` never raises.

Rewards (appendix A.1.3, lambda = 0.6). team: 1 when the grid is solved (an
episode ends when it is, so this is the paper's "1 at termination when
Solved"). The paper's Reasoner is our planner.
- planner: fmt (fills were read), legal (no duplicate in any row, column or
  box of the new grid), prog (cells that were empty and are now filled / N^2);
- tool: fmt (read, every index and value in range), exec (no fill rejected),
  san (at least one fill applied and every applied value is unique in its
  row, column and box; the paper's "all applied edits satisfy local
  constraints", made non-vacuous so an empty reply does not earn it).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from random import Random

from masrl.tasks.grid import GameRules, GridGame
from masrl.tasks.moves import final_segment
from masrl.tasks.procedural import Instance, ProceduralSplits
from masrl.tasks.team import RewardDesign, RewardParts
from masrl.types import TaskItem

Grid = tuple[tuple[int, ...], ...]
Fill = tuple[int, int, int]  # (row, column, value), 1-based as the agents write them

DESIGN = RewardDesign(
    lam=0.6,
    coefficients={
        "planner": {"fmt": 0.15, "legal": 0.55, "prog": 0.3},
        "tool": {"fmt": 0.1, "exec": 0.2, "san": 0.7},
    },
)


@dataclass(frozen=True)
class SudokuState:
    givens: Grid
    grid: Grid

    @property
    def n(self) -> int:
        return len(self.grid)


@dataclass(frozen=True)
class SudokuOutcome:
    state: SudokuState
    fills: tuple[Fill, ...] | None  # None: the reply held no grid or fill list
    in_range: bool  # every index and value within 1..N
    rejected: int  # fills not applied (out of range, or changing a given)
    applied: tuple[tuple[int, int], ...]  # 0-based cells whose value the action set


def box_size(n: int) -> int:
    b = math.isqrt(n)
    if b * b != n:
        raise ValueError(f"sudoku size must be a square (4, 9, ...), got {n}")
    return b


def _peers(grid: Grid, r: int, c: int) -> list[int]:
    """Values in the row, column and box of (r, c), the cell itself excluded."""
    n, b = len(grid), box_size(len(grid))
    br, bc = r - r % b, c - c % b
    cells = {(r, j) for j in range(n)} | {(i, c) for i in range(n)}
    cells |= {(br + i, bc + j) for i in range(b) for j in range(b)}
    cells.discard((r, c))
    return [grid[i][j] for i, j in cells]


def legal(grid: Grid) -> bool:
    """No filled value repeats in a row, column or box."""
    n = len(grid)
    return all(grid[r][c] == 0 or grid[r][c] not in _peers(grid, r, c) for r in range(n) for c in range(n))


def solved(state: SudokuState) -> bool:
    return all(v != 0 for row in state.grid for v in row) and legal(state.grid)


def _solutions(grid: list[list[int]], limit: int, rng: Random | None = None) -> list[Grid]:
    """Up to `limit` completions of `grid` by backtracking (values in random order when rng is given)."""
    n = len(grid)
    out: list[Grid] = []

    def fill(k: int) -> None:
        if len(out) >= limit:
            return
        if k == n * n:
            out.append(tuple(tuple(row) for row in grid))
            return
        r, c = divmod(k, n)
        if grid[r][c]:
            fill(k + 1)
            return
        values = list(range(1, n + 1))
        if rng is not None:
            rng.shuffle(values)
        frozen = tuple(tuple(row) for row in grid)
        taken = set(_peers(frozen, r, c))
        for v in values:
            if v not in taken:
                grid[r][c] = v
                fill(k + 1)
                grid[r][c] = 0
                if len(out) >= limit:
                    return

    fill(0)
    return out


def generate(rng: Random, n: int, blanks: int) -> tuple[Grid, Grid]:
    """(puzzle, solution) with a unique solution and at most `blanks` empty cells."""
    solution = _solutions([[0] * n for _ in range(n)], 1, rng)[0]
    puzzle = [list(row) for row in solution]
    cells = [(r, c) for r in range(n) for c in range(n)]
    rng.shuffle(cells)
    removed = 0
    for r, c in cells:
        if removed == blanks:
            break
        keep = puzzle[r][c]
        puzzle[r][c] = 0
        if len(_solutions([row[:] for row in puzzle], 2)) == 1:
            removed += 1
        else:
            puzzle[r][c] = keep
    return tuple(tuple(row) for row in puzzle), solution


# ---------------------------------------------------------------- reading actions
_BRACKETED = re.compile(r"\[[\s\d,\[\]\"'.\-]*\]")
_GRID_LINE = re.compile(r"^[\s|]*([0-9.*_](?:[\s,|]*[0-9.*_])*)[\s|]*$")


def parse_fills(text: str, n: int) -> tuple[Fill, ...] | None:
    """The fills a reply asks for, or None if it holds neither an N x N grid nor [r, c, v] triples.

    Looks after the last `####` if present, else in the whole text: the last
    JSON-like list that is an N x N grid of integers (0 = leave empty) or a
    list of integer triples; failing that, the last N consecutive lines that
    each hold N cells (digits; . _ * or 0 for blanks). Indices and values are
    returned as written (range is checked by `step`)."""
    segment = final_segment(text)
    for raw in reversed(_BRACKETED.findall(segment)):
        try:
            value = json.loads(raw.replace("'", '"'))
        # RecursionError: absurdly deep nesting; ValueError also covers an integer past Python's
        # 4,300-digit limit, which json raises outside JSONDecodeError (it stopped the run).
        except (ValueError, RecursionError):
            continue
        fills = _from_json(value, n)
        if fills is not None:
            return fills
    lines = [m.group(1) for m in map(_GRID_LINE.match, segment.splitlines()) if m]
    rows = [[0 if ch in "._*" else int(ch) for ch in re.sub(r"[\s,|]", "", line)] for line in lines]
    for end in range(len(rows), n - 1, -1):
        block = rows[end - n : end]
        if all(len(row) == n for row in block):
            return tuple((r + 1, c + 1, v) for r, row in enumerate(block) for c, v in enumerate(row) if v)
    return None


def _from_json(value: object, n: int) -> tuple[Fill, ...] | None:
    if not isinstance(value, list) or not value or not all(isinstance(row, list) for row in value):
        return None
    if not all(isinstance(v, int) and not isinstance(v, bool) for row in value for v in row):
        return None
    if len(value) == n and all(len(row) == n for row in value):
        return tuple((r + 1, c + 1, v) for r, row in enumerate(value) for c, v in enumerate(row) if v)
    if all(len(row) == 3 for row in value):
        return tuple((r, c, v) for r, c, v in value)
    return None


def step(state: SudokuState, fills: tuple[Fill, ...] | None) -> SudokuOutcome:
    if fills is None:
        return SudokuOutcome(state, None, False, 0, ())
    n = state.n
    grid = [list(row) for row in state.grid]
    in_range, rejected, applied = True, 0, {}
    for r, c, v in fills:
        if not (1 <= r <= n and 1 <= c <= n and 1 <= v <= n):
            in_range = False
            rejected += 1
            continue
        if state.givens[r - 1][c - 1]:
            rejected += state.givens[r - 1][c - 1] != v  # restating a given is harmless
            continue
        grid[r - 1][c - 1] = v
        applied[(r - 1, c - 1)] = None
    new = SudokuState(state.givens, tuple(tuple(row) for row in grid))
    return SudokuOutcome(new, fills, in_range, rejected, tuple(applied))


def reward_parts(role: str, before: SudokuState, out: SudokuOutcome) -> RewardParts:
    after = out.state
    n = after.n
    ok = out.fills is not None
    if role == "planner":
        newly = sum(1 for r in range(n) for c in range(n) if before.grid[r][c] == 0 and after.grid[r][c] != 0)
        scores = {"fmt": float(ok), "legal": float(ok and legal(after.grid)), "prog": newly / (n * n) if ok else 0.0}
    elif role == "tool":
        sane = bool(out.applied) and all(after.grid[r][c] not in _peers(after.grid, r, c) for r, c in out.applied)
        scores = {"fmt": float(ok and out.in_range), "exec": float(ok and out.rejected == 0), "san": float(ok and sane)}
    else:
        raise ValueError(f"sudoku has roles planner and tool, not {role!r}")
    return RewardParts(team=1.0 if solved(after) else 0.0, scores=scores)


def render(grid: Grid) -> str:
    return "\n".join(" ".join(str(v) if v else "." for v in row) for row in grid)


def describe(state: SudokuState) -> str:
    n, b = state.n, box_size(state.n)
    return (
        f"Sudoku {n} x {n} (boxes of {b} x {b}); . is an empty cell.\n{render(state.grid)}\n"
        f"Fill every empty cell with a digit 1..{n} so that each row, each column and each box holds every digit once."
    )


def grid_json(grid: Grid) -> str:
    return json.dumps([list(row) for row in grid], separators=(",", ":"))


def start_state(item: TaskItem) -> SudokuState:
    puzzle = tuple(tuple(row) for row in item.metadata["puzzle"])
    return SudokuState(puzzle, puzzle)


def fills_json(fills: tuple[Fill, ...]) -> str:
    return json.dumps([list(f) for f in fills], separators=(",", ":"))


class SudokuTask(GridGame):
    """Seeded N x N Sudoku puzzles with unique solutions; the answer is the solution grid as JSON.
    `extract_answer` gives the reply's fills as JSON triples."""

    design = DESIGN

    def __init__(self, seed: int = 0, size: int = 4, blanks: int = 8, eval_fraction: float = 0.1):
        box_size(size)
        if size > 9:
            raise ValueError(f"sudoku size at most 9, got {size}")
        if not 1 <= blanks < size * size:
            raise ValueError(f"blanks must be in [1, {size * size - 1}], got {blanks}")
        self.size = size

        def make(rng: Random) -> Instance:
            puzzle, solution = generate(rng, size, blanks)
            state = SudokuState(puzzle, puzzle)
            md = {"puzzle": [list(r) for r in puzzle], "solution": [list(r) for r in solution]}
            return Instance(describe(state), grid_json(solution), md)

        name = f"sudoku{size}x{size}"
        rules = GameRules(
            parse=lambda text: parse_fills(text, size), answer_text=fills_json, reset=start_state, step=step,
            solved=solved, describe=describe, reward_parts=reward_parts,
        )  # fmt: skip
        super().__init__(name, ProceduralSplits(name, make, seed, eval_fraction), rules)
