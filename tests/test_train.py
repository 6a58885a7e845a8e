"""The training loop: scoring by hand, resume equivalence, kill safety, failing agents.

Runs use the tiny random model with `parity_reward` (conftest.py), so GRPO
advantages are non-zero and every step really updates the adapter.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import masrl.train
from masrl.config import ConfigError
from masrl.loading import load_config
from masrl.registry import build_task
from masrl.run.log import RunLogger
from masrl.scoring import score
from masrl.train import TrainingError, train
from masrl.types import AgentError, Episode, TaskItem

from calls import call

pytestmark = pytest.mark.usefixtures("one_thread")

# Measurements of the machine, not of the run: wall times, throughputs, memory.
MACHINE = ("seconds", "_per_s", "_gb")


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def without_timings(lines):
    return [{k: v for k, v in line.items() if not k.endswith(MACHINE)} for line in lines]


# ---------------------------------------------------------------- score()
GRPO = ("algo.advantage=grpo", "algo.grouping=task", "algo.credit=tree_q", "algo.gamma=1", "algo.skip_zero_advantage=true",
        "algo.mean_over=trained")


def task(i):
    return TaskItem(id=f"t{i}", question=f"q{i}", answer="0")


def test_score_gives_hand_computed_grpo_advantages_and_drops_zeros():
    episodes = [
        Episode(task(0), (*(call(str(i), r) for i, r in enumerate([1, 0, 0, 1])), call("4", 0.0, error="boom"))),
        Episode(task(1), tuple(call(str(i), 1.0) for i in range(4))),
    ]
    # Episode 0: returns 1 0 0 1 (the failed call is no sample); mean 1/2,
    # unbiased std sqrt((4 * 1/4) / 3) = sqrt(1/3). Episode 1: all equal -> 0.
    a = 0.5 / (math.sqrt(1 / 3) + 1e-6)
    config = load_config("single-arithmetic", ["model.name=tiny", *GRPO])

    scored = score(episodes, config.algo)
    assert list(scored.samples) == ["p"]
    got = scored.samples["p"]
    assert [s.advantage for s in got] == pytest.approx([a, -a, -a, a])
    assert [(s.prompt_ids, s.response_ids) for s in got] == [((1, n), (9, n, 7)) for n in range(4)]
    assert scored.advantages == pytest.approx(
        {(0, "0"): a, (0, "1"): -a, (0, "2"): -a, (0, "3"): a} | {(1, str(i)): 0.0 for i in range(4)}
    )
    assert scored.metrics["return_mean"] == pytest.approx(6 / 8)
    assert scored.metrics["adv_abs_mean"] == pytest.approx(4 * a / 8)

    kept = score(episodes, load_config("single-arithmetic", ["model.name=tiny", *GRPO, "algo.skip_zero_advantage=false"]).algo)
    assert [s.advantage for s in kept.samples["p"]] == pytest.approx([a, -a, -a, a, 0, 0, 0, 0])
    assert all(s.trained for s in kept.samples["p"])
    # mean_over: batch keeps the zero-advantage samples for the loss's mean only (update_policy skips their passes)
    counted = score(episodes, load_config("single-arithmetic", ["model.name=tiny", *GRPO, "algo.mean_over=batch"]).algo)
    assert [s.advantage for s in counted.samples["p"]] == pytest.approx([a, -a, -a, a, 0, 0, 0, 0])
    assert [s.trained for s in counted.samples["p"]] == [True] * 4 + [False] * 4


def test_score_groups_by_role_and_turn_and_batches_by_policy():
    # coder (turn 0) then tester (turn 1), two chains; gamma 1:
    # Q(0.0) = 2, Q(1.0) = 5, Q(0) = 1 + 2 = 3, Q(1) = 0 + 5 = 5.
    ep = Episode(
        task(0),
        (call("0", 1.0, "coder", "coder", done=False), call("1", 0.0, "coder", "coder", done=False),
         call("0.0", 2.0, "tester", "tester"), call("1.0", 5.0, "tester", "tester")),
    )  # fmt: skip
    config = load_config("single-arithmetic", ["model.name=tiny", *GRPO, "algo.advantage=grpo_mean"])
    scored = score([ep], config.algo)
    assert sorted(scored.samples) == ["coder", "tester"]
    assert [s.advantage for s in scored.samples["coder"]] == pytest.approx([-1.0, 1.0])  # 3, 5 around 4
    assert [s.advantage for s in scored.samples["tester"]] == pytest.approx([-1.5, 1.5])  # 2, 5 around 3.5


def test_score_with_nothing_trainable_is_empty():
    ep = Episode(task(0), (call("0", 1.0, error="boom"),))
    scored = score([ep], load_config("single-arithmetic", ["model.name=tiny", *GRPO]).algo)
    assert (scored.samples, scored.advantages, scored.metrics) == ({}, {}, {})


# ---------------------------------------------------------------- resume
class Crash(Exception):
    pass


def crash_after_logging(monkeypatch, at_step: int) -> None:
    """Die like a kill -9 would: after step `at_step` wrote its log lines, before any later checkpoint."""
    real = RunLogger.episodes

    def episodes(self, step, *args):
        real(self, step, *args)
        if step == at_step:
            raise Crash(f"killed after step {step}")

    monkeypatch.setattr(RunLogger, "episodes", episodes)


RESUME = ("trainer.steps=4", "trainer.checkpoint_every=2", "eval.before=false", "trainer.keep_checkpoints=3")


def test_resume_equals_an_uninterrupted_run(tmp_path, tiny_config, parity_reward, monkeypatch):
    """4 steps straight vs. killed during step 3 (checkpoint at 2), then resumed to 4.

    Both runs have steps=4 in their config, so the resumed run reads steps=4
    from its saved config.yaml. The kill comes after step 3's metrics line was
    written, so the resume must also drop that line (kill safety).
    """
    straight = train(tiny_config(*RESUME, f"run.dir={tmp_path / 'straight'}"))

    crashed = tmp_path / "crashed"
    with monkeypatch.context() as patch, pytest.raises(Crash):
        crash_after_logging(patch, at_step=3)
        train(tiny_config(*RESUME, f"run.dir={crashed}"))
    assert [line["step"] for line in read_jsonl(crashed / "metrics.jsonl")] == [1, 2, 3]
    assert (crashed / "checkpoints" / "latest").read_text().strip() == "step_000002"

    assert train(None, resume=crashed) == crashed

    a = without_timings(read_jsonl(straight / "metrics.jsonl"))
    b = without_timings(read_jsonl(crashed / "metrics.jsonl"))
    assert [(x["step"], x["kind"]) for x in b] == [(1, "train"), (2, "train"), (3, "train"), (4, "train"), (4, "eval")]
    assert b == a  # every metric of every step, bit for bit
    assert all(x["solver/grad_norm"] > 0 and x["solver/samples"] > 0 for x in a[2:4])  # real updates happened
    assert read_jsonl(crashed / "samples.jsonl") == read_jsonl(straight / "samples.jsonl")

    wa = load_file(straight / "checkpoints" / "step_000004" / "policy" / "solver.safetensors")
    wb = load_file(crashed / "checkpoints" / "step_000004" / "policy" / "solver.safetensors")
    w2 = load_file(straight / "checkpoints" / "step_000002" / "policy" / "solver.safetensors")
    assert wa.keys() == wb.keys()
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert any(not torch.equal(wa[k], w2[k]) for k in wa)  # steps 3-4 changed the adapter


def test_a_new_run_refuses_a_directory_that_holds_a_run(tiny_config):
    config = tiny_config("trainer.steps=1", "eval.before=false")
    train(config)
    with pytest.raises(ConfigError, match="already holds a run"):
        train(config)


# ---------------------------------------------------------------- failing agents
def use_flaky_solver(monkeypatch, fails) -> None:
    """Make train() build an engine whose solver raises AgentError when fails(question)."""
    real = masrl.train.build_parts

    class Flaky:
        name = "solver"

        def __init__(self, inner):
            self.inner = inner

        async def __call__(self, messages):
            if fails(messages[-1].content):
                raise AgentError("backend down")
            return await self.inner(messages)

    def build(config, model=None):
        engine = real(config, model=model)
        engine.agents = {name: Flaky(agent) for name, agent in engine.agents.items()}
        return engine

    monkeypatch.setattr(masrl.train, "build_parts", build)


def test_failed_trajectories_are_counted_and_left_out_of_the_update(tiny_config, run_dir, parity_reward, monkeypatch):
    config = tiny_config(
        "trainer.steps=1", "eval.before=false", "algo.skip_zero_advantage=false", "trainer.log_episodes=2"
    )
    first, second = build_task(config.task).items("train", 0, 2)
    use_flaky_solver(monkeypatch, fails=lambda question: question == first.question)

    train(config)

    [step] = [x for x in read_jsonl(run_dir / "metrics.jsonl") if x["kind"] == "train"]
    bad, good = read_jsonl(run_dir / "samples.jsonl")
    assert bad["task"]["question"] == first.question and good["task"]["question"] == second.question
    assert [c["error"] for c in bad["calls"]] == ["AgentError: backend down"] * 4
    assert all(c["advantage"] is None and c["response"] is None for c in bad["calls"])
    assert all(c["error"] is None for c in good["calls"])

    assert (step["trajectories"], step["failed"]) == (8, 4)
    assert step["solver/samples"] == 4  # only the four good trajectories
    assert step["solver/response_tokens"] == sum(c["tokens_out"] for c in good["calls"])
    assert step["reward"] == pytest.approx(sum(c["reward"] for c in good["calls"]) / 4)
    assert (run_dir / "checkpoints" / "latest").read_text().strip() == "step_000001"  # the step completed


def test_an_agent_that_always_fails_stops_the_run(tiny_config, monkeypatch):
    use_flaky_solver(monkeypatch, fails=lambda question: True)
    with pytest.raises(TrainingError, match=r"step 1: every episode failed; first error: AgentError: backend down"):
        train(tiny_config("trainer.steps=2", "eval.before=false"))


# ---------------------------------------------------------------- where a step's time goes
def test_each_step_logs_where_its_time_went_and_the_parts_add_up_to_the_step(tiny_config, run_dir):
    train(tiny_config("trainer.steps=2", "eval.before=false"))
    rows = [x for x in read_jsonl(run_dir / "metrics.jsonl") if x["kind"] == "train"]
    assert len(rows) == 2
    for r in rows:
        parts = [r["generation_seconds"], r["scoring_seconds"], r["update_seconds"], r["host_seconds"]]
        assert sum(parts) == pytest.approx(r["step_seconds"], rel=1e-9, abs=1e-12)
        assert all(p > 0 for p in parts)  # the tiny model generates, is scored and updated; the tree takes time
        # generation is the part of the loop's wait for the episodes spent inside the engine's calls
        assert r["generation_seconds"] < r["sample_seconds"] < r["step_seconds"]


# ---------------------------------------------------------------- time budget
def test_checkpoint_time_counts_towards_max_minutes(tiny_config, run_dir, monkeypatch):
    """A run's allowance is wall time: a checkpoint that takes a minute (on a clock of the test's own; the
    steps themselves take none) uses a minute of it. 2.5 minutes: steps 1-3 end at 60, 120, 180 s, so the
    step run at 180 s is the last; with checkpoints uncounted the run would never stop."""
    from types import SimpleNamespace

    clock = [0.0]
    monkeypatch.setattr(masrl.train, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    real = masrl.train.checkpoint

    def minute_long_checkpoint(*args, **kwargs):
        clock[0] += 60.0
        return real(*args, **kwargs)

    monkeypatch.setattr(masrl.train, "checkpoint", minute_long_checkpoint)
    train(tiny_config("trainer.steps=8", "trainer.checkpoint_every=1", "eval.before=false", "trainer.max_minutes=2.5"))
    assert [x["step"] for x in read_jsonl(run_dir / "metrics.jsonl") if x["kind"] == "train"] == [1, 2, 3, 4]


def test_max_minutes_ends_training_with_a_checkpoint_and_the_final_eval(tiny_config, run_dir):
    """A budget smaller than one step: step 1 runs, then the run stops, saves and evaluates."""
    train(tiny_config("trainer.steps=5", "trainer.checkpoint_every=10", "eval.before=false", "trainer.max_minutes=1e-9"))

    lines = read_jsonl(run_dir / "metrics.jsonl")
    assert [(x["step"], x["kind"]) for x in lines] == [(1, "train"), (1, "eval")]
    assert (run_dir / "checkpoints" / "latest").read_text().strip() == "step_000001"


def test_a_run_evaluated_before_training_ends_with_the_paired_before_after_results(tiny_config, run_dir, capsys):
    """results.json holds the trained-minus-untrained difference that the two saved evaluations give."""
    from masrl.compare import before_after
    from masrl.evaluate import read_eval_items

    train(tiny_config("trainer.steps=1", "eval.size=4"))
    saved = json.loads((run_dir / "results.json").read_text())
    evals = run_dir / "evals"
    want = before_after(read_eval_items(evals / "step-000000.json"), read_eval_items(evals / "step-000001.json"), (0, 1))
    assert saved == want.to_json() and saved["before"]["items"] == 4 and saved["steps"] == [0, 1]
    assert "| trained minus untrained, paired |" in capsys.readouterr().out
    # Without the evaluation before training there is nothing to pair: no results.json.
    (run_dir / "results.json").unlink()
    train(tiny_config("trainer.steps=1", "eval.size=4", "eval.before=false", f"run.dir={run_dir}-2"))
    assert not (Path(f"{run_dir}-2") / "results.json").exists()
