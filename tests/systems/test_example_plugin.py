"""The example user system (examples/writer-critic): an installed plugin, written only against
masrl's public API, listed by `masrl systems`, trained by its own YAML; its rewards and turn logic
against hand-worked episodes."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from masrl.cli import main
from masrl.types import Reply
from smoke import tiny_run

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "writer-critic"
wc = pytest.importorskip("masrl_writer_critic", reason="scripts/setup.sh installs examples/writer-critic")

pytestmark = pytest.mark.usefixtures("one_thread")


def reply(text: str) -> Reply:
    return Reply(text, 0, 0, 0.0)


def test_the_example_imports_only_the_public_api():
    tree = ast.parse((EXAMPLE / "masrl_writer_critic" / "__init__.py").read_text())
    modules = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    modules |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert {m for m in modules if m and m.startswith("masrl")} == {"masrl.systems.api"}


def test_it_is_listed_as_installed(capsys):
    assert main(["systems"]) == 0
    out = capsys.readouterr().out
    assert "writer-critic    installed (masrl_writer_critic:SYSTEM)" in out
    assert "list-sum         installed (masrl_writer_critic:LIST_SUM)" in out


def test_a_wrong_draft_sent_back_then_a_right_one_accepted():
    task = wc.ListSumTask(seed=0)
    item = task.items("train", 0, 1)[0]
    system = wc.WriterCritic(task, max_rounds=2, format_weight=0.1)
    state = system.start(item)
    step = system.next_step(state)
    assert (step.agent, step.turn) == ("writer", 0) and step.messages[1].content == item.question
    t = system.advance(state, step, reply("<answer>0</answer>"))  # wrong, well formatted
    assert t.reward == pytest.approx(0.1) and not t.done
    step = system.next_step(t.state)
    assert (step.agent, step.turn) == ("critic", 1) and "<answer>0</answer>" in step.messages[1].content
    t = system.advance(t.state, step, reply("<verdict>revise</verdict> the sum is off"))
    assert t.reward == 1.0 and not t.done and "correct" not in t.rewards  # a right call on a wrong draft
    step = system.next_step(t.state)
    assert step.agent == "writer" and step.turn == 2 and "The critic says: the sum is off" in step.messages[1].content
    t = system.advance(t.state, step, reply(f"<answer>{item.answer}</answer>"))
    assert t.reward == pytest.approx(1.1)
    t = system.advance(t.state, system.next_step(t.state), reply("<verdict>accept</verdict>"))
    assert t.done and t.reward == 1.0 and t.rewards["correct"] == 1.0 and t.rewards["accepted"] == 1.0


def test_accepting_a_wrong_draft_earns_the_critic_nothing_and_ends_the_episode():
    assert wc.critic_reward("accept", draft_correct=False) == 0.0
    assert wc.critic_reward(None, draft_correct=True) == 0.0  # no verdict stated
    task = wc.ListSumTask(seed=0)
    system = wc.WriterCritic(task, max_rounds=3, format_weight=0.0)
    state = system.start(task.items("eval", 0, 1)[0])
    t = system.advance(state, system.next_step(state), reply("I think 7"))
    t = system.advance(t.state, system.next_step(t.state), reply("<verdict>accept</verdict>"))
    assert t.done and t.reward == 0.0 and t.rewards["correct"] == 0.0


def test_list_sum_splits_are_disjoint_and_seeded():
    task = wc.ListSumTask(seed=4, length=4)
    train, held = task.items("train", 0, 50), task.items("eval", 0, 20)
    assert not {i.question for i in train} & {i.question for i in held}
    assert task.items("train", 7, 1)[0] == train[7]
    assert all(int(i.answer) == sum(int(x) for x in i.question[8:-1].split(" + ")) for i in train)
    with pytest.raises(ValueError, match="length"):
        wc.ListSumTask(length=1)


def test_it_trains_two_steps_from_its_own_yaml(tmp_path):
    run = tmp_path / "run"
    argv = ["train", str(EXAMPLE / "config.yaml"), *tiny_run(batch_size=2, eval_size=3), f"run.dir={run}"]
    assert main(argv) == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if r["kind"] == "train"]
    assert len(train) == 2 and all("reward/writer" in r and "reward/critic" in r for r in train)
    assert [r["eval/items"] for r in rows if r["kind"] == "eval"] == [3.0, 3.0]
    assert "eval/rounds" in rows[-1] and (run / "checkpoints" / "latest").exists()
    assert main(["eval", str(run)]) == 0  # the saved config finds the plugin again
