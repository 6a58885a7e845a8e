"""An agent program as a system: episodes are runs of the program, trees are grown by replay.

A program is not a state machine masrl can step, so it grows its own episode tree
(`expand`, called by masrl.rollout.tree.expand) under the same branching rules as every other
system. One *run* starts the program with the task on stdin and an episode-only URL and key of
the gateway; the calls it makes are recorded in order (call k is node depth k, its `turn`), and
its last line's answer is scored by the task's checker.

Branching by replay. To draw W candidates for call k of a run whose first k calls are known, the
tree keeps that run as the first candidate and starts W-1 more runs whose gateway sessions answer
calls 0..k-1 from the recording and sample from call k on. Under a branching rule:

- `parallel` (G runs per task): width G at the root, 1 below: G independent runs;
- `fork_on_first` (depth 0): one run, then G-1 replays forking at call d;
- `per_turn_greedy` (AT-GRPO's tree): at every trained call K candidates from the same prefix;
  the best by immediate reward continues, the others are leaves (as in every system's tree: what
  their runs did afterwards is not recorded, except a fault, which fails them);
- `full_tree`: every trained call branches.

Calls to frozen agents are never forked (`Step.branch=False`). A replayed run that asks anything
other than the recording, or whose fresh call k asks something other than its sibling's, exposes
a program that is not deterministic given its model replies: that candidate becomes a failed
call (`nondeterministic: ...`), so it is counted and never trained on. Every other fault of a run
(crash, timeout, no JSON, flood, unknown model, too many calls) ends its chain with a failed call
naming the reason; the engine leaves failed trajectories out of the update, and `observe` counts
them per reason in the step's metrics.

Rewards: the last call of a run carries `final` = correct_weight * checker score + program
reward weight * the program's own reward (plus `correct`, and `program` when reported); a call
the program rewarded itself (POST /v1/rewards) carries that as its immediate reward (`call`), and
a call its last line's `rewards` names, by its model name (every call of that role) or its
completion id, carries local_weight times the sum of those as `local`. The run's final reward is
the team reward every call of it shares; `local` is the call's own (AT-GRPO's team and local
rewards, eq. 4; what `descendant_mean` credit adds to the final reward below a call, and the only
reward that moves the advantages of one role alone). A `rewards` key that is neither a model name
of the run nor one of its call ids stops the run (`UnknownRewardKey`).
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from masrl.systems.api import Agent, Call, Episode, Planner, Step, TaskItem
from masrl.systems.program.config import ProgramConfig
from masrl.systems.program.gateway import Gateway, Recorded, Session
from masrl.systems.program.runner import Outcome, run_program
from masrl.systems.program.zygote import Zygote, forkable

ROOT = Step(agent="", role="", turn=0, messages=())  # what a rule sees before any call is known


@dataclass(frozen=True)
class Run:
    """One finished run of the program."""

    calls: tuple[Recorded, ...]  # every call it made, replayed ones first
    rewards: Mapping[str, float]  # per-call rewards it posted, by completion id
    outcome: Outcome
    fault: str | None  # the gateway's reason first (an unknown model usually crashes the program after)
    local: Mapping[str, float] = field(default_factory=dict)  # its last line's rewards per call, by completion id


class UnknownRewardKey(ValueError):
    """The last line's `rewards` names neither a model of the run nor one of its calls: a mistake in the
    program (a misspelt role) that every run repeats, so the run stops (one line, exit code 4)."""


def local_rewards(reported: Mapping[str, float], calls: Sequence[Recorded], names: Sequence[str]) -> dict[str, float]:
    """Each call's share of the last line's `rewards`: its role's reward plus its own id's, by completion id."""
    ids = {c.id for c in calls}
    for key in reported:
        if key not in ids and key not in names:
            raise UnknownRewardKey(f"the program's last line rewards {key!r}, which is neither a model name of the "
                                   f"run ({', '.join(sorted(names))}) nor the id of one of its {len(ids)} calls")
    return {c.id: reported.get(c.agent, 0.0) + reported.get(c.id, 0.0) for c in calls
            if c.agent in reported or c.id in reported}  # fmt: skip


@dataclass
class ProgramSystem:
    config: ProgramConfig
    task: object  # the task family: its checker scores the answers
    gateway: Gateway = field(init=False)

    def __post_init__(self):
        self.gateway = Gateway(per_call_rewards=self.config.per_call_rewards)
        self._slots: dict[int, asyncio.Semaphore] = {}  # per event loop
        self._zygote: Zygote | None = None  # started by the first run that can use it, ended by close()
        self._starting = threading.Lock()  # runs of two event loops (threads) start one zygote

    def zygote(self) -> Zygote | None:
        """The pre-warmed launcher of this system's runs (masrl.systems.program.zygote); None when
        `system.prewarm` is off or the command is not a script on masrl's interpreter (then each run is a
        fresh subprocess)."""
        with self._starting:
            script = forkable(self.config.command) if self.config.prewarm else None
            if self._zygote is None and script is not None:
                self._zygote = Zygote(self._base_env(), self.config.cwd, script)
            return self._zygote

    def close(self) -> None:
        """End the zygote (the engine calls this when it closes; it also ends when this process does)."""
        with self._starting:
            if self._zygote is not None:
                self._zygote.close()
                self._zygote = None

    # The System protocol: a program cannot be stepped from outside.
    def start(self, task: TaskItem):
        raise TypeError("a program system grows its own episodes (ProgramSystem.expand)")

    next_step = advance = start

    # ---------------------------------------------------------------- one run
    async def run(self, agents: Mapping[str, Agent], item: TaskItem, replay: Sequence[Recorded] = ()) -> Run:
        loop = id(asyncio.get_running_loop())
        slots = self._slots.setdefault(loop, asyncio.Semaphore(self.config.concurrency))
        async with slots:
            session = self.gateway.open(agents, self.config.trained, replay, self.config.max_calls)
            c = self.config
            try:
                outcome = await run_program(c.command, task_json(item), self._env(session), c.timeout,
                                            c.max_output_bytes, c.cwd, self.zygote())  # fmt: skip
            finally:
                self.gateway.close(session)
        calls = tuple(session.calls)
        local = local_rewards(outcome.rewards, calls, tuple(session.agents))
        return Run(calls, dict(session.rewards), outcome, session.fault or outcome.fault, local)

    def _base_env(self) -> dict[str, str]:
        """Every run's environment but its URL and key: the zygote's, so what it imports sees a run's."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
        env.update(self.config.env)
        no_proxy = ",".join(filter(None, [env.get("NO_PROXY"), "127.0.0.1", "localhost"]))
        env.update(NO_PROXY=no_proxy, no_proxy=no_proxy)
        return env

    def _env(self, session: Session) -> dict[str, str]:
        return {**self._base_env(), "OPENAI_BASE_URL": self.gateway.url(session), "OPENAI_API_KEY": session.key}

    # ---------------------------------------------------------------- the tree
    async def expand(self, agents: Mapping[str, Agent], item: TaskItem, rule) -> Episode:
        if isinstance(rule, Planner):
            raise ValueError("a program system takes a single branching rule, not a per-task plan")
        calls: list[Call] = []
        async with self.gateway.serving():
            await self._grow(agents, item, rule, calls, (), None, 0, None)
        return Episode(item, tuple(calls))

    async def _grow(self, agents, item: TaskItem, rule, out: list[Call], prefix: tuple[Recorded, ...],
                    parent: str | None, depth: int, carried: Run | None) -> None:  # fmt: skip
        step = self.step(carried.calls[depth]) if carried else ROOT
        width = rule.width(depth, step)
        fresh = await together(self.run(agents, item, prefix) for _ in range(width - (carried is not None)))
        runs = ([carried] if carried else []) + list(fresh)
        nodes: list[tuple[Call, Run | None]] = []
        for i, run in enumerate(runs):
            call_id = str(i) if parent is None else f"{parent}.{i}"
            made = self.node(call_id, parent, depth, run, item, carried.calls[depth] if carried else None)
            out.extend(made)
            nodes.append((made[0], run if not made[0].failed and not made[-1].failed and not made[0].done else None))
        kept = set(rule.keep(depth, step, [c for c, _ in nodes]))
        for i, (call, run) in enumerate(nodes):  # a candidate that does not continue is a leaf, as in any tree;
            if run is not None and i not in kept and run.fault:  # its run's later fault is still counted
                out.append(failed_call(f"{call.id}.0", call.id, depth + 1, run.fault))
        await together(
            self._grow(agents, item, rule, out, run.calls[: depth + 1], call.id, depth + 1, run)
            for i, (call, run) in enumerate(nodes) if run is not None and i in kept
        )  # fmt: skip

    def step(self, rec: Recorded) -> Step:
        return Step(rec.agent, rec.agent, 0, rec.messages, branch=rec.agent in self.config.trained)

    def node(self, call_id: str, parent: str | None, depth: int, run: Run, item: TaskItem,
             sibling: Recorded | None) -> list[Call]:  # fmt: skip
        """The calls `run` adds at `depth`: its call there (with a failed child when the run ended
        in a fault right after it), or one failed call when it has none or it departs from its sibling."""
        where = dict(id=call_id, parent=parent, turn=depth)
        if len(run.calls) <= depth:
            reason = run.fault or f"nondeterministic: the replayed run ended after {len(run.calls)} calls"
            return [failed_call(call_id, parent, depth, reason)]
        rec = run.calls[depth]
        if sibling is not None and (rec.agent, rec.messages) != (sibling.agent, sibling.messages):
            reason = f"nondeterministic: call {depth} asked {rec.agent!r} something other than its sibling"
            return [Call(**where, agent=rec.agent, role=rec.agent, messages=rec.messages, reply=None, done=True,
                         error=reason)]  # fmt: skip
        last = depth == len(run.calls) - 1
        rewards: dict[str, float] = {}
        if rec.id in run.rewards:
            rewards["call"] = run.rewards[rec.id]
        if rec.id in run.local:
            rewards["local"] = self.config.local_weight * run.local[rec.id]
        if last and run.fault is None:
            rewards.update(self.final_rewards(item, run.outcome))
        reward = rewards.get("call", 0.0) + rewards.get("local", 0.0) + rewards.get("final", 0.0)
        call = Call(**where, agent=rec.agent, role=rec.agent, messages=rec.messages, reply=rec.reply,
                    action=run.outcome.answer if last else None, rewards=rewards, reward=reward,
                    done=last and run.fault is None)  # fmt: skip
        if last and run.fault is not None:
            return [call, failed_call(f"{call_id}.0", call_id, depth + 1, run.fault)]
        return [call]

    def final_rewards(self, item: TaskItem, outcome: Outcome) -> dict[str, float]:
        correct = checked(self.task, item, outcome.answer)
        out = {"correct": correct}
        final = self.config.correct_weight * correct
        if outcome.reward is not None:
            out["program"] = outcome.reward
            final += self.config.program_reward_weight * outcome.reward
        out["final"] = final
        return out

    # ---------------------------------------------------------------- hooks the loop calls
    def observe(self, episodes: Sequence[Episode]) -> dict[str, float]:
        """Failed runs per reason (`program/failed_<reason>`) and in all; depends on the episodes alone."""
        return fault_metrics(episodes)


