"""The lean sampling engine (masrl.generation.lean) against HF generate and the trainer, on the tiny model.

- top-p filtering equals HF's TopPLogitsWarper and a hand-computed nucleus;
- greedy decoding equals HF generate through peft, row for row, with shared
  prompts, unequal prompt lengths, EOS and a stop string;
- the merged weights follow the adapter: after an optimiser step the engine
  re-merges and still equals HF generate; the reference (None) is the base;
- each sampled token's log-prob equals the trainer's (response_logprobs) to 1e-5;
- samples follow the model's distribution (a one-token draw of 4,000 rows);
- the lean loop through the plain decoder samples what the loop through HF's forward samples, and the
  fixed-shape loop (CUDA graphs) what the plain loop samples (masrl.generation.forwards);
- `rollout.engine=lean` trains end to end;
- a rollout's calls from different episodes and agents reach the engine as one batch, and greedy
  rows come out as each would alone;
- `rollout.precision: bf16`: sampled calls carry each token's sampling log-prob (near the trainer's, not
  equal to it), asked for or not, and greedy calls run float32, token for token the float32 engine's;
  the update weighs each bf16-sampled token by pi_trainer / pi_bf16.
"""

from __future__ import annotations

import asyncio
import json
import math

import pytest
import torch
from generation_cases import make_policy, prompts
from transformers.generation.logits_process import TopPLogitsWarper

from masrl.agents.policy import LoraSpec, PolicyAgent, PolicyModel
from masrl.device import placement
from masrl.generation.hf import HFEngine
from masrl.generation.lean import LeanEngine, MergedWeights, sample_batch, top_p_filter
from masrl.generation.llama import bf16_supported
from masrl.generation.sampling import SamplingParams
from masrl.generation.service import GenerationService
from masrl.models import load_model
from masrl.rollout.tree import Parallel, Step, Transition, rollout
from masrl.train import train
from masrl.types import Message, Sample, TaskItem
from masrl.update import UpdateSettings, update_policy

pytestmark = pytest.mark.usefixtures("one_thread")
needs_bf16 = pytest.mark.skipif(not bf16_supported(), reason="this CPU lacks AVX-512 BF16")


def test_top_p_keeps_the_smallest_nucleus_like_hf():
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
    want = HFEngine(pm).generate(rows, params, policy)
    got = LeanEngine(pm).generate(rows, params, policy)
    assert got == want
    assert len({g.response_ids for g in got}) > 1  # the rows differ: a real comparison


def test_greedy_with_eos_equals_hf_generate():
    pm = make_policy()
    rows = prompts()
    params = SamplingParams(max_new_tokens=12, temperature=0.0)
    free = HFEngine(pm).generate(rows, params, "red")
    # make row 0's first token the end-of-sequence token, for both engines: its group ends at once, the
    # others decode on (the lean engine drops the finished rows from its batch)
    tok = pm.tokenizer
    tok.eos_token = tok.convert_ids_to_tokens(free[0].response_ids[0])
    ended = HFEngine(pm).generate(rows, params, "red")
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
    assert after == HFEngine(pm).generate(rows, params, "red")
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
    generate = LeanEngine(pm).generate if engine == "lean" else HFEngine(pm).generate
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
    run = train(tiny_config("trainer.steps=2", "eval.before=false", "rollout.engine=lean"))
    metrics = [line for line in (run / "metrics.jsonl").read_text().splitlines() if '"train"' in line]
    assert len(metrics) == 2


class OneCall:
    """One call per episode: even tasks ask `writer`, odd ones `reader` (both the policy `red`)."""

    def start(self, task):
        return task

    def next_step(self, task):
        agent = ("writer", "reader")[int(task.id) % 2]
        return Step(agent, agent, 0, (Message("user", task.question),))

    def advance(self, task, step, reply):
        return Transition(task, action=reply.text, reward=0.0, done=True)


