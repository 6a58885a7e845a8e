"""Cost-aware returns of an orchestration path (Puppeteer (arXiv:2505.19591), section 2.2, eq. 6).

For a path of T steps with terminal reward r (1 if the path's final answer is
correct) and per-step costs F_t (the step's tokens, in `unit` tokens, or an
estimated FLOP count):

    C_t = F_t * log(1 + t / phi)                 phi = the depth limit (max steps)
    R_T = r - lambda * C_T
    R_t = gamma * R_(t+1) - lambda * C_t          t < T

Steps are numbered from 1, so the first step's cost is discounted by
log(1 + 1/phi) and a late step costs more than an early one of the same size
(the paper's "step factor normalised by the maximum step budget").

The update is REINFORCE over the N sampled decisions (eq. 5): the engine's
`algo.advantage: reinforce` (A = R) or `reinforce_baseline` (A = R - batch
mean); `masrl.systems.puppeteer.head.reinforce_loss` for the scoring head.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def step_cost(tokens: float, t: int, phi: int) -> float:
    """C_t = F * log(1 + t/phi) for a step of cost F (= `tokens`) at step t (1-based)."""
    if t < 1:
        raise ValueError(f"steps are numbered from 1, got t={t}")
    if phi < 1:
        raise ValueError(f"phi (the step budget) must be >= 1, got {phi}")
    if tokens < 0:
        raise ValueError(f"a step cost cannot be negative, got {tokens}")
    return tokens * math.log(1.0 + t / phi)


def step_costs(tokens: Sequence[float], phi: int) -> list[float]:
    """[C_1, ..., C_T] for the steps' costs F_1..F_T."""
    return [step_cost(f, t, phi) for t, f in enumerate(tokens, start=1)]


def path_returns(r: float, costs: Sequence[float], lam: float, gamma: float) -> list[float]:
    """[R_1, ..., R_T] of eq. 6 from the terminal reward and the step costs C_1..C_T."""
    if not costs:
        raise ValueError("a path has at least one step")
    if not 0.0 < gamma <= 1.0:
        raise ValueError(f"gamma must be in (0, 1], got {gamma}")
    out = [0.0] * len(costs)
    out[-1] = r - lam * costs[-1]
    for t in range(len(costs) - 2, -1, -1):
        out[t] = gamma * out[t + 1] - lam * costs[t]
    return out