async def together(coroutines) -> list:
    """Their results, run at once; when one raises (a program's `rewards` stop the run) the others are
    cancelled, their programs killed, and awaited before the error goes on: no run outlives the episode."""
    tasks = [asyncio.ensure_future(c) for c in coroutines]
    try:
        return await asyncio.gather(*tasks)
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


def answer(episode: Episode) -> str:
    """What `masrl serve` answers: the program's printed `answer`, the text training scored, not its last
    call's reply (a judge that says "A" picks a debater's answer)."""
    return episode.leaves()[-1].action or ""


def checked(task, item: TaskItem, answer: str | None) -> float:
    """The task's score of a run's answer, read out of it as out of any model reply.

    A program may print the final reply as it is ("20 - 1 = 19"): the task's own
    extraction (for math: an <answer> tag, a box, an "Answer:" line, else the last
    number) finds the answer in it, as every built-in system does before scoring."""
    found = task.extract_answer(answer) if answer else None
    return float(task.score(item, found)) if found is not None else 0.0


def failed_call(call_id: str, parent: str | None, turn: int, reason: str) -> Call:
    """Where a run failed: a call with no reply (the engine leaves its trajectory out of the update)."""
    return Call(id=call_id, parent=parent, agent="program", role="program", turn=turn, messages=(), reply=None,
                done=True, error=reason)  # fmt: skip


def fault_metrics(episodes: Sequence[Episode]) -> dict[str, float]:
    reasons = Counter(c.error.split(":", 1)[0] for ep in episodes for c in ep.calls if c.error)
    runs = sum(1 for ep in episodes for c in ep.calls if c.done or c.error)
    out = {"program/runs": float(runs), "program/failed": float(sum(reasons.values()))}
    out.update({f"program/failed_{reason}": float(n) for reason, n in sorted(reasons.items())})
    return out


def task_json(item: TaskItem) -> bytes:
    """What the program reads on stdin: the task without its answer."""
    task = {"id": item.id, "question": item.question, "metadata": dict(item.metadata)}
    return (json.dumps(task, default=str) + "\n").encode()
