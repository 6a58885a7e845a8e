"""GAE against hand-computed values, trajectories of call trees, and the loop's gae scoring phase."""

from __future__ import annotations

import pytest
import torch

from masrl.algos.gae import gae, token_gae, trajectories, whiten
from masrl.loading import load_config
from masrl.learners import CRITIC
from masrl.scoring import score
from masrl.types import Call, Episode, Reply, TaskItem, TrainingError


def test_gae_matches_hand_computed_values():
    rewards = torch.tensor([0.0, 0.0, 1.0])
    values = torch.tensor([0.5, 0.2, 0.8])
    # gamma 0.9, lam 0.8, V after the last token = 0:
    # delta_2 = 1 - 0.8 = 0.2                    A_2 = 0.2
    # delta_1 = 0.9 * 0.8 - 0.2 = 0.52           A_1 = 0.52 + 0.72 * 0.2 = 0.664
    # delta_0 = 0.9 * 0.2 - 0.5 = -0.32          A_0 = -0.32 + 0.72 * 0.664 = 0.15808
    adv, ret = gae(rewards, values, gamma=0.9, lam=0.8)
    assert adv.tolist() == pytest.approx([0.15808, 0.664, 0.2])
    assert ret.tolist() == pytest.approx([0.65808, 0.864, 1.0])


def test_gae_lambda_one_is_return_minus_value_and_lambda_zero_is_td_error():
    rewards = torch.tensor([1.0, 0.0, 2.0, 0.5])
    values = torch.tensor([0.3, -0.1, 0.4, 0.2])
    adv, ret = gae(rewards, values, gamma=1.0, lam=1.0)
    assert ret.tolist() == pytest.approx([3.5, 2.5, 2.5, 0.5])  # suffix sums of the rewards
    assert adv.tolist() == pytest.approx([3.2, 2.6, 2.1, 0.3])
    adv0, _ = gae(rewards, values, gamma=0.5, lam=0.0)
    # delta_t = r_t + 0.5 V_{t+1} - V_t, V_4 = 0
    assert adv0.tolist() == pytest.approx([1 - 0.05 - 0.3, 0 + 0.2 + 0.1, 2 + 0.1 - 0.4, 0.5 - 0.2])


def test_gae_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="must both be"):
        gae(torch.zeros(3), torch.zeros(4))


def test_whiten_gives_mean_zero_unit_std():
    x = whiten(torch.tensor([1.0, 2.0, 3.0, 6.0]))
    assert float(x.mean()) == pytest.approx(0.0, abs=1e-7)
    assert float(x.var(unbiased=False)) == pytest.approx(1.0, abs=1e-6)


# ---------------------------------------------------------------- call trees
def trained(id, n_tokens, reward=0.0, done=False, policy="controller"):
    parent = id.rpartition(".")[0] or None
    reply = Reply("x", 4, n_tokens, 0.0, prompt_ids=(1, 2, len(id)), response_ids=tuple(range(5, 5 + n_tokens)),
                  policy=policy)  # fmt: skip
    return Call(id, parent, "controller", "controller", id.count("."), (), reply, reward=reward, done=done)


def frozen(id, reward=0.0, done=False, error=None):
    parent = id.rpartition(".")[0] or None
    reply = None if error else Reply("expert says 4", 10, 5, 0.01)
    return Call(id, parent, "expert", "expert", id.count("."), (), reply, reward=reward, done=done, error=error)


TASK = TaskItem("t", "q", "4")


