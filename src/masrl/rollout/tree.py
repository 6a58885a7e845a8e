"""One tree-expansion routine; samplers are branching rules over it.

A `System` is a state machine over calls: `next_step(state)` says which agent
acts next and with what prompt, `advance(state, step, reply)` returns the new
state, the parsed action, the immediate rewards and whether the trajectory is
over. `expand` grows the episode tree for one task: at every state the
`BranchRule` says how many candidate calls to draw (`width`) and which of them
continue (`keep`). Parallel sampling (G independent episodes) is the rule
"width G at the root, 1 below, keep all"; the full tree is "width G at every
decision, keep all"; per-turn greedy trees and fork-at-agent are other rules
over the same routine (the papers' samplers, masrl.rollout.rules). A rule may
instead be a `Planner`: `plans(task)` returns the rules whose trees together
make the task's episode, grown side by side as one forest (root ids numbered
on across plans).

A system that cannot be stepped from here (an agent program in its own process,
masrl/systems/program) provides `async expand(agents, task, rule)` itself (`Expands`, one of the
optional methods in masrl.rollout.hooks) and is handed the same branching rule.

A backend failure (AgentError, or any exception from a frozen agent) ends that
branch with a failed call; the other branches go on.

A system is untrusted code (a user's plugin). Its hooks run through `call_hook`, and what they
raise is handled by the rollout's `SystemErrors` (masrl.rollout.system_errors,
`rollout.on_system_error`): one line naming the system, the hook, the file and line and the
exception, then the run stops, or the episode it raised in is dropped (its calls marked failed, the
other episodes and branches go on). A step for an agent that no policy or frozen agent serves always
stops, at its first occurrence, with the agents there are. A reward that is not a finite number and
a hook past `rollout.hook_timeout_s` fail their hook as a raise does (`_checked`, `SystemErrors.call`).

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
level by level together, by the same routine (`_Forest`): a level's calls are drawn at once
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
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

from masrl.agents.base import Agent
from masrl.rollout.hooks import Expands
from masrl.rollout.system_errors import RETURNED, BadValue, HookFailed, SystemErrors, as_failure, finite_reward
from masrl.types import Call, Episode, Message, Reply, TaskItem


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


# ---------------------------------------------------------------- branching rules (the papers': masrl.rollout.rules)
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


# ---------------------------------------------------------------- where a call sits
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


# ---------------------------------------------------------------- the expansion
async def expand(
    system: System, agents: Mapping[str, Agent], task: TaskItem, rule: BranchRule | Planner,
    key: str | None = None, slot: int = 0, env: EnvSteps | None = None, errors: SystemErrors = SystemErrors(),
) -> Episode:  # fmt: skip
    """One task's episode: its tree grown under `rule`, each node as soon as its parent is done."""
    if isinstance(system, Expands):  # a system that is not a state machine grows its own tree (an agent program)
        return await _expand_own(system, agents, task, rule, errors)
    (episode,) = await _Forest(system, agents, {slot: task}, rule, key, env, errors, lockstep=False).grow()
    return episode


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
        episodes = await _Forest(system, agents, dict(enumerate(tasks)), rule, key, env, errors, lockstep=True).grow()
    else:
        trees = [asyncio.ensure_future(one(i, t)) for i, t in enumerate(tasks)]
        try:
            episodes = list(await asyncio.gather(*trees))
        except BaseException:  # one stops the run: the others end first (their programs killed, their requests
            for tree in trees:  # answered), not under asyncio.run's teardown, which cancels every task at once
                tree.cancel()
            await asyncio.gather(*trees, return_exceptions=True)
            raise
    errors.check_share(system, episodes)
    return episodes


@dataclass(frozen=True)
class _Node:
    """A state waiting for its next call."""

    slot: int  # its task's place in the batch
    state: Any
    parent: str | None  # the id of the call that led here; None at a root
    depth: int
    rule: BranchRule
    first: int = 0  # a root's: the first root id of its plan


