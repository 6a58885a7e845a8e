"""The zygote (masrl/systems/program/zygote.py): a run forked from the pre-warmed interpreter is the same
to the program and to the runner as a fresh `python script ARGS`, and the zygote never outlives its owner.

Real processes throughout: each case runs the same program on the same input both ways and compares
what the runner makes of it (answer, rewards, fault and its reason, the stderr tail)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from masrl.loading import load_config
from masrl.parts import build_parts
from masrl.rollout.tree import Parallel, rollout
from masrl.systems.program.runner import Outcome, run_program
from masrl.systems.program.zygote import Zygote, forkable
from processes import gone
from smoke import tiny_run

ROOT = Path(__file__).resolve().parents[3]
PROGRAMS = ROOT / "tests" / "support" / "programs"
PY = sys.executable
TASK = b'{"id": "t1", "question": "2 + 2?", "metadata": {}}\n'

pytestmark = pytest.mark.usefixtures("one_thread")


# Without PYTHONUNBUFFERED, stdout is block-buffered as for most users: os._exit loses what is unflushed
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}


@pytest.fixture(scope="module")
def zygote():
    z = Zygote(ENV, str(PROGRAMS), "launched.py")
    yield z
    z.close()


def run(mode: str, zygote: Zygote | None, env: dict | None = None, timeout: float = 60.0) -> Outcome:
    command = [PY, "launched.py", mode]  # relative: argv[0] stays as typed, __file__ and sys.path[0] absolute
    env = dict(ENV, **(env or {}))
    return asyncio.run(run_program(command, TASK, env, timeout, 4096, cwd=str(PROGRAMS), zygote=zygote))


def seen(outcome: Outcome) -> tuple:
    return outcome.answer, outcome.reward, outcome.fault, dict(outcome.rewards)


@pytest.mark.parametrize("mode, expected", [
    ("ok", ("4", 0.5, None, {"solver": 1.0})),
    ("raise", None),  # a crash with the traceback's tail: checked against the fresh run's below
    ("exit3", (None, None, "crash: exit code 3: ", {})),
    ("exit_message", (None, None, "crash: exit code 1: bad thing: it stopped", {})),
    ("os_exit", (None, None, "no_json: the program printed nothing", {})),
    ("thread", ("from a thread", None, None, {})),
    ("atexit", ("at exit", None, None, {})),
    ("nojson", (None, None, "no_json: last line is not JSON: 'the answer is 4'", {})),
    ("flood", (None, None, "flood: more than 4096 bytes on stdout (killed)", {})),
    ("interrupt", None),  # ended by its own SIGINT after the traceback: checked below
])  # fmt: skip
def test_a_forked_run_ends_as_a_fresh_interpreter_does(mode, expected, zygote):
    fresh, forked = run(mode, None), run(mode, zygote)
    assert seen(forked) == seen(fresh)
    if expected is not None:
        assert seen(forked) == expected
    if mode == "raise":  # the traceback starts at the script, as the interpreter prints it
        assert forked.fault.startswith('crash: exit code 1: Traceback (most recent call last):\n  File "'
                                       f'{PROGRAMS / "launched.py"}", line'), forked.fault  # fmt: skip
        assert forked.fault.endswith("ValueError: boom: the program fell over")
    if mode == "interrupt":  # as asyncio reports a process a signal ended: -2
        assert forked.fault.startswith("crash: exit code -2: Traceback"), forked.fault
        assert forked.fault.endswith("KeyboardInterrupt")


@pytest.mark.parametrize("script, says", [
    ("broken.py", "SyntaxError: invalid syntax"),
    ("missing.py", "can't open file"),
])  # fmt: skip
def test_a_script_that_does_not_compile_or_is_not_there_fails_as_a_fresh_one_does(script, says, zygote, tmp_path):
    (tmp_path / "broken.py").write_text("print('never')\ndef (:\n")

    def outcome(z):
        return asyncio.run(run_program([PY, script], TASK, ENV, 60.0, 4096, cwd=str(tmp_path), zygote=z))

    fresh, forked = outcome(None), outcome(zygote)
    assert seen(forked) == seen(fresh)
    assert forked.fault.startswith("crash: exit code ") and says in forked.fault and "Traceback" not in forked.fault


def test_the_child_sees_what_a_fresh_interpreter_sees(zygote):
    env = {"MASRL_TEST_RUN": "only this run's", "OPENAI_API_KEY": "key-of-this-run"}
    fresh, forked = (json.loads(run("describe", z, env).answer) for z in (None, zygote))
    assert forked == fresh
    assert forked["argv"] == ["launched.py", "describe"] and forked["orig_argv"] == [PY, "launched.py", "describe"]
    assert forked["name"] == "__main__" and forked["file"] == str(PROGRAMS / "launched.py")
    assert forked["path0"] == str(PROGRAMS) and forked["cwd"] == str(PROGRAMS)
    assert forked["env"] == dict(ENV, **env)  # replaced: the run's own, nothing of the zygote's
    assert forked["fds"] == ["0", "1", "2", "3"]  # no socket or pidfd of the zygote's (3: the listing's own)
    assert forked["own_session"] and forked["sigint"] and forked["sigpipe"]
    assert forked["task"] == json.loads(TASK)
    assert not forked["stdout_tty"] and not forked["line_buffered"]


def test_a_timeout_kills_the_group_what_the_program_started_too(zygote, tmp_path):
    pid_file = tmp_path / "pids"
    outcome = run("hang", zygote, {"PID_FILE": str(pid_file)}, timeout=3.0)
    assert outcome.fault == "timeout: still running after 3 s (killed)"
    program, grandchild = map(int, pid_file.read_text().split())
    assert gone(program, grandchild)


def test_a_cancelled_run_is_killed_and_reaped(zygote, tmp_path):
    pid_file = tmp_path / "pids"

    async def cancel_midway():
        env = dict(os.environ, PID_FILE=str(pid_file))
        task = asyncio.ensure_future(run_program([PY, "launched.py", "hang"], TASK, env, 60.0, 4096, str(PROGRAMS),
                                                 zygote))  # fmt: skip
        while not pid_file.exists() or not pid_file.read_text():
            await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_midway())
    program, grandchild = map(int, pid_file.read_text().split())
    assert gone(program, grandchild)
    assert run("ok", zygote).answer == "4"  # the zygote serves on


def test_ctrl_c_is_the_owners_the_zygote_ignores_it(zygote):
    os.kill(zygote.process.pid, signal.SIGINT)
    time.sleep(0.2)
    assert zygote.process.poll() is None
    assert run("ok", zygote).answer == "4"


def test_the_zygote_exits_when_its_owner_closes_it(tmp_path):
    z = Zygote(ENV, str(PROGRAMS), "launched.py")
    assert run("ok", z).answer == "4"
    z.close()
    assert z.process.returncode == 0
    assert run("ok", z).fault.startswith("crash: cannot start")  # closed: a run says so, as a missing program


OWNER = """
import asyncio, os, sys
from masrl.systems.program.zygote import Zygote
from masrl.systems.program.runner import run_program
z = Zygote(dict(os.environ), sys.argv[1], "launched.py")
print(z.process.pid, flush=True)
asyncio.run(run_program([sys.executable, "launched.py", "hang"], b'{"id": "1"}\\n', dict(os.environ), 60, 4096,
                        sys.argv[1], z))
