"""Two steps of the shipped chain-sum config on the tiny model: it trains, checkpoints and evaluates."""

from __future__ import annotations

import json

import pytest

from masrl.checkpoint import latest_checkpoint
from masrl.cli import main
from masrl.systems.chain import SYSTEM
from smoke import tiny_run

pytestmark = pytest.mark.usefixtures("one_thread")


def test_chain_sum_trains_two_steps_on_the_tiny_model(tmp_path):
    run = tmp_path / "run"
    assert main(["train", "chain-sum", *tiny_run(batch_size=2, eval_size=3), f"run.dir={run}"]) == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if r["kind"] == "train"]
    assert [r["kind"] for r in rows] == ["eval", "train", "train", "eval"]
    for r in train:
        # 2 tasks x 4 runs; a four-term chain makes 1 to 3 calls (it stops at a reply with no number)
        assert r["trajectories"] == 8 and 8 <= r["calls"] <= 24
        assert {"reward/correct", "reward/final"} <= set(r)
    assert latest_checkpoint(run) is not None


def test_the_chain_is_registered_with_its_own_section():
    from masrl.loading import load_config

    config = load_config("chain-sum")
    assert config.system.kind == SYSTEM.kind == "chain" and isinstance(config.system, SYSTEM.config)
    assert config.system.prompt.endswith("<answer>NUMBER</answer> and nothing else.")
