"""Separate base models per policy (`model.bases`): the plan, routing, isolation, checkpoints, config errors."""

from __future__ import annotations

import asyncio
import json

import pytest
import torch
from smoke import tiny_run

import masrl.parts
from masrl.agents.policy import PolicyModel
from masrl.checkpoint import latest_checkpoint
from masrl.cli import main
from masrl.config import ConfigError
from masrl.loading import load_config
from masrl.parts import base_plan, build_parts
from masrl.learners import CRITIC
from masrl.components import smollm2_converted
from masrl.models import load_model
from masrl.run.files import RunDir
from masrl.run.resume import checkpoint, restore
from masrl.rollout.tree import rollout
from masrl.scoring import score
from masrl.types import Sample

pytestmark = pytest.mark.usefixtures("one_thread")

PER_ROLE = "turns-math-per-role"  # tool + reasoner, one adapter each
FAST = (
    *tiny_run(batch_size=1, eval_size=2),
    "sampler.group_size=2",
    "algo.epochs=1",
    "algo.skip_zero_advantage=false",
    "trainer.lr=1e-2",
)
TWO_BASES = "model.bases={tool: tiny, reasoner: tiny#reasoner}"


# ------------------------------------------------------------------ the plan (pure)
def test_base_plan_groups_policies_by_model_name_in_first_mention_order():
    assert base_plan(["tool", "reasoner"], {}, "a") == {"a": ["tool", "reasoner"]}
    assert base_plan(["tool", "reasoner"], {"reasoner": "b"}, "a") == {"a": ["tool"], "b": ["reasoner"]}
    assert base_plan(["x", "y", "z"], {"x": "b", "z": "b"}, "a") == {"b": ["x", "z"], "a": ["y"]}
    # Naming the default explicitly is the same as leaving the policy out.
    assert base_plan(["x", "y"], {"x": "a"}, "a") == {"a": ["x", "y"]}
    # The value model stays on model.name, even when no policy is left there.
    assert base_plan(["x", "y"], {"x": "b", "y": "b"}, "a", extra=[CRITIC]) == {"b": ["x", "y"], "a": [CRITIC]}
    assert base_plan(["x"], {}, "a", extra=[CRITIC]) == {"a": ["x", CRITIC]}
    assert base_plan([], {}, "a") == {}  # heads only: no base model is loaded


def test_base_plan_rejects_names_that_are_not_policies():
    with pytest.raises(ConfigError, match=r"model.bases names \['planner'\].*policies are \['tool', 'reasoner'\]"):
        base_plan(["tool", "reasoner"], {"planner": "b"}, "a")
    with pytest.raises(ConfigError, match="stays on model.name"):
        base_plan(["tool"], {CRITIC: "b"}, "a", extra=[CRITIC])


# ------------------------------------------------------------------ config errors
def test_unknown_policy_in_model_bases_names_the_systems_policies():
    per_role = load_config(PER_ROLE, [*FAST, "model.bases={planner: tiny#2}"])
    with pytest.raises(ConfigError, match=r"\['planner'\].*policies are \['tool', 'reasoner'\]"):
        build_parts(per_role)
    # With system.policies=shared the roles are not policies: only "shared" is.
    shared = load_config(PER_ROLE, [*FAST, "system.policies=shared", "model.bases={tool: tiny#2}"])
    with pytest.raises(ConfigError, match=r"\['tool'\].*policies are \['shared'\]"):
        build_parts(shared)


def test_bad_model_names_in_model_bases_fail_validation(tmp_path):
    with pytest.raises(ConfigError, match=f"model.bases.reasoner: model directory {tmp_path}/nope does not exist"):
        load_config(PER_ROLE, [*FAST, f"model.bases={{reasoner: {tmp_path}/nope}}"])
    with pytest.raises(ConfigError, match=r"model.bases.tool: model name '#2' is empty before its '#' copy tag"):
        load_config(PER_ROLE, [*FAST, "model.bases={tool: '#2'}"])
    with pytest.raises(ConfigError, match="model.bases"):
        load_config(PER_ROLE, [*FAST, "model.bases=[tool]"])  # a mapping, not a list


# ------------------------------------------------------------------ two bases
@pytest.fixture
def distinct_tiny(monkeypatch):
    """Load each tiny copy with its own seed (tiny: seed 0, any tagged copy: seed 1), so the two bases
    differ and each policy's reference can be told apart from the other's."""

    def load(name, seed=0, **kwargs):
        return load_model(name, seed=seed + (name != "tiny"), **kwargs)

    monkeypatch.setattr(masrl.parts, "load_model", load)


