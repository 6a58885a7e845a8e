"""Phases 2-3 of a training step: credit, grouping and advantages, from episodes to per-policy samples.

`score(episodes, algo)`: credit converts each episode tree's rewards into a
return per trainable call (`algo.credit`), the calls are grouped (`algo.grouping`:
which calls compare) and the advantage estimator normalises the returns within each
group (`algo.advantage`). With `algo.advantage: gae` (PPO) the value model scores
every response token instead and GAE runs along each root-to-leaf path (`score_gae`),
giving per-token advantages to the policies and value targets to the value learner.
Every trainable call becomes a `Sample` of its policy's batch. Pure functions of the
episodes and the algo section (and, for gae, the value model's predictions and
`critic.whiten_advantages`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import torch

from masrl.algos.advantages import ADVANTAGES, group_ids_from_keys
from masrl.algos.credit import CREDITS, GROUPINGS, SAMPLE_WEIGHTS, per_agent_weights, trainable_calls
from masrl.algos.gae import token_gae, trajectories, whiten
from masrl.config import AlgoConfig
from masrl.learners import CRITIC, ValueLearner
from masrl.types import Episode, Sample, TrainingError


@dataclass(frozen=True)
class Scored:
    samples: dict[str, list[Sample]]  # policy -> batch
    advantages: dict[tuple[int, str], float]  # (episode index, call id) -> advantage
    metrics: dict[str, float]
    # What samples.jsonl records for the viewer's episode trees: each trainable call's return and
    # the group it was compared within (dense ids, numbered per step across the batch).
    returns: dict[tuple[int, str], float] = field(default_factory=dict)
    groups: dict[tuple[int, str], int] = field(default_factory=dict)


def score(episodes: Sequence[Episode], algo: AlgoConfig, critic: ValueLearner | None = None,
          whiten_advantages: bool = True) -> Scored:  # fmt: skip
    """Credit, grouping and advantages: episodes in, per-policy samples out.

    `algo.advantage: gae` is the token-level phase `score_gae` instead (it needs `critic`;
    `whiten_advantages` is the critic section's)."""
    if algo.advantage == "gae":
        return score_gae(episodes, algo, critic, whiten_advantages)
    returns = [CREDITS[algo.credit](ep, algo.gamma) for ep in episodes]
    calls = trainable_calls(episodes)
    if not calls:
        return Scored({}, {}, {})
    keys = GROUPINGS[algo.grouping](calls)
    ret = torch.tensor([returns[i][c.id] for i, c in calls], dtype=torch.float64)  # [N]
    group_ids = group_ids_from_keys(keys)  # [N]
    adv = ADVANTAGES[algo.advantage](ret, group_ids)  # [N]
    weights = [SAMPLE_WEIGHTS[algo.sample_weight](episodes[i]) for i, _ in calls]
    samples: dict[str, list[Sample]] = defaultdict(list)
    roles: dict[str, list[str]] = defaultdict(list)
    for (i, c), a, w in zip(calls, adv.tolist(), weights):
        skip = algo.skip_zero_advantage and a == 0.0
        if skip and algo.mean_over == "trained":
            continue
        r = c.reply
        samples[r.policy].append(Sample(r.policy, r.prompt_ids or (), r.response_ids or (), a, w, r.payload,
                                        behavior_logprobs=r.logprobs, version=r.version, trained=not skip))  # fmt: skip
        roles[r.policy].append(c.role)
    if algo.sample_weight == "per_agent":  # MHGPO eq. 6: mean over agents of each agent's per-sample mean
        for policy, batch in samples.items():
            samples[policy] = [replace(s, weight=w) for s, w in zip(batch, per_agent_weights(roles[policy]))]
    ids = [(i, c.id) for i, c in calls]
    return Scored(
        dict(samples),
        dict(zip(ids, adv.tolist())),
        {"return_mean": float(ret.mean()), "adv_abs_mean": float(adv.abs().mean())},
        returns=dict(zip(ids, ret.tolist())),
        groups=dict(zip(ids, group_ids.tolist())),
    )


def score_gae(episodes: Sequence[Episode], algo: AlgoConfig, critic: ValueLearner | None,
              whiten_advantages: bool) -> Scored:  # fmt: skip
    """PPO's advantage phase (GAE from a learned value model, as CoRL trains its controller; masrl.algos.gae).

    The value model scores the state before every response token of every
    trainable call; GAE runs over each root-to-leaf path's concatenated
    response tokens (other agents' tokens are only context in later prompts,
    so they are never scored and never trained on); each policy gets per-token
    advantages (whitened over the batch when `critic.whiten_advantages`), and
    the value learner gets the per-token returns and the values it predicted."""
    if critic is None:
        raise TrainingError("algo.advantage 'gae' needs a value learner (the engine builds one for it)")
    calls = trainable_calls(episodes)
    if not calls:
        return Scored({}, {}, {})
    tokenless = sorted({c.reply.policy for _, c in calls if not c.reply.response_ids})
    if tokenless:
        raise TrainingError(f"algo.advantage 'gae' scores response tokens; policies {tokenless} sampled none")
    values = critic.values([c.reply.prompt_ids for _, c in calls], [c.reply.response_ids for _, c in calls])
    old = {(i, c.id): v for (i, c), v in zip(calls, values)}
    targets = token_gae(trajectories(episodes), old, algo.gamma, algo.lam)
    keys = [(i, c.id) for i, c in calls]
    flat_adv = torch.tensor([a for k in keys for a in targets[k].advantages], dtype=torch.float64)  # [N tokens]
    if whiten_advantages:
        flat_adv = whiten(flat_adv)
    flat_ret = torch.tensor([g for k in keys for g in targets[k].returns], dtype=torch.float64)
    flat_val = torch.tensor([v for k in keys for v in old[k]], dtype=torch.float64)
    samples: dict[str, list[Sample]] = defaultdict(list)
    advantages: dict[tuple[int, str], float] = {}
    returns: dict[tuple[int, str], float] = {}
    start = 0
    for (i, c), k in zip(calls, keys):
        r, n = c.reply, len(c.reply.response_ids)
        adv = tuple(flat_adv[start : start + n].tolist())
        start += n
        advantages[k] = sum(adv) / n
        returns[k] = sum(targets[k].returns) / n  # the viewer shows one number per call: the token mean
        target = Sample(CRITIC, r.prompt_ids, r.response_ids, 0.0, returns=targets[k].returns, values=tuple(old[k]))
        samples[CRITIC].append(target)
        skip = algo.skip_zero_advantage and not any(adv)
        if skip and algo.mean_over == "trained":
            continue
        w = SAMPLE_WEIGHTS[algo.sample_weight](episodes[i])
        samples[r.policy].append(Sample(r.policy, r.prompt_ids, r.response_ids, adv, w,
                                        behavior_logprobs=r.logprobs, version=r.version, trained=not skip))  # fmt: skip
    residual = (flat_ret - flat_val).var(unbiased=False)
    metrics = {
        "return_mean": float(flat_ret.mean()),
        "adv_abs_mean": float(flat_adv.abs().mean()),
        "value_mean": float(flat_val.mean()),
        # 1 - Var[R - V] / Var[R]: 1 when the value model predicts the returns exactly, <= 0 when useless.
        "value_explained_var": float(1.0 - residual / flat_ret.var(unbiased=False)) if flat_ret.var() > 0 else 0.0,
    }
    return Scored(dict(samples), advantages, metrics, returns=returns)
