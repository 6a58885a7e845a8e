"""One tree-expansion routine; samplers are branching rules over it.

A `System` is a state machine over calls: `next_step(state)` says which agent
acts next and with what prompt, `advance(state, step, reply)` returns the new
state, the parsed action, the immediate rewards and whether the trajectory is
over. `expand` grows the episode tree for one task: at every state the
`BranchRule` says how many candidate calls to draw (`width`) and which of them
continue (`keep`). Parallel sampling (G independent episodes) is the rule
"width G at the root, 1 below, keep all"; the full tree is "width G at every
decision, keep all"; per-turn greedy trees and fork-at-agent are other rules
over the same routine (`PerTurnGreedy` is AT-GRPO's: K candidates per
decision, the best-rewarded one continues).

The search pipeline's samplers (MHGPO (arXiv:2506.02718), appendix A) are
rules too: `ForkAt(G, d)` is Algorithm 2's fork_on (one-to-one before and
after depth d, G candidates at d); Fork-on-first is `ForkAt(G, 0)`. A rule
may instead draw a per-task plan: `plans(task)` returns the rules whose
trees together make the task's episode, grown side by side as one forest
(root ids numbered on across plans). Independent Sampling plans one
`ForkAt` per agent (Algorithm 4); Round-robin draws one fork depth per
question from p (Algorithm 5, seeded by the task id so a resumed run draws
the same).

A system that cannot be stepped from here (an agent program in its own process,
masrl/systems/program) provides `async expand(agents, task, rule)` itself (`Expands`) and is
handed the same branching rule.

The other optional methods a system may have (docs/api.md) are Protocols too: `Observes`,
`Stateful`, `EvalMetrics`, `ItemMetrics`. `SystemHooks.of(system)` checks them once, when the
engine builds the system, and the loop and the evaluation call what it found.

A backend failure (AgentError, or any exception from a frozen agent) ends that
branch with a failed call; the other branches go on.

A system is untrusted code (a user's plugin). Its hooks run through `call_hook`, and what they
raise is handled by the rollout's `SystemErrors` (masrl.rollout.system_errors,
`rollout.on_system_error`): one line naming the system, the hook, the file and line and the
exception, then the run stops, or the episode it raised in is dropped (its calls marked failed, the
other episodes and branches go on). A step for an agent that no policy or frozen agent serves always
stops, at its first occurrence, with the agents there are; `check_system` tries one item when the
engine is built, before any model loads.

A rollout given a `key` (`rollout.order: place`; the key names the run seed
and step) depends only on where each call sits, not on the order concurrent
replies happened to arrive in (remote agents answer in any order): every call
runs with `CALL_ADDRESS` set to its place (the key, the task's slot in the
batch, the call's id in its tree), so an agent that draws at random can key
its draw on it, and the episode lists its calls level by level in tree order,
so the update sums its samples in the same order. A run resumed after a kill
then draws exactly what the uninterrupted one drew. Without a key, calls are
listed as they finished (the order every measured run in the docs used).

A rollout in lockstep (`rollout(..., lockstep=True)`) grows every task's tree
level by level together, by the same rules: a level's calls are drawn at once
(one generation batch) and its environment steps run in task order, so a
system whose steps share state across tasks sees them in a fixed order (the
router's usage caps at evaluation, masrl/systems/router/evaluation.py).

Environment steps that block (a sandboxed program, a tool, a retrieval: a
system's `advance`) run on the event loop by default, which keeps every seeded
run reproducible; with `rollout.env_threads: N` they run on N threads
(`EnvSteps`) so the loop keeps serving the other episodes meanwhile.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from masrl.agents.base import Agent
from masrl.rollout.system_errors import Guarded, HookFailed, SystemErrors, as_failure, call_hook
from masrl.types import Call, Episode, Message, Reply, SystemCodeError, TaskItem


@dataclass(frozen=True)
class Step:
    """What the system asks for next: one agent, one prompt."""

    agent: str
    role: str
    turn: int
    messages: tuple[Message, ...]
    branch: bool = True  # False: a frozen agent's answer to an action, drawn once (samplers never fork it)


@dataclass(frozen=True)
class Transition:
    state: Any
    action: Any = None
    rewards: Mapping[str, float] = field(default_factory=dict)
    reward: float = 0.0
    done: bool = False


class System(Protocol):
    def start(self, task: TaskItem) -> Any: ...

    def next_step(self, state: Any) -> Step: ...

    def advance(self, state: Any, step: Step, reply: Reply) -> Transition: ...


# ---------------------------------------------------------------- optional system methods
@runtime_checkable
class Observes(Protocol):
    """Metrics of its own from each training step's episodes, after sampling (the router's usage and
    dual ascent). Every rank calls it on the same broadcast episodes: it must depend on them alone."""

    def observe(self, episodes: Sequence[Episode]) -> Mapping[str, float]: ...


@runtime_checkable
class Stateful(Protocol):
    """State that must survive a checkpoint (the router's Lagrange multipliers)."""

    def state_dict(self) -> Any: ...

    def load_state_dict(self, state: Any) -> None: ...


@runtime_checkable
class EvalMetrics(Protocol):
    """Numbers of its own in the default evaluation (the search system's F1)."""

    def eval_metrics(self, episodes: Sequence[Episode]) -> Mapping[str, float]: ...


@runtime_checkable
class ItemMetrics(Protocol):
    """The same numbers per item, saved with the evaluation so they get intervals."""

    def eval_item_metrics(self, episode: Episode) -> Mapping[str, float]: ...


@runtime_checkable
class Expands(Protocol):
    """A system that cannot be stepped from outside grows its own tree under the sampler's rule."""

    def expand(self, agents: Mapping[str, Agent], task: TaskItem, rule: Any) -> Awaitable[Episode]: ...


@dataclass(frozen=True)
class SystemHooks:
    """The optional methods a built system has, found once (`of`) when the engine builds it; None: absent."""

    observe: Callable[[Sequence[Episode]], Mapping[str, float]] | None = None
    state: Stateful | None = None
    eval_metrics: Callable[[Sequence[Episode]], Mapping[str, float]] | None = None
    eval_item_metrics: Callable[[Episode], Mapping[str, float]] | None = None

    @classmethod
    def of(cls, system: object, errors: SystemErrors = SystemErrors()) -> SystemHooks:
        """The hooks `system` has, each stopping the run with one line when it raises (`errors`)."""

        def guarded(hook: str, present: bool) -> Callable[..., Any] | None:
            return Guarded(hook, getattr(system, hook), system, errors) if present else None

        return cls(
            observe=guarded("observe", isinstance(system, Observes)),
            state=system if isinstance(system, Stateful) else None,
            eval_metrics=guarded("eval_metrics", isinstance(system, EvalMetrics)),
            eval_item_metrics=guarded("eval_item_metrics", isinstance(system, ItemMetrics)),
        )


def check_system(system: object, item: TaskItem | None, agents: Collection[str], errors: SystemErrors) -> None:
    """What can be checked of a built system before any model loads: it has the methods a rollout calls,
    and its first step on `item` (a training item) names an agent that is served. A hook that raises
    here stops the run with on_error 'stop'; with 'drop' the rollout sees to it, episode by episode."""
    if isinstance(system, Expands):
        return
    missing = [m for m in ("start", "next_step", "advance") if not callable(getattr(system, m, None))]
    if missing:
        raise SystemCodeError(f"system {errors.title(system)} built a {type(system).__name__} without "
                              f"{', '.join(missing)}: a system needs start, next_step and advance, or expand "
                              "(docs/api.md)")  # fmt: skip
    if item is None:
        return
    try:
        step = call_hook("next_step", system.next_step, call_hook("start", system.start, item))
    except HookFailed as failure:
        if errors.on_error == "stop":
            raise errors.stop(system, failure) from None
        return
    if step.agent not in agents:
        raise errors.unknown_agent(system, step.agent, agents)


# ---------------------------------------------------------------- samplers
class BranchRule(Protocol):
    def width(self, depth: int, step: Step) -> int: ...

    def keep(self, depth: int, step: Step, children: Sequence[Call]) -> Sequence[int]: ...


@runtime_checkable
class Planner(Protocol):
    """A sampler that picks, per task, the branch rules whose trees make its episode."""

    def plans(self, task: TaskItem) -> Sequence[BranchRule]: ...


@dataclass(frozen=True)
class Parallel:
    """G independent episodes per task: branch only at the root."""

    group_size: int

    def width(self, depth: int, step: Step) -> int:
        return self.group_size if depth == 0 else 1

    def keep(self, depth: int, step: Step, children: Sequence[Call]) -> Sequence[int]:
        return range(len(children))


@dataclass(frozen=True)
class FullTree:
    """Every decision node draws G candidates and all of them continue (critique-routing
    controller, appendix E.2): a node's children are the next decisions after each action.
    Steps marked `branch=False` (the routed agent's answer) are drawn once."""

    group_size: int

    def width(self, depth: int, step: Step) -> int:
        return self.group_size if step.branch else 1

    def keep(self, depth: int, step: Step, children: Sequence[Call]) -> Sequence[int]:
        return range(len(children))


@dataclass(frozen=True)
class PerTurnGreedy:
    """AT-GRPO's tree-structured sampling (arXiv:2510.11062, sec. 4, Algorithm 1, line 13):
    at every decision draw K candidates from the same observation and continue only the one
    with the highest immediate reward (the first on a tie; failed candidates never win).
    Steps marked `branch=False` are drawn once. K = 1 is a single greedy-free rollout."""

    group_size: int

    def width(self, depth: int, step: Step) -> int:
        return self.group_size if step.branch else 1

    def keep(self, depth: int, step: Step, children: Sequence[Call]) -> Sequence[int]:
        live = [i for i, c in enumerate(children) if not c.failed]
        return [max(live, key=lambda i: children[i].reward)] if live else []


@dataclass(frozen=True)
class ForkAt:
    """fork_on (MHGPO, Algorithm 2): G candidates at depth `depth`, one everywhere else.
    Fork-on-first is depth 0 (Algorithm 3)."""

    group_size: int
    depth: int = 0

    def width(self, depth: int, step: Step) -> int:
        return self.group_size if depth == self.depth else 1

    def keep(self, depth: int, step: Step, children: Sequence[Call]) -> Sequence[int]:
        return range(len(children))


@dataclass(frozen=True)
class IndependentSampling:
    """IS (MHGPO, Algorithm 4): for each of the `agents` pipeline positions, a separate
    fork_on at that position. Only the fork agent's G siblings form a (homogeneous)
    group; pair it with `algo.grouping: independent`, which leaves every other call
    alone in its group (advantage 0, so it is not trained on)."""

    group_size: int
    agents: int = 3

    def plans(self, task: TaskItem) -> Sequence[BranchRule]:
        return [ForkAt(self.group_size, d) for d in range(self.agents)]


@dataclass(frozen=True)
class RoundRobin:
    """RR (MHGPO, Algorithm 5): per question the fork depth is drawn from `probs`
    (one probability per agent, in pipeline order); calls before the fork are
    singletons, regrouped across the batch by `algo.grouping: round_robin`."""

    group_size: int
    probs: tuple[float, ...] = (0.7, 0.1, 0.2)
    seed: int = 0

    def __post_init__(self):
        if not self.probs or any(p < 0 for p in self.probs) or sum(self.probs) <= 0:
            raise ValueError(f"round-robin probabilities must be >= 0 and not all 0, got {self.probs}")

    def fork_depth(self, task: TaskItem) -> int:
        rng = random.Random(f"{self.seed}:{task.id}")
        return rng.choices(range(len(self.probs)), weights=self.probs)[0]

    def plans(self, task: TaskItem) -> Sequence[BranchRule]:
        return [ForkAt(self.group_size, self.fork_depth(task))]


BRANCH_RULES = {
    "parallel": Parallel,
    "full_tree": FullTree,
    "fork_on_first": ForkAt,
    "independent": IndependentSampling,
    "round_robin": RoundRobin,
    "per_turn_greedy": PerTurnGreedy,
}


CALL_ADDRESS: ContextVar[str | None] = ContextVar("masrl_call_address", default=None)


def call_address(key: str, slot: int, call_id: str) -> str:
    """Where a call sits: the rollout's key, the task's slot in the batch, the call's tree id."""
    return f"{key}/{slot}/{call_id}"


def address_seed(address: str) -> int:
    """A 63-bit seed from an address (sha256: stable across processes, unlike hash())."""
    return int.from_bytes(hashlib.sha256(address.encode()).digest()[:8], "big") >> 1


class EnvSteps:
    """`System.advance` calls on a thread pool, off the event loop (`rollout.env_threads`).

    It counts the steps in flight: the generation service waits until none is
    running before it cuts a batch (`GenerationService(env=...)`), so the episodes
    whose steps finish together still share a batch, as when steps ran inline.
    Requests may then reach the batch in another order (threads finish in any
    order), so samples are not bit-for-bit those of the inline run."""

    def __init__(self, threads: int):
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="masrl-env")
        self.running = 0  # touched only on the event loop's thread

    async def advance(self, system: System, state: Any, step: Step, reply: Reply) -> Transition:
        self.running += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self.pool, system.advance, state, step, reply)
        finally:
            self.running -= 1

    def close(self) -> None:
        self.pool.shutdown(wait=True)