def rollout_once(engine, tasks: int = 1):
    items = engine.task.items("train", 0, tasks)
    return asyncio.run(rollout(engine.system, engine.agents, items, engine.rule))


def snapshot(model: PolicyModel) -> dict[str, torch.Tensor]:
    """Every parameter of a base (weights and all adapters)."""
    return {n: p.detach().clone() for n, p in model.model.named_parameters()}


def test_two_bases_are_two_copies_and_an_update_changes_only_its_own(distinct_tiny):
    config = load_config(PER_ROLE, [*FAST, "algo.kl_coef=0.1", TWO_BASES])
    engine = build_parts(config)
    tool, reasoner = engine.models["tool"], engine.models["reasoner"]
    assert tool is not reasoner and tool.model is not reasoner.model and len(engine.bases) == 2
    assert tool.policies == ("tool",) and reasoner.policies == ("reasoner",)
    ptrs = [{p.data_ptr() for p in m.model.parameters()} for m in (tool, reasoner)]
    assert not ptrs[0] & ptrs[1]  # no tensor is shared: two copies of the weights
    with pytest.raises(RuntimeError, match="2 base models"):
        engine.model  # noqa: B018  (single-base accessor)

    # Each role samples from its own base, and each call's sample reaches the learner of that base's policy.
    episodes = rollout_once(engine)
    calls = [c for ep in episodes for c in ep.calls]
    assert {c.agent for c in calls} == {"tool", "reasoner"}
    assert all(c.reply.policy == c.agent for c in calls)
    samples = score(episodes, config.algo).samples
    for policy in ("tool", "reasoner"):
        sent = sorted((s.prompt_ids, s.response_ids) for s in samples[policy])
        made = sorted((c.reply.prompt_ids, c.reply.response_ids) for c in calls if c.agent == policy)
        assert sent == made and len(sent) == 4  # group 2 x max_turns 2, nobody stops early on the tiny model
        learner = engine.learners[policy]
        assert learner.model is engine.models[policy]
        assert [id(p) for p in learner.optimizer.param_groups[0]["params"]] == [
            id(p) for p in engine.models[policy].parameters(policy)
        ]

    # One AdamW step on the tool: only the tool base's LoRA B matrices move, each entry by lr (Adam's first
    # step is lr * g / (|g| + eps)); A gets no gradient while B is zero; the reasoner's base is untouched.
    before = {"tool": snapshot(tool), "reasoner": snapshot(reasoner)}
    call = next(c for c in calls if c.agent == "tool")
    engine.learners["tool"].update([Sample("tool", call.reply.prompt_ids, call.reply.response_ids, 1.0)])
    after = {"tool": snapshot(tool), "reasoner": snapshot(reasoner)}
    assert all(torch.equal(before["reasoner"][n], after["reasoner"][n]) for n in before["reasoner"])
    moved = {n for n in before["tool"] if not torch.equal(before["tool"][n], after["tool"][n])}
    assert moved and all("lora_B.tool" in n for n in moved)
    steps = torch.cat([(after["tool"][n] - before["tool"][n]).abs().flatten() for n in moved])
    assert steps.max().item() == pytest.approx(1e-2, rel=1e-4)

    # The KL reference of each policy is its own base with the adapters off: the raw tiny model of its seed.
    prompt, response = [call.reply.prompt_ids], [call.reply.response_ids]
    for policy, seed in (("tool", 0), ("reasoner", 1)):
        raw = PolicyModel(load_model("tiny", seed=seed), ["x"], None, keep_reference=False)
        ref, _ = engine.models[policy].response_logprobs(prompt, response, None)
        expected, _ = raw.response_logprobs(prompt, response, "x")
        assert torch.allclose(ref, expected, atol=1e-6)
    trained, _ = tool.response_logprobs(prompt, response, "tool")
    assert not torch.allclose(trained, tool.response_logprobs(prompt, response, None)[0])  # the adapter acts


def test_policies_on_one_model_name_share_one_base():
    config = load_config(PER_ROLE, [*FAST, "model.bases={tool: tiny#b, reasoner: tiny#b}"])
    engine = build_parts(config)
    assert engine.models["tool"] is engine.models["reasoner"] and len(engine.bases) == 1
    assert engine.model is engine.models["tool"] and engine.model.policies == ("tool", "reasoner")
    # The value model of algo.advantage=gae stays on model.name: a second base here.
    gae = build_parts(load_config(PER_ROLE, [*FAST, "model.bases={tool: tiny#b, reasoner: tiny#b}",
                                              "algo.advantage=gae", "algo.grouping=task"]))  # fmt: skip
    assert gae.models[CRITIC] is not gae.models["tool"] and gae.models[CRITIC].policies == (CRITIC,)
    assert gae.critic.model is gae.models[CRITIC] and len(gae.bases) == 2


