"""masrl.run.trained: a trained run's engine holds its checkpoint's adapters; only eval.* overrides are taken.

A newest checkpoint cut mid-file is passed over, by `masrl eval` and `masrl serve` (real processes) as by
`train --resume`, with a line naming the one used (issue 50)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import torch
from safetensors.torch import load_file

from masrl.config import ConfigError
from masrl.http import wait_healthy
from masrl.run.trained import load_parts, load_trained
from masrl.train import train

pytestmark = pytest.mark.usefixtures("one_thread")


def test_load_parts_takes_a_trained_run_or_a_config(tiny_config, tiny_overrides, run_dir):
    config = tiny_config("trainer.steps=1", "eval.before=false")
    train(config)
    trained = load_parts(str(run_dir))  # the run's saved config and its step-1 adapter
    saved = load_file(run_dir / "checkpoints" / "step_000001" / "policy" / "solver.safetensors")
    state = trained.models["solver"].state_dict("solver")
    assert saved and saved.keys() == state.keys() and all(torch.equal(saved[k], state[k]) for k in saved)
    with pytest.raises(ConfigError, match="only eval.* keys can be overridden, not trainer.lr=1"):
        load_parts(str(run_dir), ["trainer.lr=1"])
    assert load_parts(str(run_dir), ["eval.size=5"]).config.eval.size == 5
    fresh = load_parts(tiny_overrides[0], [*tiny_overrides[1:], "model.lora_rank=2"])  # a config: untrained
    assert fresh.config.model.lora_rank == 2 and fresh.config.run.dir == config.run.dir


# ---------------------------------------------------------------- issue 50: a newest checkpoint cut mid-file
def cut_newest(run_dir: Path) -> Path:
    """Train two steps, a checkpoint after each, then cut step 2's adapter file in half (a half-written file)."""
    weights = run_dir / "checkpoints" / "step_000002" / "policy" / "solver.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    return weights


@pytest.fixture
def cut_run(tiny_config, run_dir) -> Path:
    train(tiny_config("trainer.steps=2", "trainer.checkpoint_every=1", "eval.before=false"))
    cut_newest(run_dir)
    return run_dir


FELL_BACK = ["masrl: checkpoint step_000002 is unreadable", "masrl: using checkpoint step_000001, the newest that reads back whole"]


def fell_back(err: str) -> bool:
    """The two lines saying which checkpoint was passed over and which is used, and no traceback."""
    lines = [line for line in err.splitlines() if line.startswith("masrl: ") and " checkpoint step_" in line]
    return len(lines) == 2 and lines[0].startswith(FELL_BACK[0]) and lines[1] == FELL_BACK[1] and "Traceback" not in err


def test_load_trained_passes_over_a_damaged_newest_checkpoint_and_leaves_it(cut_run, capsys):
    engine, ckpt = load_trained(cut_run)
    assert ckpt == cut_run / "checkpoints" / "step_000001"
    saved = load_file(ckpt / "policy" / "solver.safetensors")
    state = engine.models["solver"].state_dict("solver")
    assert all(torch.equal(saved[k], state[k]) for k in saved)
    assert fell_back(capsys.readouterr().err)
    assert (cut_run / "checkpoints" / "step_000002").is_dir()  # a reader renames nothing


def _env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "MASRL_ALLOCATOR": "system"}


def test_eval_uses_the_checkpoint_before_a_truncated_one(cut_run):
    done = subprocess.run([sys.executable, "-m", "masrl.cli", "eval", str(cut_run)], env=_env(), capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert fell_back(done.stderr), done.stderr[-3000:]
    saved = json.loads((cut_run / "eval.json").read_text())
    assert (saved["checkpoint"], saved["step"]) == ("checkpoints/step_000001", 1)


def test_serve_uses_the_checkpoint_before_a_truncated_one(cut_run):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "masrl.cli", "serve", str(cut_run), "--port", str(port)]
    proc = subprocess.Popen(cmd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc)
        reply = httpx.post(f"{url}/v1/chat/completions", timeout=120,
                           json={"model": "run", "messages": [{"role": "user", "content": "What is 2 + 3?"}]})  # fmt: skip
        assert reply.status_code == 200, reply.text
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert fell_back(err), err[-3000:]
