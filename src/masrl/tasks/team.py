"""Team and local rewards of turn-based cooperating agents, and the two ways to mix them.

AT-GRPO (arXiv:2510.11062) rewards each candidate action of agent i at
turn k with a shared team reward and the agent's own local reward:

- main text, eq. 4:    r = alpha * r_team + r_loc                  (`mix_alpha`, paper alpha = 1)
- appendix A.1:        r = lambda * r_team + (1 - lambda) * m * r_loc (`mix_lambda`)

where r_loc = sum_l c_l * s_l is a convex combination of verifiable component
scores s_l in [0, 1] with fixed per-role coefficients c_l, and m in {0, 1} is
the verifiability mask (1 when the checker could compute the local scores).

A task family states its components as `RewardParts` (team, the s_l by name,
mask) and its per-role coefficients and lambda as a `RewardDesign`; the mix
is chosen in config. `reward_components` flattens everything into the named
numbers a Call records, so every component is logged separately.

Departure, on purpose: the appendix leaves open what a reply that cannot be
parsed scores. Our checkers can always run (the environments are ours), so
the mask stays 1 and every local component of an unparsable reply is 0: a
format failure costs the agent its whole local reward instead of masking it
away.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class RewardParts:
    team: float
    scores: Mapping[str, float]  # component name -> s_l in [0, 1]
    mask: float = 1.0  # m: 1 when the local scores could be computed


@dataclass(frozen=True)
class RewardDesign:
    """A task's per-role local coefficients (each role's sum to 1) and its appendix-A.1 lambda."""

    lam: float
    coefficients: Mapping[str, Mapping[str, float]] = field(default_factory=dict)  # role -> component -> c_l

    def __post_init__(self):
        if not 0.0 <= self.lam <= 1.0:
            raise ValueError(f"lambda must be in [0, 1], got {self.lam}")
        for role, cs in self.coefficients.items():
            if any(c < 0 for c in cs.values()) or abs(sum(cs.values()) - 1.0) > 1e-9:
                raise ValueError(f"local coefficients of {role!r} must be >= 0 and sum to 1, got {dict(cs)}")

    def local(self, role: str, parts: RewardParts) -> float:
        """r_loc = sum_l c_l s_l over the role's components."""
        if role not in self.coefficients:
            raise ValueError(f"no local reward design for role {role!r}; roles: {sorted(self.coefficients)}")
        cs = self.coefficients[role]
        missing = set(cs) - set(parts.scores)
        if missing:
            raise ValueError(f"role {role!r} needs component scores {sorted(missing)}")
        return sum(c * parts.scores[name] for name, c in cs.items())


def mix_alpha(team: float, local: float, mask: float, *, alpha: float, lam: float) -> float:
    """Main text eq. 4: alpha * team + local (the mask and lambda are not part of it)."""
    return alpha * team + local


def mix_lambda(team: float, local: float, mask: float, *, alpha: float, lam: float) -> float:
    """Appendix A.1: lambda * team + (1 - lambda) * mask * local."""
    return lam * team + (1.0 - lam) * mask * local


MIXES = {"alpha": mix_alpha, "lambda": mix_lambda}


def mixed_reward(
    design: RewardDesign, role: str, parts: RewardParts, mix: str = "lambda", alpha: float = 1.0,
    lam: float | None = None,
) -> tuple[float, dict[str, float]]:
    """The candidate's reward and every component by name (team, local, mask, local/<s_l>).

    `lam` overrides the task's appendix-A.1 lambda when given."""
    if mix not in MIXES:
        raise ValueError(f"unknown reward mix {mix!r}; valid: {', '.join(MIXES)}")
    local = design.local(role, parts)
    reward = MIXES[mix](parts.team, local, parts.mask, alpha=alpha, lam=design.lam if lam is None else lam)
    return reward, reward_components(parts, local)


def reward_components(parts: RewardParts, local: float) -> dict[str, float]:
    out = {"team": float(parts.team), "local": float(local), "mask": float(parts.mask)}
    out.update({f"local/{name}": float(s) for name, s in parts.scores.items()})
    return out
