"""One writer per run directory: an OS lock held for the life of a `train`, `eval` or `serve` that writes into it.

`hold(run, command)` takes an exclusive, non-blocking `fcntl.flock` on RUN/.lock and writes
the holder (pid, command, host, start time) into that file. The kernel releases the lock when
the process ends, however it ends (kill -9 included), so a crash never leaves a stale lock and
nothing has to be cleaned up by hand. A second writer does not wait: it is refused at once with
one line naming the holder (ConfigError, exit code 2: nothing ran). Readers (`compare`, `view`,
`report`) take no lock.

With `trainer.processes=N` the launcher holds the lock and its ranks write under it: the rank
that finds the lock held by its own parent process goes on without taking it (flock would refuse
it, since a spawned child opens the file anew). Under torchrun, rank 0 takes it.

A directory the lock created for a new run is removed again on release when nothing but the lock
file is in it (a run refused or undone before writing anything leaves no trace).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from masrl.config import ConfigError
from masrl.run.files import RunDir


@contextmanager
def hold(run: RunDir, command: str) -> Iterator[None]:
    """Hold `run`'s lock while the block runs, as `command` (e.g. "masrl train"); refuse if another process holds it."""
    if run.path.exists() and not run.path.is_dir():
        raise ConfigError(f"run.dir {run} is a file, not a directory; choose another run.dir")
    made = [p for p in (*reversed(run.path.parents), run.path) if not p.exists()]
    run.path.mkdir(parents=True, exist_ok=True)
    fd = os.open(run.lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(run.lock)
            if holder.get("pid") == os.getppid():  # our launcher (trainer.processes=N) holds it for its ranks
                yield
                return
            raise ConfigError(f"{run} is in use by {_describe(holder)}; one command at a time writes a run "
                              "directory: wait until that one ends, or choose another run.dir") from None  # fmt: skip
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps(_me(command)).encode())
        yield
    finally:
        _leave(run, made)
        os.close(fd)  # closing the descriptor releases the lock


def _me(command: str) -> dict:
    since = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    return {"pid": os.getpid(), "command": command, "host": socket.gethostname(), "since": since}


def _holder(lock: Path) -> dict:
    """What the holder wrote; {} while it has not written yet (it took the lock a moment ago) or wrote garbage."""
    try:
        holder = json.loads(lock.read_text())
    except (OSError, ValueError):
        return {}
    return holder if isinstance(holder, dict) else {}


def _describe(holder: dict) -> str:
    if "pid" not in holder:
        return "another process"
    return (f"{holder.get('command', 'another command')} (pid {holder['pid']} on {holder.get('host', '?')}, "
            f"since {holder.get('since', '?')})")  # fmt: skip


def _leave(run: RunDir, made: list[Path]) -> None:
    """Remove the directories `hold` made, while they hold nothing but the lock file (still locked by us, so no
    other writer can have taken it in between)."""
    if not made or any(p.name != run.lock.name for p in run.path.iterdir()):
        return
    run.lock.unlink(missing_ok=True)
    for path in reversed(made):
        try:
            path.rmdir()
        except OSError:  # someone else's file appeared there: leave it
            return
