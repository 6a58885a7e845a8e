"""The lean sampling engine (masrl.rollout.decode) against HF generate and the trainer, on the tiny model.

- top-p filtering equals HF's TopPLogitsWarper and a hand-computed nucleus;
- greedy decoding equals HF generate through peft, row for row, with shared
  prompts, unequal prompt lengths, EOS and a stop string;
- the merged weights follow the adapter: after an optimiser step the engine
  re-merges and still equals HF generate; the reference (None) is the base;
- each sampled token's log-prob equals the trainer's (response_logprobs) to 1e-5;
- samples follow the model's distribution (a one-token draw of 4,000 rows);
- the plain decoder (masrl.rollout.llama_decoder) computes HF's logits for left-padded shared prompts and
  every step after them, for Llama and for Qwen2 (q/k/v biases), with the rows grouped by prompt or
  scattered in groups of unequal size (its shared-prefix attention), and the lean loop through it samples
  what the loop through HF's forward samples;
- `rollout.engine=lean` trains end to end, and `auto` (the default) picks it on CPU;
- `rollout.precision: bf16`: a bf16 matmul is the float32 product of the bfloat16-rounded operands,
  rounded to bfloat16; sampled calls carry each token's sampling log-prob (near the trainer's, not
  equal to it), asked for or not, and greedy calls run float32, token for token the float32 engine's;
  the update weighs each bf16-sampled token by pi_trainer / pi_bf16; every place it cannot run (no
  AVX-512 BF16, full fine-tuning, the hf engine, no algo.behavior_cap) is refused with a message.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from masrl.agents.policy import LoraSpec, PolicyModel
from masrl.agents.sampling import SamplingParams
from masrl.models import load_model
from masrl.config import ConfigError
from masrl.rollout.decode import LeanEngine, MergedWeights, sample_batch, sampler, top_p_filter
from masrl.rollout.llama_decoder import Bf16Matmul, KVCache, LlamaDecoder, Matmul, bf16_supported, fused_weights, supported
from masrl.types import Sample
from masrl.update import UpdateSettings, update_policy

pytestmark = pytest.mark.usefixtures("one_thread")


def make_policy() -> PolicyModel:
    torch.manual_seed(0)
    pm = PolicyModel(load_model("tiny", seed=0), ["red", "blue"], LoraSpec(rank=4, alpha=8))
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
    want = pm.generate(rows, params, policy)
    got = LeanEngine(pm).generate(rows, params, policy)
    assert got == want
    assert len({g.response_ids for g in got}) > 1  # the rows differ: a real comparison


def test_greedy_with_eos_equals_hf_generate():
    pm = make_policy()
    rows = prompts()
    params = SamplingParams(max_new_tokens=12, temperature=0.0)
    free = pm.generate(rows, params, "red")
    # make row 0's first token the end-of-sequence token, for both engines: its group ends at once, the
    # others decode on (the lean engine drops the finished rows from its batch)
    tok = pm.tokenizer
    tok.eos_token = tok.convert_ids_to_tokens(free[0].response_ids[0])
    ended = pm.generate(rows, params, "red")
    assert ended[0].response_ids == (tok.eos_token_id,) and ended[0].finish_reason == "stop"
    assert any(len(g.response_ids) == 12 for g in ended)
    assert LeanEngine(pm).generate(rows, params, "red") == ended


def test_a_stop_string_ends_its_row_where_it_completes():
    """Sample with a seed; a character row 0 first emits mid-row, as a stop string, cuts row 0 right after it
    (each row draws one uniform per step whatever the other rows do, so the row's draws up to there are the same)."""
    pm = make_policy()
    rows, tok, lean = prompts(), pm.tokenizer, LeanEngine(pm)
    free, _ = lean.sample(rows, SamplingParams(max_new_tokens=16, seed=5), "red")
    ids = free[0].response_ids
    k, stop = next(
        (k, c) for k, c in enumerate(tok.decode([t]) for t in ids)
        if k >= 2 and c.isprintable() and c.strip() and c not in tok.decode(ids[:k])
    )  # fmt: skip
    cut, _ = lean.sample(rows, SamplingParams(max_new_tokens=16, seed=5, stop=(stop,)), "red")
    assert cut[0].response_ids == ids[: k + 1] and cut[0].finish_reason == "stop"
    assert cut[0].text == tok.decode(ids[: k + 1])


def test_merged_weights_follow_the_adapter_through_an_update():
    pm = make_policy()
    rows, lean = prompts(), LeanEngine(pm)
    params = SamplingParams(max_new_tokens=10, temperature=0.0)
    before = lean.generate(rows, params, "red")
    assert lean.merged.sync("red") is False  # nothing changed since the merge
    samples = [Sample("red", tuple(p), g.response_ids, 1.0 if i % 2 else -1.0) for i, (p, g) in enumerate(zip(rows, before))]
    update_policy(pm, "red", samples, torch.optim.SGD(pm.parameters("red"), lr=5.0), UpdateSettings(micro_batch=4))
    after = lean.generate(rows, params, "red")  # re-merges: the adapter's tensors moved
    assert after == pm.generate(rows, params, "red")
    assert after != before


def test_sampled_logprobs_equal_the_trainers():
    pm = make_policy()
    rows, lean = prompts(), LeanEngine(pm)
    params = SamplingParams(max_new_tokens=12, temperature=0.7, seed=3)
    gens, logps = lean.sample(rows, params, "red")
    assert lean.sample(rows, params, "red") == (gens, logps)  # seeded: reproducible
    trainer, mask = pm.response_logprobs(rows, [g.response_ids for g in gens], "red", temperature=0.7)
    for i, lp in enumerate(logps):
        assert len(lp) == len(gens[i].response_ids) == int(mask[i].sum())
        torch.testing.assert_close(torch.tensor(lp), trainer[i, : len(lp)].detach(), rtol=0, atol=1e-5)


@pytest.mark.parametrize("engine", ["lean", "hf"])
def test_generate_with_logprobs_returns_the_sampling_logprobs_the_trainer_computes(engine):
    """What a rollout worker records as the behaviour policy (SamplingParams.logprobs), either engine."""
    pm = make_policy()
    generate = LeanEngine(pm).generate if engine == "lean" else pm.generate
    rows = prompts()
    gens = generate(rows, SamplingParams(max_new_tokens=12, temperature=0.7, seed=3, logprobs=True), "red")
    trainer, _ = pm.response_logprobs(rows, [g.response_ids for g in gens], "red", temperature=0.7)
    for i, g in enumerate(gens):
        assert g.logprobs is not None and len(g.logprobs) == len(g.response_ids) > 0
        torch.testing.assert_close(torch.tensor(g.logprobs), trainer[i, : len(g.logprobs)].detach(), rtol=0, atol=1e-5)
    assert all(g.logprobs is None for g in generate(rows, SamplingParams(max_new_tokens=4, temperature=0.7), "red"))


def test_samples_follow_the_models_distribution():
    pm = make_policy()
    prompt = prompts()[0]
    n = 4000
    # the random tiny model is near uniform: a low temperature gives tokens frequent enough to count
    gens, _ = LeanEngine(pm).sample([prompt] * n, SamplingParams(max_new_tokens=1, temperature=0.02, seed=0), "red")
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


def test_auto_picks_the_lean_engine_on_cpu_in_float32_and_hf_generate_elsewhere(tiny_config):
    from masrl.engine import build_engine, sampling_engine

    from masrl.device import Placement

    cpu = Placement()  # float32
    cpu_bf16 = Placement(torch.device("cpu"), torch.float32, torch.bfloat16)
    cuda = Placement(torch.device("cuda", 0), torch.bfloat16, torch.bfloat16)  # a device object needs no GPU
    assert [sampling_engine("auto", p) for p in (cpu, cpu_bf16, cuda)] == ["lean", "hf", "hf"]
    assert [sampling_engine(e, cuda) for e in ("hf", "lean")] == ["hf", "lean"]  # named: as named
    engine = build_engine(tiny_config("trainer.device=cpu"))  # rollout.engine left at its default, auto
    try:
        assert engine.config.rollout.engine == "auto"
        service = engine.agents["solver"].service
        assert isinstance(service._generate.__self__, LeanEngine)  # the function its batches go to
    finally:
        engine.close()


def tiny_qwen2():
    """A random 2-layer Qwen2 (q/k/v projections with biases) on the tiny model's tokenizer."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tok = load_model("tiny").tokenizer
    cfg = Qwen2Config(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)  # fmt: skip
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(cfg).float().eval()
    with torch.no_grad():  # biases start at 0: make them act
        for name, p in model.named_parameters():
            if name.endswith("proj.bias"):
                p.copy_(torch.randn(p.shape) * 0.5)
    return model, tok


def scattered(rows: list[list[int]]) -> list[list[int]]:
    """The rows of `prompts()` out of their prompt order and one row fewer: groups of 3, 3, 3 and 2 rows
    interleaved, so the decoder's shared-prefix attention places rows in its grid by index."""
    order = [0, 3, 6, 1, 9, 4, 2, 10, 7, 5, 8]
    return [rows[i] for i in order]


@pytest.mark.parametrize("stepping", ["step", "step_static"])
@pytest.mark.parametrize("layout", ["grouped", "scattered"])
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_plain_decoder_equals_hf_forward(arch, layout, stepping):
    """`step_static` (fixed shapes for a CUDA graph: the whole generated buffer, masked after the step
    index) computes what `step` computes."""
    model, tok = (load_model("tiny").model.eval(), None) if arch == "llama" else tiny_qwen2()
    assert supported(model)
    decoder = LlamaDecoder(model, fused_weights(model))
    rows = prompts()  # 4 distinct prompts of 3 to 12 tokens, 3 rows each
    if layout == "scattered":
        rows = scattered(rows)
    distinct = list(dict.fromkeys(tuple(p) for p in rows))
    owner = torch.tensor([distinct.index(tuple(p)) for p in rows])
    p_len, steps = max(map(len, distinct)), 5
    ids = torch.zeros(len(distinct), p_len, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(distinct):
        ids[i, p_len - len(p) :], mask[i, p_len - len(p) :] = torch.tensor(p), 1
    new = torch.randint(3, 250, (len(rows), steps), generator=torch.Generator().manual_seed(4))  # [B, steps]
    with torch.no_grad():
        static = stepping == "step_static"
        cache = KVCache(decoder, len(rows), p_len + steps, decoder.embed, static=static)
        got = [decoder.prefill(ids, mask, cache, owner)]
        assert (cache.slots is None) == (layout == "grouped")
        pos = mask.sum(-1)[owner]
        for j in range(steps):
            if static:  # the step index is a tensor; the buffer holds 2 positions more than are ever written
                got.append(decoder.step_static(new[:, j], pos + j, torch.tensor([j]), cache))
            else:
                got.append(decoder.step(new[:, j], pos + j, cache))
        full_ids = torch.cat([ids[owner], new], 1)
        full_mask = torch.cat([mask[owner], torch.ones_like(new)], 1)
        want = model(input_ids=full_ids, attention_mask=full_mask, position_ids=(full_mask.cumsum(-1) - 1).clamp(min=0)).logits
    for j, logits in enumerate(got):
        torch.testing.assert_close(logits, want[:, p_len - 1 + j], rtol=0, atol=1e-5)


def test_the_plain_loop_samples_what_the_hf_loop_samples():
    pm = make_policy()
    merged = MergedWeights(pm.model)
    merged.sync("blue")
    assert merged.decoder is not None
    params = SamplingParams(max_new_tokens=10, temperature=0.8, seed=7)
    plain = sample_batch(merged.model, pm.tokenizer, prompts(), params, merged.decoder)
    hf = sample_batch(merged.model, pm.tokenizer, prompts(), params, None)
    assert plain[0] == hf[0]
    for a, b in zip(plain[1], hf[1]):
        torch.testing.assert_close(torch.tensor(a), torch.tensor(b), rtol=0, atol=1e-5)


def test_the_fixed_shape_loop_samples_what_the_plain_loop_samples():
    """`GraphForward` (run eagerly here: the CUDA graph is only its replay) keeps finished rows in the
    batch and ignores them; the rows it returns are the plain loop's, which drops them. Row 0's first
    token is made the end-of-sequence token so that rows end at different steps."""
    pm = make_policy()
    merged = MergedWeights(pm.model)
    merged.sync("blue")
    params = SamplingParams(max_new_tokens=10, temperature=0.8, seed=7)
    free, _ = sample_batch(merged.model, pm.tokenizer, prompts(), params, merged.decoder, graphs=False)
    pm.tokenizer.eos_token = pm.tokenizer.convert_ids_to_tokens(free[0].response_ids[0])
    plain = sample_batch(merged.model, pm.tokenizer, prompts(), params, merged.decoder, graphs=False)
    fixed = sample_batch(merged.model, pm.tokenizer, prompts(), params, merged.decoder, graphs=True)
    lengths = {len(g.response_ids) for g in plain[0]}
    assert 1 in lengths and 10 in lengths  # some rows ended at once, others ran to the limit
    assert fixed[0] == plain[0]
    for a, b in zip(fixed[1], plain[1]):
        torch.testing.assert_close(torch.tensor(a), torch.tensor(b), rtol=0, atol=1e-5)


def test_a_static_cache_keeps_every_row():
    model = load_model("tiny").model.eval()
    decoder = LlamaDecoder(model, fused_weights(model))
    cache = KVCache(decoder, 2, 4, decoder.embed, static=True)
    cache.start(torch.ones(1, 2, dtype=torch.long), torch.tensor([0, 0]))
    assert all(k.abs().sum() == 0 for k in cache.keys)  # masked positions must add 0, not garbage
    with pytest.raises(RuntimeError, match="keeps every row"):
        cache.keep(torch.tensor([0]))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_cuda_graphs_sample_what_the_plain_loop_samples():
    """On CUDA in float32: the decode step replayed as a CUDA graph samples the plain loop's tokens, with its
    log-probs, and the trainer's log-probs for them agree (docs/gpu.md has the bf16 gaps of bench/gpu.py)."""
    from masrl.device import placement

    torch.manual_seed(0)
    pm = PolicyModel(load_model("tiny", seed=0), ["red"], LoraSpec(rank=4, alpha=8), placement=placement("cuda", "fp32"))
    rows, params = prompts(), SamplingParams(max_new_tokens=10, temperature=0.8, seed=7)
    plain = LeanEngine(pm, graphs=False).sample(rows, params, "red")
    graphed = LeanEngine(pm, graphs=True).sample(rows, params, "red")
    assert graphed[0] == plain[0]
    trainer, _ = pm.response_logprobs(rows, [g.response_ids for g in graphed[0]], "red", temperature=0.8)
    for i, (a, b) in enumerate(zip(graphed[1], plain[1])):
        torch.testing.assert_close(torch.tensor(a), torch.tensor(b), rtol=0, atol=1e-4)
        torch.testing.assert_close(torch.tensor(a), trainer[i, : len(a)].detach().cpu(), rtol=0, atol=1e-4)


# ---------------------------------------------------------------- rollout.precision: bf16
needs_bf16 = pytest.mark.skipif(not bf16_supported(), reason="this CPU lacks AVX-512 BF16")


@needs_bf16
def test_a_bf16_matmul_is_the_product_of_the_rounded_operands():
    g = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(5, 64, generator=g), torch.randn(48, 64, generator=g), torch.randn(48, generator=g)
    out = Bf16Matmul(w, b)(x)
    rounded = lambda t: t.to(torch.bfloat16).float()  # noqa: E731
    expected = rounded(rounded(x) @ rounded(w).T + rounded(b))
    assert out.dtype == torch.float32 and out.shape == (5, 48)
    # Accumulation order may differ from the reference's by float32 rounding, which can move the final
    # bfloat16 rounding by one step: 2^-8 relative.
    torch.testing.assert_close(out, expected, rtol=2**-7, atol=1e-6)
    assert (out - Matmul(w, b)(x)).abs().max() > 1e-3  # not the float32 product


@needs_bf16
def test_bf16_sampling_carries_its_logprobs_and_greedy_calls_stay_float32():
    pm = make_policy()
    rows, bf16, f32 = prompts(), LeanEngine(pm, precision="bf16"), LeanEngine(pm)
    sampled = bf16.generate(rows, SamplingParams(max_new_tokens=12, temperature=0.7, seed=3), "red")  # not asked
    trainer, _ = pm.response_logprobs(rows, [g.response_ids for g in sampled], "red", temperature=0.7)
    gap = torch.cat([torch.tensor(g.logprobs) - trainer[i, : len(g.logprobs)] for i, g in enumerate(sampled)])
    assert all(g.logprobs is not None and len(g.logprobs) == len(g.response_ids) > 0 for g in sampled)
    assert 1e-5 < gap.abs().max() < 0.05  # near the trainer's, and not the float32 engine's 1e-5
    assert bf16.merged.decoder.precision == "bf16"

    greedy = SamplingParams(max_new_tokens=10, temperature=0.0)
    evaluated = bf16.generate(rows, greedy, "red")
    assert bf16.merged.decoder.precision == "float32"
    assert evaluated == f32.generate(rows, greedy, "red")  # token for token, and no log-probs
    assert all(g.logprobs is None for g in evaluated)
    again = bf16.generate(rows, SamplingParams(max_new_tokens=12, temperature=0.7, seed=3), "red")
    assert again == sampled  # back to bf16, the same draws


def test_bf16_sampling_is_refused_where_it_cannot_run(monkeypatch):
    pm = make_policy()
    with pytest.raises(ConfigError, match="sets the lean engine's matmuls; this base samples with hf"):
        sampler(pm, "hf", "bf16")
    full = PolicyModel(load_model("tiny", seed=0), ["red"], None)
    with pytest.raises(ConfigError, match="merged copy of LoRA weights, and this model trains all its weights"):
        LeanEngine(full, precision="bf16")
    monkeypatch.setattr("masrl.rollout.decode.bf16_supported", lambda: False)
    with pytest.raises(ConfigError, match="rollout.precision bf16: this CPU lacks AVX-512 BF16"):
        LeanEngine(pm, precision="bf16")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ([], "truncated at algo.behavior_cap: set it"),
        (["algo.behavior_cap=2", "rollout.engine=hf"], "rollout.engine 'hf' samples in the model's own precision"),
        (["algo.behavior_cap=2", "model.lora_rank=0"], "merged copy of the LoRA weights: set model.lora_rank > 0"),
    ],
)
def test_a_config_that_cannot_sample_in_bf16_is_refused(tiny_config, overrides, message):
    with pytest.raises(ConfigError, match=message):
        tiny_config("rollout.precision=bf16", *overrides)


@needs_bf16
def test_training_on_bf16_samples_weighs_each_token_by_the_trainer_over_the_sampler(tiny_config, parity_reward):
    from masrl.train import train

    run = train(tiny_config("trainer.steps=2", "eval.before=false", "rollout.precision=bf16", "algo.behavior_cap=2"))
    steps = [m for m in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if m["kind"] == "train"]
    assert len(steps) == 2
    for m in steps:
        assert m["adv_abs_mean"] > 0  # the parity reward splits groups: the update trains
        # pi_trainer / pi_bf16 per token: near 1 and not 1 (the float32 engine's weights are 1 to 1e-5)
        assert m["solver/behavior_weight_min"] < 0.9999 < 1.0001 < m["solver/behavior_weight_max"] < 2.0
        assert m["solver/behavior_weight_mean"] == pytest.approx(1.0, abs=0.01)
