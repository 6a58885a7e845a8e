"""The critique-and-routing controller's rewards and usage multipliers, as pure functions
(Critique-and-routing (arXiv:2605.08686), section 3.2 and Proposition 3.1):

    R_r  = 1 if the chosen agent's draft is correct     (0 at turn T, 0 with no agent)
    R_v  = 1 if the verdict matches the draft's truth   (0 at turn 1)
    R'_r = R_r - sum_k 2 xi_k [chose k]
    r    = 0.5 R'_r + 0.5 R_v                            (weights configurable)

The multipliers xi are fixed by hand (the paper's 0.25 / 0.125 / 0, strongest first) or moved
between steps by dual ascent on measured usage against the caps rho.

`system.reward` picks the reward family (`REWARDS`):

- ``paper``: the rewards above, per action.
- ``outcome`` (ours, not the paper's): R_r is paid once, for the final draft: the action that ends
  the episode earns w_r * [the final draft is correct]; a routed draft earns nothing when written.
  R_v and the usage penalty are the paper's.

Why the second. Under the paper's reward with gamma = 1 (its Proposition 3.1), a False verdict
on a *correct* draft is worth more than True whenever the next agent is likely right: True earns
w_v; False earns w_r (R_r of the next draft - 2 xi) plus the next verdict's w_v, 0.5 R_r - 0.125
+ 0.5 with the paper's weights and a medium agent, 0.825 at R_r = 0.9 against 0.5 for True. Every
escalation adds another routing and verification reward, so "always False" is the fixed point our
default run converged to (docs/router.md, "the default config"). Paying for the final
draft once removes that: True on a correct draft earns w_v + w_r, False at most w_r minus the next
agent's penalty (plus what its own verdict earns); False on a wrong draft earns w_v and what the next
agent makes of it, True nothing. With `final_verification: false` a path holds one verdict, on the
first draft, whoever wrote it, so no route earns more verdicts than another.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from masrl.systems.router.action import Action, ActionKind


@dataclass(frozen=True)
class RewardWeights:
    routing: float = 0.5
    verification: float = 0.5


def controller_reward(
    action: Action, turn: int, draft_correct: bool | None, xi: Mapping[str, float], w: RewardWeights
) -> dict[str, float]:
    """The controller-side terms of one action: verification and the usage penalty.

    `draft_correct` is the truth of the draft under review (None at turn 1).
    The routing term follows when the routed agent answers (`routing_reward`).
    """
    if action.kind == ActionKind.FORMAT_ERROR:
        return {"verification": 0.0, "penalty": 0.0, "format_error": 1.0, "reward": 0.0}
    r_v = 0.0 if turn == 1 or draft_correct is None else float(action.verdict == draft_correct)
    penalty = 2.0 * xi.get(action.agent, 0.0) if action.kind == ActionKind.ROUTE else 0.0
    reward = w.verification * r_v - w.routing * penalty
    return {"verification": r_v, "penalty": penalty, "format_error": 0.0, "reward": reward}


def routing_reward(correct: bool, last: bool, w: RewardWeights) -> dict[str, float]:
    """R_r of a routing action, once the routed agent's draft is graded (`last`: no turn follows)."""
    r_r = float(correct)
    return {"routing": r_r, "reward": w.routing * r_r}


def outcome_controller_reward(
    action: Action, turn: int, draft_correct: bool | None, xi: Mapping[str, float], w: RewardWeights
) -> dict[str, float]:
    """The ``outcome`` family: the paper's R_v and usage penalty; an action that ends the episode (a
    stop, or a format failure, which keeps the last draft) also earns the final draft's correctness."""
    terms = controller_reward(action, turn, draft_correct, xi, w)
    if action.kind == ActionKind.ROUTE:
        return terms
    final = float(bool(draft_correct))
    return {**terms, "outcome": final, "reward": terms["reward"] + w.routing * final}


def outcome_routing_reward(correct: bool, last: bool, w: RewardWeights) -> dict[str, float]:
    """The ``outcome`` family: a draft earns only when it is the final one (no controller turn follows)."""
    return {"routing": float(correct), "reward": w.routing * float(correct) if last else 0.0}


@dataclass(frozen=True)
class RewardFamily:
    controller: Callable[..., dict[str, float]]  # (action, turn, draft_correct, xi, weights)
    routed: Callable[..., dict[str, float]]  # (correct, last, weights)


REWARDS = {
    "paper": RewardFamily(controller_reward, routing_reward),
    "outcome": RewardFamily(outcome_controller_reward, outcome_routing_reward),
}


# ---------------------------------------------------------------- multipliers
@dataclass
class Multipliers:
    """The Lagrange multipliers xi_k and caps rho_k; `auto` moves xi by dual ascent."""

    xi: dict[str, float]
    rho: dict[str, float]
    auto: bool = False
    lr: float = 0.5

    def state_dict(self) -> dict[str, float]:
        return dict(self.xi)

    def load_state_dict(self, state: Mapping[str, float]) -> None:
        self.xi = {k: float(state.get(k, v)) for k, v in self.xi.items()}


def dual_ascent(xi: Mapping[str, float], usage: Mapping[str, float], rho: Mapping[str, float], lr: float) -> dict[str, float]:
    """xi_k <- max(0, xi_k + lr * (usage_k - rho_k)): raise the price of an over-used agent,
    lower it (down to 0) for one under its cap. Projected subgradient step on the dual of (2)."""
    return {k: max(0.0, v + lr * (usage.get(k, 0.0) - rho.get(k, 1.0))) for k, v in xi.items()}


def default_caps(agents: Sequence[str]) -> dict[str, float]:
    """The paper's caps for a three-agent pool (strongest 0.25, middle 0.5, weakest 1.0), extended:
    the strongest gets 0.25, the next 0.5, every weaker agent 1.0. The weakest agent is never
    capped: it is where capped calls fall back to, and caps summing below 1 cannot all hold
    (with two agents, 0.25 + 0.5)."""
    caps = {a: 1.0 for a in agents}
    for a, rho in zip(reversed(list(agents)[1:]), (0.25, 0.5)):
        caps[a] = rho
    return caps


def default_multipliers(agents: Sequence[str]) -> dict[str, float]:
    """The paper's xi for a three-agent pool: strongest 0.25, middle 0.125, others 0 (the
    weakest, uncapped agent always 0)."""
    xi = {a: 0.0 for a in agents}
    for a, v in zip(reversed(list(agents)[1:]), (0.25, 0.125)):
        xi[a] = v
    return xi
