"""kill -9 at a random moment loses at most the steps since the last checkpoint.

A training process (the real CLI, tiny model) is killed with SIGKILL at a
random time after its first checkpoint; `--resume` then finishes the run. The
result must be the run that was never interrupted: same per-step metrics,
bit-identical final adapter.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file
from seeded import volatile

STEPS = 6
ARGS = [
    "model.name=tiny",
    f"trainer.steps={STEPS}",
    "trainer.checkpoint_every=2",
    "trainer.batch_size=2",
    "sampler.group_size=4",
    "rollout.max_new_tokens=6",
    "eval.size=2",
    "eval.max_new_tokens=4",
    "eval.before=false",
    "trainer.threads=1",
    "trainer.lr=0.01",
]


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "masrl.cli", *args]


def _train_rows(run: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    # measurements of the process, not results (as test_faults and test_pipeline_smoke drop them): peak RSS
    # varies by a few hundred KB between runs under jemalloc, whose threads take arenas in the order they run
    return [{k: v for k, v in r.items() if not volatile(k)} for r in rows if r["kind"] == "train"]


def _final_adapter(run: Path) -> dict:
    latest = (run / "checkpoints" / "latest").read_text().strip()
    return load_file(str(run / "checkpoints" / latest / "policy" / "solver.safetensors"))


@pytest.mark.slow  # 10-30 s of processes on 2 cores: behind the marker so the default run stays near 10 minutes
def test_sigkill_then_resume_equals_uninterrupted(tmp_path):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    clean = tmp_path / "clean"
    subprocess.run(_cli("train", "single-arithmetic", f"run.dir={clean}", *ARGS), check=True, env=env, capture_output=True, timeout=300)

    killed = tmp_path / "killed"
    proc = subprocess.Popen(
        _cli("train", "single-arithmetic", f"run.dir={killed}", *ARGS), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.time() + 120
    while not (killed / "checkpoints" / "latest").exists():
        assert proc.poll() is None, "training ended before its first checkpoint"
        assert time.time() < deadline
        time.sleep(0.02)
    time.sleep(random.uniform(0.0, 0.6))  # anywhere in the steps after it, a save included
    if proc.poll() is not None:
        pytest.skip("the run finished before the kill; nothing to test this time")
    proc.send_signal(signal.SIGKILL)
    proc.wait()

    done = subprocess.run(_cli("train", "--resume", str(killed)), env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]

    assert [r["step"] for r in _train_rows(killed)] == list(range(1, STEPS + 1))
    assert _train_rows(killed) == _train_rows(clean)
    a, b = _final_adapter(killed), _final_adapter(clean)
    assert a.keys() == b.keys()
    assert all((a[k] == b[k]).all() for k in a)
