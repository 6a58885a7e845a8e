"""Generalised advantage estimation over token sequences, and the trajectories it runs on.

GAE (Schulman et al. 2015, "High-dimensional continuous control using
generalized advantage estimation", eq. 16) over one trajectory of T tokens,
with a value V_t for the state before token t and the value after the last
token taken as 0 (the episode is over):

    delta_t = r_t + gamma * V_{t+1} - V_t          (V_T = 0)
    A_t     = delta_t + gamma * lam * A_{t+1}      (A_T = 0)
    R_t     = A_t + V_t                            (the value target)

lam = 1 gives the Monte-Carlo return minus V_t; lam = 0 the one-step TD error.

A *trajectory* of a multi-agent episode is one root-to-leaf path of its call
tree, seen as the token sequence of the trained policies' responses on that
path, in order (CoRL (arXiv:2511.02755), sec. 3.1-3.2: the controller's
rounds interleaved with expert replies; the expert tokens are masked out of
the loss). Tokens other agents wrote live only in later prompts, so they are
never time steps here and never receive a gradient. Each call's reward sits
on the last token of the most recent trainable call at or before it, so a
frozen agent's reward (e.g. its answer was graded) credits the action that
asked for it; rewards before any trainable call cannot be acted on and are
dropped. A call that lies on several paths of a tree (a branching sampler)
gets the mean of its per-path advantages and returns, token by token.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from masrl.types import Call, Episode


def gae(
    rewards: torch.Tensor, values: torch.Tensor, gamma: float = 1.0, lam: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and returns of one trajectory: rewards [T], values [T] -> ([T], [T])."""
    if rewards.shape != values.shape or rewards.dim() != 1:
        raise ValueError(f"rewards and values must both be [T]; got {tuple(rewards.shape)} and {tuple(values.shape)}")
    r, v = rewards.double(), values.double()
    adv = torch.zeros_like(r)
    running = 0.0
    for t in range(r.numel() - 1, -1, -1):  # a loop over one trajectory's tokens: T is hundreds, not millions
        next_value = v[t + 1] if t + 1 < r.numel() else 0.0
        delta = r[t] + gamma * next_value - v[t]
        running = delta + gamma * lam * running
        adv[t] = running
    return adv.to(rewards.dtype), (adv + v).to(rewards.dtype)


def whiten(x: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """(x - mean) / std over all entries (population std); x unchanged in shape.

    PPO implementations normalise GAE advantages over the batch's tokens
    (verl's `masked_whiten`, on which Search-R1 and CoRL build)."""
    if x.numel() < 2:
        return x - x.mean() if x.numel() else x
    return (x - x.mean()) / (x.var(unbiased=False).sqrt() + eps)


@dataclass(frozen=True)
class Trajectory:
    """The trainable calls of one root-to-leaf path and the reward each of them carries."""

    episode: int  # index in the batch
    calls: tuple[Call, ...]  # trainable calls on the path, root first
    rewards: tuple[float, ...]  # reward on the last token of each of them


def trajectories(episodes: Sequence[Episode]) -> list[Trajectory]:
    """Every root-to-leaf path that did not fail and holds a trainable call."""
    out = []
    for i, ep in enumerate(episodes):
        failed = ep.failed_ids()
        for leaf in ep.leaves():
            if leaf.id in failed:
                continue
            calls: list[Call] = []
            rewards: list[float] = []
            for call in ep.path(leaf):
                if call.reply is not None and call.reply.trainable:
                    calls.append(call)
                    rewards.append(0.0)
                if calls:  # a reward before the first trainable call credits no action
                    rewards[-1] += call.reward
            if calls:
                out.append(Trajectory(i, tuple(calls), tuple(rewards)))
    return out


@dataclass(frozen=True)
class TokenTargets:
    """Per-token advantage and value target of one call's response tokens (mean over its paths)."""

    advantages: tuple[float, ...]
    returns: tuple[float, ...]


def token_gae(
    paths: Sequence[Trajectory],
    values: Mapping[tuple[int, str], Sequence[float]],
    gamma: float = 1.0,
    lam: float = 1.0,
) -> dict[tuple[int, str], TokenTargets]:
    """GAE over each path's concatenated response tokens.

    `values[(episode, call id)]` holds V_t for each response token of that call
    (len = its response length). Returns (episode, call id) -> targets; a call
    on several paths gets the token-wise mean over them."""
    adv_sum: dict[tuple[int, str], torch.Tensor] = {}
    ret_sum: dict[tuple[int, str], torch.Tensor] = {}
    count: dict[tuple[int, str], int] = defaultdict(int)
    for path in paths:
        keys = [(path.episode, c.id) for c in path.calls]
        lengths = [len(values[k]) for k in keys]
        v = torch.tensor([x for k in keys for x in values[k]], dtype=torch.float64)  # [T]
        r = torch.zeros_like(v)
        end = 0
        for n, reward in zip(lengths, path.rewards):
            end += n
            if end:  # the call's last token (an empty response: the previous call's last token)
                r[end - 1] += reward
        adv, ret = gae(r, v, gamma, lam)
        start = 0
        for k, n in zip(keys, lengths):
            a, g = adv[start : start + n], ret[start : start + n]
            adv_sum[k] = adv_sum[k] + a if k in adv_sum else a.clone()
            ret_sum[k] = ret_sum[k] + g if k in ret_sum else g.clone()
            count[k] += 1
            start += n
    return {
        k: TokenTargets(tuple((adv_sum[k] / count[k]).tolist()), tuple((ret_sum[k] / count[k]).tolist()))
        for k in adv_sum
    }
