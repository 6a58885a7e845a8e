"""A program run's answer and rewards: what `masrl serve` answers, and credit that tells roles apart.

Serving: a real `masrl serve` process of a trained tiny run, started from another directory than the
one it trained in, answers with the program's printed answer (not its last call's text); without
its program it stops at start with one line naming the path. Credit: rewards the program reports per
role or per call on its last line move the advantages of exactly the calls they name (worked by hand)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from smoke import tiny_run

from masrl.cli import main
from masrl.http import wait_healthy
from masrl.loading import load_config
from masrl.registry import build_task
from masrl.scoring import score
from masrl.systems.program.config import ProgramConfig
from masrl.systems.program.gateway import Recorded
from masrl.systems.program.runner import Outcome
from masrl.systems.program.system import ProgramSystem, Run, UnknownRewardKey, local_rewards
from masrl.types import Episode, Message, Reply

ROOT = Path(__file__).resolve().parents[3]
SOLVER_CHECKER = ROOT / "examples" / "program-solver-checker" / "config.yaml"
JUDGED = ROOT / "tests" / "support" / "programs" / "judged.py"
TRAINED = "system.trained={solver: solver, judge: judge}"

pytestmark = pytest.mark.usefixtures("one_thread")


# ---------------------------------------------------------------- serving
@pytest.fixture(scope="module")
def trained_here(tmp_path_factory):
    """A one-step run of judged.py, trained in its own directory with a relative command."""
    home = tmp_path_factory.mktemp("trained-here")
    shutil.copy(JUDGED, home / "judged.py")
    with contextlib.chdir(home):
        assert main(["train", str(SOLVER_CHECKER), *tiny_run(eval_size=1), "trainer.steps=1", "run.dir=run",
                     "system.command=python judged.py", TRAINED, "eval.before=false"]) == 0  # fmt: skip
    return home


def serve(run: Path, cwd: Path, port: int) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("MASRL_API_KEY", None)
    return subprocess.Popen([sys.executable, "-m", "masrl.cli", "serve", str(run), "--port", str(port)], cwd=cwd,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_served_program_answers_what_it_printed_from_any_directory(trained_here, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert load_config(trained_here / "run" / "config.yaml").system.cwd == str(trained_here)
    port = free_port()
    proc = serve(trained_here / "run", elsewhere, port)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc)
        request = {"model": "run", "messages": [{"role": "user", "content": "Calculate 2 + 3."}]}
        body = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=request, timeout=120).json()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    calls = body["masrl"]["calls"]  # the per-call audit stays
    assert [c["agent"] for c in calls] == ["solver", "judge"]
    content = body["choices"][0]["message"]["content"]
    assert content == f"picked: {calls[0]['text']}" and content != calls[-1]["text"]


def test_serving_without_the_program_is_one_line_naming_it(trained_here, tmp_path):
    moved = trained_here / "judged.py.away"
    (trained_here / "judged.py").rename(moved)
    try:
        proc = serve(trained_here / "run", tmp_path, free_port())
        _, err = proc.communicate(timeout=300)
    finally:
        moved.rename(trained_here / "judged.py")
    assert proc.returncode == 2
    assert err.strip().splitlines() == [f"masrl: config error: system.command: no program {trained_here / 'judged.py'}"
                                        " (relative paths are from system.cwd)"]  # fmt: skip


# ---------------------------------------------------------------- rewards per role or call
@pytest.mark.parametrize("mode, says", [
    ("misspelt", "rewards 'jduge', which is neither a model name of the run (judge, solver) nor the id of one "
                 "of its 2 calls"),
    ("nan", "rewards 'judge' with nan: rewards must be finite numbers"),
])  # fmt: skip
def test_rewards_for_an_unknown_role_or_not_a_number_stop_the_run_with_one_line(mode, says, run_dir, capsys):
    assert main(["train", str(SOLVER_CHECKER), *tiny_run(), f"run.dir={run_dir}",
                 f"system.command={sys.executable} {JUDGED} {mode}", TRAINED]) == 4  # fmt: skip
    err = capsys.readouterr().err  # the progress bar may share the terminal line before the `masrl:` one
    (line,) = [line[line.index("masrl: "):] for line in err.splitlines() if "masrl: " in line]
    assert "Traceback" not in err and "never retrieved" not in err, err  # the other runs were stopped cleanly
    assert line.startswith("masrl: system 'program' raised in expand") and says in line, line
    assert "Traceback" in (run_dir / "errors.log").read_text()


def test_rewards_by_role_reach_every_call_of_it(run_dir):
    assert main(["train", str(SOLVER_CHECKER), *tiny_run(eval_size=1), f"run.dir={run_dir}", "trainer.steps=1",
                 f"system.command={sys.executable} {JUDGED} roles", TRAINED, "eval.before=false"]) == 0  # fmt: skip
    record = json.loads((run_dir / "samples.jsonl").read_text().splitlines()[0])
    local = {c["agent"]: c["rewards"].get("local") for c in record["calls"]}
    assert local == {"solver": 0.0, "judge": 1.0}


def recorded(run: str, agent: str, k: int) -> Recorded:
    reply = Reply("x", 1, 1, 0.0, prompt_ids=(1, k), response_ids=(2,), policy=agent)
    return Recorded(f"{run}-{k}", agent, (Message("user", f"{agent} {k}"),), reply)


ROLES = ("debater_a", "debater_b", "judge")


def debate(reported_a: dict, reported_b: dict, **config) -> Episode:
    """One task, two runs of a debate (debater_a, debater_b, judge), both with the right answer:
    one final reward, the same in both runs. Each run's last line reports `reported_*` as `rewards`."""
    task = build_task(load_config("single-arithmetic").task)
    system = ProgramSystem(ProgramConfig(command=["x"], trained={r: r for r in ROLES}, **config), task)
    item = task.items("train", 0, 1)[0]
    nodes = []
    for i, (name, reported) in enumerate((("a", reported_a), ("b", reported_b))):
        calls = tuple(recorded(name, role, k) for k, role in enumerate(ROLES))
        run = Run(calls, {}, Outcome(item.answer, None, None, 0.0), None, local_rewards(reported, calls, ROLES))
        ids = [str(i), f"{i}.0", f"{i}.0.0"]
        for depth, call_id in enumerate(ids):
            nodes += system.node(call_id, ids[depth - 1] if depth else None, depth, run, item, None)
    return Episode(item, tuple(nodes))


