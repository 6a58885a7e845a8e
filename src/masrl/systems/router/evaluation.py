"""Evaluation of routers under per-agent usage caps (Critique-and-routing (arXiv:2605.08686), section 4).

Every method (the trained controller and each one-shot baseline) is scored the
same way, on the same items, with the same pool draws (agents that count their
attempts, `CountsAttempts`, are reset first):

- The controller runs through the engine's rollout (masrl.rollout.tree, one
  greedy episode per item), in lockstep: items go turn by turn across the
  whole set, so the controller's calls of one turn are one generation batch
  and cap accounting is in item order, deterministic. The caps are a wrapper
  of the system (`LimitedRouter`) that passes each routing through a
  `CapLedger`; `masrl serve` limits a request's pool with the same wrapper.
- **Usage caps.** Agent k may take a call only while its share of all calls
  stays within rho_k: a call is allowed if calls_k + 1 <= rho_k * (calls so far
  + 1 + items not yet started). The right side is a lower bound on the final
  number of calls (every unstarted item makes at least one), so the final
  share is always <= rho_k; for a one-shot router it is exactly
  "at most rho_k * N calls". A capped agent's call goes to the next-best
  available agent: the strongest allowed agent weaker than the one chosen,
  and, on a re-route, still stronger than the draft's author; when there is
  none the episode ends with the draft it has (turn 1: the weakest allowed).
- Reported: accuracy; per-agent usage ratios; calls per item; share of items
  that used every turn; accuracy had the episode stopped after turn t; the
  routing confusion matrix (rows: weakest agent that solves the item alone,
  columns: the agent that answered turn 1); the verification confusion matrix
  at turn 2; total and per-item cost.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from masrl.systems.api import (
    Agent, AgentError, CountsAttempts, Episode, ItemScores, Message, Parallel, Reply, Step, Task, TaskItem,
    Transition, rollout,
)
from masrl.systems.router.action import Action, ActionKind
from masrl.systems.router.baselines import labels_from_agents
from masrl.systems.router.system import AGENT_PROMPT, CONTROLLER, RouterState, RouterSystem


# ---------------------------------------------------------------- caps
@dataclass
class CapLedger:
    agents: tuple[str, ...]  # weak -> strong
    rho: Mapping[str, float]
    items: int
    calls: dict[str, int] = field(default_factory=dict)
    started: int = 0  # items that have made their first call
    redirected: int = 0
    overflow: int = 0  # calls made with every candidate capped (only when no agent is allowed at turn 1)

    def allowed(self, agent: str) -> bool:
        total = sum(self.calls.values())
        bound = total + 1 + max(0, self.items - self.started - 1)
        return self.calls.get(agent, 0) + 1 <= self.rho.get(agent, 1.0) * bound + 1e-9

    def assign(self, wanted: str, author: str | None = None) -> str | None:
        """The agent that takes this call (`wanted` or the next-best allowed), recorded; None if none may."""
        order = list(self.agents)
        floor = order.index(author) + 1 if author in order else 0
        candidates = [a for a in reversed(order[floor : order.index(wanted) + 1])]
        chosen = next((a for a in candidates if self.allowed(a)), None)
        if chosen is None and author is None:  # a first call must go somewhere
            chosen = next((a for a in order if self.allowed(a)), None)
            if chosen is None:
                chosen, self.overflow = order[0], self.overflow + 1
        if chosen is None:
            return None
        if author is None:
            self.started += 1
        self.redirected += chosen != wanted
        self.calls[chosen] = self.calls.get(chosen, 0) + 1
        return chosen


@dataclass
class LimitedRouter:
    """The router with its routing passed through a ledger: a call to an agent the ledger does not allow
    goes to the one it assigns, or ends the episode with the draft it has when it assigns none."""

    inner: RouterSystem
    ledger: CapLedger

    def start(self, task: TaskItem) -> RouterState:
        return self.inner.start(task)

    def next_step(self, state: RouterState) -> Step:
        return self.inner.next_step(state)

    def advance(self, state: RouterState, step: Step, reply: Reply) -> Transition:
        tr = self.inner.advance(state, step, reply)
        if state.pending is not None or tr.done:
            return tr
        agent = self.ledger.assign(tr.state.pending, state.author)
        if agent is None:  # nobody allowed is stronger than the author: keep the draft
            final = {"correct": float(bool(state.draft_correct)), "turns": float(state.turn)}
            return replace(tr, state=replace(tr.state, pending=None), rewards={**tr.rewards, **final}, done=True)
        return replace(tr, state=replace(tr.state, pending=agent))


# ---------------------------------------------------------------- traces and results
@dataclass
class Trace:
    """One item's episode at eval."""

    item: TaskItem
    answered_by: list[str] = field(default_factory=list)  # agents that wrote drafts, in order
    wanted: list[str] = field(default_factory=list)  # what the router asked for (before caps)
    correct_after: list[bool] = field(default_factory=list)  # truth of the held draft after each controller turn
    verdicts: list[str] = field(default_factory=list)  # "True" / "False" / "format_error" per turn > 1
    turns: int = 0
    cost: float = 0.0
    correct: bool = False
    decisions: int = 0  # controller replies
    format_errors: int = 0  # of them, replies that did not parse


