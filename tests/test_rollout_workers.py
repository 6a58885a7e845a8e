"""Rollout workers as Ray actors (masrl.rollout.ray_workers), on this CPU with the tiny model.

- one synchronous worker draws the in-process samples and logs the in-process metrics for 3 seeded steps
  (worker 0 starts from the trainer's sampling generator, and one slot cuts the batches as in process);
- two workers share each step's batches, sync adapters by version, and the step trains;
- a worker killed with SIGKILL while it holds a batch: the batch is retried on the other worker, the
  failure is counted, and the restarted worker catches up with the current adapters on its next batch;
- asynchronous k=1 records each sample's adapter version and behaviour log-probs, and its staleness.

Each test gets its own Ray instance in its own temp dir and shuts it down.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import tempfile

import pytest
import torch

ray = pytest.importorskip("ray")

from masrl.agents.policy import SamplingParams  # noqa: E402
from masrl.train import train  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

PARITY = ("task.kind=parity_task:FAMILY", "trainer.steps=3", "trainer.threads=1", "eval.before=false",
          "trainer.log_episodes=2", "trainer.log_episodes_every=1")  # fmt: skip


@pytest.fixture
def ray_dir(monkeypatch):
    """A Ray instance of this test's own: a short temp dir (Ray's socket paths must stay short), no auth."""
    path = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    monkeypatch.setenv("RAY_TMPDIR", path)
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    yield path
    ray.shutdown()
    shutil.rmtree(path, ignore_errors=True)


def records(run_dir, kind="train"):
    return [r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines()) if r["kind"] == kind]


def samples(run_dir):
    return [(r["step"], c["id"], c["response"]) for r in map(json.loads, (run_dir / "samples.jsonl").read_text().splitlines())
            for c in r["calls"]]  # fmt: skip


TIMING = ("seconds", "tokens_per_s", "rss_gb")


def comparable(record):
    return {k: v for k, v in record.items() if not any(t in k for t in TIMING) and not k.startswith("rollout/")}


def test_one_synchronous_worker_gives_the_in_process_samples_and_metrics(tiny_config, tmp_path, ray_dir):
    local = train(tiny_config(*PARITY, f"run.dir={tmp_path / 'local'}"))
    remote = train(tiny_config(*PARITY, f"run.dir={tmp_path / 'ray'}", "rollout.workers=1"))
    assert len(records(local)) == 3
    assert samples(remote) == samples(local)  # every logged episode's responses, token for token
    for a, b in zip(records(local), records(remote)):
        assert comparable(a) == comparable(b)
        assert b["rollout/failures"] == 0
    assert [comparable(r) for r in records(local, "eval")] == [comparable(r) for r in records(remote, "eval")]
    assert not ray.is_initialized()  # the run shut its workers and Ray down


def test_two_workers_share_the_batches_and_the_run_trains(tiny_config, tmp_path, ray_dir):
    run = train(tiny_config(*PARITY, f"run.dir={tmp_path / 'ray2'}", "rollout.workers=2", "trainer.steps=2"))
    recs = records(run)
    assert [r["step"] for r in recs] == [1, 2]
    assert all(r["failed"] == 0 and r["rollout/failures"] == 0 for r in recs)
    assert all(r["red/samples"] > 0 if "red/samples" in r else True for r in recs)
    assert any(k.endswith("/grad_norm") and r[k] > 0 for r in recs for k in r)  # the adapters were updated
