"""When a system's own code raises (masrl/rollout/system_errors.py), by hand: what counts as the
system's error, the one line that names where and what, stopping or dropping the episode, and the
share of dropped episodes a step may have. (Inside real rollouts: tests/rollout/test_tree_system_errors.py.)"""

from __future__ import annotations

import errno

import pytest

from masrl.rollout.system_errors import RAISED, THE_SYSTEM, HookFailed, SystemErrors, as_failure, call_hook, exception_line
from masrl.types import Call, Episode, SystemCodeError, TaskItem


class Mine:
    """A system defined in this test file (its source is this module's file)."""


def boom(key):
    return {}[key]


def failure():
    with pytest.raises(HookFailed) as info:
        call_hook("next_step", boom, "x")
    return info.value


def test_what_the_system_raises_comes_back_as_a_hook_failure_and_a_full_disk_does_not():
    f = failure()
    assert f.hook == "next_step" and isinstance(f.error, KeyError)
    assert call_hook("start", lambda a: a + 1, 1) == 2
    assert as_failure("advance", OSError(errno.ENOSPC, "No space left on device")) is None  # the machine's, not the system's
    assert isinstance(as_failure("advance", ValueError("bad")), HookFailed)


def test_an_exception_is_one_line():
    assert exception_line(KeyError("x")) == "KeyError: 'x'"
    assert exception_line(ValueError("two\n  lines")) == "ValueError: two lines"
    assert exception_line(RuntimeError()) == "RuntimeError"


def test_stop_names_the_system_the_hook_where_and_what_and_logs_the_traceback(tmp_path):
    log = tmp_path / "errors.log"
    error = SystemErrors(name="mine", log=log).stop(Mine(), failure())
    line = str(error)
    assert line.startswith("system 'mine' raised in next_step (") and line.endswith(f"): KeyError: 'x' (traceback in {log})")
    assert "test_system_errors.py:" in line  # the deepest frame in the system's own code
    assert "Traceback" in log.read_text() and "KeyError: 'x'" in log.read_text()
    assert "traceback in" not in str(SystemErrors(log=tmp_path / "gone" / "errors.log").stop(Mine(), failure()))


def test_drop_keeps_the_calls_marked_failed_and_stop_raises():
    task = TaskItem("t", "q", "a")
    calls = (Call("0", None, "a", "r", 0, (), None),)
    episode = SystemErrors(on_error="drop").drop(Mine(), task, calls, failure())
    assert episode.dropped.startswith("the system raised in next_step (") and episode.calls[0].error == episode.dropped
    assert SystemErrors(on_error="drop").drop(Mine(), task, (), failure()).calls[0].failed  # one failed call stands in
    with pytest.raises(SystemCodeError, match="'Mine' raised in next_step"):
        SystemErrors(on_error="stop").drop(Mine(), task, calls, failure())


def test_more_than_the_allowed_share_of_dropped_episodes_stops_the_run():
    task = TaskItem("t", "q", "a")
    ran = Episode(task, ())
    dropped = Episode(task, (), dropped=THE_SYSTEM + RAISED + " advance (m.py:3): ValueError: bad")
    errors = SystemErrors(name="mine", on_error="drop", max_dropped=0.5)
    errors.check_share(Mine(), [ran, dropped])  # one of two: not more than half
    with pytest.raises(SystemCodeError, match=r"raised in 2 of 3 episodes, .*; the first: advance \(m.py:3\)"):
        errors.check_share(Mine(), [dropped, ran, dropped])
