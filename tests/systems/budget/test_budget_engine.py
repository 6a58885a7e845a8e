"""The budget controller on the tiny model: expert tokens get exactly zero gradient, the value head
trains on its episodes, and every shipped budget config runs two steps and evaluates per mode."""

from __future__ import annotations

import asyncio
import json

import pytest
import torch

from masrl.cli import main
from masrl.loading import load_config
from masrl.parts import build_parts
from masrl.learners import CRITIC
from masrl.rollout.tree import Parallel, rollout
from masrl.scoring import score
from masrl.types import Sample
from masrl.update import micro_batches
from smoke import tiny_run

SMALL = tiny_run()
# The untrained tiny model writes no tags; in the free protocol a prefilled call makes every round but
# the last ask an expert (two calls, then a format failure).
FREE = ("system.protocol=free", "system.labels=names", "system.shuffle_options=false")  # the shipped configs: decide
CALLING = (*FREE, "system.prefill=<call>sim-nano: check this</call>", "system.max_rounds=3")


def calling_engine(tmp_path, *extra):
    config = load_config("budget-ppo", [*SMALL, *CALLING, f"run.dir={tmp_path / 'run'}", *extra])
    engine = build_parts(config)
    tasks = engine.task.items("train", 0, 2)
    episodes = asyncio.run(rollout(engine.system, engine.agents, tasks, Parallel(2)))
    return engine, episodes


def expert_spans(row: list[int], expert_ids: list[list[int]]) -> set[int]:
    """Positions in `row` covered by any occurrence of an expert reply's token ids."""
    out: set[int] = set()
    for ids in expert_ids:
        n = len(ids)
        for i in range(len(row) - n + 1):
            if row[i : i + n] == ids:
                out.update(range(i, i + n))
    return out


def logit_gradients(engine, samples: list[Sample]) -> list[tuple[Sample, list[int], int, dict[int, float]]]:
    """One real policy update on `samples`, reading the gradient of the loss at every logit it computed.

    Returns per sample: its row of token ids, where its response starts, and for each position whose
    token some logit predicts, the gradient magnitude reaching that logit (0 = the token is not trained)."""
    captured: list[torch.Tensor] = []

    def keep_logits(module, inputs, output):
        if output.requires_grad:  # the policy pass, not the no-grad reference pass of the KL
            output.retain_grad()
            captured.append(output)

    handle = engine.model.model.get_output_embeddings().register_forward_hook(keep_logits)
    try:
        engine.learners["controller"].update(samples)
    finally:
        handle.remove()
    t = engine.config.trainer
    batches = micro_batches(samples, t.micro_batch, max_tokens=t.micro_batch_tokens)  # as update_policy cuts them
    assert len(captured) == len(batches)
    out = []
    for logits, mb in zip(captured, batches):
        ids, _, _, p_len, _ = engine.model._layout([s.prompt_ids for s in mb], [s.response_ids for s in mb])
        width, kept = ids.shape[1], logits.shape[1]
        assert kept == width - p_len  # the response positions' predictors only (logits_to_keep)
        grad = logits.grad.abs().sum(-1)  # [B, kept]
        for b, s in enumerate(mb):
            # logit k is read at position p_len-1+k and predicts the token at the next position
            predicted = {p_len + k: float(grad[b, k]) for k in range(kept)}
            out.append((s, ids[b].tolist(), p_len, predicted))
    return out


