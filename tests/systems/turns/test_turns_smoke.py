"""Two-step runs of every shipped turn-based config on the tiny model, and per-role policy routing."""

from __future__ import annotations

import asyncio
import json

import pytest
import torch

from masrl.checkpoint import latest_checkpoint
from masrl.cli import main
from masrl.loading import load_config
from masrl.parts import build_parts
from masrl.rollout.tree import rollout
from masrl.types import Sample
from smoke import tiny_run

pytestmark = pytest.mark.usefixtures("one_thread")

CONFIGS = [
    "turns-planpath", "turns-planpath-per-role", "turns-planpath-single", "turns-sudoku", "turns-sokoban",
    "turns-math", "turns-math-per-role", "turns-math-single", "turns-math-single-tool", "turns-code",
]  # fmt: skip
FAST = (*tiny_run(batch_size=1, eval_size=2), "sampler.group_size=2")


@pytest.mark.parametrize("config", CONFIGS)
def test_shipped_turn_configs_run_two_steps(config, tmp_path):
    run = tmp_path / "run"
    assert main(["train", config, *FAST, f"run.dir={run}"]) == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if r["kind"] == "train"]
    assert len(train) == 2 and all("reward/team" in r and "reward/local" in r for r in train)
    final = [r for r in rows if r["kind"] == "eval"][-1]
    assert final["eval/items"] == 2 and "eval/turns" in final
    policies = {p.stem for p in (latest_checkpoint(run) / "policy").iterdir()}
    cfg = load_config(run / "config.yaml")
    expected = set(cfg.system.agents) if cfg.system.policies == "per_role" else {"shared"}
    assert policies == expected  # one adapter (and optimizer state) per policy


def test_per_role_calls_train_their_own_adapter_only():
    config = load_config("turns-planpath-per-role", [*FAST, "sampler.group_size=2"])
    engine = build_parts(config)
    items = engine.task.items("train", 0, 1)
    episodes = asyncio.run(rollout(engine.system, engine.agents, items, engine.rule))
    calls = [c for ep in episodes for c in ep.calls]
    assert {c.agent for c in calls} == {"tool", "planner"}
    assert all(c.reply.policy == c.agent for c in calls)  # each role samples from its own adapter
    model = engine.learners["tool"].model
    before = {p: {k: v.clone() for k, v in model.state_dict(p).items()} for p in ("tool", "planner")}
    call = next(c for c in calls if c.agent == "tool")
    sample = Sample("tool", call.reply.prompt_ids, call.reply.response_ids, 1.0)
    engine.learners["tool"].update([sample])
    after = {p: model.state_dict(p) for p in ("tool", "planner")}
    assert all(torch.equal(before["planner"][k], after["planner"][k]) for k in before["planner"])
    assert any(not torch.equal(before["tool"][k], after["tool"][k]) for k in before["tool"])