class _Forest:
    """The one expansion routine: the trees of `tasks` (slot -> task) grown under `rule`.

    A group of nodes is stepped together (`_step`): each asks the system for its next step, the
    group's calls are drawn at once, then each node's children are advanced in turn and the ones the
    rule keeps (and that are not done) become the next nodes. `lockstep` says only how those are
    grouped: a whole level as one group (every task level by level, environment steps in task order),
    or each node on its own, stepped as soon as its parent is done (`expand`, one task)."""

    def __init__(
        self, system: System, agents: Mapping[str, Agent], tasks: Mapping[int, TaskItem], rule: BranchRule | Planner,
        key: str | None, env: EnvSteps | None, errors: SystemErrors, lockstep: bool,
    ):  # fmt: skip
        self.system, self.agents, self.tasks, self.rule = system, agents, tasks, rule
        self.key, self.env, self.errors, self.lockstep = key, env, errors, lockstep
        self.calls: dict[int, list[Call]] = {slot: [] for slot in tasks}  # appended parents first
        self.broken: dict[int, HookFailed] = {}  # on_error 'drop': task slot -> what the system raised there first

    async def grow(self) -> list[Episode]:
        """Every task's episode, in the order of `tasks`."""
        roots: list[_Node] = []
        for slot, task in self.tasks.items():
            try:
                start = self.errors.call("start", self.system.start, task)
                plans = _roots(self.system, start, task, self.rule, self.errors)
                roots += [_Node(slot, start, None, 0, plan, first) for plan, first in plans]
            except HookFailed as failure:
                self._fail(slot, failure)
        await self._grow(roots)
        return [self._episode(slot, task) for slot, task in self.tasks.items()]

    async def _grow(self, nodes: list[_Node]) -> None:
        if self.lockstep:  # the level as one group
            await self._step(nodes)
        else:  # each node on its own, concurrently
            await asyncio.gather(*(self._step([n]) for n in nodes))

    async def _step(self, nodes: list[_Node]) -> None:
        """Step `nodes` together, then grow the children that go on."""
        nodes = [n for n in nodes if n.slot not in self.broken]  # a dropped episode's other branches end here
        stepped: list[tuple[_Node, Step]] = []
        for n in nodes:
            try:
                stepped.append((n, self.errors.call("next_step", self.system.next_step, n.state)))
            except HookFailed as failure:
                self._fail(n.slot, failure)
        draws = [(n, step, _agent(self.system, step, self.agents, self.errors), n.rule.width(n.depth, step))
                 for n, step in stepped if n.slot not in self.broken]  # fmt: skip
        if not draws:
            return
        outcomes = iter(await asyncio.gather(*(_invoke(agent, step.messages, self._address(n, i))
                                               for n, step, agent, width in draws for i in range(width))))  # fmt: skip
        after: list[_Node] = []
        raised: set[int] = set()  # tasks whose step raised in this group: their later nodes here are not advanced
        for n, step, _, width in draws:
            drawn = [next(outcomes) for _ in range(width)]
            if n.slot in raised:
                continue
            children, failure = await _children(self.system, n.state, step, drawn, n.parent, n.first, self.env,
                                                self.errors)  # fmt: skip
            self.calls[n.slot].extend(c for c, _ in children)
            if failure is not None:
                self._fail(n.slot, failure)
                raised.add(n.slot)
                continue
            after += [_Node(n.slot, tr.state, call.id, n.depth + 1, n.rule)
                      for call, tr in _continuing(n.rule, n.depth, step, children)]  # fmt: skip
        await self._grow(after)

    def _address(self, n: _Node, i: int) -> str | None:
        return None if self.key is None else call_address(self.key, n.slot, _call_id(n.parent, i, n.first))

    def _fail(self, slot: int, failure: HookFailed) -> None:
        if self.errors.on_error == "stop":
            raise self.errors.stop(self.system, failure) from None
        self.broken.setdefault(slot, failure)

    def _episode(self, slot: int, task: TaskItem) -> Episode:
        calls = self.calls[slot]
        if self.key is not None:  # by place: level by level in tree order, not in the order replies finished in
            calls = sorted(calls, key=_tree_order)
        if slot in self.broken:
            return self.errors.drop(self.system, task, calls, self.broken[slot])
        return Episode(task=task, calls=tuple(calls))


async def _expand_own(
    system: Expands, agents: Mapping[str, Agent], task: TaskItem, rule: BranchRule | Planner, errors: SystemErrors
) -> Episode:
    """The episode a system grows itself; what its `expand` raises is its own error, handled as the hooks' are."""
    try:
        episode = await system.expand(agents, task, rule)
        for call in episode.calls:
            finite_reward(f"call {call.id}'s reward", call.reward)
            for name, value in call.rewards.items():
                finite_reward(f"call {call.id}'s rewards[{name!r}]", value)
        return episode
    except BadValue as bad:
        return errors.drop(system, task, (), HookFailed("expand", bad, RETURNED))
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


def _roots(
    system: System, start: Any, task: TaskItem, rule: BranchRule | Planner, errors: SystemErrors
) -> list[tuple[BranchRule, int]]:
    """The branch rules whose trees make the task's episode, each with its first root id."""
    plans = rule.plans(task) if isinstance(rule, Planner) else [rule]  # a Planner, or one BranchRule
    firsts = [0]  # the first root id of each plan's tree
    for plan in plans[:-1]:
        firsts.append(firsts[-1] + plan.width(0, errors.call("next_step", system.next_step, start)))
    return list(zip(plans, firsts))


async def _advance(
    system: System, state: Any, step: Step, reply: Reply, env: EnvSteps | None, errors: SystemErrors
) -> Transition:
    """The system's `advance`, on the event loop or on an environment thread (`env`), its rewards checked."""
    if env is None:
        return _checked(errors.call("advance", system.advance, state, step, reply))
    try:
        transition = await env.advance(system, state, step, reply)
    except Exception as exc:
        failure = as_failure("advance", exc)
        if failure is None:
            raise
        raise failure from exc
    return _checked(transition)


def _checked(transition: Any) -> Transition:
    """`advance`'s Transition with its rewards as floats. One that is not a Transition, or a reward that is not
    a finite number, is the system's mistake (HookFailed, as a raise): NaN or inf would train on without a
    word and make every adapter weight NaN, a string would fail deep in the scoring."""
    try:
        if not isinstance(transition, Transition):
            raise BadValue(f"{type(transition).__name__} instead of a Transition")
        if not isinstance(transition.rewards, Mapping):
            raise BadValue(f"rewards={transition.rewards!r}, not a mapping of names to numbers")
        rewards = {name: finite_reward(f"rewards[{name!r}]", v) for name, v in transition.rewards.items()}
        return replace(transition, reward=finite_reward("reward", transition.reward), rewards=rewards)
    except BadValue as bad:
        raise HookFailed("advance", bad, RETURNED) from None


async def _children(
    system: System, state: Any, step: Step, outcomes: Sequence[tuple[Reply | None, str | None]],
    parent: str | None, first: int, env: EnvSteps | None, errors: SystemErrors,
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
            tr = await _advance(system, state, step, reply, env, errors)
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
