"""Crash-safe checkpoint IO: roundtrip, failed writers, pruning, RNG, and SIGKILL."""

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from masrl.checkpoint import (
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    capture_rng,
    latest_checkpoint,
    read_meta,
    restore_rng,
    save_checkpoint,
)


def names(run_dir):
    return sorted(p.name for p in (run_dir / "checkpoints").iterdir())


def write_adapter(step):
    """A writer like save_pretrained: makes a directory with files in it."""

    def write(p: Path):
        p.mkdir(parents=True)
        (p / "adapter_config.json").write_text(json.dumps({"step": step}))
        torch.save({"w": torch.full((3,), float(step))}, p / "adapter_model.pt")

    return write


def simple_files(step):
    return {
        "policy/adapter": write_adapter(step),
        "optimizer.pt": lambda p: torch.save({"lr": 0.1 * step}, p),
    }


def test_atomic_writes(tmp_path):
    p = tmp_path / "sub" / "x.json"
    atomic_write_json(p, {"a": 1})
    assert json.loads(p.read_text()) == {"a": 1}
    atomic_write_text(p, "hello")
    assert p.read_text() == "hello"
    atomic_write_bytes(p, b"\x00\x01")
    assert p.read_bytes() == b"\x00\x01"
    assert os.listdir(p.parent) == ["x.json"]  # no temp files left behind


def test_save_load_roundtrip(tmp_path):
    assert latest_checkpoint(tmp_path) is None
    path = save_checkpoint(tmp_path, 7, simple_files(7), {"tokens_seen": 1234})
    assert path == tmp_path / "checkpoints" / "step_000007"
    assert latest_checkpoint(tmp_path) == path
    assert (tmp_path / "checkpoints" / "latest").read_text().strip() == "step_000007"
    assert read_meta(path) == {"step": 7, "tokens_seen": 1234}
    assert json.loads((path / "policy/adapter/adapter_config.json").read_text()) == {"step": 7}
    w = torch.load(path / "policy/adapter/adapter_model.pt", weights_only=True)["w"]
    assert torch.equal(w, torch.full((3,), 7.0))
    assert torch.load(path / "optimizer.pt", weights_only=True) == {"lr": pytest.approx(0.7)}
    assert names(tmp_path) == ["latest", "step_000007"]


def test_failing_writer_leaves_previous_checkpoint(tmp_path):
    first = save_checkpoint(tmp_path, 1, simple_files(1), {})

    def boom(p):
        raise RuntimeError("disk full")

    files = {"policy/adapter": write_adapter(2), "optimizer.pt": boom}  # fails halfway
    with pytest.raises(RuntimeError, match="disk full"):
        save_checkpoint(tmp_path, 2, files, {})
    assert latest_checkpoint(tmp_path) == first
    assert names(tmp_path) == ["latest", "step_000001"]  # partial dir cleaned up


def test_stale_tmp_dirs_are_ignored_then_removed(tmp_path):
    first = save_checkpoint(tmp_path, 1, simple_files(1), {})
    # what a kill -9 mid-save leaves: a hidden dir, even one with a meta.json
    stale = tmp_path / "checkpoints" / ".tmp-step_000002-abcd"
    (stale / "policy").mkdir(parents=True)
    (stale / "meta.json").write_text('{"step": 2}')
    (tmp_path / "checkpoints" / "latest").unlink()  # and even without `latest`
    assert latest_checkpoint(tmp_path) == first
    save_checkpoint(tmp_path, 3, simple_files(3), {})
    assert names(tmp_path) == ["latest", "step_000001", "step_000003"]


def test_latest_fallback(tmp_path):
    save_checkpoint(tmp_path, 1, simple_files(1), {}, keep=5)
    second = save_checkpoint(tmp_path, 2, simple_files(2), {}, keep=5)
    latest = tmp_path / "checkpoints" / "latest"
    latest.write_bytes(b"\xff\xfe garbage")
    assert latest_checkpoint(tmp_path) == second
    latest.write_text("step_000009\n")  # names a dir that does not exist
    assert latest_checkpoint(tmp_path) == second
    latest.unlink()
    # an incomplete step dir (no meta.json) is never chosen
    (tmp_path / "checkpoints" / "step_000005").mkdir()
    assert latest_checkpoint(tmp_path) == second


def test_keep_prunes_oldest(tmp_path):
    for step in range(1, 5):
        save_checkpoint(tmp_path, step, simple_files(step), {})
    assert names(tmp_path) == ["latest", "step_000003", "step_000004"]
    save_checkpoint(tmp_path, 5, simple_files(5), {}, keep=1)
    assert names(tmp_path) == ["latest", "step_000005"]


def test_resave_same_step_replaces_it(tmp_path):
    save_checkpoint(tmp_path, 1, simple_files(1), {"v": "a"})
    path = save_checkpoint(tmp_path, 1, simple_files(1), {"v": "b"})
    assert read_meta(path)["v"] == "b"
    assert names(tmp_path) == ["latest", "step_000001"]


def draws():
    return (
        [random.random() for _ in range(3)],
        np.random.rand(3).tolist(),
        torch.rand(3).tolist(),
        random.gauss(0, 1),
        np.random.randn(),
    )


def test_rng_roundtrip_through_torch_save(tmp_path):
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    random.gauss(0, 1)  # leave a cached gaussian in both generators
    np.random.randn()
    torch.save(capture_rng(), tmp_path / "rng.pt")
    expected = draws()
    draws()  # move every generator on
    restore_rng(torch.load(tmp_path / "rng.pt", weights_only=True))
    assert draws() == expected


CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from masrl.checkpoint import latest_checkpoint, read_meta, save_checkpoint

    run = Path(sys.argv[1])
    last = latest_checkpoint(run)
    step = read_meta(last)["step"] if last else 0
    while True:  # save until killed
        step += 1
        blob = bytes([step % 256]) * 300_000

        def model(p, blob=blob):
            p.write_bytes(blob)

        def adapter(p, step=step, blob=blob):
            p.mkdir(parents=True)
            (p / "config.json").write_text(str(step))
            (p / "weights.bin").write_bytes(blob)

        files = {"model.bin": model, "policy/adapter": adapter}
        save_checkpoint(run, step, files, {"blob_len": len(blob)}, keep=2)
    """
)


def check_complete(ckpt):
    meta = read_meta(ckpt)
    step = meta["step"]
    assert ckpt.name == f"step_{step:06d}"
    blob = bytes([step % 256]) * meta["blob_len"]
    assert (ckpt / "model.bin").read_bytes() == blob
    assert (ckpt / "policy/adapter/weights.bin").read_bytes() == blob
    assert (ckpt / "policy/adapter/config.json").read_text() == str(step)
    return step


def test_sigkill_mid_save_leaves_complete_checkpoint(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    run = tmp_path / "run"
    rng = random.Random(0)
    prev = 0
    for _ in range(3):
        child = subprocess.Popen([sys.executable, str(script), str(run)])
        try:
            deadline = time.monotonic() + 5.0
            start = latest_checkpoint(run)
            while latest_checkpoint(run) == start:  # wait for at least one new save
                assert child.poll() is None, "child died on its own"
                assert time.monotonic() < deadline, "child made no checkpoint"
                time.sleep(0.01)
            time.sleep(rng.uniform(0.0, 0.3))
        finally:
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
        ckpt = latest_checkpoint(run)
        assert ckpt is not None
        step = check_complete(ckpt)
        assert step > prev
        prev = step
    # the next save sweeps whatever the kills left half-written
    save_checkpoint(run, prev + 1, {}, {})
    assert not [n for n in names(run) if n.startswith(".tmp-")]