def test_checkpoint_restores_each_adapter_into_its_own_base(distinct_tiny, tmp_path):
    config = load_config(PER_ROLE, [*FAST, TWO_BASES])
    engine = build_parts(config)
    calls = [c for ep in rollout_once(engine) for c in ep.calls]
    for policy in ("tool", "reasoner"):  # two steps each, so A and B both differ from their initial values
        call = next(c for c in calls if c.agent == policy)
        for _ in range(2):
            engine.learners[policy].update([Sample(policy, call.reply.prompt_ids, call.reply.response_ids, 1.0)])
    checkpoint(engine, RunDir(tmp_path), 1)
    ckpt = latest_checkpoint(tmp_path)
    assert {p.name for p in (ckpt / "policy").iterdir()} == {"tool.safetensors", "reasoner.safetensors"}
    assert {p.name for p in (ckpt / "optimizer").iterdir()} == {"tool.pt", "reasoner.pt"}

    fresh = build_parts(config)
    for policy in ("tool", "reasoner"):
        saved, other = engine.models[policy].state_dict(policy), fresh.models[policy].state_dict(policy)
        assert any(not torch.equal(saved[k], other[k]) for k in saved)  # a new engine draws new adapters
    restore(fresh, ckpt)
    for policy in ("tool", "reasoner"):
        saved, loaded = engine.models[policy].state_dict(policy), fresh.models[policy].state_dict(policy)
        assert saved.keys() == loaded.keys() and all(torch.equal(saved[k], loaded[k]) for k in saved)
        # Into its own base: the adapters and the base weights of each model are the saved engine's.
        old, new = snapshot(engine.models[policy]), snapshot(fresh.models[policy])
        assert old.keys() == new.keys() and all(torch.equal(old[n], new[n]) for n in old)
        steps = [s["step"] for s in fresh.learners[policy].optimizer.state_dict()["state"].values()]
        assert steps and all(float(s) == 2.0 for s in steps)


# ------------------------------------------------------------------ the shipped config
def test_shipped_separate_bases_config_runs_two_steps_evaluates_and_serves(tmp_path, capsys, monkeypatch):
    config = load_config("turns-math-separate")
    assert config.system.policies == "per_role"
    assert config.model.bases == {"tool": "smollm2", "reasoner": "smollm2#reasoner"}  # two copies of SmolLM2
    run = tmp_path / "run"
    assert main(["train", "turns-math-separate", *tiny_run(batch_size=1, eval_size=2), "sampler.group_size=2",
                 "algo.skip_zero_advantage=false", TWO_BASES, f"run.dir={run}"]) == 0  # fmt: skip
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if r["kind"] == "train"]
    assert len(train) == 2 and all("tool/loss" in r and "reasoner/loss" in r for r in train)
    assert {p.stem for p in (latest_checkpoint(run) / "policy").iterdir()} == {"tool", "reasoner"}
    capsys.readouterr()
    assert main(["eval", str(run)]) == 0  # restores each policy into its own base
    assert json.loads((run / "eval.json").read_text())["items"] == 2

    # `masrl serve RUN_DIR --policy NAME` serves one trained agent, each from its own base.
    served = []
    monkeypatch.setattr("masrl.http.create_app", lambda backend, settings, title: served.append(backend))
    monkeypatch.setattr("masrl.http.run", lambda app, settings: None)
    assert main(["serve", str(run), "--policy", "tool"]) == 0 and main(["serve", str(run), "--policy", "reasoner"]) == 0
    tool, reasoner = served
    assert (tool.name, reasoner.name) == ("tool", "reasoner") and tool.agent.model is not reasoner.agent.model
    assert (tool.agent.model.policies, reasoner.agent.model.policies) == (("tool",), ("reasoner",))
    assert main(["serve", str(run), "--policy", "nobody"]) == 2  # not a trained agent: one line, exit 2


@pytest.mark.skipif(not (smollm2_converted() / "config.json").exists(), reason="needs the converted SmolLM2 copy")
def test_gae_needs_every_base_on_the_value_models_vocabulary():
    # The value model (on model.name = tiny, a 259-token byte vocabulary) cannot read SmolLM2's token ids.
    config = load_config(PER_ROLE, [*FAST, "algo.advantage=gae", "algo.grouping=task", "model.bases={tool: smollm2}"])
    with pytest.raises(ConfigError, match=r"the bases of \['tool'\] \(model.bases\) have another vocabulary"):
        build_parts(config)