async def expand(
    system: System, agents: Mapping[str, Agent], task: TaskItem, rule: BranchRule | Planner,
    key: str | None = None, slot: int = 0, env: EnvSteps | None = None, errors: SystemErrors = SystemErrors(),
) -> Episode:  # fmt: skip
    if isinstance(system, Expands):  # a system that is not a state machine grows its own tree (an agent program)
        return await _expand_own(system, agents, task, rule, errors)
    calls: list[Call] = []  # appended parents first
    broken: list[HookFailed] = []  # on_error 'drop': what the system raised; the episode is dropped

    def address(parent: str | None, i: int, first: int) -> str | None:
        return None if key is None else call_address(key, slot, _call_id(parent, i, first))

    def fail(failure: HookFailed) -> None:
        if errors.on_error == "stop":
            raise errors.stop(system, failure) from None
        broken.append(failure)

    async def grow(state: Any, parent: str | None, depth: int, rule: BranchRule, first: int = 0) -> None:
        if broken:  # the episode is dropped: its other branches end here
            return
        try:
            step = call_hook("next_step", system.next_step, state)
        except HookFailed as failure:
            return fail(failure)
        agent = _agent(system, step, agents, errors)
        width = rule.width(depth, step)
        outcomes = await asyncio.gather(*(_invoke(agent, step.messages, address(parent, i, first))
                                          for i in range(width)))  # fmt: skip
        children, failure = await _children(system, state, step, outcomes, parent, first, env)
        calls.extend(c for c, _ in children)
        if failure is not None:
            return fail(failure)
        live = _continuing(rule, depth, step, children)
        await asyncio.gather(*(grow(tr.state, call.id, depth + 1, rule) for call, tr in live))

    try:
        start = call_hook("start", system.start, task)
        roots = _roots(system, start, task, rule)
    except HookFailed as failure:
        return errors.drop(system, task, (), failure)
    await asyncio.gather(*(grow(start, None, 0, plan, first) for plan, first in roots))
    if key is not None:  # by place: level by level in tree order, not in the order replies finished in
        calls.sort(key=_tree_order)
    return errors.drop(system, task, calls, broken[0]) if broken else Episode(task=task, calls=tuple(calls))