def test_trajectory_concatenates_trained_tokens_and_credits_frozen_rewards_to_the_asking_call():
    # controller (3 tokens) -> expert (reward 0.5) -> controller (2 tokens, reward 1, done)
    ep = Episode(TASK, (trained("0", 3), frozen("0.0", reward=0.5), trained("0.0.0", 2, reward=1.0, done=True)))
    [path] = trajectories([ep])
    assert [c.id for c in path.calls] == ["0", "0.0.0"]
    assert path.rewards == (0.5, 1.0)
    values = {(0, "0"): [0.1, 0.2, 0.3], (0, "0.0.0"): [0.6, 0.9]}
    out = token_gae([path], values, gamma=1.0, lam=1.0)
    # token rewards [0, 0, 0.5, 0, 1]; lam = gamma = 1: A_t = (sum of rewards from t) - V_t
    assert out[(0, "0")].returns == pytest.approx((1.5, 1.5, 1.5))
    assert out[(0, "0")].advantages == pytest.approx((1.4, 1.3, 1.2))
    assert out[(0, "0.0.0")].returns == pytest.approx((1.0, 1.0))
    assert out[(0, "0.0.0")].advantages == pytest.approx((0.4, 0.1))


def test_gae_crosses_the_expert_reply_with_the_next_calls_first_value():
    ep = Episode(TASK, (trained("0", 2), frozen("0.0"), trained("0.0.0", 1, reward=1.0, done=True)))
    out = token_gae(trajectories([ep]), {(0, "0"): [0.2, 0.4], (0, "0.0.0"): [0.7]}, gamma=0.5, lam=0.5)
    # tokens: V = [0.2, 0.4, 0.7], r = [0, 0, 1], gamma = lam = 0.5 (gamma*lam = 0.25)
    # delta_2 = 1 - 0.7 = 0.3 ; delta_1 = 0.5*0.7 - 0.4 = -0.05 ; delta_0 = 0.5*0.4 - 0.2 = 0
    # A_2 = 0.3 ; A_1 = -0.05 + 0.25*0.3 = 0.025 ; A_0 = 0 + 0.25*0.025 = 0.00625
    assert out[(0, "0")].advantages == pytest.approx((0.00625, 0.025))
    assert out[(0, "0.0.0")].advantages == pytest.approx((0.3,))


def test_a_call_on_two_paths_gets_the_mean_and_failed_paths_are_left_out():
    # root controller call, two expert answers (branching), each followed by a final controller call;
    # a third branch whose expert failed.
    ep = Episode(TASK, (
        trained("0", 1),
        frozen("0.0"), frozen("0.1"), frozen("0.2", error="timeout", done=True),
        trained("0.0.0", 1, reward=1.0, done=True), trained("0.1.0", 1, reward=0.0, done=True),
    ))  # fmt: skip
    paths = trajectories([ep])
    assert [[c.id for c in p.calls] for p in paths] == [["0", "0.0.0"], ["0", "0.1.0"]]
    values = {(0, "0"): [0.5], (0, "0.0.0"): [0.0], (0, "0.1.0"): [0.0]}
    out = token_gae(paths, values, gamma=1.0, lam=1.0)
    assert out[(0, "0")].advantages == pytest.approx((0.0,))  # mean of 1 - 0.5 and 0 - 0.5
    assert out[(0, "0")].returns == pytest.approx((0.5,))


# ---------------------------------------------------------------- the score phase
class FakeCritic:
    """Values from a table keyed by the call's prompt (tests only)."""

    def __init__(self, table):
        self.table = table
        self.asked = 0

    def values(self, prompts, responses):
        self.asked += 1
        return [list(self.table[tuple(p)][: len(r)]) for p, r in zip(prompts, responses)]


def gae_config(*extra):
    gae = ["algo.advantage=gae", "algo.gamma=1", "algo.lam=1"]
    return load_config("single-arithmetic", ["model.name=tiny", *gae, *extra])