def test_calls_from_different_episodes_and_agents_are_one_batch_and_greedy_rows_are_as_alone():
    """Greedy only: a sampled batch draws its rows' uniforms from one stream, in row order
    (`sample_batch`), so a sampled row depends on its place in the batch; the seeded runs
    (tests/test_seeded_metrics.py) pin those batches as they are cut."""
    pm = make_policy()
    lean = LeanEngine(pm)
    seen = []

    def generate(prompts, params, policy):
        seen.append([list(p) for p in prompts])
        return lean.generate(prompts, params, policy)

    service = GenerationService(generate)
    params = SamplingParams(max_new_tokens=8, temperature=0.0)
    agents = {name: PolicyAgent(name, "red", service, pm, params) for name in ("writer", "reader")}
    tasks = [TaskItem(id=str(i), question=f"question {i}: " + "why " * i, answer="") for i in range(6)]
    together = asyncio.run(rollout(OneCall(), agents, tasks, Parallel(1)))
    alone = [asyncio.run(rollout(OneCall(), agents, [t], Parallel(1)))[0] for t in tasks]

    calls = [ep.calls[0] for ep in together]
    assert [c.agent for c in calls] == ["writer", "reader"] * 3
    assert seen[0] == [list(c.reply.prompt_ids) for c in calls]  # one generate call: every episode, both agents
    assert [len(b) for b in seen] == [6, 1, 1, 1, 1, 1, 1]
    assert [c.reply.response_ids for c in calls] == [ep.calls[0].reply.response_ids for ep in alone]
    assert len({c.reply.response_ids for c in calls}) > 1  # the rows differ: a real comparison


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


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_cuda_graphs_sample_what_the_plain_loop_samples():
    """On CUDA in float32: the decode step replayed as a CUDA graph samples the plain loop's tokens, with its
    log-probs, and the trainer's log-probs for them agree (docs/gpu.md has the bf16 gaps of bench/gpu.py)."""

    torch.manual_seed(0)
    pm = PolicyModel(load_model("tiny", seed=0), ["red"], LoraSpec(rank=4, alpha=8), placement=placement("cuda", "float32"))
    rows, params = prompts(), SamplingParams(max_new_tokens=10, temperature=0.8, seed=7)
    plain = LeanEngine(pm, graphs=False).sample(rows, params, "red")
    graphed = LeanEngine(pm, graphs=True).sample(rows, params, "red")
    assert graphed[0] == plain[0]
    trainer, _ = pm.response_logprobs(rows, [g.response_ids for g in graphed[0]], "red", temperature=0.8)
    for i, (a, b) in enumerate(zip(graphed[1], plain[1])):
        torch.testing.assert_close(torch.tensor(a), torch.tensor(b), rtol=0, atol=1e-4)
        torch.testing.assert_close(torch.tensor(a), trainer[i, : len(a)].detach().cpu(), rtol=0, atol=1e-4)


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


@needs_bf16
def test_training_on_bf16_samples_weighs_each_token_by_the_trainer_over_the_sampler(tiny_config, parity_reward):
    # the CPU's bf16 sampler (AVX-512 BF16): on a GPU machine `auto` would place the run on CUDA, where auto is HF
    run = train(tiny_config("trainer.steps=2", "eval.before=false", "rollout.precision=bf16", "algo.behavior_cap=2",
                            "trainer.device=cpu"))  # fmt: skip
    steps = [m for m in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if m["kind"] == "train"]
    assert len(steps) == 2
    for m in steps:
        assert m["adv_abs_mean"] > 0  # the parity reward splits groups: the update trains
        # pi_trainer / pi_bf16 per token: near 1 and not 1 (the float32 engine's weights are 1 to 1e-5)
        assert m["solver/behavior_weight_min"] < 0.9999 < 1.0001 < m["solver/behavior_weight_max"] < 2.0
        assert m["solver/behavior_weight_mean"] == pytest.approx(1.0, abs=0.01)
