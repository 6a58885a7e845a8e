"""Build the parts a config names: model, policies, generation service, task, system, sampler.

`build_engine(config)` is the only place that turns config strings into
objects; the training loop and evaluation receive the assembled `Engine`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from masrl.agents.base import Agent
from masrl.agents.policy import LoraSpec, PolicyAgent, PolicyModel, SamplingParams
from masrl.config import Config, ConfigError
from masrl.memory import keep_heap_small
from masrl.models import load_model
from masrl.rollout.service import GenerationService
from masrl.rollout.tree import BRANCH_RULES, BranchRule, System
from masrl.pools.build import build_pool
from masrl.systems.router import (
    CONTROLLER,
    Multipliers,
    RewardWeights,
    RouterSystem,
    default_caps,
    default_multipliers,
)
from masrl.systems.single import SingleAgentSystem
from masrl.tasks import build_task
from masrl.tasks.math import MixedMathTask
from masrl.tasks.base import Task

STOP = ("</answer>",)
ROUTER_STOP = ("</model>",)  # a controller's reply ends with its routing tag (a True verdict ends at EOS)


@dataclass
class Engine:
    config: Config
    model: PolicyModel
    service: GenerationService
    task: Task
    system: System
    rule: BranchRule
    agents: Mapping[str, Agent]  # sampling agents (training)
    eval_agents: Mapping[str, Agent]  # greedy agents (evaluation)
    optimizers: dict[str, torch.optim.Optimizer]
    pool: Mapping[str, Agent]  # frozen agents a router coordinates, weak to strong (empty otherwise)


def build_task_from(config: Config) -> Task:
    t = config.task
    if t.kind == "jsonl":
        return build_task("jsonl", path=t.path, seed=t.seed)
    if t.kind == "champ":
        from masrl.pools.champ import ChampTask

        return ChampTask(t.path)
    if t.difficulty == "mixed":
        return MixedMathTask(t.dataset, seed=t.seed, config=dict(t.config))
    return build_task("math", dataset=t.dataset, seed=t.seed, difficulty=t.difficulty, config=dict(t.config))


def build_system(config: Config, task: Task, pool: Mapping[str, Agent]) -> tuple[System, list[str]]:
    """The system and the names of the trainable policies it uses."""
    s = config.system
    if s.kind == "single":
        return SingleAgentSystem(task, s.prompt, dict(config.reward.weights)), ["solver"]
    if s.kind == "router":
        names = tuple(pool)
        r = config.router
        for field, given in (("rho", r.rho), ("xi", r.xi)):
            unknown = set(given) - set(names)
            if unknown:
                raise ConfigError(f"router.{field} names agents not in the pool: {sorted(unknown)}; pool: {list(names)}")
        multipliers = Multipliers(
            xi={**default_multipliers(names), **r.xi},
            rho={**default_caps(names), **r.rho},
            auto=r.dual_ascent,
            lr=r.dual_lr,
        )
        weights = RewardWeights(r.routing_weight, r.verification_weight)
        return RouterSystem(task, names, multipliers, s.max_turns, weights, s.prefill), [CONTROLLER]
    raise ValueError(f"unknown system {s.kind!r}")


def build_engine(config: Config, model: Any = None) -> Engine:
    if config.trainer.threads:
        torch.set_num_threads(config.trainer.threads)
    if config.trainer.low_memory:
        keep_heap_small()
    torch.manual_seed(config.run.seed)
    task = build_task_from(config)
    pool = build_pool(config, task) if config.system.kind == "router" else {}
    system, policies = build_system(config, task, pool)
    loaded = model or load_model(config.model.name, seed=config.run.seed)
    m = config.model
    lora = LoraSpec(rank=m.lora_rank, alpha=m.lora_alpha, dropout=m.lora_dropout) if m.lora_rank > 0 else None
    policy_model = PolicyModel(loaded, policies, lora, keep_reference=config.algo.kl_coef > 0)
    service = GenerationService(policy_model.generate, max_batch=config.rollout.max_batch)
    r = config.rollout
    stop = ROUTER_STOP if config.system.kind == "router" else STOP
    train_params = SamplingParams(r.max_new_tokens, r.temperature, r.top_p, stop)
    eval_params = SamplingParams(config.eval.max_new_tokens, 0.0, 1.0, stop)
    agents = {**pool, **{p: PolicyAgent(p, p, service, policy_model, train_params) for p in policies}}
    eval_agents = {**pool, **{p: PolicyAgent(p, p, service, policy_model, eval_params) for p in policies}}
    optimizers = {
        p: torch.optim.AdamW(policy_model.parameters(p), lr=config.trainer.lr, weight_decay=config.trainer.weight_decay)
        for p in policies
    }
    rule = BRANCH_RULES[config.sampler.rule](config.sampler.group_size)
    return Engine(config, policy_model, service, task, system, rule, agents, eval_agents, optimizers, pool)