@dataclass(frozen=True)
class RouterEval:
    method: str
    accuracy: float
    usage: dict[str, float]  # share of all agent calls
    calls_per_item: float
    exhausted: float  # share of items whose episode used all T turns
    accuracy_by_turn: list[float]  # accuracy had each episode stopped after turn t
    routing_confusion: dict[str, dict[str, int]]  # weakest solver -> agent at turn 1 -> count
    verification_confusion: dict[str, dict[str, int]]  # draft truth -> verdict at turn 2 -> count
    cost: float
    cost_per_item: float
    redirected: int
    items: int
    seconds: float
    format_failures: float = 0.0  # share of the controller's replies that did not parse (0 for one-shot routers)
    traces: tuple[Trace, ...] = ()  # per item, in evaluation order: what intervals resample

    def item_scores(self) -> ItemScores:
        t = self.traces
        return ItemScores(self.method, tuple(x.item.id for x in t),
                          {"accuracy": tuple(float(x.correct) for x in t), "cost": tuple(x.cost for x in t)})

    def row(self) -> dict[str, Any]:
        return {"method": self.method, "accuracy": self.accuracy, **{f"usage/{k}": v for k, v in self.usage.items()},
                "calls_per_item": self.calls_per_item, "cost": self.cost}


def summarize(
    method: str,
    traces: Sequence[Trace],
    agents: Sequence[str],
    max_turns: int,
    solvers: Mapping[str, Sequence[bool]] | None,
    redirected: int,
    seconds: float,
) -> RouterEval:
    n = max(1, len(traces))
    counts = {a: sum(t.answered_by.count(a) for t in traces) for a in agents}
    total = sum(counts.values())
    by_turn = []
    for turn in range(1, max_turns + 1):
        # an episode that stopped earlier keeps its final draft
        by_turn.append(sum(t.correct_after[min(turn, len(t.correct_after)) - 1] if t.correct_after else False
                           for t in traces) / n)
    routing: dict[str, dict[str, int]] = {}
    if solvers is not None:
        for t in traces:
            row = weakest_solver(solvers[t.item.id], agents)
            col = t.answered_by[0] if t.answered_by else "none"
            routing.setdefault(row, {}).setdefault(col, 0)
            routing[row][col] += 1
    verification: dict[str, dict[str, int]] = {}
    for t in traces:
        if t.verdicts and len(t.correct_after) >= 1:
            row = "draft correct" if t.correct_after[0] else "draft wrong"
            verification.setdefault(row, {}).setdefault(t.verdicts[0], 0)
            verification[row][t.verdicts[0]] += 1
    cost = sum(t.cost for t in traces)
    decisions = sum(t.decisions for t in traces)
    return RouterEval(
        method=method,
        accuracy=sum(t.correct for t in traces) / n,
        usage={a: (c / total if total else 0.0) for a, c in counts.items()},
        calls_per_item=total / n,
        exhausted=sum(t.turns >= max_turns for t in traces) / n,
        accuracy_by_turn=by_turn,
        routing_confusion=routing,
        verification_confusion=verification,
        cost=cost,
        cost_per_item=cost / n,
        redirected=redirected,
        items=len(traces),
        seconds=seconds,
        format_failures=sum(t.format_errors for t in traces) / decisions if decisions else 0.0,
        traces=tuple(traces),
    )


def weakest_solver(solved: Sequence[bool], agents: Sequence[str]) -> str:
    return next((a for a, ok in zip(agents, solved) if ok), "none")


def reset_pool(pool: Mapping[str, Agent]) -> None:
    for agent in pool.values():
        if isinstance(agent, CountsAttempts):
            agent.reset()


async def _grade(agent: Agent, messages, task: Task, item: TaskItem) -> tuple[bool, float, str]:
    reply = await agent(messages)
    answer = task.extract_answer(reply.text)
    return (answer is not None and task.score(item, answer) > 0), reply.cost, reply.text


# ---------------------------------------------------------------- the controller
def evaluate_controller(
    system: RouterSystem,
    controller: Agent,
    pool: Mapping[str, Agent],
    items: Sequence[TaskItem],
    rho: Mapping[str, float],
    max_turns: int | None = None,
    solvers: Mapping[str, Sequence[bool]] | None = None,
    method: str = "masrl controller",
) -> RouterEval:
    """The multi-turn controller (greedy `controller` agent) under caps `rho`: one episode per item,
    rolled out in lockstep with every routing through the caps' ledger."""
    started = time.perf_counter()
    system = replace(system, max_turns=max_turns or system.max_turns)
    reset_pool(pool)
    ledger = CapLedger(system.agents, rho, len(items))
    capped = LimitedRouter(system, ledger)
    agents = {**pool, system.policy: controller}
    episodes = asyncio.run(rollout(capped, agents, items, Parallel(1), lockstep=True))
    traces = [episode_trace(system, episode) for episode in episodes]
    return summarize(method, traces, system.agents, system.max_turns, solvers, ledger.redirected,
                     time.perf_counter() - started)


