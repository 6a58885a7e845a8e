"""The lean sampling engine (masrl.rollout.decode) against HF generate and the trainer, on the tiny model.

- top-p filtering equals HF's TopPLogitsWarper and a hand-computed nucleus;
- greedy decoding equals HF generate through peft, row for row, with shared
  prompts, unequal prompt lengths, EOS and a stop string;
- the merged weights follow the adapter: after an optimiser step the engine
  re-merges and still equals HF generate; the reference (None) is the base;
- each sampled token's log-prob equals the trainer's (response_logprobs) to 1e-5;
- samples follow the model's distribution (a one-token draw of 4,000 rows);
- `rollout.engine=lean` trains end to end.
"""

from __future__ import annotations

import math

import pytest
import torch

from masrl.agents.policy import LoraSpec, PolicyModel, SamplingParams
from masrl.models import load_model
from masrl.rollout.decode import top_p_filter
from masrl.types import Sample
from masrl.update import UpdateSettings, update_policy

pytestmark = pytest.mark.usefixtures("one_thread")


def make_policy(engine: str = "lean") -> PolicyModel:
    torch.manual_seed(0)
    pm = PolicyModel(load_model("tiny", seed=0), ["red", "blue"], LoraSpec(rank=4, alpha=8), engine=engine)
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():  # a fresh adapter has B = 0: make both act, differently
        for name, p in pm.model.named_parameters():
            if "lora_B." in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    return pm


def prompts() -> list[list[int]]:
    g = torch.Generator().manual_seed(1)
    distinct = [torch.randint(3, 250, (n,), generator=g).tolist() for n in (5, 9, 3, 12)]
    return [p for p in distinct for _ in range(3)]  # groups of 3 rows share a prompt


def hf_generate(pm: PolicyModel, rows, params, policy):
    pm.engine = "hf"
    try:
        return pm.generate(rows, params, policy)
    finally:
        pm.engine = "lean"


def test_top_p_keeps_the_smallest_nucleus_like_hf():
    from transformers.generation.logits_process import TopPLogitsWarper

    logits = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log()
    for top_p, kept in [(0.75, [0, 1]), (0.9, [0, 1, 2]), (0.4, [0]), (1.0, [0, 1, 2, 3])]:
        out = top_p_filter(logits, top_p)
        assert torch.isfinite(out[0]).nonzero().flatten().tolist() == kept
        if top_p < 1.0:
            assert torch.equal(out, TopPLogitsWarper(top_p)(None, logits.clone()))


@pytest.mark.parametrize("policy", ["red", "blue", None])
def test_greedy_equals_hf_generate_row_for_row(policy):
    pm = make_policy()
    rows = prompts()
    params = SamplingParams(max_new_tokens=12, temperature=0.0)
    want = hf_generate(pm, rows, params, policy)
    got = pm.generate(rows, params, policy)
    assert got == want
    assert len({g.response_ids for g in got}) > 1  # the rows differ: a real comparison


def test_greedy_with_eos_equals_hf_generate():
    pm = make_policy()
    rows = prompts()
    params = SamplingParams(max_new_tokens=12, temperature=0.0)
    free = hf_generate(pm, rows, params, "red")
    # make row 0's first token the end-of-sequence token, for both engines: its group ends at once, the
    # others decode on (the lean engine drops the finished rows from its batch)
    tok = pm.tokenizer
    tok.eos_token = tok.convert_ids_to_tokens(free[0].response_ids[0])
    ended = hf_generate(pm, rows, params, "red")
    assert ended[0].response_ids == (tok.eos_token_id,) and ended[0].finish_reason == "stop"
    assert any(len(g.response_ids) == 12 for g in ended)
    assert pm.generate(rows, params, "red") == ended


def test_a_stop_string_ends_its_row_where_it_completes():
    """Sample with a seed; a character row 0 first emits mid-row, as a stop string, cuts row 0 right after it
    (rows draw from one generator, so the row's draws up to there are the same)."""
    pm = make_policy()
    rows, tok = prompts(), pm.tokenizer
    free, _ = pm.sample(rows, SamplingParams(max_new_tokens=16, seed=5), "red")
    ids = free[0].response_ids
    k, stop = next(
        (k, c) for k, c in enumerate(tok.decode([t]) for t in ids)
        if k >= 2 and c.isprintable() and c.strip() and c not in tok.decode(ids[:k])
    )  # fmt: skip
    cut, _ = pm.sample(rows, SamplingParams(max_new_tokens=16, seed=5, stop=(stop,)), "red")
    assert cut[0].response_ids == ids[: k + 1] and cut[0].finish_reason == "stop"
    assert cut[0].text == tok.decode(ids[: k + 1])


def test_merged_weights_follow_the_adapter_through_an_update():
    pm = make_policy()
    rows = prompts()
    params = SamplingParams(max_new_tokens=10, temperature=0.0)
    before = pm.generate(rows, params, "red")
    assert pm._merged.sync("red") is False  # nothing changed since the merge
    samples = [Sample("red", tuple(p), g.response_ids, 1.0 if i % 2 else -1.0) for i, (p, g) in enumerate(zip(rows, before))]
    update_policy(pm, "red", samples, torch.optim.SGD(pm.parameters("red"), lr=5.0), UpdateSettings(micro_batch=4))
    after = pm.generate(rows, params, "red")  # re-merges: the adapter's tensors moved
    assert after == hf_generate(pm, rows, params, "red")
    assert after != before


def test_sampled_logprobs_equal_the_trainers():
    pm = make_policy()
    rows = prompts()
    params = SamplingParams(max_new_tokens=12, temperature=0.7, seed=3)
    gens, logps = pm.sample(rows, params, "red")
    assert pm.sample(rows, params, "red") == (gens, logps)  # seeded: reproducible
    trainer, mask = pm.response_logprobs(rows, [g.response_ids for g in gens], "red", temperature=0.7)
    for i, lp in enumerate(logps):
        assert len(lp) == len(gens[i].response_ids) == int(mask[i].sum())
        torch.testing.assert_close(torch.tensor(lp), trainer[i, : len(lp)].detach(), rtol=0, atol=1e-5)


def test_samples_follow_the_models_distribution():
    pm = make_policy()
    prompt = prompts()[0]
    n = 4000
    # the random tiny model is near uniform: a low temperature gives tokens frequent enough to count
    gens, _ = pm.sample([prompt] * n, SamplingParams(max_new_tokens=1, temperature=0.02, seed=0), "red")
    with torch.no_grad(), pm.use("red") as model:
        probs = (model(input_ids=torch.tensor([prompt])).logits[0, -1] / 0.02).softmax(-1)  # [V]
    counts = torch.bincount(torch.tensor([g.response_ids[0] for g in gens]), minlength=probs.numel()).float()
    top = probs.argsort(descending=True)[:5]
    assert probs[top[0]] > 0.05 and probs[top[0]] < 0.9  # frequent enough to test, not one token
    for t in top.tolist():
        p = float(probs[t])
        sd = math.sqrt(p * (1 - p) / n)
        assert abs(counts[t] / n - p) < 4.5 * sd, (t, float(counts[t] / n), p)


def test_training_with_the_lean_engine(tiny_config, parity_reward):
    from masrl.train import train

    run = train(tiny_config("trainer.steps=2", "eval.before=false", "rollout.engine=lean"))
    metrics = [line for line in (run / "metrics.jsonl").read_text().splitlines() if '"train"' in line]
    assert len(metrics) == 2
