"""A system's own exceptions in a rollout (rollout.on_system_error, masrl.rollout.system_errors.SystemErrors).

No model: the agent answers every prompt with one fixed reply, so every episode, call id and count
below is written out by hand. tests/test_system_errors.py runs the same system on the tiny model.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import signal
from pathlib import Path

import faulty_system
import numpy as np
import pytest
from faulty_system import Faulty, FaultyConfig

from masrl.rollout.hooks import SystemHooks, check_system
from masrl.rollout.rules import FullTree
from masrl.rollout.system_errors import BadValue, SystemErrors, finite_reward, raised_at
from masrl.rollout.tree import EnvSteps, Parallel, rollout
from masrl.sandbox import SandboxError
from masrl.types import Reply, SystemCodeError, TaskItem

SOURCE = Path(__file__).resolve().parents[1] / "support" / "faulty_system.py"
ITEMS = [TaskItem(f"t/train/{i}", f"{i} + 1", str(i + 1)) for i in range(4)]


def line_of(marker: str) -> int:
    """The line of faulty_system.py that carries `# RAISES: <marker>`."""
    lines = SOURCE.read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if line.endswith(f"# RAISES: {marker}"))


def def_line(name: str) -> int:
    lines = SOURCE.read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if line.strip().startswith(f"def {name}("))


class Answers:
    """An agent that answers everything with the same text (one token in, one out, no cost)."""

    async def __call__(self, messages):
        return Reply("<answer>1</answer>", 1, 1, 0.0)


AGENTS = {"solver": Answers()}


def run(system, errors, rule=Parallel(2), items=ITEMS, **kw):
    return asyncio.run(rollout(system, AGENTS, items, rule, errors=errors, **kw))


def faulty(**config) -> Faulty:
    return Faulty(FaultyConfig(kind="faulty_system:SYSTEM", **config))


# ---------------------------------------------------------------- stop (the default)
@pytest.mark.parametrize("hook", ["advance", "next_step", "start"])
def test_stop_is_one_line_naming_the_system_hook_file_line_and_exception(hook, tmp_path):
    errors = SystemErrors("mysys:SYSTEM", "stop", log=tmp_path / "errors.log")
    with pytest.raises(SystemCodeError) as raised:
        run(faulty(hook=hook), errors)
    what = {"advance": "KeyError: 'x'", "next_step": "KeyError: 't/train/1'", "start": "ValueError: no start for t/train/1"}
    assert str(raised.value) == (f"system 'mysys:SYSTEM' raised in {hook} (faulty_system.py:{line_of(hook)}): "
                                 f"{what[hook]} (traceback in {tmp_path / 'errors.log'})")  # fmt: skip
    log = (tmp_path / "errors.log").read_text()
    assert log.startswith(f"system 'mysys:SYSTEM' raised in {hook}:\nTraceback (most recent call last):\n")
    assert f'faulty_system.py", line {line_of(hook)}' in log and log.rstrip().endswith(what[hook])


def test_without_a_log_folder_the_line_names_no_log_and_nothing_is_written(tmp_path):
    errors = SystemErrors(None, "stop", log=tmp_path / "not-made" / "errors.log")
    with pytest.raises(SystemCodeError) as raised:
        run(faulty(hook="advance"), errors)
    assert str(raised.value) == f"system 'Faulty' raised in advance (faulty_system.py:{line_of('advance')}): KeyError: 'x'"
    assert not (tmp_path / "not-made").exists()


def test_the_default_settings_stop():
    with pytest.raises(SystemCodeError, match=r"^system 'Faulty' raised in next_step"):
        asyncio.run(rollout(faulty(hook="next_step"), AGENTS, ITEMS, Parallel(2)))


# ---------------------------------------------------------------- drop
def test_drop_keeps_the_other_episodes_and_marks_every_call_of_the_dropped_one(tmp_path):
    errors = SystemErrors("mysys", "drop", max_dropped=0.5, log=tmp_path / "errors.log")
    episodes = run(faulty(hook="advance"), errors)
    reason = f"the system raised in advance (faulty_system.py:{line_of('advance')}): KeyError: 'x'"
    assert [ep.dropped for ep in episodes] == [None, reason, None, None]
    kept, dropped = episodes[0], episodes[1]
    assert [(c.id, c.failed, c.done) for c in kept.calls] == [("0", False, True), ("1", False, True)]
    # Both of the dropped episode's draws were answered (they cost what they cost) and are marked failed.
    assert [(c.id, c.reply is not None, c.error) for c in dropped.calls] == [("0", True, reason), ("1", True, reason)]
    assert all(leaf.failed for leaf in dropped.leaves())
    assert (tmp_path / "errors.log").read_text().count("Traceback (most recent call last)") == 1


def test_a_raise_before_any_call_leaves_one_failed_call(tmp_path):
    episodes = run(faulty(hook="next_step"), SystemErrors("mysys", "drop", log=tmp_path / "errors.log"))
    dropped = episodes[1]
    reason = f"the system raised in next_step (faulty_system.py:{line_of('next_step')}): KeyError: 't/train/1'"
    assert dropped.dropped == reason
    assert [(c.id, c.agent, c.reply, c.error) for c in dropped.calls] == [("0", "", None, reason)]
    assert [len(ep.calls) for ep in episodes] == [2, 1, 2, 2]


def test_more_than_the_share_dropped_stops_with_one_line(tmp_path):
    errors = SystemErrors("mysys", "drop", max_dropped=0.5, log=tmp_path / "errors.log")
    with pytest.raises(SystemCodeError) as raised:
        run(faulty(hook="advance", items=""), errors)  # every item raises: 4 of 4
    assert str(raised.value) == (
        f"system 'mysys' raised in 4 of 4 episodes, more than rollout.max_dropped=0.5 of them; the first: "
        f"advance (faulty_system.py:{line_of('advance')}): KeyError: 'x' (tracebacks in {tmp_path / 'errors.log'})"
    )
    assert (tmp_path / "errors.log").read_text().count("Traceback (most recent call last)") == 4


def test_exactly_the_share_goes_on_and_more_stops():
    items = [TaskItem(i, "q", "1") for i in ("a/0", "a/1", "b/0", "b/1")]  # it raises on two of four
    episodes = run(faulty(hook="advance"), SystemErrors("mysys", "drop", max_dropped=0.5), items=items)
    assert [ep.dropped is not None for ep in episodes] == [False, True, False, True]
    with pytest.raises(SystemCodeError, match=r"raised in 2 of 4 episodes, more than rollout.max_dropped=0.25 of"):
        run(faulty(hook="advance"), SystemErrors("mysys", "drop", max_dropped=0.25), items=items)


def test_a_dropped_branch_stops_the_other_branches_of_its_episode():
    # Full tree, two turns: at item 1 the second turn's next_step raises; the episode is dropped with what it
    # drew before (2 first-turn calls), and no second-turn call is drawn for it.
    system = Faulty(FaultyConfig(kind="x", hook="none", then="solver"))
    episodes = run(system, SystemErrors("m", "drop"), rule=FullTree(2))
    assert [len(ep.calls) for ep in episodes] == [6, 6, 6, 6]

    class SecondTurnRaises(Faulty):
        def next_step(self, state):
            if state.turn == 1 and state.item.id.endswith("/1"):
                raise RuntimeError("turn 2")
            return super().next_step(state)

    episodes = run(SecondTurnRaises(system.config), SystemErrors("m", "drop"), rule=FullTree(2))
    assert [len(ep.calls) for ep in episodes] == [6, 2, 6, 6]
    assert episodes[1].dropped.endswith("RuntimeError: turn 2")


@pytest.mark.parametrize("on_error", ["stop", "drop"])
def test_lockstep_rollouts_handle_it_the_same_way(on_error, tmp_path):
    errors = SystemErrors("mysys", on_error, log=tmp_path / "errors.log")
    if on_error == "stop":
        with pytest.raises(SystemCodeError, match=rf"^system 'mysys' raised in advance \(faulty_system.py:{line_of('advance')}\)"):
            run(faulty(hook="advance"), errors, lockstep=True)
        return
    episodes = run(faulty(hook="advance"), errors, lockstep=True)
    assert [ep.dropped is not None for ep in episodes] == [False, True, False, False]
    assert [len(ep.calls) for ep in episodes] == [2, 2, 2, 2]


def test_an_advance_on_an_environment_thread_is_named_the_same():
    env = EnvSteps(2)
    try:
        with pytest.raises(SystemCodeError) as raised:
            run(faulty(hook="advance"), SystemErrors("mysys"), env=env)
    finally:
        env.close()
    assert str(raised.value) == f"system 'mysys' raised in advance (faulty_system.py:{line_of('advance')}): KeyError: 'x'"


def test_masrls_own_errors_pass_through_as_they_are():
    class NoSandbox(Faulty):
        def advance(self, state, step, reply):
            raise SandboxError("no user namespaces")

    with pytest.raises(SandboxError, match="no user namespaces"):
        run(NoSandbox(FaultyConfig(kind="x")), SystemErrors("mysys", "drop"))


# ---------------------------------------------------------------- where it raised
def test_the_line_named_is_the_deepest_in_the_systems_code_not_in_a_library():
    class BadJson(Faulty):
        def advance(self, state, step, reply):
            return json.loads("{")  # the JSONDecodeError is raised inside json/decoder.py

    with pytest.raises(SystemCodeError) as raised:
        run(BadJson(FaultyConfig(kind="x")), SystemErrors("mysys"))
    here = Path(__file__).read_text().splitlines().index('            return json.loads("{")  # the JSONDecodeError is raised inside json/decoder.py') + 1
    assert str(raised.value).startswith(f"system 'mysys' raised in advance (test_tree_system_errors.py:{here}): JSONDecodeError:")


def test_raised_at_falls_back_to_the_deepest_frame_outside_the_system():
    try:
        json.loads("{")
    except ValueError as exc:
        assert raised_at(exc, None).startswith("decoder.py:")


# ---------------------------------------------------------------- an agent nobody serves
def test_a_step_for_an_unknown_agent_stops_at_its_first_occurrence_with_the_agents_there_are():
    system = Faulty(FaultyConfig(kind="x", then="judge"))
    for on_error in ("stop", "drop"):  # never dropped: every episode would ask for it
        with pytest.raises(SystemCodeError) as raised:
            run(system, SystemErrors("mysys", on_error))
        assert str(raised.value) == (f"system 'mysys' asked for agent 'judge' in next_step "
                                     f"(faulty_system.py:{def_line('next_step')}), which no policy or frozen agent "
                                     "serves; its agents are ['solver']")  # fmt: skip


def test_check_system_tries_the_first_step_when_the_system_is_built(tmp_path):
    item = ITEMS[1]  # an item it raises on
    check_system(faulty(), item, ["solver"], SystemErrors("mysys"))  # fine
    with pytest.raises(SystemCodeError, match=r"asked for agent 'judge' in next_step .* its agents are \['a', 'solver'\]"):
        check_system(faulty(first="judge"), item, ["solver", "a"], SystemErrors("mysys"))
    with pytest.raises(SystemCodeError, match=r"^system 'mysys' raised in next_step \(faulty_system.py:\d+\): KeyError"):
        check_system(faulty(hook="next_step"), item, ["solver"], SystemErrors("mysys", "stop"))
    check_system(faulty(hook="next_step"), item, ["solver"], SystemErrors("mysys", "drop"))  # the rollout drops it
    with pytest.raises(SystemCodeError, match=r"built a object without start, next_step, advance"):
        check_system(object(), item, ["solver"], SystemErrors("mysys"))


# ---------------------------------------------------------------- optional hooks
def test_an_optional_hook_that_raises_stops_with_one_line(tmp_path):
    class Observer(Faulty):
        def observe(self, episodes):
            return {"share": 1 / len(episodes)}

    system = Observer(FaultyConfig(kind="x"))
    hooks = SystemHooks.of(system, SystemErrors("mysys", "drop", log=tmp_path / "errors.log"))
    assert hooks.observe([1, 2]) == {"share": 0.5}
    with pytest.raises(SystemCodeError) as raised:
        hooks.observe([])
    assert str(raised.value).startswith("system 'mysys' raised in observe (test_tree_system_errors.py:")
    assert str(raised.value).endswith(f"ZeroDivisionError: division by zero (traceback in {tmp_path / 'errors.log'})")


# ---------------------------------------------------------------- issue 50: bad rewards, hooks that hang
@pytest.mark.parametrize(("value", "taken"), [(1, 1.0), (0.5, 0.5), (True, 1.0), (False, 0.0), (np.float32(0.25), 0.25),
                                              (np.int64(2), 2.0)])  # fmt: skip
def test_a_finite_reward_is_taken_as_a_float(value, taken):
    assert finite_reward("reward", value) == taken and type(finite_reward("reward", value)) is float


@pytest.mark.parametrize(("value", "shown"), [(math.nan, "reward=nan"), (-math.inf, "reward=-inf"),
                                              ("1", "reward='1' (str)"), (None, "reward=None (NoneType)"),
                                              # math.isfinite raised OverflowError; repr raises past 4,300 digits
                                              pytest.param(10**400, "reward=an int of 1329 bits", id="past-float"),
                                              pytest.param(-(10**5000), "reward=an int of 16610 bits", id="past-repr")])  # fmt: skip
def test_a_reward_that_is_no_finite_number_is_refused(value, shown):
    with pytest.raises(BadValue, match=re.escape(f"{shown} is not a finite number (a reward is an int, float or bool)")):
        finite_reward("reward", value)


def test_a_bad_reward_drops_the_episode_it_is_in_naming_the_hook_and_the_value():
    episodes = run(faulty(reward="nan"), SystemErrors("mysys", "drop", max_dropped=1.0), items=ITEMS[:1])
    assert episodes[0].dropped == (f"the system returned a bad value from advance (faulty_system.py:{def_line('advance')}): "
                                   "reward=nan is not a finite number (a reward is an int, float or bool)")  # fmt: skip


def spin(seconds: float) -> None:
    """A hang that never sleeps: a busy loop in pure Python."""
    while True:
        pass


def test_a_hook_past_its_limit_is_stopped_where_it_hangs_and_dropped(monkeypatch):
    monkeypatch.setattr(faulty_system.time, "sleep", spin)
    errors = SystemErrors("mysys", "drop", max_dropped=1.0, timeout_s=0.2)
    episodes = run(faulty(hangs=True), errors)  # it hangs on item 1 only
    hangs = next(i for i, line in enumerate(SOURCE.read_text().splitlines(), 1) if line.endswith("# HANGS"))
    assert [ep.dropped for ep in episodes] == [None, f"the system hung in advance (faulty_system.py:{hangs}): it did "
                                               "not return within 0.2 s (rollout.hook_timeout_s)", None, None]  # fmt: skip
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)  # nothing left armed
    assert signal.getsignal(signal.SIGALRM) is signal.SIG_DFL  # the handler put back


def test_a_hook_that_returns_in_time_is_not_stopped():
    assert [ep.dropped for ep in run(faulty(), SystemErrors("mysys", "stop", timeout_s=5.0))] == [None] * 4


class ReturnsNothing(Faulty):
    def advance(self, state, step, reply):
        return None


def test_an_advance_that_returns_no_transition_fails_as_a_raise_does():
    with pytest.raises(SystemCodeError) as raised:
        run(ReturnsNothing(FaultyConfig(kind="faulty_system:SYSTEM")), SystemErrors("mysys"))
    assert re.fullmatch(r"system 'mysys' returned a bad value from advance \(test_tree_system_errors\.py:\d+\): "
                        r"NoneType instead of a Transition", str(raised.value)), str(raised.value)  # fmt: skip
