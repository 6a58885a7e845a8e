"""The Puppeteer configs on the packaged SmolLM2 model (run with `-m slow`)."""

from __future__ import annotations

import json

import pytest

from masrl.cli import main

pytestmark = pytest.mark.slow

SMALL = ("trainer.steps=1", "trainer.batch_size=2", "sampler.group_size=2", "eval.size=2", "system.depth=2")


def _rows(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_llm_orchestrator_trains_one_step_on_smollm2(tmp_path):
    run = tmp_path / "run"
    assert main(["train", "puppeteer-llm", *SMALL, f"run.dir={run}"]) == 0
    train = [r for r in _rows(run) if r["kind"] == "train"]
    assert len(train) == 1 and "format_error" in train[0] and "tokens_per_task" in train[0]


def test_tool_agents_run_on_smollm2(tmp_path):
    run = tmp_path / "run"
    assert main(["train", "puppeteer-tools", *SMALL, f"run.dir={run}", "eval.before=false"]) == 0
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    agents = {c["agent"] for s in samples for c in s["calls"]}
    assert any(a.startswith(("smollm2:", "sim-medium:")) for a in agents)