async def _expand_own(
    system: Expands, agents: Mapping[str, Agent], task: TaskItem, rule: BranchRule | Planner, errors: SystemErrors
) -> Episode:
    """The episode a system grows itself; what its `expand` raises is its own error, handled as the hooks' are."""
    try:
        return await system.expand(agents, task, rule)
    except Exception as exc:
        failure = as_failure("expand", exc)
        if failure is None:
            raise
        return errors.drop(system, task, (), failure)


def _agent(system: System, step: Step, agents: Mapping[str, Agent], errors: SystemErrors) -> Agent:
    """The agent that answers `step`; a name that none serves stops the run at its first occurrence."""
    agent = agents.get(step.agent)
    if agent is None:
        raise errors.unknown_agent(system, step.agent, agents)
    return agent


def _roots(system: System, start: Any, task: TaskItem, rule: BranchRule | Planner) -> list[tuple[BranchRule, int]]:
    """The branch rules whose trees make the task's episode, each with its first root id."""
    plans = rule.plans(task) if isinstance(rule, Planner) else [rule]  # a Planner, or one BranchRule
    firsts = [0]  # the first root id of each plan's tree
    for plan in plans[:-1]:
        firsts.append(firsts[-1] + plan.width(0, call_hook("next_step", system.next_step, start)))
    return list(zip(plans, firsts))


