"""Sokoban: push every box onto a goal (AT-GRPO (arXiv:2510.11062), sec. 5, appendix A.1.5).

Generator (reverse play, our own): an N x N room whose border is wall, plus
`inner_walls` random interior walls. Boxes start on their goals; the player
stands on a free cell; then `reverse_steps` random reverse moves: the player
steps to a free neighbour and, with probability `pull_prob`, pulls a box that
was behind it along. Every pull is a push played backwards, so the reversed
move list (each direction flipped) solves the puzzle from where the reverse
play ends: solvable by construction, and that list is the item's answer
(a solution, not necessarily the shortest). A draw that leaves every box on a
goal is drawn again. The item's answer is a shortest solution found by
breadth-first search over (player, boxes), which a 6 x 6 room makes cheap;
rooms solved in fewer than `min_moves` moves are drawn again. The paper's size is 6 x 6.

Environment: the state is the player and the boxes. An action is a move list
(masrl.tasks.moves.parse_moves). A move into a wall or off the grid, or a push
whose box would hit a wall, another box or the edge, is illegal and stops the
list; moves after every box is on a goal are ignored. `step` never raises.

Rewards (appendix A.1.5, lambda = 0.4). B boxes, b of them on goals;
psi = -sum over boxes of the Manhattan distance to the nearest goal.
- team: 1 when every box is on a goal, else b / B;
- planner: fmt (a move list was read), leg (no illegal move or push), dlk
  (after the moves no box off a goal sits in a corner of two walls: the
  standard static corner deadlock);
- tool: fmt, exec (no illegal move or push), pot (psi did not decrease).
"""

from __future__ import annotations

from dataclasses import dataclass
from random import Random

from masrl.tasks.grid import GameRules, GridGame
from masrl.tasks.moves import MOVES, parse_moves
from masrl.tasks.procedural import Instance, ProceduralSplits
from masrl.tasks.team import RewardDesign, RewardParts
from masrl.types import TaskItem

Cell = tuple[int, int]
OPPOSITE = {"U": "D", "D": "U", "L": "R", "R": "L"}

DESIGN = RewardDesign(
    lam=0.4,
    coefficients={
        "planner": {"fmt": 0.1, "leg": 0.45, "dlk": 0.45},
        "tool": {"fmt": 0.1, "exec": 0.3, "pot": 0.6},
    },
)


@dataclass(frozen=True)
class Room:
    size: int
    walls: frozenset[Cell]  # border included
    goals: frozenset[Cell]

    def wall(self, cell: Cell) -> bool:
        r, c = cell
        return not (0 <= r < self.size and 0 <= c < self.size) or cell in self.walls


@dataclass(frozen=True)
class SokobanState:
    room: Room
    player: Cell
    boxes: frozenset[Cell]


@dataclass(frozen=True)
class SokobanOutcome:
    state: SokobanState
    moves: tuple[str, ...] | None  # None: the reply held no move list
    executed: int  # moves that changed the state
    illegal: bool  # stopped at a move into a wall or a blocked push


def _add(cell: Cell, move: str) -> Cell:
    dr, dc = MOVES[move]
    return (cell[0] + dr, cell[1] + dc)


def solved(state: SokobanState) -> bool:
    return state.boxes <= state.room.goals


def step(state: SokobanState, moves: tuple[str, ...] | None) -> SokobanOutcome:
    if moves is None:
        return SokobanOutcome(state, None, 0, False)
    room, player, boxes = state.room, state.player, set(state.boxes)
    executed, illegal = 0, False
    for m in moves:
        if boxes <= room.goals:
            break
        nxt = _add(player, m)
        if room.wall(nxt):
            illegal = True
            break
        if nxt in boxes:
            beyond = _add(nxt, m)
            if room.wall(beyond) or beyond in boxes:
                illegal = True
                break
            boxes.remove(nxt)
            boxes.add(beyond)
        player, executed = nxt, executed + 1
    return SokobanOutcome(SokobanState(room, player, frozenset(boxes)), moves, executed, illegal)


def potential(state: SokobanState) -> int:
    """psi: minus the summed Manhattan distance of each box to its nearest goal."""
    goals = state.room.goals
    return -sum(min(abs(b[0] - g[0]) + abs(b[1] - g[1]) for g in goals) for b in state.boxes)


def deadlocked(state: SokobanState) -> bool:
    """A box off every goal with walls on two orthogonal sides can never move again."""
    room = state.room
    for b in state.boxes - room.goals:
        vertical = room.wall(_add(b, "U")) or room.wall(_add(b, "D"))
        horizontal = room.wall(_add(b, "L")) or room.wall(_add(b, "R"))
        if vertical and horizontal:
            return True
    return False


def reward_parts(role: str, before: SokobanState, out: SokobanOutcome) -> RewardParts:
    after = out.state
    on_goal = len(after.boxes & after.room.goals)
    team = 1.0 if solved(after) else on_goal / len(after.boxes)
    ok = out.moves is not None
    if role == "planner":
        scores = {"fmt": float(ok), "leg": float(ok and not out.illegal), "dlk": float(ok and not deadlocked(after))}
    elif role == "tool":
        scores = {
            "fmt": float(ok),
            "exec": float(ok and not out.illegal),
            "pot": float(ok and potential(after) >= potential(before)),
        }
    else:
        raise ValueError(f"sokoban has roles planner and tool, not {role!r}")
    return RewardParts(team=team, scores=scores)


