"""The public API of a system: what a system is, what it hands the engine, what it may read.

A system is a state machine over calls (`System`: `start`, `next_step`, `advance`; see
masrl/rollout/tree.py). It declares itself with one `SystemSpec`. Its core: its `kind`, its config
model (a `SystemSection` subclass: the run config's `system` section), a builder `build(config,
task) -> Built`, and optionally its own evaluation, cross-checks against the engine sections, the
sampler rules it supports, whether it runs only its own task families and what else a config of it
needs (`needs`: `Component`s such as an embedder's weights package). Its optional parts, each
its own type: its `page` (`Page`: its own curves and views on the run's page, `masrl view`:
`views(run_dir) -> [View]`, plotly figures and tables read from the run's files), its `serving`
(`Serving`: how `masrl serve` runs a request) and its `commands` (`Command`s added to `masrl`).
The engine finds a spec by `system.kind`:

- a built-in name (`masrl.systems.BUILTIN`),
- a dotted path `package.module:OBJECT` to a `SystemSpec`,
- or the name of an entry point in the group `masrl.systems` of an installed package.

What a system may read from the engine: the typed `config` (every engine section and its own
`config.system`), the `task` it is built for, and in its evaluation the `Engine` (`eval_agents`,
`frozen`, `task`, `system`, `config`). A system never sees models, optimisers or the algorithm
that trains it; the builder's `Built` says which agent names are trainable and which policy
(LoRA adapter) each samples from (several roles can share one policy, `{"coder": "shared",
"tester": "shared"}`, or have one each). Frozen agents (a pool, priced experts, tools) come
ready-made. A trainable policy that is not a LoRA adapter of the base model (a small scoring
head over agents, as in the Puppeteer orchestrator) comes as a `Head`: its sampling and greedy
agents and the learner that updates it.

Optional hooks the loop calls on the system object when present: `observe(episodes) -> metrics`
after each step's sampling (e.g. usage and dual ascent), `state_dict()` / `load_state_dict(d)`
for state that must survive a checkpoint, `eval_metrics(episodes)` for metrics of its own in
the default evaluation, and `eval_item_metrics(episode)` for those metrics per item (saved with the
evaluation so intervals can be computed). docs/api.md walks through a complete example.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import InitVar, dataclass, field
from pathlib import Path
from typing import Any

from masrl.agents.base import Agent
from masrl.components import Component
from masrl.config import Config, ConfigError, SystemSection
from masrl.evaluate import ItemScores, SystemEval, evaluate_episodes
from masrl.rollout.tree import Step, System, Transition
from masrl.tasks.base import Task, TaskFamily, TurnTask, grade, held_out
from masrl.tasks.rewards import format_reward, reward_terms
from masrl.types import Call, Episode, Message, Price, Reply, TaskItem
from masrl.run.files import Table, View, saved_evaluations

__all__ = [
    "Agent", "Built", "Call", "Command", "Component", "Config", "ConfigError", "Episode", "GENERAL_RULES", "Head",
    "ItemScores", "Message", "Page", "Price", "Reply", "ServeOptions", "Serving", "Step", "System", "SystemEval",
    "SystemSection", "SystemSpec", "Table", "Task", "TaskFamily", "TaskItem", "Transition", "TurnTask", "View",
    "evaluate_episodes", "format_reward", "grade", "held_out", "lazy", "match_agent", "reward_terms",
    "saved_evaluations",
]  # fmt: skip

# Sampler rules (sampler.rule) that need nothing of a system beyond the System protocol.
GENERAL_RULES: tuple[str, ...] = ("parallel", "full_tree", "fork_on_first", "per_turn_greedy")


@dataclass(frozen=True)
class Command:
    """A `masrl` subcommand a system adds (e.g. building its pool's data file)."""

    help: str
    arguments: Callable[[Any], None]  # adds its arguments to an argparse parser
    run: Callable[[Any], int]  # parsed arguments -> exit code


@dataclass(frozen=True)
class Page:
    """A system's own parts of its run's page (`masrl view`, `masrl report`), drawn from the run's files."""

    curves: tuple[tuple[str, str], ...] = ()  # (metric, title) drawn first, before the other metrics
    views: Callable[[Path], Sequence[View]] | None = None  # RUN_DIR -> its own sections of the page


@dataclass(frozen=True)
class SystemSpec:
    """Everything the engine needs to know of a system; one per system, found by `system.kind`.

    The core every system gives (kind, config, build; evaluation, checks, sampler rules and own tasks
    have defaults), then its optional parts, each its own type: `page`, `commands`, `serving`. The flat
    keywords `curves=` and `views=` (the page's parts, as docs/api.md first wrote them) are taken into
    `page` once; read them as `spec.page.curves` and `spec.page.views`."""

    kind: str
    config: type[SystemSection]  # the `system` section's model
    build: Callable[[Config, Task], "Built"]
    summary: str = ""  # one line for `masrl systems`
    evaluate: Callable[[Any, Sequence[TaskItem], bool], SystemEval] | None = None  # None: greedy episodes
    check: Callable[[Config], None] | None = None  # cross-checks with the engine sections; raise ValueError
    rules: tuple[str, ...] = GENERAL_RULES  # the sampler rules it supports
    own_tasks: bool = False  # True: it runs only task families made for it (TaskFamily.system == kind)
    # What a config of it needs beyond masrl's dependencies (an embedder, a pool's models): checked, and
    # got where masrl can, before any model loads (masrl.preflight).
    needs: Callable[[Config], Sequence[Component]] | None = field(default=None, kw_only=True)
    page: Page = field(default=Page(), kw_only=True)  # its own curves and views on the run's page
    commands: Mapping[str, Command] = field(default_factory=dict)
    curves: InitVar[tuple[tuple[str, str], ...] | None] = None  # = page=Page(curves=...)
    views: InitVar[Callable[[Path], Sequence[View]] | None] = None  # = page=Page(views=...)
    serving: "Serving" = field(default_factory=lambda: Serving())  # how `masrl serve RUN_DIR` runs a request

    def __post_init__(self, curves, views) -> None:  # the InitVars above: the page's flat keywords
        if curves is None and views is None:
            return
        if self.page != Page():
            raise TypeError(f"SystemSpec {self.kind!r}: give its page as page=Page(...) or as curves=/views=, not both")
        object.__setattr__(self, "page", Page(tuple(curves or ()), views))


@dataclass(frozen=True)
class ServeOptions:
    """What one request to `masrl serve RUN_DIR` asks of the system beyond its question."""

    mode: str | None = None  # "budget" in the body, or the model name's suffix NAME:MODE
    fields: Mapping[str, Any] = field(default_factory=dict)  # the request's other extra fields (extra_body)


@dataclass(frozen=True)
class Serving:
    """How a served request (one greedy episode of the trained system) is set up and reported.

    Every hook is optional; without them a request runs the system as trained, its answer is the
    text of the episode's last call, and the response's audit record lists the calls, tokens and cost.
    """

    modes: Callable[[System], Sequence[str]] | None = None  # request modes, listed as NAME:MODE in /v1/models
    # The system for one request, given its options; raise ValueError to refuse the request (HTTP 400).
    configure: Callable[[System, ServeOptions], System] | None = None
    answer: Callable[[Episode], str] | None = None  # the final answer the client gets as message.content
    audit: Callable[[Episode], Mapping[str, Any]] | None = None  # the system's own fields in the audit record


def lazy(target: str) -> Callable:
    """The function at "module:name", imported at its first call: a spec can name its evaluation
    without loading the evaluation's imports (baselines, plotting) whenever the system is resolved."""

    def call(*args, **kwargs):
        module, _, name = target.partition(":")
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    call.__qualname__ = f"lazy({target!r})"
    return call


@dataclass(frozen=True)
class Head:
    """A trainable policy outside the base model: agents that sample and act greedily, and its learner."""

    agent: Agent
    eval_agent: Agent
    learner: Any  # masrl.learners.Learner (not imported: learners imports the model stack)


@dataclass(frozen=True)
class Built:
    system: System
    policies: Mapping[str, str]  # agent name the system calls -> trainable policy it samples from
    frozen: Mapping[str, Agent] = field(default_factory=dict)  # agents that are not trained
    stop: tuple[str, ...] = ()  # stop strings of the trainable agents' generation
    heads: Mapping[str, Head] = field(default_factory=dict)  # agent name (= its policy name) -> non-LoRA policy

    def __post_init__(self):
        clash = (set(self.policies) & set(self.frozen)) | (set(self.heads) & (set(self.policies) | set(self.frozen)))
        if clash:
            raise ValueError(f"agent names are both trainable and frozen: {sorted(clash)}")
        if not self.policies and not self.heads:
            raise ValueError("a system needs at least one trainable agent")

    @property
    def policy_names(self) -> list[str]:
        """The distinct policies, in first-mention order."""
        return list(dict.fromkeys(self.policies.values()))


def match_agent(name: str, agents: Sequence[str]) -> str | None:
    """The agent of `agents` that `name` refers to (a router's pool, a budget controller's experts, an
    orchestrator's actions): exact, case-insensitive, or the one agent it is a unique part of."""
    name = name.strip().strip("\"'`").strip()
    if not name:
        return None
    lower = {a.lower(): a for a in agents}
    if name.lower() in lower:
        return lower[name.lower()]
    partial = [a for a in agents if name.lower() in a.lower()]
    return partial[0] if len(partial) == 1 else None