async def _advance(system: System, state: Any, step: Step, reply: Reply, env: EnvSteps | None) -> Transition:
    """The system's `advance`, on the event loop or on an environment thread (`env`)."""
    if env is None:
        return call_hook("advance", system.advance, state, step, reply)
    try:
        return await env.advance(system, state, step, reply)
    except Exception as exc:
        failure = as_failure("advance", exc)
        if failure is None:
            raise
        raise failure from exc


async def _children(
    system: System, state: Any, step: Step, outcomes: Sequence[tuple[Reply | None, str | None]],
    parent: str | None, first: int, env: EnvSteps | None,
) -> tuple[list[tuple[Call, Transition | None]], HookFailed | None]:  # fmt: skip
    """The calls drawn at one node, each advanced in turn (a failed draw ends its branch), and what the
    system raised while advancing them: that call and the ones after it stay unadvanced (done)."""
    children: list[tuple[Call, Transition | None]] = []
    failure: HookFailed | None = None
    for i, (reply, error) in enumerate(outcomes):
        base = dict(id=_call_id(parent, i, first), parent=parent, agent=step.agent, role=step.role, turn=step.turn, messages=step.messages)
        if reply is None or failure is not None:
            children.append((Call(**base, reply=reply, done=True, error=error), None))
            continue
        try:
            tr = await _advance(system, state, step, reply, env)
        except HookFailed as raised:
            failure = raised
            children.append((Call(**base, reply=reply, done=True), None))
            continue
        call = Call(**base, reply=reply, action=tr.action, rewards=dict(tr.rewards), reward=tr.reward, done=tr.done)
        children.append((call, tr))
    return children, failure


