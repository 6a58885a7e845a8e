"""Rollout: tree expansion, failures, tree credit (the batching service: tests/generation/test_service.py).

No model here: generation is a fake function and agents are scripted, so every
expected batch, call id and Q value is written out by hand.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass

import pytest
from generation_cases import FakeGenerate

from masrl.algos.credit import tree_q, trainable_calls
from masrl.generation.sampling import SamplingParams
from masrl.generation.service import GenerationService
from masrl.rollout.tree import EnvSteps, Parallel, Step, Transition, expand, rollout
from masrl.types import AgentError, Call, Episode, Message, Reply, TaskItem

SAMPLE = SamplingParams(max_new_tokens=4, temperature=1.0)


# ---------------------------------------------------------------- expand
@dataclass(frozen=True)
class TurnState:
    task: TaskItem
    turn: int
    history: tuple[str, ...]


@dataclass
class TwoTurnSystem:
    """Two turns; the second prompt carries the first reply. Reward = turn + 1."""

    turns: int = 2

    def start(self, task):
        return TurnState(task, 0, ())

    def next_step(self, state):
        content = " | ".join((state.task.question, *state.history))
        return Step(agent="solver", role="solver", turn=state.turn, messages=(Message("user", content),))

    def advance(self, state, step, reply):
        done = state.turn + 1 >= self.turns
        nxt = TurnState(state.task, state.turn + 1, (*state.history, reply.text))
        return Transition(state=nxt, action=reply.text, rewards={"r": 1.0}, reward=float(state.turn + 1), done=done)


class ScriptedAgent:
    """Numbers its replies r0, r1, ... in call order; raises when the prompt contains `fail_on`."""

    name = "solver"

    def __init__(self, fail_on: str | None = None):
        self.count = 0
        self.fail_on = fail_on

    async def __call__(self, messages):
        n = self.count
        self.count += 1
        if self.fail_on and self.fail_on in messages[-1].content:
            raise AgentError("backend timed out")
        return Reply(f"r{n}", tokens_in=1, tokens_out=1, cost=0.5, prompt_ids=(1,), response_ids=(2, n), policy="p")


TASK = TaskItem(id="t0", question="q", answer="a")


def test_parallel_expand_gives_group_size_root_calls_and_one_chain_each():
    agent = ScriptedAgent()
    ep = asyncio.run(expand(TwoTurnSystem(), {"solver": agent}, TASK, Parallel(3)))

    assert [c.id for c in ep.calls if c.parent is None] == ["0", "1", "2"]
    assert sorted(c.id for c in ep.calls) == ["0", "0.0", "1", "1.0", "2", "2.0"]
    assert {c.id: c.parent for c in ep.calls if c.parent} == {"0.0": "0", "1.0": "1", "2.0": "2"}
    assert [c.turn for c in ep.calls[:3]] == [0, 0, 0] and all(c.turn == 1 and c.done for c in ep.calls[3:])
    # The second turn's prompt continues its own branch's first reply.
    by_id = {c.id: c for c in ep.calls}
    for i in range(3):
        assert by_id[f"{i}.0"].messages[0].content == f"q | {by_id[str(i)].reply.text}"
    assert ep.cost == pytest.approx(6 * 0.5)
    assert ep.failed_ids() == set()


def test_a_failing_agent_fails_only_its_branch():
    # Root calls run in order, so branch 1 answers "r1" and its second call fails.
    agent = ScriptedAgent(fail_on="| r1")
    ep = asyncio.run(expand(TwoTurnSystem(), {"solver": agent}, TASK, Parallel(3)))
    by_id = {c.id: c for c in ep.calls}

    assert by_id["1"].reply.text == "r1"
    bad = by_id["1.0"]
    assert bad.failed and bad.reply is None and bad.error == "AgentError: backend timed out" and bad.done
    assert all(not by_id[i].failed for i in ("0", "0.0", "1", "2", "2.0"))
    assert ep.failed_ids() == {"1", "1.0"}
    assert [c.id for _, c in trainable_calls([ep])] == ["0", "2", "0.0", "2.0"]
    assert set(tree_q(ep)) == {"0", "0.0", "2", "2.0"}


class ServiceAgent:
    """A solver whose every call goes through `service` (its prompt: the message length)."""

    name = "solver"

    def __init__(self, service: GenerationService):
        self.service = service

    async def __call__(self, messages):
        gen = await self.service.generate([len(messages[-1].content)], SAMPLE, "p")
        return Reply(text=gen.text, tokens_in=1, tokens_out=1, cost=0.0)


def test_rollout_expands_every_task_and_batches_through_the_service():
    fake = FakeGenerate()
    service = GenerationService(fake)

    tasks = [TaskItem(id=f"t{i}", question="q" * (i + 1), answer="a") for i in range(3)]
    episodes = asyncio.run(rollout(TwoTurnSystem(), {"solver": ServiceAgent(service)}, tasks, Parallel(2)))
    assert [ep.task.id for ep in episodes] == ["t0", "t1", "t2"]
    assert all(len(ep.calls) == 4 for ep in episodes)
    # All 6 first-turn calls share one batch; all 6 second-turn calls the next.
    assert [len(b[0]) for b in fake.batches] == [6, 6]


def test_an_episode_lists_its_calls_in_tree_order_whatever_order_they_finished_in():
    """Remote agents answer in any order; the episode (and so the update's sample order) must not."""
    from masrl.rollout.tree import CALL_ADDRESS

    seen = {}

    class Slow:
        name = "solver"

        def __init__(self, delays):
            self.delays, self.n = delays, 0

        async def __call__(self, messages):
            delay = self.delays[self.n % len(self.delays)]
            self.n += 1
            await asyncio.sleep(delay)
            seen[CALL_ADDRESS.get()] = messages[-1].content
            return Reply("x", tokens_in=1, tokens_out=1, cost=0.0)

    tasks = [TaskItem(id="a", question="qa", answer=""), TaskItem(id="b", question="qb", answer="")]
    orders = []
    for delays in ((0.02, 0.0, 0.01), (0.0, 0.02, 0.01)):
        eps = asyncio.run(rollout(TwoTurnSystem(turns=3), {"solver": Slow(delays)}, tasks, Parallel(2), key="s:1"))
        orders.append([[c.id for c in ep.calls] for ep in eps])
    want = ["0", "1", "0.0", "1.0", "0.0.0", "1.0.0"]  # level by level, each level in tree order
    assert orders[0] == orders[1] == [want, want]
    # each call ran knowing its place: rollout key, task slot, call id
    assert seen["s:1/1/1.0"] == "qb | x" and seen["s:1/0/0.0.0"] == "qa | x | x"
    assert len(seen) == 12


def test_lockstep_grows_every_tree_level_by_level_and_steps_in_task_order():
    """The same episodes as the concurrent rollout, each level's calls one batch, its steps in task order,
    however the replies arrive (the router's capped evaluation relies on the order)."""

    class Slow:
        name = "solver"

        async def __call__(self, messages):
            await asyncio.sleep(0.01 * (len(messages[-1].content) % 3))  # later tasks may answer first
            return Reply(messages[-1].content[-2:], tokens_in=1, tokens_out=1, cost=0.0)

    @dataclass
    class Recording(TwoTurnSystem):
        steps: list = None

        def advance(self, state, step, reply):
            self.steps.append((state.turn, state.task.id))
            return super().advance(state, step, reply)

    tasks = [TaskItem(id=f"t{i}", question="q" * (i + 1), answer="a") for i in range(4)]
    system = Recording(turns=3, steps=[])
    eps = asyncio.run(rollout(system, {"solver": Slow()}, tasks, Parallel(2), key="k", lockstep=True))
    assert system.steps == [(turn, t.id) for turn in range(3) for t in tasks for _ in range(2)]
    free = asyncio.run(rollout(TwoTurnSystem(turns=3), {"solver": Slow()}, tasks, Parallel(2), key="k"))
    assert eps == free
    fake = FakeGenerate()
    asyncio.run(rollout(TwoTurnSystem(), {"solver": ServiceAgent(GenerationService(fake))}, tasks, Parallel(2),
                        lockstep=True))  # fmt: skip
    assert [len(b[0]) for b in fake.batches] == [8, 8]


class BlockingSystem(TwoTurnSystem):
    """A system whose step blocks its thread (as a sandboxed program does) until the event loop, which must keep
    running meanwhile, sets `loop_alive`; `alive` records for each step whether that happened."""

    def __init__(self, wait: float):
        super().__init__()
        self.wait = wait
        self.loop_alive = threading.Event()
        self.alive: list[bool] = []
        self.stepping = 0  # steps blocking now; the heartbeat counts only beats that happen during one
        self.lock = threading.Lock()

    def advance(self, state, step, reply):
        with self.lock:
            self.stepping += 1
        try:
            self.alive.append(self.loop_alive.wait(timeout=self.wait))
        finally:
            with self.lock:
                self.stepping -= 1
        return super().advance(state, step, reply)


def test_env_steps_on_threads_leave_the_loop_free_and_the_batches_full():
    def run(env, wait):
        fake = FakeGenerate()
        service = GenerationService(fake, env=env)
        system = BlockingSystem(wait)

        async def main():
            async def heartbeat():  # runs only if the loop is free while a step blocks
                while True:
                    await asyncio.sleep(0.001)
                    if system.stepping:
                        system.loop_alive.set()

            beat = asyncio.get_running_loop().create_task(heartbeat())
            tasks = [TaskItem(id=f"t{i}", question="q" * (i + 1), answer="a") for i in range(3)]
            out = await rollout(system, {"solver": ServiceAgent(service)}, tasks, Parallel(2), env=env)
            beat.cancel()
            return out

        episodes = asyncio.run(main())
        return system.alive, [len(b[0]) for b in fake.batches], episodes

    inline_alive, inline_batches, inline_eps = run(None, wait=0.05)
    env = EnvSteps(threads=4)
    try:
        threaded_alive, threaded_batches, threaded_eps = run(env, wait=30.0)
    finally:
        env.close()
    assert inline_alive == [False] * 12  # on the loop, every step blocked it: no beat ever fell during one
    assert len(threaded_alive) == 12 and all(threaded_alive)  # on threads, the loop ran during every step
    assert inline_batches == threaded_batches == [6, 6]  # and each turn's calls still share one batch
    assert [len(ep.calls) for ep in threaded_eps] == [len(ep.calls) for ep in inline_eps] == [4, 4, 4]


# ---------------------------------------------------------------- tree credit
def call(id, reward=0.0, done=False, error=None):
    parent = id.rpartition(".")[0] or None
    reply = None if error else Reply("x", 1, 1, 0.0, prompt_ids=(1,), response_ids=(2,), policy="p")
    return Call(id=id, parent=parent, agent="c", role="c", turn=id.count("."), messages=(), reply=reply,
                reward=reward, done=done, error=error)  # fmt: skip


def test_tree_q_on_a_hand_built_tree():
    #  0 (r .5) -+- 0.0 (r 3, done)
    #            +- 0.1 (r 0) -+- 0.1.0 (r 2, done)
    #            |             +- 0.1.1 failed
    #            +- 0.2 failed
    #  1 (r .25, done: stops at depth 1)
    #  2 (r 1) --- 2.0 failed          -> 2 failed too (no surviving leaf)
    ep = Episode(
        task=TASK,
        calls=(
            call("0", 0.5), call("1", 0.25, done=True), call("2", 1.0),
            call("0.0", 3.0, done=True), call("0.1", 0.0), call("0.2", error="boom"), call("2.0", error="boom"),
            call("0.1.0", 2.0, done=True), call("0.1.1", error="boom"),
        ),
    )  # fmt: skip
    assert ep.failed_ids() == {"0.1.1", "0.2", "2", "2.0"}

    gamma = 0.5
    q_010 = 2.0
    q_01 = 0.0 + gamma * q_010  # failed sibling 0.1.1 left out of the mean
    q_00 = 3.0
    q_0 = 0.5 + gamma * (q_00 + q_01) / 2  # 0.2 failed: mean over two children
    expected = {"0": q_0, "0.0": q_00, "0.1": q_01, "0.1.0": q_010, "1": 0.25}
    assert expected == {"0": 1.5, "0.0": 3.0, "0.1": 1.0, "0.1.0": 2.0, "1": 0.25}
    assert tree_q(ep, gamma) == pytest.approx(expected)
    assert [c.id for _, c in trainable_calls([ep])] == ["0", "1", "0.0", "0.1", "0.1.0"]


def test_tree_q_on_parallel_chains_is_the_return_to_go():
    ep = Episode(
        task=TASK,
        calls=(call("0", 1.0), call("1", 2.0), call("0.0", 10.0), call("1.0", 20.0), call("0.0.0", 100.0, done=True),
               call("1.0.0", 200.0, done=True)),
    )  # fmt: skip
    assert tree_q(ep, 1.0) == {"0": 111.0, "0.0": 110.0, "0.0.0": 100.0, "1": 222.0, "1.0": 220.0, "1.0.0": 200.0}
    # gamma 0.1: Q(0.0) = 10 + 0.1 * 100, Q(0) = 1 + 0.1 * 20, and so on.
    expected = {"0": 3.0, "0.0": 20.0, "0.0.0": 100.0, "1": 6.0, "1.0": 40.0, "1.0.0": 200.0}
    assert tree_q(ep, 0.1) == pytest.approx(expected)
