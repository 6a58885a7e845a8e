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
`config.system`), the `task` it is built for, and in its evaluation the `Parts` (`eval_agents`,
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

Beyond that core it re-exports what the papers' systems use of the engine (agent pools, retrieval,
the tree's `rollout`, the OpenAI protocol layer, ...), one line each below: they import nothing of
masrl but this module and their own package, as a user's system does (tests/test_layers.py).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from masrl.agents.base import Agent
from masrl.components import Component
from masrl.config import Config, ConfigError, SystemSection
from masrl.evaluate import ItemScores, SystemEval, evaluate_episodes
from masrl.rollout.tree import Step, System, Transition
from masrl.tasks.base import Task, TaskFamily, TurnTask, grade, held_out
from masrl.tasks.rewards import format_reward, reward_terms
from masrl.run.files import RunDir, Table, View, saved_evaluations
from masrl.types import Call, Episode, Message, Price, Reply, TaskItem

# ---- What the papers' systems read beyond the core (docs/api.md, "Beyond the core"): each name is
# the engine's own, re-exported here, so a system (ours or a user's) imports masrl.systems.api alone.
# Agents, their replies and the config's building blocks
from masrl.agents.base import (
    CountsAttempts,  # a frozen agent that counts its attempts per item: reset() per evaluation, fork() per request
    approx_tokens,  # the token estimate (about 4 characters a token) of an agent whose backend reports none
)
from masrl.types import (
    AgentError,  # what an agent raises when it has no usable reply (the episode's call is marked failed)
    Sample,  # one trainable call flattened for the update: what a Head's learner receives
)
from masrl.update import optimizer_step  # a Head learner's step: clipped, skipped or stopped on a non-finite gradient
from masrl.config import Section  # a nested part of a system's section (typed, unknown keys refused)
from masrl.components import MINILM  # the MiniLM sentence encoder's weights package, as a system's need
from masrl.models import load_model  # a fresh copy of the model a name names (a head's encoder)
from masrl.sandbox import run_code  # run a program in the contained interpreter (a code-running tool)
from masrl.stats import bootstrap_mean  # the mean of per-item values with its 95% bootstrap interval
# Episodes run by the system itself (its evaluation's baselines) and the tree's own hooks
from masrl.rollout.tree import (
    CALL_ADDRESS,  # the address of the call being made (a context variable), to seed a head's draw by place
    Parallel,  # the branching rule of independent episodes: G per task, branching only at the root
    Planner,  # a sampler that picks the branch rules per task (what a system with its own `expand` reads)
    address_seed,  # a 63-bit seed from an address, stable across processes
    rollout,  # run a system's episodes over tasks with agents and a branching rule (an evaluation's baselines)
)
from masrl.algos.credit import (
    FINAL,  # the reward component a system sets on a final output (credit propagates it backward)
    round_robin_groups,  # MHGPO's round-robin regrouping of calls (keys, leftovers), for its metrics
    trainable_calls,  # (episode index, call) of every trainable call on a trajectory that did not fail
)
from masrl.run.files import (
    read_metrics,  # the rows of RUN_DIR/metrics.jsonl (a page's views)
    series,  # (step, value) of one metric over those rows
)
# Agent pools (weak to strong, priced), one `system.pool` section shared by the systems that route
from masrl.pools.build import (
    build_agent,  # the agent one PoolAgentConfig describes
    build_pool,  # the pool a PoolConfig describes: agent name -> Agent, weak to strong
)
from masrl.pools.champ import build_champ_pool  # write the recorded CHAMP pool file (needs champ-dataset)
from masrl.pools.config import (
    PoolAgentConfig,  # one agent of a pool (its backend, model, price)
    PoolConfig,  # a pool: simulated, recorded CHAMP or your own agents
    check_pool,  # a pool's cross-checks with the task (ValueError)
    pool_needs,  # the model packages a pool's local agents load
)
from masrl.pools.simulated import (
    ItemIndex,  # finds the task item a conversation is about, by its question text
    SimulatedAgent,  # a simulated agent: calibrated correctness draws written up as worked solutions, priced
)
# Search over a corpus (the search system's retriever, the orchestrator's tools)
from masrl.retrieval.corpus import Page as CorpusPage  # one page of a corpus: id, title, text
from masrl.retrieval.index import (
    BM25Index,  # a BM25 index over pages
    DenseIndex,  # a MiniLM embedding index over pages, cached on disk
    Retriever,  # the protocol of both: search(query, k) -> (page id, score) pairs
    minilm_encoder,  # the MiniLM sentence encoder: texts -> embeddings
    search_many,  # the top k pages of each query, each page kept where it first appears
)
# Task families' helpers that systems made for them share
from masrl.tasks.calculator import (
    calculate,  # the expression a reply types into a calculator and its exact value, or None
    evaluate as exact_value,  # the exact value (a Fraction) of plain arithmetic, or None
)
from masrl.tasks.math import fraction  # the exact value of one plain number a model wrote, or None (bounded)
from masrl.tasks.moves import final_segment  # the text after a reply's last marker (####)
from masrl.tasks.search import (
    SearchTask,  # the multi-hop question-answering task over a corpus
    extract_short_answer,  # the short answer inside a reply's <answer> tag
    qa_metrics,  # exact match and F1 of a prediction against the gold answer
)
from masrl.tasks.team import mixed_reward  # AT-GRPO's mix of the team's and a role's own reward
from masrl.tasks.tools import (
    ToolRun,  # a program a reply ran: code, status, stdout, stderr
    tool_output,  # the text a task should parse from a reply that holds a program, and the run
)
# The OpenAI protocol (masrl.http), for a system that serves agents to a program (the program system's gateway)
from masrl.http import (
    ChatRequest,  # a POST /v1/chat/completions body
    Completion,  # what a backend answers to one request
    HTTPError,  # a refused request: an OpenAI error body with its status
    ModelCard,  # one model of GET /v1/models
    ServerSettings,  # host, port, key and limits of a server
    create_app,  # the FastAPI app serving a backend within those limits
)
from masrl.http.protocol import (
    completion_id,  # a fresh chat-completion id
    error_body,  # an OpenAI error body
)

__all__ = [
    "Agent", "AgentError", "BM25Index", "Built", "CALL_ADDRESS", "Call", "ChatRequest", "Command", "Completion",
    "Component", "Config", "ConfigError", "CorpusPage", "CountsAttempts", "DenseIndex", "Episode", "FINAL",
    "GENERAL_RULES", "HTTPError", "Head", "ItemIndex", "ItemScores", "MINILM", "Message", "ModelCard", "Page",
    "Parallel", "Planner", "PoolAgentConfig", "PoolConfig", "Price", "Reply", "Retriever", "RunDir", "Sample", "SearchTask",
    "Section", "ServeOptions", "ServerSettings", "Serving", "SimulatedAgent", "Step", "System", "SystemEval",
    "SystemSection", "SystemSpec", "Table", "Task", "TaskFamily", "TaskItem", "ToolRun", "Transition", "TurnTask",
    "View", "address_seed", "approx_tokens", "bootstrap_mean", "build_agent", "build_champ_pool", "build_pool",
    "calculate", "check_pool", "completion_id", "create_app", "error_body", "evaluate_episodes", "exact_value", "extract_short_answer",
    "final_segment", "format_reward", "grade", "held_out", "lazy", "load_model", "match_agent", "minilm_encoder",
    "mixed_reward", "option_number", "pool_needs", "qa_metrics", "read_metrics", "reward_terms", "rollout", "round_robin_groups",
    "run_code", "saved_evaluations", "search_many", "series", "tool_output", "trainable_calls",
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
    have defaults), then its optional parts, each its own type: `page`, `commands`, `serving`."""

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
    serving: "Serving" = field(default_factory=lambda: Serving())  # how `masrl serve RUN_DIR` runs a request


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


# No option, index or count a model picks is longer: int() of a longer run wastes time, and past
# 4,300 digits it raises.
MAX_OPTION_DIGITS = 18


def option_number(text: str) -> int | None:
    """The number `text` writes as a choice ("3", "07", also in another script's decimal digits, as
    int reads them), or None: not decimal digits alone ("²" is a digit to str.isdigit but not to
    int, which raised), or longer than MAX_OPTION_DIGITS (int raises past 4,300 digits)."""
    text = text.strip()
    return int(text) if text.isdecimal() and len(text) <= MAX_OPTION_DIGITS else None


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
