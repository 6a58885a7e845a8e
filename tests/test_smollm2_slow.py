"""Slow checks on the packaged SmolLM2 model (run by .ci/run with `-m slow`)."""

from __future__ import annotations

import json

import pytest
import torch

from masrl.components import SMOLLM2_GGUF, smollm2_gguf_dir
from masrl.models import ensure_smollm2, load_model

pytestmark = pytest.mark.slow


def test_cached_conversion_has_the_gguf_logits():
    """The float32 safetensors cache is the GGUF model, not an approximation of it."""
    from transformers import AutoModelForCausalLM

    cached = load_model("smollm2")
    assert (ensure_smollm2() / "model.safetensors").exists()
    gguf = AutoModelForCausalLM.from_pretrained(smollm2_gguf_dir(), gguf_file=SMOLLM2_GGUF, dtype=torch.float32)
    ids = cached.tokenizer("What is 12 + 30?", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        a = cached.model(ids).logits
        b = gguf(ids).logits
    assert torch.equal(a, b)
    assert cached.tokenizer.eos_token == "<|im_end|>"
    assert cached.tokenizer.padding_side == "left"


SMALL = ("trainer.steps=1", "trainer.batch_size=2", "sampler.group_size=2", "rollout.max_new_tokens=8",
         "eval.size=2", "eval.max_new_tokens=8")


def _train_rows(run):
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r["kind"] == "train"]


def test_default_config_trains_the_router_one_step_on_smollm2(tmp_path):
    """`masrl train` with no config: the critique-and-routing controller over the simulated pool."""
    from masrl.cli import main

    run = tmp_path / "run"
    assert main(["train", "router", f"run.dir={run}", *SMALL, "system.label_items=40"]) == 0
    train_rows = _train_rows(run)
    assert [r["step"] for r in train_rows] == [1]
    # G=2 actions at every decision, T=3: between 2 and 2^3 leaves per task.
    assert 4.0 <= train_rows[0]["trajectories"] <= 16.0
    assert abs(sum(train_rows[0][f"usage/sim-{a}"] for a in ("weak", "medium", "strong")) - 1.0) < 1e-9
    results = json.loads((run / "results.json").read_text())
    methods = [r["method"] for r in results]
    assert methods[0] == "masrl controller" and "random" in methods and "embedding-classifier" in methods
    assert all(r["items"] == 2 for r in results)
    assert main(["eval", str(run)]) == 0
    evaluated = json.loads((run / "eval.json").read_text())["results"]
    assert [r["method"] for r in evaluated] == methods


def test_single_agent_config_one_step_and_eval_on_smollm2(tmp_path):
    from masrl.cli import main

    run = tmp_path / "run"
    assert main(["train", "single-arithmetic", f"run.dir={run}", *SMALL]) == 0
    train_rows = _train_rows(run)
    assert [r["step"] for r in train_rows] == [1]
    assert train_rows[0]["trajectories"] == 4.0  # 2 tasks x 2 parallel samples
    assert main(["eval", str(run)]) == 0
    result = json.loads((run / "eval.json").read_text())
    assert result["items"] == 2.0 and 0.0 <= result["accuracy"] <= 1.0
