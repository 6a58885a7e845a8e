"""The samplers of the papers, as branching rules of the one tree expansion (masrl.rollout.tree), and
the registry of rules by name (`sampler.rule`).

`FullTree` draws G candidates at every decision and keeps them all (the critique-routing
controller); `PerTurnGreedy` is AT-GRPO's: K candidates per decision, the best-rewarded one continues.

The search pipeline's samplers (MHGPO (arXiv:2506.02718), appendix A) are
rules too: `ForkAt(G, d)` is Algorithm 2's fork_on (one-to-one before and
after depth d, G candidates at d); Fork-on-first is `ForkAt(G, 0)`. Two are
`Planner`s, drawing a per-task plan of rules whose trees together make the
task's episode: Independent Sampling plans one `ForkAt` per agent
(Algorithm 4); Round-robin draws one fork depth per question from p
(Algorithm 5, seeded by the task id so a resumed run draws the same).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from masrl.rollout.tree import BranchRule, Parallel, Step
from masrl.types import Call, TaskItem


@dataclass(frozen=True)
class FullTree:
    """Every decision node draws G candidates and all of them continue (critique-routing
    controller, appendix E.2): a node's children are the next decisions after each action.
    Steps marked `branch=False` (the routed agent's answer) are drawn once."""

    group_size: int

    def width(self, depth: int, step: Step) -> int:
        return self.group_size if step.branch else 1

    def keep(self, depth: int, step: Step, children: Sequence[Call]) -> Sequence[int]:
        return range(len(children))


@dataclass(frozen=True)
class PerTurnGreedy:
    """AT-GRPO's tree-structured sampling (arXiv:2510.11062, sec. 4, Algorithm 1, line 13):
    at every decision draw K candidates from the same observation and continue only the one
    with the highest immediate reward (the first on a tie; failed candidates never win).
    Steps marked `branch=False` are drawn once. K = 1 is a single greedy-free rollout."""

    group_size: int

    def width(self, depth: int, step: Step) -> int:
        return self.group_size if step.branch else 1

    def keep(self, depth: int, step: Step, children: Sequence[Call]) -> Sequence[int]:
        live = [i for i, c in enumerate(children) if not c.failed]
        return [max(live, key=lambda i: children[i].reward)] if live else []


@dataclass(frozen=True)
class ForkAt:
    """fork_on (MHGPO, Algorithm 2): G candidates at depth `depth`, one everywhere else.
    Fork-on-first is depth 0 (Algorithm 3)."""

    group_size: int
    depth: int = 0

    def width(self, depth: int, step: Step) -> int:
        return self.group_size if depth == self.depth else 1

    def keep(self, depth: int, step: Step, children: Sequence[Call]) -> Sequence[int]:
        return range(len(children))


@dataclass(frozen=True)
class IndependentSampling:
    """IS (MHGPO, Algorithm 4): for each of the `agents` pipeline positions, a separate
    fork_on at that position. Only the fork agent's G siblings form a (homogeneous)
    group; pair it with `algo.grouping: independent`, which leaves every other call
    alone in its group (advantage 0, so it is not trained on)."""

    group_size: int
    agents: int = 3

    def plans(self, task: TaskItem) -> Sequence[BranchRule]:
        return [ForkAt(self.group_size, d) for d in range(self.agents)]


@dataclass(frozen=True)
class RoundRobin:
    """RR (MHGPO, Algorithm 5): per question the fork depth is drawn from `probs`
    (one probability per agent, in pipeline order); calls before the fork are
    singletons, regrouped across the batch by `algo.grouping: round_robin`."""

    group_size: int
    probs: tuple[float, ...] = (0.7, 0.1, 0.2)
    seed: int = 0

    def __post_init__(self):
        if not self.probs or any(p < 0 for p in self.probs) or sum(self.probs) <= 0:
            raise ValueError(f"round-robin probabilities must be >= 0 and not all 0, got {self.probs}")

    def fork_depth(self, task: TaskItem) -> int:
        rng = random.Random(f"{self.seed}:{task.id}")
        return rng.choices(range(len(self.probs)), weights=self.probs)[0]

    def plans(self, task: TaskItem) -> Sequence[BranchRule]:
        return [ForkAt(self.group_size, self.fork_depth(task))]


BRANCH_RULES = {
    "parallel": Parallel,
    "full_tree": FullTree,
    "fork_on_first": ForkAt,
    "independent": IndependentSampling,
    "round_robin": RoundRobin,
    "per_turn_greedy": PerTurnGreedy,
}
