"""The policy update (masrl/update.py).

Its plain pieces by hand: a pass's forward tokens, length-sorted micro-batches under a row and a
token cap, advantages as a tensor, the behaviour weights' spread (the update itself on the tiny
model: tests/agents/test_policy.py and tests/agents/test_shared_prompt.py).

A training update whose gradient is not finite (issue 50): skipped and counted, or the run stops; no
checkpoint holds a NaN.

The loss of the first update is poisoned (multiplied by NaN, in process: the fault is the update's
own arithmetic) on a run whose rewards have spread (tests/support/parity_task.py), so every step has
a real update to take. With `trainer.nonfinite: skip` the step is not taken (the adapter's LoRA B
matrices, zero at the start, stay zero), `<policy>/skipped_updates` counts it, and the next step
trains; with `stop` the run stops with one line and writes no checkpoint. Every adapter saved is
read back and checked finite.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from smoke import tiny_run

import masrl.update
from masrl.cli import main
from masrl.types import Sample
from masrl.update import UpdateSettings, advantage_tensor, forward_tokens, micro_batches, optimizer_step, spread


def poison_first_loss(monkeypatch) -> list[int]:
    """Make the first micro-batch loss of the run NaN; the list counts the losses computed."""
    calls: list[int] = []
    real = masrl.update.total_loss

    def poisoned(*args, **kwargs):
        loss, metrics = real(*args, **kwargs)
        calls.append(1)
        return (loss * float("nan") if len(calls) == 1 else loss), metrics

    monkeypatch.setattr(masrl.update, "total_loss", poisoned)
    return calls


def train(run: Path, *overrides: str) -> int:
    return main(["train", "single-arithmetic", "task.kind=parity_task:FAMILY", *tiny_run(batch_size=2, eval_size=2),
                 "sampler.group_size=4", "trainer.micro_batch=64", "trainer.micro_batch_tokens=null",
                 "eval.before=false", f"run.dir={run}", *overrides])  # fmt: skip


def adapters(run: Path) -> dict[str, dict[str, torch.Tensor]]:
    """Every saved adapter of the run, by checkpoint name, each checked finite."""
    out = {}
    for path in sorted(run.glob("checkpoints/step_*/policy/*.safetensors")):
        weights = load_file(str(path))
        assert all(bool(torch.isfinite(w).all()) for w in weights.values()), path
        out[path.parents[1].name] = weights
    return out


def test_a_non_finite_update_is_skipped_and_counted(tmp_path, monkeypatch, one_thread):
    calls = poison_first_loss(monkeypatch)
    run = tmp_path / "run"
    assert train(run) == 0
    assert len(calls) >= 2  # the poisoned update and step 2's
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if r["kind"] == "train"]
    skipped = [{k: v for k, v in r.items() if k.endswith("/skipped_updates")} for r in steps]
    assert skipped == [{"solver/skipped_updates": 1.0}, {}]
    saved = adapters(run)
    assert list(saved) == ["step_000001", "step_000002"]
    lora_b = lambda weights: [w for k, w in weights.items() if "lora_B" in k]  # noqa: E731 - zero at the start
    assert lora_b(saved["step_000001"]) and all(not w.any() for w in lora_b(saved["step_000001"]))  # not taken
    assert any(w.any() for w in lora_b(saved["step_000002"]))  # step 2 trained


def test_stop_ends_the_run_with_one_line_and_no_checkpoint(tmp_path, monkeypatch, capsys, one_thread):
    poison_first_loss(monkeypatch)
    run = tmp_path / "run"
    assert train(run, "trainer.nonfinite=stop") == 1
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("masrl: ")]
    assert lines == ["masrl: training stopped: solver's gradient is not finite (norm nan) and trainer.nonfinite is "
                     "stop; the checkpoints hold the steps before this one"]  # fmt: skip
    assert adapters(run) == {}


def test_weights_an_update_makes_non_finite_stop_whatever_the_setting():
    weight = torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.SGD([weight], lr=1e38)
    weight.grad = torch.full((3,), 1e3)  # finite, but the step overflows float32
    with pytest.raises(masrl.update.TrainingError, match=r"^w's weights are not finite after an update \(trainer.lr 1e\+38"):
        optimizer_step([weight], optimizer, max_grad_norm=1e9, nonfinite="skip", name="w")


def test_a_non_finite_gradient_leaves_weights_and_moments_as_they_were():
    weight = torch.nn.Parameter(torch.ones(2))
    optimizer = torch.optim.AdamW([weight], lr=0.1)
    weight.grad = torch.tensor([1.0, math.inf])
    norm, stepped = optimizer_step([weight], optimizer, 1.0, "skip", "w")
    assert not stepped and not math.isfinite(float(norm))
    assert weight.detach().tolist() == [1.0, 1.0] and optimizer.state_dict()["state"] == {}
    assert UpdateSettings().nonfinite == "skip"


# ---------------------------------------------------------------- the plain pieces, by hand

def row(prompt: int, response: int, advantage=1.0, first: int = 0) -> Sample:
    """A sample with a `prompt`-token prompt (ids from `first`) and a `response`-token response."""
    return Sample("p", tuple(range(first, first + prompt)), tuple(range(response)), advantage)


def length_of(sample: Sample) -> int:
    return len(sample.prompt_ids) + len(sample.response_ids)


def test_forward_tokens_of_one_pass_and_of_shared_prompts():
    mb = [row(3, 2), row(3, 5), row(4, 1, first=10)]
    assert forward_tokens(mb) == 3 * (4 + 5)  # rows x (longest prompt + longest response)
    assert forward_tokens(mb, by_prompt=True) == 2 * 4 + 3 * 5  # distinct prompts x P + rows x R
    assert forward_tokens([row(2, 0)]) == 2 + 1  # an empty response still takes one position


def test_micro_batches_sort_by_length_and_stop_at_the_size():
    samples = [row(5, 5), row(1, 1), row(3, 3), row(2, 2), row(4, 4)]
    assert [[len(s.prompt_ids) for s in mb] for mb in micro_batches(samples, 2)] == [[1, 2], [3, 4], [5]]


def test_micro_batches_stop_at_the_token_cap_and_a_long_row_gets_its_own():
    samples = [row(1, 1), row(1, 2), row(2, 2), row(10, 10)]
    # [1+1, 1+2]: 2 x 3 = 6; adding 2+2 makes 3 x 4 = 12 > 10; [2+2] then 10+10 alone (over the cap, still a chunk)
    got = micro_batches(samples, 8, max_tokens=10)
    assert [[length_of(s) for s in mb] for mb in got] == [[2, 3], [4], [20]]


def test_advantages_are_one_per_row_or_zero_padded_per_token():
    torch.testing.assert_close(advantage_tensor([row(1, 2, 0.5), row(1, 3, -1)], 3, torch.float32),
                               torch.tensor([0.5, -1.0]))  # fmt: skip
    per_token = advantage_tensor([row(1, 2, (0.1, 0.2)), row(1, 3, 2.0)], 3, torch.float32)
    torch.testing.assert_close(per_token, torch.tensor([[0.1, 0.2, 0.0], [2.0, 2.0, 2.0]]))
    with pytest.raises(ValueError, match="1 advantages for 2 response tokens"):
        advantage_tensor([row(1, 2, (0.1,))], 2, torch.float32)


def test_spread_takes_the_std_out_of_the_mean_square_and_keeps_the_extremes():
    means = {"behavior_weight_mean": 1.0, "behavior_weight_sq_mean": 1.25}
    out = spread(means, {"behavior_weight_min": 0.5, "behavior_weight_max": 1.5})
    assert out["behavior_weight_std"] == pytest.approx(math.sqrt(1.25 - 1.0))
    assert out["behavior_weight_min"] == 0.5 and out["behavior_weight_max"] == 1.5
    assert "behavior_weight_sq_mean" not in means  # taken out: it is no metric of its own
    assert spread({"loss": 1.0}, {}) == {}