"""


def test_the_zygote_and_its_runs_end_when_its_owner_dies(tmp_path):
    pid_file = tmp_path / "pids"
    env = dict(os.environ, PID_FILE=str(pid_file), PYTHONPATH=os.pathsep.join([str(ROOT / "src"), *sys.path]))
    with subprocess.Popen([PY, "-c", OWNER, str(PROGRAMS)], env=env, stdout=subprocess.PIPE, text=True) as owner:
        try:
            zygote_pid = int(owner.stdout.readline())
            for _ in range(600):
                if pid_file.exists() and pid_file.read_text():
                    break
                time.sleep(0.05)
            program, grandchild = map(int, pid_file.read_text().split())
        finally:
            owner.kill()  # SIGKILL: no finalizer, no close; the kernel closes its end of the socket
    assert gone(zygote_pid, program, grandchild)


@pytest.mark.parametrize("command, script", [
    ([PY, "debate.py", "--rounds", "2"], "debate.py"),
    ([PY, "-u", "debate.py"], None),  # an interpreter flag a started interpreter cannot take
    ([PY, "-m", "debate"], None),
    ([PY], None),
    (["python", "debate.py"], None),  # another interpreter than masrl's (the system makes `python` masrl's first)
    (["/bin/echo", "debate.py"], None),
])  # fmt: skip
def test_only_a_script_on_masrls_own_interpreter_is_forked(command, script):
    assert forkable(command) == script


def test_the_engine_closes_the_zygote_its_system_started(tmp_path):
    """Parts.close (the end of training, `masrl eval`, `masrl serve`) closes the system, and it its zygote."""

    def zygotes() -> set[int]:
        return {p.pid for p in psutil.Process().children() if any("zygote.py" in a for a in p.cmdline())}

    before = zygotes()
    example = ROOT / "examples" / "program-solver-checker"
    engine = build_parts(load_config(str(example / "config.yaml"), [
        *tiny_run(), f"run.dir={tmp_path / 'run'}", f"system.command={PY} {example / 'solver_checker.py'}"]))
    try:
        items = engine.task.items("train", 0, 1)
        (episode,) = asyncio.run(rollout(engine.system, engine.agents, items, Parallel(2)))
        assert sum(1 for c in episode.calls if c.reply is not None) >= 2
        assert len(zygotes() - before) == 1
    finally:
        engine.close()
    assert zygotes() == before
