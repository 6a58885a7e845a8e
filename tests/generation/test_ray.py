"""Rollout workers as Ray actors (masrl.generation.ray), on this CPU with the tiny model.

- one synchronous worker draws the in-process samples and logs the in-process metrics for 3 seeded steps
  (worker 0 starts from the trainer's sampling generator, and one slot cuts the batches as in process);
- two workers share each step's batches, sync adapters by version, and the step trains;
- a worker killed with SIGKILL while it holds a batch: the batch is retried on the other worker, the
  failure is counted, and the restarted worker catches up with the current adapters on its next batch;
- asynchronous k=1 records each sample's adapter version and behaviour log-probs, and its staleness;
- `rollout.precision` reaches the workers (a bf16 worker's generations carry their sampling log-probs);
- a rollout sampled ahead (masrl.rollout.ahead) gets the adapter version its step pins and seeds each batch
  by (run seed, step, batch number), so two asynchronous runs with one seed draw the same tokens.

Each test gets its own Ray instance in its own temp dir and shuts it down. The default run holds the first
and the pool-level kill test (about 40 s together); the rest are marked slow.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import pytest
import ray  # the `scale` extra, installed by scripts/setup.sh
import torch
from test_train import Crash, crash_after_logging

from masrl.agents.policy import LoraSpec, PolicyModel
from masrl.cli import main
from masrl.generation.llama import bf16_supported
from masrl.generation.ray import RayWorkers, RolloutWorker, WorkerSpec, host_port
from masrl.generation.sampling import SamplingParams
from masrl.models import load_model
from masrl.rollout.ahead import Pin
from masrl.rollout.tree import address_seed
from masrl.train import train

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


@pytest.mark.parametrize("engine", ["auto", "hf"])  # auto: the lean engine, in process and in the worker
def test_one_synchronous_worker_gives_the_in_process_samples_and_metrics(tiny_config, tmp_path, ray_dir, engine):
    local = train(tiny_config(*PARITY, f"run.dir={tmp_path / 'local'}", f"rollout.engine={engine}"))
    remote = train(tiny_config(*PARITY, f"run.dir={tmp_path / 'ray'}", "rollout.workers=1", f"rollout.engine={engine}"))
    assert len(records(local)) == 3
    assert samples(remote) == samples(local)  # every logged episode's responses, token for token
    for a, b in zip(records(local), records(remote)):
        assert comparable(a) == comparable(b)
        assert b["rollout/failures"] == 0
    assert [comparable(r) for r in records(local, "eval")] == [comparable(r) for r in records(remote, "eval")]
    assert not ray.is_initialized()  # the run shut its workers and Ray down


@pytest.mark.slow  # three runs, each starting Ray: over the default run's minute for Ray tests
def test_a_resumed_worker_run_samples_what_the_uninterrupted_run_samples(tiny_config, tmp_path, ray_dir, monkeypatch):
    """1 worker, 4 steps straight vs. killed after step 3 (checkpoint at 2) and resumed: the worker's
    sampling generator is in the checkpoint, so steps 3-4 draw the same tokens (without it the restarted
    worker would start its stream over)."""
    args = (*PARITY, "rollout.workers=1", "trainer.steps=4", "trainer.checkpoint_every=2", "trainer.keep_checkpoints=3")
    straight = train(tiny_config(*args, f"run.dir={tmp_path / 'straight'}"))
    crashed = tmp_path / "crashed"
    with monkeypatch.context() as patch, pytest.raises(Crash):
        crash_after_logging(patch, at_step=3)
        train(tiny_config(*args, f"run.dir={crashed}"))
    assert (crashed / "checkpoints" / "step_000002" / "rng_workers.pt").exists()
    train(None, resume=crashed)
    assert [s[0] for s in samples(crashed)] == [s[0] for s in samples(straight)] and samples(crashed)[-1][0] == 4
    assert samples(crashed) == samples(straight)
    assert [comparable(r) for r in records(crashed)] == [comparable(r) for r in records(straight)]


@pytest.mark.slow
def test_two_workers_share_the_batches_and_the_run_trains(tiny_config, tmp_path, ray_dir):
    run = train(tiny_config(*PARITY, f"run.dir={tmp_path / 'ray2'}", "rollout.workers=2", "trainer.steps=2"))
    recs = records(run)
    assert [r["step"] for r in recs] == [1, 2]
    assert all(r["failed"] == 0 and r["rollout/failures"] == 0 for r in recs)
    assert all(r["red/samples"] > 0 if "red/samples" in r else True for r in recs)
    assert any(k.endswith("/grad_norm") and r[k] > 0 for r in recs for k in r)  # the adapters were updated


def _trainer_model():
    torch.manual_seed(0)
    model = PolicyModel(load_model("tiny", seed=0), ["red"], LoraSpec(rank=4, alpha=8))
    with torch.no_grad():  # a fresh adapter has B = 0 (the base policy): make the adapters matter
        for p in model.parameters("red"):
            p.add_(0.3 * torch.randn_like(p))
    return model


@pytest.mark.slow  # 10-30 s of processes on 2 cores: behind the marker so the default run stays near 10 minutes
def test_a_worker_killed_mid_batch_is_retried_counted_and_restarted_with_the_current_adapters(ray_dir):
    model = _trainer_model()
    spec = WorkerSpec("tiny", ("red",), LoraSpec(rank=4, alpha=8), seed=0, dtype="float32", threads=1, logprobs=True)
    pool = RayWorkers(spec, 2, address=None, cpus=1.0, timeout_s=300.0, retries=1)
    try:
        pool.publish(7, {"red": model.state_dict("red")})
        pids = pool.pids()
        assert [os.getpriority(os.PRIO_PROCESS, pid) for pid in pids] == [0, 0]  # not Ray's background niceness 15
        prompts = [[5, 6, 7, i] for i in range(32)]
        params = SamplingParams(max_new_tokens=512, temperature=1.0)  # seconds of work: the kill lands mid-batch

        async def kill_one_mid_batch():
            batch = asyncio.ensure_future(pool.generate(prompts, params, "red"))
            while sum(pool.busy) == 0:  # the batch has been sent to a worker
                await asyncio.sleep(0.001)
            victim = pool.busy.index(1)
            os.kill(pids[victim], signal.SIGKILL)
            return await asyncio.wait_for(batch, 300), victim

        outs, victim = asyncio.run(kill_one_mid_batch())
        assert pool.failures == 1  # counted once, then answered by the other worker
        assert len(outs) == 32 and all(o.version == 7 for o in outs)
        assert pool.pids()[victim] != pids[victim]  # Ray restarted it
        # The restarted worker loads version 7 on its first batch: its log-probs are the trainer's.
        short = SamplingParams(max_new_tokens=8, temperature=1.0)
        again = ray.get(pool.actors[victim].generate.remote(prompts[:4], short, "red", pool.version, pool._refs))
        with torch.no_grad():
            logp, _ = model.response_logprobs(prompts[:4], [g.response_ids for g in again], "red", 1.0)
        for i, g in enumerate(again):
            n = len(g.response_ids)
            assert g.version == 7 and n > 0
            assert torch.allclose(torch.tensor(g.logprobs), logp[i, :n], atol=1e-5)
    finally:
        pool.close()


@pytest.mark.slow
def test_sigkill_of_a_generating_worker_mid_step_the_step_completes_and_counts_it(tiny_config, tmp_path, ray_dir):
    run_dir = tmp_path / "killed"
    killed: list[int] = []

    def kill_a_generating_worker():
        """Once step 1 is logged, SIGKILL a worker process while Ray shows it inside `generate`."""
        metrics = run_dir / "metrics.jsonl"
        while not killed:
            if metrics.exists() and '"kind": "train"' in metrics.read_text():
                # this run's workers only (Ray's processes descend from this one): never another run's
                for proc in psutil.Process().children(recursive=True):
                    try:
                        if (proc.cmdline() or [""])[0].startswith("ray::RolloutWorker.generate"):
                            os.kill(proc.pid, signal.SIGKILL)
                            killed.append(proc.pid)
                            return
                    except psutil.NoSuchProcess:
                        continue
            threading.Event().wait(0.002)

    killer = threading.Thread(target=kill_a_generating_worker, daemon=True)
    killer.start()
    run = train(tiny_config(*PARITY, f"run.dir={run_dir}", "rollout.workers=2", "rollout.max_new_tokens=256",
                            "trainer.steps=4", "trainer.batch_size=4"))  # fmt: skip
    killer.join(timeout=1)
    recs = records(run)
    assert killed and [r["step"] for r in recs] == [1, 2, 3, 4]  # every step completed
    assert recs[0]["rollout/failures"] == 0
    assert sum(r["rollout/failures"] for r in recs[1:]) == 1  # the killed batch, counted once (then retried)
    assert all(r["failed"] == 0 for r in recs)  # the retry answered it: no trajectory lost


@pytest.mark.slow
def test_asynchronous_k1_trains_on_samples_one_version_behind_and_corrects_them(tiny_config, tmp_path, ray_dir):
    run = train(tiny_config(*PARITY, f"run.dir={tmp_path / 'async'}", "rollout.workers=1", "rollout.max_staleness=1",
                            "trainer.steps=4", "trainer.log_episodes=1000"))  # fmt: skip
    recs = records(run)
    assert [r["step"] for r in recs] == [1, 2, 3, 4]
    assert recs[0]["rollout/staleness_max"] == 0  # step 1 is sampled with the initial adapters
    # Step s+1 is sampled while step s updates, so with the adapters of version s-1: one behind.
    assert all(r["rollout/staleness_max"] <= 1 for r in recs) and any(r["rollout/staleness_max"] == 1 for r in recs)
    weights = [r[k] for r in recs for k in r if k.endswith("/behavior_weight_mean")]
    assert weights and all(w > 0 and math.isfinite(w) for w in weights)
    # A checkpoint does not ask the worker, busy sampling the next step, for its generator (it would wait).
    assert list(run.glob("checkpoints/step_*")) and not list(run.glob("checkpoints/*/rng_workers.pt"))
    # The generation rate is the sampling's own (it ran on the background thread), not tokens over
    # the loop's wait, which is ~0 for a step sampled while the previous one updated.
    logged = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]  # every episode
    tokens = [sum(c["tokens_out"] for ep in logged if ep["step"] == r["step"] for c in ep["calls"]) for r in recs]
    for r, n in zip(recs, tokens):
        assert r["rollout/generate_seconds"] > 0
        assert r["gen_tokens_per_s"] == pytest.approx(n / r["rollout/generate_seconds"], rel=1e-9)


def cluster_cpus(ray_cli: str, address: str, env: dict) -> float:
    out = subprocess.run([ray_cli, "status", "--address", address], env=env, capture_output=True, text=True).stdout
    found = re.search(r"/([0-9.]+) CPU", out)
    return float(found.group(1)) if found else 0.0


@pytest.mark.slow
def test_ray_address_attaches_to_a_head_and_a_second_node_and_trains_across_both(tiny_config, tmp_path, ray_dir, capsys):
    """`ray start --head` and `ray start --address` (each --block, so stopping them stops their node), one CPU each:
    rollout.workers=2 with ray.worker_cpus=1 must put one worker on each node."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ray_cli = str(Path(sys.executable).with_name("ray"))
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "RAY_AUTH_MODE": "disabled",
           "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}  # fmt: skip
    common = ["--num-cpus", "1", "--node-ip-address", "127.0.0.1", "--block", "--disable-usage-stats"]
    head = subprocess.Popen([ray_cli, "start", "--head", "--port", str(port), "--temp-dir", ray_dir,
                             "--include-dashboard", "false", *common], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip
    nodes = [head]
    try:
        address = f"127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while subprocess.run([ray_cli, "status", "--address", address], env=env, capture_output=True).returncode:
            assert head.poll() is None and time.monotonic() < deadline, "the Ray head did not start"
            time.sleep(0.5)
        nodes.append(subprocess.Popen([ray_cli, "start", "--address", address, *common], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))  # fmt: skip
        while cluster_cpus(ray_cli, address, env) < 2:  # each node brings one CPU
            assert nodes[1].poll() is None and time.monotonic() < deadline, "the second Ray node did not join"
            time.sleep(0.5)
        run = train(tiny_config(*PARITY, f"run.dir={tmp_path / 'cluster'}", "trainer.steps=1", "rollout.workers=2",
                                f"ray.address={address}", "ray.worker_cpus=1"))  # fmt: skip
        assert "2 rollout workers on 2 Ray node(s)" in capsys.readouterr().out
        rec = records(run)[0]
        assert rec["step"] == 1 and rec["failed"] == 0 and rec["rollout/failures"] == 0
    finally:
        for proc in reversed(nodes):
            proc.terminate()
        for proc in reversed(nodes):
            try:
                proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()


def test_ray_that_cannot_start_stops_the_run_with_exit_code_3_and_says_why(tiny_overrides, tmp_path, monkeypatch, capsys):
    """RAY_TMPDIR under a regular file: ray.init fails with its own error, which the run reports in one line."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("RAY_TMPDIR", str(blocker / "ray"))
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    code = main(["train", *tiny_overrides, *PARITY, f"run.dir={tmp_path / 'run'}", "rollout.workers=1"])
    err = capsys.readouterr().err
    assert code == 3  # ExitCode.ENVIRONMENT: the machine's to fix, not a masrl bug
    assert "masrl: Ray could not start on this machine (NotADirectoryError" in err
    assert "Traceback" not in err


def test_a_ray_address_nobody_answers_at_fails_in_seconds_with_exit_code_3(tiny_overrides, tmp_path, ray_dir, capsys):
    """Without the knock on the GCS port, ray.init retries such an address for many minutes, silently."""
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = main(["train", *tiny_overrides, *PARITY, f"run.dir={tmp_path / 'run'}", "rollout.workers=1",
                 f"ray.address=127.0.0.1:{port}"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 3
    assert f"masrl: Ray could not attach to ray.address=127.0.0.1:{port} (ConnectionRefusedError" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("address, expected", [
    ("10.0.0.5:6379", ("10.0.0.5", 6379)), ("head.cluster:6380", ("head.cluster", 6380)),
    ("[::1]:6379", ("::1", 6379)), ("auto", None), ("ray://head:10001", None), (":6379", None), ("head:", None),
])  # fmt: skip
def test_which_ray_addresses_are_knocked_at(address, expected):
    assert host_port(address) == expected


@pytest.mark.slow
def test_the_only_worker_killed_mid_batch_answers_it_after_ray_restarts_it(ray_dir):
    model = _trainer_model()
    spec = WorkerSpec("tiny", ("red",), LoraSpec(rank=4, alpha=8), seed=0, dtype="float32", threads=1, logprobs=False)
    pool = RayWorkers(spec, 1, address=None, cpus=1.0, timeout_s=300.0, retries=1)
    try:
        pool.publish(2, {"red": model.state_dict("red")})
        [pid] = pool.pids()
        params = SamplingParams(max_new_tokens=512, temperature=1.0)

        async def kill_mid_batch():
            batch = asyncio.ensure_future(pool.generate([[5, 6, 7, i] for i in range(32)], params, "red"))
            while not pool.busy[0]:
                await asyncio.sleep(0.001)
            os.kill(pid, signal.SIGKILL)
            return await asyncio.wait_for(batch, 300)

        outs = asyncio.run(kill_mid_batch())
        assert pool.failures == 1 and len(outs) == 32 and all(o.version == 2 for o in outs)
        assert pool.pids()[0] != pid
    finally:
        pool.close()


@pytest.mark.skipif(not bf16_supported(), reason="this CPU lacks AVX-512 BF16")
def test_a_worker_samples_in_the_precision_the_trainer_names():
    """rollout.precision reaches the workers: a bf16 worker's generations carry their sampling log-probs
    (the behaviour policy the update weighs by) though the spec asks for none (synchronous training)."""
    spec = WorkerSpec("tiny", ("red",), LoraSpec(rank=4, alpha=8), seed=0, dtype="float32", threads=1,
                      logprobs=False, engine="lean", precision="bf16")  # fmt: skip
    threads, rng = torch.get_num_threads(), torch.get_rng_state()
    try:
        worker = RolloutWorker(spec, 0, None)  # the actor's class, in this process: no Ray needed
        gens = worker.generate([[5, 6, 7]] * 4, SamplingParams(max_new_tokens=6, temperature=1.0), "red", -1, [])
    finally:  # the worker sets its process's threads and seed, as it does its actor's: not the tests' after this
        torch.set_num_threads(threads)
        torch.set_rng_state(rng)
    assert worker.sample.__self__.precision == "bf16"
    assert all(g.logprobs is not None and len(g.logprobs) == len(g.response_ids) > 0 for g in gens)


# ---------------------------------------------------------------- rollouts sampled ahead (masrl.rollout.ahead)
def test_ray_workers_send_the_pinned_version_and_keep_every_version_a_later_pin_may_name():
    """RayWorkers without Ray: publish and pick the adapters a batch names (no actor is started)."""
    pool = RayWorkers.__new__(RayWorkers)  # the bookkeeping only: __init__ would start Ray
    pool.version, pool._refs, pool.versions, pool.floor = -1, [], {}, None

    def publish(v):
        pool._add(v, [f"refs{v}"])  # what publish does after ray.put

    publish(0)
    assert pool._adapters(None) == (0, ["refs0"])
    assert pool._adapters(0) == (0, ["refs0"]) and pool.floor == 0
    publish(1)
    publish(2)
    assert sorted(pool.versions) == [0, 1, 2]  # a batch pinned to 0 may still come
    assert pool._adapters(None) == (2, ["refs2"])  # an evaluation: the newest
    assert pool._adapters(1) == (1, ["refs1"])
    publish(3)
    assert sorted(pool.versions) == [1, 2, 3]
    with pytest.raises(RuntimeError, match="adapter version 0 is not published"):
        pool._adapters(0)


def test_a_pinned_rollouts_batches_are_seeded_by_run_seed_step_and_batch_number():
    pool = RayWorkers.__new__(RayWorkers)
    pool.seed, pool._numbered = 7, {}
    params = SamplingParams(temperature=1.0)
    seeds = [pool._seeded(params, Pin(3, 1)).seed for _ in range(2)] + [pool._seeded(params, Pin(4, 1)).seed]
    assert seeds == [address_seed("7:train:3/batch0"), address_seed("7:train:3/batch1"),
                     address_seed("7:train:4/batch0")]  # fmt: skip
    assert pool._seeded(params, None) is params  # synchronous: the worker's own generator
    greedy = SamplingParams(temperature=0.0)
    assert pool._seeded(greedy, Pin(4, 1)) is greedy  # nothing to draw


@pytest.mark.slow  # two runs, each starting Ray: 15-30 s each
@pytest.mark.parametrize("workers", [1, 2])
def test_two_asynchronous_runs_with_one_seed_log_the_same_samples_and_metrics(workers, tiny_config, tmp_path,
                                                                               ray_dir, one_thread):  # fmt: skip
    """k = 2, 5 steps: each step samples with exactly the version its step pins (staleness 0, 1, 2, 2, 2
    whatever the timing) and each batch with its own seed (whichever worker draws it), so a second run
    with the same seed draws every token again and logs every metric again, timings aside."""
    # Several workers answer in any order: calls listed in tree order keep the update's sums in one order.
    order = "arrival" if workers == 1 else "place"
    args = (*PARITY, f"rollout.workers={workers}", f"rollout.order={order}", "rollout.max_staleness=2",
            "trainer.steps=5", "trainer.log_episodes=1000")  # fmt: skip
    first = train(tiny_config(*args, f"run.dir={tmp_path / 'first'}"))
    second = train(tiny_config(*args, f"run.dir={tmp_path / 'second'}"))

    def untimed(record):
        return {k: v for k, v in record.items() if not any(t in k for t in TIMING)}

    recs = records(first)
    assert [r["rollout/staleness_max"] for r in recs] == [0, 1, 2, 2, 2]
    assert [r["rollout/staleness_mean"] for r in recs] == [0, 1, 2, 2, 2]
    assert any(k.endswith("/behavior_weight_std") for k in recs[-1])
    assert samples(first) == samples(second)  # every episode's responses, token for token
    assert [untimed(r) for r in records(first)] == [untimed(r) for r in records(second)]
    assert [untimed(r) for r in records(first, "eval")] == [untimed(r) for r in records(second, "eval")]