def _continuing(rule: BranchRule, depth: int, step: Step, children: Sequence[tuple[Call, Transition | None]]
                ) -> list[tuple[Call, Transition]]:  # fmt: skip
    """The children the rule keeps that go on (not failed, not done)."""
    kept = rule.keep(depth, step, [c for c, _ in children])
    return [(call, tr) for call, tr in (children[i] for i in kept) if tr and not call.done]


@dataclass(frozen=True)
class _Node:
    """A state of a lockstep rollout waiting for its next call."""

    slot: int  # its task's place in the batch
    state: Any
    parent: str | None
    depth: int
    rule: BranchRule
    first: int = 0


async def _lockstep(
    system: System, agents: Mapping[str, Agent], tasks: Sequence[TaskItem], rule: BranchRule | Planner,
    key: str | None, env: EnvSteps | None, errors: SystemErrors,
) -> list[Episode]:  # fmt: skip
    """Every task's tree grown level by level: a level's calls at once, then its steps in task order."""
    calls: list[list[Call]] = [[] for _ in tasks]
    broken: dict[int, HookFailed] = {}  # on_error 'drop': task slot -> what the system raised there

    def fail(slot: int, failure: HookFailed) -> None:
        if errors.on_error == "stop":
            raise errors.stop(system, failure) from None
        broken.setdefault(slot, failure)

    level: list[_Node] = []
    for slot, task in enumerate(tasks):
        try:
            start = call_hook("start", system.start, task)
            level += [_Node(slot, start, None, 0, plan, first) for plan, first in _roots(system, start, task, rule)]
        except HookFailed as failure:
            fail(slot, failure)
    while level:
        stepped: list[tuple[_Node, Step]] = []
        for n in level:
            try:
                stepped.append((n, call_hook("next_step", system.next_step, n.state)))
            except HookFailed as failure:
                fail(n.slot, failure)
        stepped = [(n, step) for n, step in stepped if n.slot not in broken]
        widths = [n.rule.width(n.depth, step) for n, step in stepped]
        draws = [(_agent(system, step, agents, errors), step.messages,
                  None if key is None else call_address(key, n.slot, _call_id(n.parent, i, n.first)))
                 for (n, step), width in zip(stepped, widths) for i in range(width)]  # fmt: skip
        outcomes = iter(await asyncio.gather(*(_invoke(*draw) for draw in draws)))
        after: list[_Node] = []
        for (n, step), width in zip(stepped, widths):
            drawn = [next(outcomes) for _ in range(width)]
            if n.slot in broken:  # its task was dropped earlier in this level
                continue
            children, failure = await _children(system, n.state, step, drawn, n.parent, n.first, env)
            calls[n.slot].extend(c for c, _ in children)
            if failure is not None:
                fail(n.slot, failure)
                continue
            after += [_Node(n.slot, tr.state, call.id, n.depth + 1, n.rule)
                      for call, tr in _continuing(n.rule, n.depth, step, children)]  # fmt: skip
        level = [n for n in after if n.slot not in broken]
    if key is not None:
        calls = [sorted(cs, key=_tree_order) for cs in calls]
    return [errors.drop(system, task, cs, broken[slot]) if slot in broken else Episode(task=task, calls=tuple(cs))
            for slot, (task, cs) in enumerate(zip(tasks, calls))]  # fmt: skip