def test_expert_tokens_receive_exactly_zero_gradient(tmp_path):
    """Run the real update (KL on) on interleaved CoRL episodes and read the gradient of the loss with respect
    to every logit the update computed: a position's token is trained iff that gradient is non-zero. Every
    controller token must get one; every expert token (inside later rounds' context) exactly 0. A control
    batch whose responses wrongly include the expert's tokens shows the check sees them when they are trained."""
    # One pass per row: the logits read below are laid out as `_layout` lays them out (the shared-prompt
    # pass gives the same log-probs and gradients: tests/agents/test_shared_prompt.py).
    engine, episodes = calling_engine(tmp_path, "algo.kl_coef=0.5", "trainer.share_prompts=false")
    tok = engine.model.tokenizer
    expert_calls = [c for ep in episodes for c in ep.calls if c.role == "expert"]
    assert len(expert_calls) == 8  # 2 tasks x 2 samples x 2 calls
    # the expert's reply as it sits in the next round's prompt
    expert_ids = [tok(c.reply.text.strip(), add_special_tokens=False)["input_ids"] for c in expert_calls]
    ctrl = [c for ep in episodes for c in ep.calls if c.reply is not None and c.reply.trainable]
    assert len(ctrl) == 12 and all(c.agent == "controller" for c in ctrl)
    samples = [Sample("controller", c.reply.prompt_ids, c.reply.response_ids, 1.0 if i % 2 else -1.0)
               for i, c in enumerate(ctrl)]  # fmt: skip
    assert sum(bool(expert_spans(list(s.prompt_ids), expert_ids)) for s in samples) == 8  # rounds 2 and 3

    checked_expert = 0
    for s, row, p_len, predicted in logit_gradients(engine, samples):
        controller = set(range(p_len, p_len + len(s.response_ids)))
        experts = expert_spans(row, expert_ids)
        assert controller and not controller & experts
        assert all(predicted[pos] > 0.0 for pos in controller), "a controller token got no gradient"
        assert all(predicted.get(pos, 0.0) == 0.0 for pos in experts), "an expert token was trained"
        assert {p for p, g in predicted.items() if g != 0.0} == controller
        checked_expert += len(experts)
    assert checked_expert > 0

    # control: the same round-2 samples with the expert reply unmasked (appended to the response)
    leaky = [Sample("controller", s.prompt_ids, s.response_ids + tuple(expert_ids[0]), s.advantage) for s in samples[:2]]
    for s, row, p_len, predicted in logit_gradients(engine, leaky):
        tail = range(p_len + len(s.response_ids) - len(expert_ids[0]), p_len + len(s.response_ids))
        assert all(predicted[pos] > 0.0 for pos in tail)


def test_value_head_loss_falls_on_a_fixed_batch_of_budget_episodes(tmp_path):
    engine, episodes = calling_engine(tmp_path, "critic.lr=1e-2", "critic.value_clip=null")
    critic = engine.critic
    # a fixed reward so the returns are not all zero: +1 for the first task's samples, -1 for the second's
    ctrl = [(i, c) for i, ep in enumerate(episodes) for c in ep.calls if c.reply is not None and c.reply.trainable]
    prompts, responses = [c.reply.prompt_ids for _, c in ctrl], [c.reply.response_ids for _, c in ctrl]
    targets = [(1.0 if i == 0 else -1.0,) * len(c.reply.response_ids) for i, c in ctrl]
    losses = []
    for _ in range(10):
        old = critic.values(prompts, responses)
        batch = [Sample(CRITIC, p, r, 0.0, returns=t, values=tuple(v)) for p, r, t, v in zip(prompts, responses, targets, old)]
        losses.append(critic.update(batch)["value_loss"])
    assert losses[0] == pytest.approx(0.5)
    assert losses[-1] < 0.5 * losses[0]