def test_score_phase_hands_per_token_advantages_to_the_policy_and_targets_to_the_critic():
    ep = Episode(TASK, (trained("0", 3), frozen("0.0", reward=0.5), trained("0.0.0", 2, reward=1.0, done=True)))
    critic = FakeCritic({(1, 2, 1): [0.1, 0.2, 0.3], (1, 2, 5): [0.6, 0.9]})
    config = gae_config("critic.whiten_advantages=false")
    scored = score([ep], config.algo, critic, config.critic.whiten_advantages)
    assert critic.asked == 1  # one batched request for every call
    policy = scored.samples["controller"]
    assert [s.advantage for s in policy] == [pytest.approx((1.4, 1.3, 1.2)), pytest.approx((0.4, 0.1))]
    value = scored.samples[CRITIC]
    assert [s.returns for s in value] == [pytest.approx((1.5, 1.5, 1.5)), pytest.approx((1.0, 1.0))]
    assert [s.values for s in value] == [pytest.approx((0.1, 0.2, 0.3)), pytest.approx((0.6, 0.9))]
    assert scored.advantages[(0, "0")] == pytest.approx(1.3)

    config = gae_config()
    whitened = score([ep], config.algo, critic, config.critic.whiten_advantages).samples["controller"]
    flat = torch.tensor([a for s in whitened for a in s.advantage])
    raw = torch.tensor([1.4, 1.3, 1.2, 0.4, 0.1])
    assert flat.tolist() == pytest.approx(((raw - raw.mean()) / raw.std(unbiased=False)).tolist(), abs=1e-6)


def test_score_phase_without_a_critic_is_a_clear_error():
    ep = Episode(TASK, (trained("0", 1, reward=1.0, done=True),))
    with pytest.raises(TrainingError, match="value learner"):
        score([ep], gae_config().algo, None)


# ---------------------------------------------------------------- the loop with a critic
@pytest.mark.usefixtures("one_thread")
def test_ppo_run_trains_policy_and_critic_and_resumes_exactly(tmp_path, tiny_config, parity_reward, monkeypatch):
    import json

    from safetensors.torch import load_file

    from masrl.run.log import RunLogger
    from masrl.train import train

    ppo = ("algo.advantage=gae", "algo.kl_coef=0.001", "algo.epochs=2", "critic.lr=1e-2", "trainer.steps=3",
           "trainer.checkpoint_every=2", "eval.before=false", "trainer.keep_checkpoints=3")  # fmt: skip
    straight = train(tiny_config(*ppo, f"run.dir={tmp_path / 'straight'}"))

    class Crash(Exception):
        pass

    real = RunLogger.episodes

    def episodes(self, step, *args):
        real(self, step, *args)
        if step == 3:
            raise Crash()

    crashed = tmp_path / "crashed"
    with monkeypatch.context() as patch, pytest.raises(Crash):
        patch.setattr(RunLogger, "episodes", episodes)
        train(tiny_config(*ppo, f"run.dir={crashed}"))
    train(None, resume=crashed)

    def lines(run):
        rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        return [{k: v for k, v in r.items() if not k.endswith(("seconds", "_per_s", "_gb"))} for r in rows]

    a, b = lines(straight), lines(crashed)
    assert a == b
    train_rows = [r for r in a if r["kind"] == "train"]
    assert all(r["critic/value_loss"] > 0 and r["critic/grad_norm"] > 0 for r in train_rows)
    assert all(r["solver/grad_norm"] > 0 and "solver/kl" in r for r in train_rows)
    assert "value_explained_var" in train_rows[0]
    ckpt = straight / "checkpoints" / "step_000003"
    assert (ckpt / "value_head" / "critic.safetensors").exists() and (ckpt / "optimizer" / "critic.pt").exists()
    first = load_file(straight / "checkpoints" / "step_000002" / "value_head" / "critic.safetensors")
    last = load_file(ckpt / "value_head" / "critic.safetensors")
    assert not torch.equal(first["weight"], last["weight"])  # the value head moved
    samples = [json.loads(x) for x in (straight / "samples.jsonl").read_text().splitlines()]
    assert all(isinstance(c["advantage"], float) for s in samples for c in s["calls"])


def test_gae_needs_lora(tmp_path):
    from masrl.config import ConfigError

    with pytest.raises(ConfigError, match="lora_rank"):
        gae_config("model.lora_rank=0")
