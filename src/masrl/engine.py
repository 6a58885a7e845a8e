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
from masrl.config import Config
from masrl.memory import keep_heap_small
from masrl.models import load_model
from masrl.rollout.service import GenerationService
from masrl.rollout.tree import BRANCH_RULES, BranchRule, System
from masrl.systems.single import SingleAgentSystem
from masrl.tasks import build_task
from masrl.tasks.base import Task

STOP = ("</answer>",)


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


def build_task_from(config: Config) -> Task:
    t = config.task
    if t.kind == "jsonl":
        return build_task("jsonl", path=t.path, seed=t.seed)
    return build_task("math", dataset=t.dataset, seed=t.seed, difficulty=t.difficulty, config=dict(t.config))


def build_system(config: Config, task: Task) -> tuple[System, list[str]]:
    """The system and the names of the trainable policies it uses."""
    s = config.system
    if s.kind == "single":
        return SingleAgentSystem(task, s.prompt, dict(config.reward.weights)), ["solver"]
    raise ValueError(f"unknown system {s.kind!r}")


def build_engine(config: Config, model: Any = None) -> Engine:
    if config.trainer.threads:
        torch.set_num_threads(config.trainer.threads)
    if config.trainer.low_memory:
        keep_heap_small()
    torch.manual_seed(config.run.seed)
    task = build_task_from(config)
    system, policies = build_system(config, task)
    loaded = model or load_model(config.model.name, seed=config.run.seed)
    m = config.model
    lora = LoraSpec(rank=m.lora_rank, alpha=m.lora_alpha, dropout=m.lora_dropout) if m.lora_rank > 0 else None
    policy_model = PolicyModel(loaded, policies, lora, keep_reference=config.algo.kl_coef > 0)
    service = GenerationService(policy_model.generate, max_batch=config.rollout.max_batch)
    r = config.rollout
    train_params = SamplingParams(r.max_new_tokens, r.temperature, r.top_p, STOP)
    eval_params = SamplingParams(config.eval.max_new_tokens, 0.0, 1.0, STOP)
    agents = {p: PolicyAgent(p, p, service, policy_model, train_params) for p in policies}
    eval_agents = {p: PolicyAgent(p, p, service, policy_model, eval_params) for p in policies}
    optimizers = {
        p: torch.optim.AdamW(policy_model.parameters(p), lr=config.trainer.lr, weight_decay=config.trainer.weight_decay)
        for p in policies
    }
    rule = BRANCH_RULES[config.sampler.rule](config.sampler.group_size)
    return Engine(config, policy_model, service, task, system, rule, agents, eval_agents, optimizers)
