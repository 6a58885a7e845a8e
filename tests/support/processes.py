"""The real `masrl` command in a subprocess, and what a test of its faults reads back: its `masrl:` lines,
the moment it reaches a phase, and every file it left, read back whole; whether a process is gone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def masrl(*args: str, env: dict | None = None) -> subprocess.Popen:
    """`python -m masrl.cli ARGS`, started; stdout and stderr piped apart."""
    return subprocess.Popen([sys.executable, "-m", "masrl.cli", *args], env=env or ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip


def finish(proc: subprocess.Popen) -> subprocess.CompletedProcess:
    out, err = proc.communicate(timeout=600)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def messages(stderr: str) -> list[str]:
    """The `masrl:` lines, less the note of the memory allocator a started run restarts under (masrl.memory)."""
    lines = [line for line in stderr.split("\n") if line.startswith("masrl: ")]
    return [line for line in lines if not line.startswith("masrl: memory allocator")]


def wait_until(done, proc: subprocess.Popen, timeout: float = 600.0) -> None:
    """Poll `done()` until it holds; the process must not end first."""
    deadline = time.monotonic() + timeout
    while not done():
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.005)


def loads_torch(pid: int) -> bool:
    """Whether the process has mapped libtorch: it is importing torch (start-up) or past it."""
    try:
        return "libtorch" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


def pauses(proc: subprocess.Popen, at_each: list[list[int]]) -> None:
    """The process stops itself at each pause (MASRL_TEST_PAUSE); send the i-th pause the signals `at_each[i]`
    while it is stopped, then continue it; once the list is used up, continue it at every pause until it ends.

    Each stop is counted from waitpid(WUNTRACED), which reports every stop of a child once, not by watching
    /proc for the stopped state: a child continued that stops again at its next pause before this process
    looks (a loaded machine) would never be seen running, and the watcher would wait for ever."""
    k = 0
    while True:
        _, status = os.waitpid(proc.pid, os.WUNTRACED)
        if not os.WIFSTOPPED(status):  # it ended: Popen must not wait for a child already reaped
            proc.returncode = os.waitstatus_to_exitcode(status)
            return
        for sig in at_each[k] if k < len(at_each) else []:
            proc.send_signal(sig)
        k += 1
        proc.send_signal(signal.SIGCONT)


def read_back_whole(run: Path) -> list[str]:
    """Read every file under `run` the way a reader does (JSON, JSON lines, YAML, tensors); the relative
    names of those read. A half-written file raises; no temporary file of an atomic write may be left."""
    import torch  # lazy: only the tests that check tensors pay for it
    from safetensors.torch import load_file

    names = []
    for path in sorted(p for p in run.rglob("*") if p.is_file()):
        rel = path.relative_to(run).as_posix()
        assert ".tmp-" not in rel, rel
        if path.suffix == ".json":
            json.loads(path.read_text())
        elif path.suffix == ".jsonl":
            [json.loads(line) for line in path.read_text().splitlines()]
        elif path.suffix == ".yaml":
            yaml.safe_load(path.read_text())
        elif path.suffix == ".safetensors":
            load_file(path)
        elif path.suffix == ".pt":
            torch.load(path, weights_only=False)
        names.append(rel)
    return names


def alive(pid: int) -> bool:
    """Running (a zombie, dead and not yet reaped, is not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(")")[-1].split()[0] != "Z"


def gone(*pids: int, seconds: float = 10.0) -> bool:
    """Whether every one of `pids` has ended within `seconds` (a killed process's children are reaped by init)."""
    deadline = time.monotonic() + seconds
    while any(alive(p) for p in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
