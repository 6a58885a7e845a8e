"""Slow checks on the packaged SmolLM2 model (run by .ci/run with `-m slow`)."""

from __future__ import annotations

import json

import pytest
import torch

from masrl.models import SMOLLM2_GGUF, _smollm2_gguf_dir, ensure_smollm2, load_model

pytestmark = pytest.mark.slow


def test_cached_conversion_has_the_gguf_logits():
    """The float32 safetensors cache is the GGUF model, not an approximation of it."""
    from transformers import AutoModelForCausalLM

    cached = load_model("smollm2")
    assert (ensure_smollm2() / "model.safetensors").exists()
    gguf = AutoModelForCausalLM.from_pretrained(_smollm2_gguf_dir(), gguf_file=SMOLLM2_GGUF, dtype=torch.float32)
    ids = cached.tokenizer("What is 12 + 30?", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        a = cached.model(ids).logits
        b = gguf(ids).logits
    assert torch.equal(a, b)
    assert cached.tokenizer.eos_token == "<|im_end|>"
    assert cached.tokenizer.padding_side == "left"


def test_one_training_step_and_eval_on_smollm2(tmp_path):
    from masrl.cli import main

    run = tmp_path / "run"
    small = [
        f"run.dir={run}",
        "trainer.steps=1",
        "trainer.batch_size=2",
        "sampler.group_size=2",
        "rollout.max_new_tokens=8",
        "eval.size=2",
        "eval.max_new_tokens=8",
    ]
    assert main(["train", *small]) == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train_rows = [r for r in rows if r["kind"] == "train"]
    assert [r["step"] for r in train_rows] == [1]
    assert train_rows[0]["trajectories"] == 4.0
    assert main(["eval", str(run)]) == 0
    result = json.loads((run / "eval.json").read_text())
    assert result["items"] == 2.0 and 0.0 <= result["accuracy"] <= 1.0
