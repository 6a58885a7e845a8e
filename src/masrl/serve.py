"""`masrl serve`: a trained run behind the OpenAI chat-completions protocol.

Two backends for the shared server (`masrl.http`):

- `SystemBackend` serves the trained **system** (the default): each request
  is one greedy episode of the run's system with the trained adapters and
  the run's frozen agents (a pool, experts, tools, reached through their own
  backends). The reply's content is the system's final answer; the response
  also carries an audit record under ``masrl`` (calls in order with agent,
  role, turn, tokens and cost; tokens and cost per agent; turns; and the
  system's own fields, e.g. the router's verdicts or the budget mode). A
  system's `SystemSpec.serving` says how a request configures it (modes such
  as the budget controller's low/medium/high, chosen per request with
  ``"budget": MODE`` or the model name ``NAME:MODE``; the router's
  ``pool`` and ``caps``) and what its answer is.
- `PolicyBackend` serves one trained policy as a plain chat model
  (``masrl serve RUN --policy NAME``).

Where the served system generates, a request's ``max_tokens``,
``temperature``, ``top_p``, ``stop`` and ``seed`` replace the trained
agents' evaluation settings (greedy by default); frozen agents keep their own.
Replies are streamed (``stream: true``) once the episode has finished: a
system's answer exists only at its end.

The question is the last user message. When it is one of the task's own
items (its held-out or training questions), the episode runs on that item,
so simulated agents (which need the item's gold answer to play their part)
can answer it and the audit record says whether the answer was correct; any
other question runs as a new item without a gold answer.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from prometheus_client import CollectorRegistry, Counter

from masrl.agents.base import CountsAttempts
from masrl.agents.policy import PolicyAgent
from masrl.generation.sampling import SamplingParams
import masrl.http  # create_app is looked up when called: a caller may replace it (tests/test_parts.py)
from masrl.config import ConfigError
from masrl.http.protocol import ChatRequest, Completion, HTTPError, ModelCard
from masrl.rollout.tree import Parallel, rollout
from masrl.systems.api import ServeOptions, Serving
from masrl.types import AgentError, Episode, Message, TaskItem

MODE_FIELD = "budget"  # the body field that picks a request's mode (the CoRL budget modes)
MAX_TOKENS = 4096  # the most new tokens one request may ask a trained agent for (a hostile 10**9 ties up the server)


# ---------------------------------------------------------------- requests
def sampling_for(params: SamplingParams, request: ChatRequest) -> SamplingParams:
    """The trained agent's settings with the request's sampling fields in their place."""
    if (request.token_limit or 0) > MAX_TOKENS:
        raise HTTPError(400, f"max_tokens {request.token_limit} is over this server's limit of {MAX_TOKENS}")
    return replace(
        params,
        max_new_tokens=request.token_limit or params.max_new_tokens,
        temperature=params.temperature if request.temperature is None else request.temperature,
        top_p=params.top_p if request.top_p is None else request.top_p,
        stop=tuple(dict.fromkeys((*params.stop, *request.stops))),
        seed=request.seed,
    )


def split_model(name: str | None, served: str) -> tuple[str | None, bool]:
    """(mode suffix, whether `name` is ours): "router" -> (None, True), "budget:low" -> ("low", True)."""
    if name is None or name == served:
        return None, True
    base, sep, mode = name.rpartition(":")
    return (mode, True) if sep and base == served and mode else (None, False)


def last_user_text(messages: Sequence[Message]) -> str:
    for m in reversed(messages):
        if m.role == "user" and m.content.strip():
            return m.content.strip()
    raise HTTPError(400, "the request has no user message with text: the system answers the last user message")


# ---------------------------------------------------------------- audit
def audit(episode: Episode) -> dict[str, Any]:
    """What happened in one served episode, for any system (the path from the root to the answer)."""
    leaf = episode.leaves()[-1]
    path = episode.path(leaf)
    tokens: dict[str, dict[str, int]] = defaultdict(lambda: {"in": 0, "out": 0})
    cost: dict[str, float] = defaultdict(float)
    calls = []
    for c in path:
        tin, tout = (c.reply.tokens_in, c.reply.tokens_out) if c.reply else (0, 0)
        tokens[c.agent]["in"] += tin
        tokens[c.agent]["out"] += tout
        cost[c.agent] += c.cost
        calls.append({"agent": c.agent, "role": c.role, "turn": c.turn, "tokens_in": tin, "tokens_out": tout,
                      "cost": c.cost, "text": c.reply.text if c.reply else None, "error": c.error})  # fmt: skip
    return {
        "calls": calls,
        "agents": [c["agent"] for c in calls],
        "turns": max((c.turn for c in path), default=0),
        "tokens": dict(tokens),
        "cost_by_agent": dict(cost),
        "cost": sum(cost.values()),
    }


def last_text(episode: Episode) -> str:
    """The default answer: the text of the episode's last call."""
    leaf = episode.leaves()[-1]
    return leaf.reply.text if leaf.reply else ""