CREDIT = {  # the engine options of docs/program.md's credit table
    "at_grpo": ["algo.credit=descendant_mean", "algo.grouping=agent_turn"],
    "mhgpo": ["algo.credit=descendant_mean", "algo.grouping=task", "algo.sample_weight=per_agent",
              "algo.aggregation=seq_mean"],
    "tree_q": ["algo.credit=tree_q", "algo.grouping=agent_turn"],
}  # fmt: skip


def advantages(episode: Episode, options: list[str], run_dir) -> dict[str, float]:
    cfg = load_config(str(SOLVER_CHECKER), [*tiny_run(), f"run.dir={run_dir}", "system.command=x",
                                            "algo.advantage=grpo_mean", "algo.skip_zero_advantage=false", *options])
    return {cid: round(a, 9) for (_, cid), a in score([episode], cfg.algo, whiten_advantages=cfg.critic.whiten_advantages).advantages.items()}


# Calls: run a = "0" (debater_a), "0.0" (debater_b), "0.0.0" (judge); run b = "1", "1.0", "1.0.0".
# Each call's return under descendant_mean: the run's final reward (1, both right) + its own local reward.
NONE = {"0": 0.0, "0.0": 0.0, "0.0.0": 0.0, "1": 0.0, "1.0": 0.0, "1.0.0": 0.0}


@pytest.mark.parametrize("credit", ["at_grpo", "mhgpo"])
def test_rewards_per_role_or_call_move_exactly_the_calls_they_name(credit, run_dir):
    options = CREDIT[credit]
    # one final reward: every role's calls get the same advantage (here 0: both runs scored 1)
    assert advantages(debate({}, {}), options, run_dir) == NONE
    # the judge of run a rewarded 1, of run b 0: judge returns 2 and 1, mean 1.5: +-0.5; the debaters' stay
    assert advantages(debate({"judge": 1.0}, {"judge": 0.0}), options, run_dir) == {
        **NONE, "0.0.0": 0.5, "1.0.0": -0.5}
    # by call id: run a's debater_a call (its completion id a-0) alone
    assert advantages(debate({"a-0": 1.0}, {}), options, run_dir) == {**NONE, "0": 0.5, "1": -0.5}
    # system.local_weight scales the local reward (AT-GRPO's mix): returns 1.5 and 1 -> +-0.25
    episode = debate({"judge": 1.0}, {"judge": 0.0}, local_weight=0.5)
    assert advantages(episode, options, run_dir) == {**NONE, "0.0.0": 0.25, "1.0.0": -0.25}
    assert [c.rewards.get("local") for c in episode.calls] == [None, None, 0.5, None, None, 0.0]


def test_under_tree_q_a_role_s_reward_flows_back_to_the_calls_before_it(run_dir):
    """Why the per-role credit is descendant_mean's: tree_q's return-to-go adds the judge's reward to the
    debaters' returns (2, 2, 2 against 1, 1, 1), so all three roles move together."""
    assert advantages(debate({"judge": 1.0}, {"judge": 0.0}), CREDIT["tree_q"], run_dir) == {
        "0": 0.5, "0.0": 0.5, "0.0.0": 0.5, "1": -0.5, "1.0": -0.5, "1.0.0": -0.5}


def test_a_reward_key_must_name_a_role_or_a_call_of_the_run():
    calls = (recorded("a", "judge", 0), recorded("a", "judge", 1))
    assert local_rewards({"judge": 1.0, "a-1": 0.5}, calls, ROLES) == {"a-0": 1.0, "a-1": 1.5}
    assert local_rewards({"debater_a": 1.0}, calls, ROLES) == {}  # a role that made no call: nothing to reward
    with pytest.raises(UnknownRewardKey, match=r"rewards 'b-0', which is neither a model name of the run "
                                               r"\(debater_a, debater_b, judge\) nor the id of one of its 2 calls"):
        local_rewards({"b-0": 1.0}, calls, ROLES)