def episode_trace(system: RouterSystem, episode: Episode) -> Trace:
    """What one item's greedy episode did: who was asked for and who answered, verdicts, cost."""
    trace = Trace(episode.task)
    for call in episode.calls:  # a path: the controller's calls and the drafts they routed, in turn order
        if call.failed:  # as when the evaluation called its agents itself: a backend failure stops it
            raise AgentError(f"router evaluation: {call.agent} failed on {episode.task.id}: {call.error}")
        trace.cost += call.reply.cost
        if call.role == CONTROLLER:
            action: Action = call.action
            trace.turns, trace.decisions = call.turn, trace.decisions + 1
            trace.format_errors += action.kind == ActionKind.FORMAT_ERROR
            if call.turn > 1:
                trace.verdicts.append("format_error" if action.kind == ActionKind.FORMAT_ERROR else str(action.verdict))
            if action.kind == ActionKind.ROUTE:
                trace.wanted.append(action.agent)  # before the caps; `answered_by` is after
        else:
            trace.answered_by.append(call.agent)
            trace.correct_after.append(system.draft_correct(episode.task, call.action))  # action: its answer
    _close(trace)
    return trace


def _close(trace: Trace) -> None:
    trace.correct = bool(trace.correct_after[-1]) if trace.correct_after else False


# ---------------------------------------------------------------- one-shot routers
def evaluate_one_shot(
    router: Any,
    pool: Mapping[str, Agent],
    task: Task,
    items: Sequence[TaskItem],
    rho: Mapping[str, float],
    solvers: Mapping[str, Sequence[bool]] | None = None,
    prompt: str | None = None,
) -> RouterEval:
    """A router with `choose(items) -> [agent]` (masrl.systems.router.baselines), the chosen agent's draft final."""
    started = time.perf_counter()
    agents = tuple(pool)
    reset_pool(pool)
    ledger = CapLedger(agents, rho, len(items))
    wanted = router.choose(items)
    assigned = [ledger.assign(w) for w in wanted]
    system_prompt = Message("system", prompt or AGENT_PROMPT)

    async def run():
        return await asyncio.gather(
            *(_grade(pool[a], (system_prompt, Message("user", it.question.strip())), task, it)
              for a, it in zip(assigned, items))
        )

    outcomes = asyncio.run(run())
    traces = []
    for it, w, a, (ok, cost, _) in zip(items, wanted, assigned, outcomes):
        traces.append(Trace(it, answered_by=[a], wanted=[w], correct_after=[ok], turns=1, cost=cost, correct=ok))
    return summarize(router.name, traces, agents, 1, solvers, ledger.redirected, time.perf_counter() - started)


def solver_profile(pool: Mapping[str, Agent], task: Task, items: Sequence[TaskItem], prompt: str | None = None) -> dict[str, list[bool]]:
    """Whether each agent alone solves each item (item id -> one bool per agent, pool order).

    For a simulated or recorded pool this is the same draw the evaluation sees
    (attempt 0 after a reset); for live endpoints it costs one call per agent and item."""
    reset_pool(pool)
    labels = labels_from_agents(pool, items, task, prompt or AGENT_PROMPT)
    return {item.id: list(solved) for item, solved in zip(labels.items, labels.solved)}


# ---------------------------------------------------------------- tables
def results_table(results: Sequence[RouterEval], agents: Sequence[str]) -> str:
    """A markdown table: method, accuracy, usage per agent, calls per item, cost."""
    head = ["method", "accuracy", *[f"usage {a}" for a in agents], "calls/item", "cost $", "$/item"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        cells = [r.method, f"{r.accuracy:.3f}", *[f"{r.usage.get(a, 0.0):.2f}" for a in agents],
                 f"{r.calls_per_item:.2f}", f"{r.cost:.4f}", f"{r.cost_per_item:.6f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def detail_text(r: RouterEval, agents: Sequence[str]) -> str:
    """Turn budget, accuracy by max turns and both confusion matrices, as plain text."""
    lines = [f"{r.method}: accuracy {r.accuracy:.3f} on {r.items} items; exhausted turn budget {r.exhausted:.2f}; "
             f"redirected by caps {r.redirected}; replies that did not parse {r.format_failures:.3f}",
             "accuracy by max turns: " + ", ".join(f"T={t + 1}: {a:.3f}" for t, a in enumerate(r.accuracy_by_turn))]
    if r.routing_confusion:
        cols = [*agents, "none"]
        lines.append("routing (rows: weakest solver; columns: agent at turn 1)")
        lines.append("  " + " ".join(f"{c:>12s}" for c in ["", *cols]))
        for row in [*agents, "none"]:
            counts = r.routing_confusion.get(row, {})
            lines.append("  " + " ".join([f"{row:>12s}", *[f"{counts.get(c, 0):>12d}" for c in cols]]))
    if r.verification_confusion:
        lines.append("verification at turn 2 (rows: draft truth; columns: verdict)")
        for row, counts in sorted(r.verification_confusion.items()):
            lines.append(f"  {row:>14s}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return "\n".join(lines)
