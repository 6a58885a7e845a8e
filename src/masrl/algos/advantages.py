"""Advantage estimators: turn per-sample returns into per-sample advantages.

Every estimator has one signature,

    f(returns [N] float, group_ids [N] long, eps) -> advantages [N] float

Samples that share a group id (e.g. the G completions drawn for one prompt)
are compared with each other; ids are arbitrary integers, need not be dense or
sorted, and groups may be interleaved. Everything is vectorised with
`index_add_` over groups: no Python loop over samples.

- `grpo_mean`: A = R - mean(group)                  (Dr. GRPO, Liu et al. 2025, sec. 3.1)
- `grpo`:      A = (R - mean(group)) / (std(group) + eps)
               (DeepSeekMath, Shao et al. 2024, eq. 4 / sec. 4.1.2). std is the
               unbiased sample std (divide by n - 1), as torch.std and TRL's
               GRPOTrainer compute it. A group of one has no comparison, so its
               advantage is 0 (torch.std would give NaN).
- `rloo`:      A_i = R_i - mean_{j != i} R_j        (Ahmadian et al. 2024, sec. 3.2;
               Kool et al. 2019). Equal to n/(n-1) * (R_i - mean). Group of one -> 0.
- `reinforce_baseline`: A = R - mean(batch), one baseline over the whole batch,
               groups ignored (Williams 1992 with a constant baseline).
- `reinforce`: A = R, no baseline.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch


def group_ids_from_keys(keys: Sequence[Hashable]) -> torch.Tensor:
    """Dense long ids [N] for arbitrary hashable keys, numbered in first-seen order."""
    index: dict[Hashable, int] = {}
    ids = [index.setdefault(k, len(index)) for k in keys]
    return torch.tensor(ids, dtype=torch.long)


def _float(x: torch.Tensor) -> torch.Tensor:
    """Keep float64 as float64; promote ints/bools to float32."""
    return x if x.is_floating_point() else x.float()


def _group_stats(
    returns: torch.Tensor, group_ids: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-sample group size n [N], group mean [N] and sum of squared deviations [N]."""
    _, dense = torch.unique(group_ids, return_inverse=True)  # [N], ids in 0..G-1
    num_groups = int(dense.max()) + 1 if dense.numel() else 0
    r = _float(returns)
    count_g = torch.zeros(num_groups, dtype=r.dtype, device=r.device).index_add_(
        0, dense, torch.ones_like(r)
    )  # [G]
    sum_g = torch.zeros(num_groups, dtype=r.dtype, device=r.device).index_add_(0, dense, r)  # [G]
    mean = (sum_g / count_g)[dense]  # [N]
    sq_g = torch.zeros(num_groups, dtype=r.dtype, device=r.device).index_add_(
        0, dense, (r - mean) ** 2
    )  # [G]
    return count_g[dense], mean, sq_g[dense]


def grpo_mean(returns: torch.Tensor, group_ids: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """A = R - mean(group). [N] -> [N]."""
    _, mean, _ = _group_stats(returns, group_ids)
    return _float(returns) - mean


def grpo(returns: torch.Tensor, group_ids: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """A = (R - mean(group)) / (sample_std(group) + eps); 0 for a group of one. [N] -> [N]."""
    n, mean, sq = _group_stats(returns, group_ids)
    std = torch.sqrt(sq / (n - 1).clamp(min=1))  # [N], unbiased
    adv = (_float(returns) - mean) / (std + eps)
    return torch.where(n > 1, adv, torch.zeros_like(adv))


def rloo(returns: torch.Tensor, group_ids: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """A_i = R_i - mean of the other samples in the group; 0 for a group of one. [N] -> [N]."""
    n, mean, _ = _group_stats(returns, group_ids)
    r = _float(returns)
    loo_mean = (n * mean - r) / (n - 1).clamp(min=1)  # [N]
    return torch.where(n > 1, r - loo_mean, torch.zeros_like(r))


def reinforce_baseline(
    returns: torch.Tensor, group_ids: torch.Tensor, eps: float = 1e-6
) -> torch.Tensor:
    """A = R - mean over the whole batch; group ids are ignored. [N] -> [N]."""
    r = _float(returns)
    return r - r.mean() if r.numel() else r


def reinforce(returns: torch.Tensor, group_ids: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """A = R (no baseline). [N] -> [N]."""
    return _float(returns).clone()


ADVANTAGES = {
    "grpo": grpo,
    "grpo_mean": grpo_mean,
    "rloo": rloo,
    "reinforce_baseline": reinforce_baseline,
    "reinforce": reinforce,
}
# The estimators that need more than returns and groups: per-token advantages from a learned value
# model (PPO's GAE, masrl.algos.gae), which masrl.scoring.score_gae runs in place of ADVANTAGES.
TOKEN_ADVANTAGES = ("gae",)