def test_gae_scoring_of_budget_episodes_gives_critic_targets_for_every_controller_token(tmp_path):
    engine, episodes = calling_engine(tmp_path)
    scored = score(episodes, engine.config.algo, engine.critic, engine.config.critic.whiten_advantages)
    ctrl_tokens = sum(len(c.reply.response_ids) for ep in episodes for c in ep.calls if c.reply and c.reply.trainable)
    assert sum(len(s.returns) for s in scored.samples[CRITIC]) == ctrl_tokens
    final = [c for ep in episodes for c in ep.calls if c.done]
    assert all(c.rewards["expert_calls"] == 2.0 and c.rewards["cost"] > 0 for c in final)


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("config", ["budget-ppo", "budget-grpo"])
def test_shipped_budget_configs_run_two_steps(config, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", config, *SMALL, f"run.dir={run}"]) == 0
    out = capsys.readouterr().out
    assert "| mode | budget $ | accuracy |" in out and "| low | 0.001 |" in out and "| high | 1000 |" in out
    rows = read_jsonl(run / "metrics.jsonl")
    train = [r for r in rows if r["kind"] == "train"]
    assert len(train) == 2 and all("reward/hard" in r and "reward/soft" in r for r in train)
    assert any(k.startswith("mode/") for k in train[0])
    if config == "budget-ppo":
        assert all("critic/value_loss" in r for r in train)
    evals = [r for r in rows if r["kind"] == "eval"]
    assert "eval/mode/low/mean_cost" in evals[-1] and "eval/mode/high/call_ratio/sim-strong" in evals[-1]
    results = json.loads((run / "budget_results.json").read_text())["modes"]
    assert [r["mode"] for r in results] == ["low", "medium", "high"] and all(r["items"] == 3 for r in results)
    assert (run / "checkpoints" / "latest").exists()
    assert main(["report", str(run)]) == 0
    assert "accuracy vs mean cost per query" in (run / "report.html").read_text()
    baselines = json.loads((run / "budget_results.json").read_text())["baselines"]
    assert [b["method"] for b in baselines] == ["single:sim-nano", "single:sim-mid", "single:sim-strong", "random"]
    assert "| single:sim-strong |" in out
    # the experts' prices: one call each, a query costs nano < 0.001 < mid < 0.006 < strong
    cost = {b["method"]: b["mean_cost"] for b in baselines}
    assert cost["single:sim-nano"] < 0.001 < cost["single:sim-mid"] < 0.006 < cost["single:sim-strong"]
    over = {b["method"]: b["over_budget"] for b in baselines}
    assert over["single:sim-nano"] == {"low": 0.0, "medium": 0.0, "high": 0.0}
    assert over["single:sim-strong"] == {"low": 1.0, "medium": 1.0, "high": 0.0}


@pytest.mark.parametrize("config", ["budget-ppo", "budget-grpo"])
def test_budget_runs_with_expert_calls_log_cost_per_mode(config, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", config, *SMALL, *CALLING, f"run.dir={run}", "eval.before=false"]) == 0
    rows = read_jsonl(run / "metrics.jsonl")
    train = [r for r in rows if r["kind"] == "train"]
    assert all(r["cost"] > 0 and r["reward/expert_calls"] == 2.0 for r in train)
    modes = {k.split("/")[1] for k in train[0] if k.startswith("mode/")}
    assert modes and all(train[0][f"mode/{m}/cost"] > 0 for m in modes)
    results = json.loads((run / "budget_results.json").read_text())["modes"]
    # every item calls sim-nano twice, then fails to answer: same spend in every mode
    assert all(r["call_ratio"]["sim-nano"] == 1.0 and r["calls_per_query"]["sim-nano"] == 2.0 for r in results)
    assert all(r["mean_cost"] > 0 and r["answered_alone"] == 0.0 and r["format_errors"] == 1.0 for r in results)


def test_eval_of_a_budget_run_and_the_soft_reward(tmp_path, capsys):
    run = tmp_path / "run"
    argv = ["train", "budget-grpo", *SMALL, *CALLING, f"run.dir={run}", "system.reward=soft", "eval.before=false",
            "system.eval_modes=[low,high]"]  # fmt: skip
    assert main(argv) == 0
    capsys.readouterr()
    assert main(["eval", str(run)]) == 0
    out = capsys.readouterr().out
    assert "| low |" in out and "| high |" in out and "| medium |" not in out
    saved = json.loads((run / "eval.json").read_text())
    assert [m["mode"] for m in saved["modes"]] == ["low", "high"]
    assert [b["method"] for b in saved["baselines"]][-1] == "random" and "| random |" in out
    # per-item results of every mode and reference row, consistent with the summary rows
    per_item = {m["method"]: m["scores"] for m in saved["per_item"]}
    assert list(per_item)[:2] == ["controller: low", "controller: high"] and "random" in per_item
    for mode in saved["modes"]:
        scores = per_item[f"controller: {mode['mode']}"]
        assert sum(scores["accuracy"]) / len(scores["accuracy"]) == mode["accuracy"]
        assert sum(scores["cost"]) == pytest.approx(mode["total_cost"])
    train = [r for r in read_jsonl(run / "metrics.jsonl") if r["kind"] == "train"]
    # soft: no answer (perf 0) minus 0.5 * cost / B, so the trained reward is negative and differs from hard
    assert all(r["reward"] < 0 and r["reward/hard"] == 0.0 for r in train)


@pytest.mark.parametrize(
    "override, message",
    [
        ("system.modes={}", "at least one mode"),
        ("system.mode_probs={lavish: 1}", "unknown modes ['lavish']"),
        ("system.eval_modes=[cheap]", "unknown modes ['cheap']"),
        ("system.reward=linear", "system.reward"),
        ("system.prefill=<", "protocol 'decide' prefills"),
        (("system.protocol=free", "system.labels=numbers"), "needs system.protocol: decide"),
    ],
)
def test_budget_config_mistakes_are_clear(override, message, tmp_path, capsys):
    overrides = override if isinstance(override, tuple) else (override,)
    assert main(["train", "budget-ppo", *SMALL, f"run.dir={tmp_path / 'run'}", *overrides]) == 2
    assert message in capsys.readouterr().err


def test_unknown_price_table_entry_is_a_config_error(tmp_path, capsys):
    argv = ["train", "budget-ppo", *SMALL, f"run.dir={tmp_path / 'run'}", "system.prices={gpt-5: {input_per_1k: 1}}"]
    assert main(argv) == 2
    assert "gpt-5" in capsys.readouterr().err


def test_experts_from_the_pool_section_any_backend_priced_by_the_table(tmp_path):
    """A local HF model and a simulated agent as experts (system.experts: pool); the price table
    overrides the local one's own price, and episode costs follow the tokens it reported."""
    pool = ("system.pool.agents=[{name: local, backend: hf, model: tiny, max_new_tokens: 6, price_out: 0.5},"
            " {name: sim, backend: simulated, ability: 2.0, price_in: 0.002, price_out: 0.008}]")  # fmt: skip
    config = load_config("budget-grpo", [
        *SMALL, f"run.dir={tmp_path / 'run'}", "system.experts=pool", "system.pool.kind=agents", pool,
        *FREE, "system.prefill=<call>local</call>", "system.max_rounds=2",
        "system.prices={local: {input_per_1k: 1.0, output_per_1k: 0.0}}",
    ])  # fmt: skip
    engine = build_parts(config)
    assert list(engine.system.experts) == ["local", "sim"]
    episodes = asyncio.run(rollout(engine.system, engine.agents, engine.task.items("train", 0, 2), Parallel(2)))
    for ep in episodes:
        path = ep.path(ep.leaves()[0])
        assert [c.agent for c in path] == ["controller", "local", "controller"]
        local = path[1].reply
        assert local.tokens_in > 0 and local.cost == pytest.approx(local.tokens_out * 0.5 / 1000)  # its own price
        assert path[-1].rewards["cost"] == pytest.approx(local.tokens_in * 1.0 / 1000)  # the table's


@pytest.mark.slow  # 10-30 s of processes on 2 cores: behind the marker so the default run stays near 10 minutes
def test_budget_ppo_resume_equals_an_uninterrupted_run(tmp_path, monkeypatch):
    """3 steps straight vs. crashed after step 2's log lines (before its checkpoint), resumed to 3: the same
    metrics bit for bit and the same controller and critic weights. Soft reward: the spend differs
    between samples, so the updates are real."""
    from safetensors.torch import load_file

    from masrl.run.log import RunLogger
    from masrl.train import train

    def config(run):
        extra = ["trainer.steps=3", "system.reward=soft", "sampler.group_size=2", "eval.before=false",
                 "trainer.keep_checkpoints=3", "eval.size=1"]  # fmt: skip
        return load_config("budget-ppo", [*SMALL, *CALLING, f"run.dir={run}", *extra])

    straight = train(config(tmp_path / "straight"))
    crashed = tmp_path / "crashed"
    real = RunLogger.episodes

    def episodes(self, step, *args):
        real(self, step, *args)
        if step == 2:
            raise RuntimeError("killed after step 2")  # a crash (a signal checkpoints: tests/test_user_mistakes.py)

    with monkeypatch.context() as patch, pytest.raises(RuntimeError, match="killed after step 2"):
        patch.setattr(RunLogger, "episodes", episodes)
        train(config(crashed))
    assert (crashed / "checkpoints" / "latest").read_text().strip() == "step_000001"  # step 2 is redone
    train(None, resume=crashed)
    timing = ("seconds", "tokens_per_s", "rss_gb")
    rows = [[{k: v for k, v in r.items() if not k.endswith(timing)} for r in read_jsonl(run / "metrics.jsonl")]
            for run in (straight, crashed)]  # fmt: skip
    assert rows[0] == rows[1]
    assert any(r.get("controller/samples", 0) > 0 for r in rows[0]) and all(
        r["critic/grad_norm"] > 0 for r in rows[0] if r["kind"] == "train"
    )
    for name in ("policy/controller.safetensors", "policy/critic.safetensors", "value_head/critic.safetensors"):
        a = load_file(straight / "checkpoints" / "step_000003" / name)
        b = load_file(crashed / "checkpoints" / "step_000003" / name)
        assert all(torch.equal(a[k], b[k]) for k in a)
