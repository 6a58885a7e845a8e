"""Run one episode of an agent program: a subprocess with its limits, and what its output means.

The program gets the task as one JSON object on stdin and answers with a JSON object on its last
line of stdout (`{"answer": ..., "reward": ..., "rewards": {...}}`: `reward` scores the whole run,
`rewards` single roles or calls, by model name or completion id). It is untrusted: it may crash, hang, print
nothing useful or flood its output, and each of these ends the episode with a named fault
(`crash`, `timeout`, `no_json`, `flood`) rather than an exception in the training step. The process
runs in its own session (process group), so a timeout or a flood kills everything it started; it is a
fresh interpreter, or a fork of the system's pre-warmed one (masrl.systems.program.zygote), the same to it.
Reading its pipes is asyncio's, so a running program never blocks the event loop that batches
generation for the others.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from masrl.systems.program.zygote import Forked, Zygote, kill_group

Process = asyncio.subprocess.Process | Forked  # a program's process, fresh or forked

STDERR_TAIL = 2000  # characters of stderr kept for a crash's reason


@dataclass(frozen=True)
class Outcome:
    answer: str | None  # the last line's `answer`, as text
    reward: float | None  # the program's own reward, if it reported one
    fault: str | None  # "crash: ...", "timeout: ...", "no_json: ...", "flood: ..."; None when it ran well
    seconds: float
    rewards: Mapping[str, float] = field(default_factory=dict)  # the last line's `rewards`: role or call id -> reward


class BadRewards(ValueError):
    """The last line's `rewards` is not an object of finite numbers: a mistake in the program that every run
    repeats, so it stops the run (one line, exit code 4) rather than failing one run."""


def parse_last_line(stdout: bytes) -> tuple[str | None, float | None, str | None, dict[str, float]]:
    """(answer, reward, fault, rewards) from a program's stdout: its last non-empty line must be a JSON object
    with an `answer` (any JSON scalar, taken as text), optionally a finite numeric `reward` and a `rewards`
    object of finite numbers (BadRewards otherwise)."""
    lines = [line for line in stdout.decode("utf-8", "replace").splitlines() if line.strip()]
    if not lines:
        return None, None, "no_json: the program printed nothing", {}
    last = lines[-1].strip()
    try:
        record = json.loads(last)
    except (ValueError, RecursionError):  # RecursionError: nesting past the parser's depth ("[" * 4000)
        return None, None, f"no_json: last line is not JSON: {last[:120]!r}", {}
    if not isinstance(record, dict) or "answer" not in record:
        return None, None, f"no_json: last line has no 'answer': {last[:120]!r}", {}
    answer = record["answer"]
    if isinstance(answer, (dict, list)):
        return None, None, "no_json: 'answer' must be a string or a number", {}
    reward = record.get("reward")
    if reward is not None:
        if not finite(reward):
            return None, None, f"no_json: 'reward' must be a finite number, got {reward!r}", {}
        reward = float(reward)
    return ("" if answer is None else str(answer)), reward, None, parse_rewards(record.get("rewards"))


def finite(x: object) -> bool:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return False
    try:
        return math.isfinite(x)
    except OverflowError:  # an int past float's range (JSON allows 4,300 digits)
        return False


def parse_rewards(rewards: object) -> dict[str, float]:
    """The last line's `rewards` ({} when absent): an object whose values are finite numbers."""
    if rewards is None:
        return {}
    if not isinstance(rewards, dict):
        raise BadRewards(f"the program's last line has 'rewards' {str(rewards)[:80]!r}: it must be an object of "
                         "model name or call id -> finite number")  # fmt: skip
    bad = {k: v for k, v in rewards.items() if not finite(v)}
    if bad:
        key, value = next(iter(bad.items()))
        raise BadRewards(f"the program's last line rewards {key!r} with {value!r}: rewards must be finite numbers")
    return {k: float(v) for k, v in rewards.items()}


async def run_program(
    command: Sequence[str],
    stdin: bytes,
    env: Mapping[str, str],
    timeout: float,
    max_output_bytes: int,
    cwd: str | None = None,
    zygote: Zygote | None = None,
) -> Outcome:
    started = time.perf_counter()
    try:
        proc = await start(command, env, cwd, zygote)
    except OSError as exc:
        return Outcome(None, None, f"crash: cannot start {command[0]!r}: {exc}", time.perf_counter() - started)
    out = bytearray()
    err = bytearray()
    flooded = False

    async def read_stdout() -> None:
        nonlocal flooded
        while chunk := await proc.stdout.read(1 << 16):
            out.extend(chunk)
            if len(out) > max_output_bytes:
                flooded = True
                _kill(proc)
                return

    async def read_stderr() -> None:  # drained so a chatty program never blocks on a full pipe; the tail is kept
        while chunk := await proc.stderr.read(1 << 16):
            err.extend(chunk)
            del err[: max(0, len(err) - 4 * STDERR_TAIL)]

    async def feed() -> None:
        try:
            proc.stdin.write(stdin)
            await proc.stdin.drain()
            proc.stdin.close()
        except (BrokenPipeError, ConnectionResetError):  # it exited without reading its task: its exit code says why
            pass

    io = asyncio.gather(feed(), read_stdout(), read_stderr(), proc.wait())
    try:
        await asyncio.wait_for(io, timeout)
    except asyncio.TimeoutError:
        _kill(proc)
        await proc.wait()
        seconds = time.perf_counter() - started
        return Outcome(None, None, f"timeout: still running after {timeout:g} s (killed)", seconds)
    except asyncio.CancelledError:  # the rollout stops (another run's error, Ctrl-C): kill it, reap it, then go
        _kill(proc)
        await asyncio.gather(io, proc.wait(), return_exceptions=True)
        raise
    return await _ended(proc, bytes(out), bytes(err), flooded, max_output_bytes, time.perf_counter() - started)


async def start(command: Sequence[str], env: Mapping[str, str], cwd: str | None, zygote: Zygote | None) -> Process:
    """The program's process in its own session: forked by `zygote` (which the caller gives only for a
    command it can run, masrl.systems.program.zygote.forkable), else a fresh subprocess; both with the
    pid, pipes, wait() and returncode the rest of run_program reads."""
    if zygote is not None:
        return await zygote.spawn(list(command), dict(env), cwd or os.getcwd())
    return await asyncio.create_subprocess_exec(
        *command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=dict(env), cwd=cwd, start_new_session=True,
    )  # fmt: skip


async def _ended(proc: Process, out: bytes, err: bytes, flooded: bool, max_output_bytes: int,
                 seconds: float) -> Outcome:  # fmt: skip
    """What a program that ended within its time means: a flood (its stdout cut off), a crash, or its last line."""
    if flooded:
        await proc.wait()
        return Outcome(None, None, f"flood: more than {max_output_bytes} bytes on stdout (killed)", seconds)
    if proc.returncode != 0:
        tail = err.decode("utf-8", "replace").strip()[-STDERR_TAIL:]
        return Outcome(None, None, f"crash: exit code {proc.returncode}: {tail}", seconds)
    answer, reward, fault, rewards = parse_last_line(out)
    return Outcome(answer, reward, fault, seconds, rewards)


def _kill(proc: Process) -> None:
    """SIGKILL the program's whole process group (whatever it started, too)."""
    kill_group(proc.pid)
