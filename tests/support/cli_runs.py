"""Shared by the tests that run the real CLI in a subprocess: the command, its `masrl:` lines, a run's steps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from smoke import tiny_run

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "masrl.cli", *args]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(cli(*args), env=ENV, capture_output=True, text=True, timeout=600)


def messages(stderr: str) -> list[str]:
    """The `masrl:` lines, less the note of the memory allocator a started run restarts under (masrl.memory)."""
    lines = [line for line in stderr.split("\n") if line.startswith("masrl: ")]
    return [line for line in lines if not line.startswith("masrl: memory allocator")]


def logged(run: Path, kind: str = "train") -> list[int]:
    """The steps of metrics.jsonl's `kind` lines, in the file's order."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r["step"] for r in rows if r["kind"] == kind]


def trained_tiny(run: Path, *extra: str) -> Path:
    """`run`, a finished 2-step tiny run (smoke.tiny_run) trained by the real CLI, with `extra` overrides."""
    done = run_cli("train", "single-arithmetic", *tiny_run(), *extra, f"run.dir={run}")
    assert done.returncode == 0, done.stderr[-3000:]
    return run