def _tree_order(call: Call) -> tuple[int, tuple[int, ...]]:
    path = tuple(int(p) for p in call.id.split("."))
    return len(path), path


def _call_id(parent: str | None, i: int, first: int) -> str:
    """Roots are numbered on across a task's plans; a child is its parent's id and its index."""
    return str(first + i) if parent is None else f"{parent}.{i}"


async def _invoke(agent: Agent, messages: tuple[Message, ...], address: str | None = None
                  ) -> tuple[Reply | None, str | None]:  # fmt: skip
    CALL_ADDRESS.set(address)  # gather runs each call as its own task, so this stays in this call
    try:
        return await agent(messages), None
    except Exception as exc:  # noqa: BLE001 - recorded on the call; the step goes on
        return None, f"{type(exc).__name__}: {exc}"


async def rollout(
    system: System, agents: Mapping[str, Agent], tasks: Sequence[TaskItem], rule: BranchRule | Planner,
    key: str | None = None, env: EnvSteps | None = None, lockstep: bool = False,
    errors: SystemErrors = SystemErrors(), finished: Callable[[], None] | None = None,
) -> list[Episode]:  # fmt: skip
    """Expand every task's tree concurrently, so generation batches across tasks. `key` (unique
    within a run) makes the rollout one by place (see the module's doc); None: by arrival.
    `lockstep`: level by level across tasks, environment steps in task order (a system stepped from
    here; one that grows its own tree cannot be). `errors`: what the system's own exceptions do (the
    default stops at the first); more than `errors.max_dropped` of the episodes dropped stops too.
    `finished()` is called as each task's tree is done (a progress bar; not with `lockstep`)."""

    async def one(i: int, task: TaskItem) -> Episode:
        episode = await expand(system, agents, task, rule, key, i, env, errors)
        if finished is not None:
            finished()
        return episode

    if lockstep:
        episodes = await _lockstep(system, agents, tasks, rule, key, env, errors)
    else:
        episodes = list(await asyncio.gather(*(one(i, t) for i, t in enumerate(tasks))))
    errors.check_share(system, episodes)
    return episodes