# ---------------------------------------------------------------- the system
class SystemBackend:
    """The run's trained system; one request, one greedy episode."""

    def __init__(self, engine, name: str):
        self.engine, self.name = engine, name
        self.kind = engine.config.system.kind
        self.serving: Serving = engine.spec.serving
        self.modes = tuple(self.serving.modes(engine.system)) if self.serving.modes else ()
        self.items = question_index(engine.task, engine.config.eval.size)
        self._trained = {n: a for n, a in engine.eval_agents.items() if isinstance(a, PolicyAgent)}
        self.register_metrics(CollectorRegistry())  # the server registers them again in its own registry

    def models(self) -> list[ModelCard]:
        meta = {"masrl": {"system": self.kind, "modes": list(self.modes)}}
        return [ModelCard(self.name, meta), *(ModelCard(f"{self.name}:{m}", meta) for m in self.modes)]

    def register_metrics(self, registry: CollectorRegistry) -> None:
        self.m_cost = Counter("masrl_agent_cost_dollars", "dollars spent per agent", ["agent"], registry=registry)
        self.m_calls = Counter("masrl_agent_calls", "calls per agent", ["agent"], registry=registry)
        self.m_failed = Counter("masrl_episodes_failed", "episodes whose agents failed", registry=registry)

    def prepare(self, request: ChatRequest):
        suffix, ours = split_model(request.model, self.name)
        if not ours:
            names = ", ".join(m.id for m in self.models())
            raise HTTPError(404, f"model {request.model!r} not found; this server serves {names}",
                            code="model_not_found")  # fmt: skip
        fields = request.extra
        mode = fields.pop(MODE_FIELD, None)
        if mode is not None and suffix is not None and mode != suffix:
            raise HTTPError(400, f"the model name asks for mode {suffix!r} and {MODE_FIELD!r} for {mode!r}")
        mode = mode if mode is not None else suffix
        if mode is not None and not self.modes:
            raise HTTPError(400, f"the {self.kind} system takes no mode (got {mode!r})")
        if mode is not None and mode not in self.modes:
            raise HTTPError(400, f"unknown mode {mode!r}; modes: {', '.join(self.modes)}")
        if mode is None and self.modes:  # no mode asked for: the middle one (CoRL's "medium")
            mode = self.modes[len(self.modes) // 2]
        item = self.item_for(last_user_text(request.conversation()))
        system = self.engine.system
        if self.serving.configure is not None:
            try:
                system = self.serving.configure(system, ServeOptions(mode, fields))
            except ValueError as exc:
                raise HTTPError(400, str(exc)) from None
        # Each request is an independent first attempt: agents that count attempts (a simulated pool,
        # recordings) are forked, so a served answer is what a reset evaluation draws for the item.
        agents = {n: a.fork() if isinstance(a, CountsAttempts) else a for n, a in self.engine.eval_agents.items()}
        for n, a in self._trained.items():
            agents[n] = a.with_params(sampling_for(a.params, request))

        async def work() -> Completion:
            episode = (await rollout(system, agents, [item], Parallel(1)))[0]
            return self._completion(episode, item, mode)

        return work

    def item_for(self, question: str) -> TaskItem:
        found = self.items.get(question)
        if found is not None:
            return found
        ident = "request-" + hashlib.sha256(question.encode()).hexdigest()[:16]
        return TaskItem(ident, question, "", {})

    def _completion(self, episode: Episode, item: TaskItem, mode: str | None) -> Completion:
        record = audit(episode)
        leaf = episode.leaves()[-1]
        for agent, dollars in record["cost_by_agent"].items():
            self.m_cost.labels(agent).inc(dollars)
        for agent in record["agents"]:
            self.m_calls.labels(agent).inc()
        if leaf.failed:
            self.m_failed.inc()
            raise HTTPError(502, f"agent {leaf.agent} failed: {leaf.error}", kind="agent_error")
        if self.serving.audit is not None:
            record.update(self.serving.audit(episode))
        record.update(system=self.kind, mode=mode, item=item.id)
        if item.answer:
            record["correct"] = bool(leaf.rewards.get("correct", 0.0))
        text = (self.serving.answer or last_text)(episode)
        tokens_in = sum(c["tokens_in"] for c in record["calls"])
        tokens_out = sum(c["tokens_out"] for c in record["calls"])
        finish = leaf.reply.finish_reason if leaf.reply else "stop"
        return Completion(text, tokens_in, tokens_out, finish, extension=record)


def question_index(task, eval_size: int) -> Mapping[str, TaskItem]:
    """The task's own items by question text: the held-out items and every item it has generated."""
    items = list(task.items("eval", 0, eval_size))
    known = getattr(task, "known_items", None)
    if known is not None:
        items += known()
    return {it.question.strip(): it for it in reversed(items)}  # the held-out item wins a clash


# ---------------------------------------------------------------- one policy
class PolicyBackend:
    """One trained policy as a plain chat model (``--policy NAME``): the request's messages, one reply."""

    def __init__(self, agent, name: str):
        self.agent, self.name = agent, name

    def models(self) -> list[ModelCard]:
        return [ModelCard(self.name)]

    def prepare(self, request: ChatRequest):
        if request.model is not None and request.model != self.name:
            raise HTTPError(404, f"model {request.model!r} not found; this server serves {self.name!r}",
                            code="model_not_found")  # fmt: skip
        agent = self.agent
        if isinstance(agent, PolicyAgent):
            agent = agent.with_params(sampling_for(agent.params, request))
        messages = request.conversation()

        async def work() -> Completion:
            try:
                reply = await agent(messages)
            except AgentError as exc:
                raise HTTPError(502, str(exc), kind="agent_error") from None
            return Completion(reply.text, reply.tokens_in, reply.tokens_out, reply.finish_reason)

        return work


def backend_for(engine, run_name: str, policy: str | None):
    """The backend `masrl serve` puts behind the server: the system, or one policy with `policy`."""
    if policy is None:
        return SystemBackend(engine, run_name)
    trained = [n for n, a in engine.eval_agents.items() if isinstance(a, PolicyAgent)]
    if policy not in trained:
        raise ConfigError(f"no trained language-model agent {policy!r}; this run has {', '.join(trained) or 'none'}")
    return PolicyBackend(engine.eval_agents[policy], policy)


def agent_app(agent, name: str, settings=None):
    """Any agent (a local model, a function) behind the server as the chat model `name`."""
    backend, settings = PolicyBackend(agent, name), settings or masrl.http.ServerSettings()
    return masrl.http.create_app(backend, settings, title=f"masrl: {name}")