def render(state: SokobanState) -> str:
    """# wall, _ floor, O goal, X box, V box on a goal, P player, Q player on a goal."""
    room, lines = state.room, []
    for r in range(room.size):
        row = []
        for c in range(room.size):
            cell, goal = (r, c), (r, c) in room.goals
            if cell in room.walls:
                row.append("#")
            elif cell == state.player:
                row.append("Q" if goal else "P")
            elif cell in state.boxes:
                row.append("V" if goal else "X")
            else:
                row.append("O" if goal else "_")
        lines.append("".join(row))
    return "\n".join(lines)


def describe(state: SokobanState) -> str:
    return (
        f"Sokoban room ({state.room.size} x {state.room.size}; row 0 is the top).\n"
        "Legend: # wall, _ floor, O goal, X box, V box on a goal, P you, Q you on a goal.\n"
        f"{render(state)}\n"
        "Push every box onto a goal. Moves: U (up), D (down), L (left), R (right); "
        "walking into a box pushes it one cell if the cell beyond it is free."
    )


def generate(
    rng: Random, size: int, boxes: int, inner_walls: int, reverse_steps: int, pull_prob: float
) -> tuple[SokobanState, tuple[str, ...]]:
    """A start state and a solution move list, by reverse play."""
    border = {(r, c) for r in range(size) for c in range(size) if r in (0, size - 1) or c in (0, size - 1)}
    interior = sorted({(r, c) for r in range(size) for c in range(size)} - border)
    while True:
        walls = set(rng.sample(interior, inner_walls))
        free = [cell for cell in interior if cell not in walls]
        if len(free) < boxes + 1:
            continue
        picked = rng.sample(free, boxes + 1)
        goals, player = frozenset(picked[:boxes]), picked[boxes]
        room = Room(size, frozenset(border | walls), goals)
        placed, played = set(goals), []
        for _ in range(reverse_steps):
            move = rng.choice("UDLR")
            nxt = _add(player, move)
            if room.wall(nxt) or nxt in placed:
                continue
            behind = _add(player, OPPOSITE[move])
            if behind in placed and rng.random() < pull_prob:
                placed.remove(behind)
                placed.add(player)
            player = nxt
            played.append(move)
        start = SokobanState(room, player, frozenset(placed))
        if not solved(start):
            return start, tuple(OPPOSITE[m] for m in reversed(played))


def shortest_solution(state: SokobanState, max_states: int = 200_000) -> tuple[str, ...] | None:
    """A shortest move list that solves `state` (breadth-first over player and box cells), or None."""
    seen = {(state.player, state.boxes)}
    frontier: list[tuple[SokobanState, tuple[str, ...]]] = [(state, ())]
    while frontier:
        nxt_frontier = []
        for s, path in frontier:
            if solved(s):
                return path
            for m in "UDLR":
                out = step(s, (m,))
                key = (out.state.player, out.state.boxes)
                if out.executed and key not in seen:
                    seen.add(key)
                    nxt_frontier.append((out.state, path + (m,)))
            if len(seen) > max_states:
                return None
        frontier = nxt_frontier
    return None


def state_of(item: TaskItem) -> SokobanState:
    md = item.metadata
    room = Room(md["size"], frozenset(map(tuple, md["walls"])), frozenset(map(tuple, md["goals"])))
    return SokobanState(room, tuple(md["player"]), frozenset(map(tuple, md["boxes"])))


class SokobanTask(GridGame):
    """Seeded Sokoban rooms made by reverse play; the answer of an item is a shortest solution."""

    design = DESIGN
    rules = GameRules(
        parse=parse_moves, answer_text=" ".join, reset=state_of, step=step, solved=solved, describe=describe,
        reward_parts=reward_parts,
    )  # fmt: skip

    def __init__(
        self, seed: int = 0, size: int = 6, boxes: int = 1, inner_walls: int = 2, reverse_steps: int = 40,
        pull_prob: float = 0.7, min_moves: int = 2, eval_fraction: float = 0.1,
    ):
        if size < 4:
            raise ValueError(f"sokoban room must be at least 4 x 4, got {size}")
        if boxes < 1 or boxes + 1 + inner_walls > (size - 2) ** 2:
            raise ValueError(f"{boxes} boxes and {inner_walls} inner walls do not fit a {size} x {size} room")
        if not 0.0 < pull_prob <= 1.0 or reverse_steps < 1 or not 1 <= min_moves <= reverse_steps:
            raise ValueError("pull_prob must be in (0, 1], reverse_steps >= 1, 1 <= min_moves <= reverse_steps")

        def make(rng: Random) -> Instance:
            while True:  # redraw (same rng) until the room needs at least min_moves moves
                state, played = generate(rng, size, boxes, inner_walls, reverse_steps, pull_prob)
                solution = shortest_solution(state) or played
                if len(solution) >= min_moves:
                    break
            md = {
                "size": size,
                "walls": sorted(map(list, state.room.walls)),
                "goals": sorted(map(list, state.room.goals)),
                "boxes": sorted(map(list, state.boxes)),
                "player": list(state.player),
                "shortest": len(solution),
            }
            return Instance(describe(state), " ".join(solution), md)

        name = f"sokoban{size}x{size}"
        super().__init__(name, ProceduralSplits(name, make, seed, eval_fraction))
