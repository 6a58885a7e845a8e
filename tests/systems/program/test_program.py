"""The program system: agent programs that know nothing of masrl, trained through the gateway.

Real subprocesses, the real gateway (uvicorn on 127.0.0.1) and the official `openai` client; the
tiny model answers. Faults become failed runs with their reason in the metrics; replay branching
detects programs that are not deterministic given their model replies."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
import torch

from masrl.algos.credit import trainable_calls
from masrl.cli import main
from masrl.config import ConfigError
from masrl.loading import load_config
from masrl.parts import build_parts
from masrl.rollout.rules import PerTurnGreedy
from masrl.rollout.tree import Parallel, expand, rollout
from masrl.systems.program import interpreter
from masrl.systems.program.config import ProgramConfig
from masrl.systems.program.runner import parse_last_line
from masrl.systems.program.system import ProgramSystem, checked, fault_metrics
from masrl.registry import build_task
from masrl.scoring import score
from masrl.types import TaskItem
from processes import gone
from smoke import tiny_run

ROOT = Path(__file__).resolve().parents[3]
SOLVER_CHECKER = ROOT / "examples" / "program-solver-checker"
LANGGRAPH = ROOT / "examples" / "program-langgraph"
DEBATE = ROOT / "examples" / "program-debate"
PROGRAMS = ROOT / "tests" / "support" / "programs"
PY = sys.executable

pytestmark = pytest.mark.usefixtures("one_thread")


def overrides(run_dir, command: str, *extra: str) -> list[str]:
    return [*tiny_run(eval_size=2), f"run.dir={run_dir}", f"system.command={PY} {command}", *extra]


def config(run_dir, command: str, *extra: str, example: Path = SOLVER_CHECKER):
    return load_config(str(example / "config.yaml"), overrides(run_dir, command, *extra))


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


# ---------------------------------------------------------------- the program's last line
@pytest.mark.parametrize("stdout, expected", [
    (b'log line\n{"answer": "4", "reward": 0.5}\n\n', ("4", 0.5, None)),
    (b'{"answer": 12}', ("12", None, None)),
    (b"", (None, None, "no_json")),
    (b"the answer is 4\n", (None, None, "no_json")),
    (b'{"reward": 1}', (None, None, "no_json")),
    (b'{"answer": "4", "reward": NaN}', (None, None, "no_json")),
    (b'{"answer": "4", "reward": true}', (None, None, "no_json")),
    (b'{"answer": ["4"]}', (None, None, "no_json")),
])  # fmt: skip
def test_the_last_line(stdout, expected):
    answer, reward, fault, _ = parse_last_line(stdout)
    assert (answer, reward) == expected[:2]
    assert (fault or "").split(":")[0] == (expected[2] or "")


# ---------------------------------------------------------------- both examples train
@pytest.mark.parametrize(
    "answer, expected",
    [("19", 1.0), (19, 1.0), ("20 - 1 = 19", 1.0), ("<answer>19</answer>", 1.0), ("Answer: 19", 1.0),
     ("20 - 1 = 18", 0.0), ("", 0.0), (None, 0.0),
     ("<answer>18</answer> <answer>19</answer>", 0.0),  # a hedge states no answer: listing candidates earns nothing
     ("19 or maybe 20", 0.0)],  # the last number is the answer
)
def test_a_run_s_answer_is_read_out_as_a_reply_is(answer, expected):
    task = build_task(load_config("examples/program-solver-checker/config.yaml").task)
    item = TaskItem("t", "Calculate 20 - 1.", "19")
    assert checked(task, item, None if answer is None else str(answer)) == expected


def test_the_openai_client_example_trains_two_steps(run_dir):
    assert main(["train", str(SOLVER_CHECKER / "config.yaml"),
                 *overrides(run_dir, SOLVER_CHECKER / "solver_checker.py")]) == 0  # fmt: skip
    steps = [m for m in metrics(run_dir) if m["kind"] == "train"]
    assert [m["step"] for m in steps] == [1, 2]
    for m in steps:  # 2 tasks x 4 runs, each a solver call, a checker call and maybe a second solver call
        assert m["program/runs"] == 8 and m["program/failed"] == 0 and m["failed"] == 0
        assert 16 <= m["calls"] <= 24
    record = json.loads((run_dir / "samples.jsonl").read_text().splitlines()[0])
    agents = [c["agent"] for c in record["calls"]]
    assert agents.count("solver") >= 4 and agents.count("checker") == 4
    assert (run_dir / "checkpoints").exists()


def test_the_langgraph_example_trains_two_steps(run_dir):
    pytest.importorskip("langgraph")
    frozen = 'system.frozen=[{"name": "reviewer", "backend": "hf", "model": "tiny", "max_new_tokens": 6}]'
    args = overrides(run_dir, LANGGRAPH / "graph.py", frozen, "sampler.group_size=2")
    assert main(["train", str(LANGGRAPH / "config.yaml"), *args]) == 0
    steps = [m for m in metrics(run_dir) if m["kind"] == "train"]
    assert [m["step"] for m in steps] == [1, 2]
    assert all(m["program/runs"] == 4 and m["failed"] == 0 for m in steps)
    record = json.loads((run_dir / "samples.jsonl").read_text().splitlines()[0])
    calls = record["calls"]
    assert {c["agent"] for c in calls} >= {"planner", "solver", "reviewer"}
    assert {c["policy"] for c in calls if c["agent"] == "reviewer"} == {None}  # frozen: recorded, not trained
    assert {c["policy"] for c in calls if c["agent"] != "reviewer"} == {"planner", "solver"}


def test_the_debate_example_trains_one_lora_per_role(run_dir):
    args = overrides(run_dir, DEBATE / "debate.py", "eval.before=false")
    assert main(["train", str(DEBATE / "config.yaml"), *args]) == 0
    steps = [m for m in metrics(run_dir) if m["kind"] == "train"]
    assert [(m["program/runs"], m["failed"], m["calls"]) for m in steps] == [(8, 0, 40), (8, 0, 40)]
    record = json.loads((run_dir / "samples.jsonl").read_text().splitlines()[0])
    calls = record["calls"]  # 4 runs, each debater_a, debater_b, debater_a, debater_b, judge
    assert sorted(c["agent"] for c in calls) == ["debater_a"] * 8 + ["debater_b"] * 8 + ["judge"] * 4
    assert [c["agent"] for c in calls if c["turn"] == 4] == ["judge"] * 4
    assert all(c["policy"] == c["agent"] for c in calls)  # each role its own adapter
    assert all("local" in c["rewards"] for c in calls)  # the per-role rewards of its last line reach every call
    saved = sorted((run_dir / "checkpoints").iterdir())[-1] / "policy"
    assert sorted(p.name for p in saved.iterdir()) == ["debater_a.safetensors", "debater_b.safetensors",
                                                       "judge.safetensors"]  # fmt: skip


# ---------------------------------------------------------------- token ids and log-probs
def test_the_trainer_scores_the_sampled_tokens_with_the_sampling_logprobs(run_dir, tmp_path):
    seen = tmp_path / "seen"
    seen.mkdir()
    cfg = config(run_dir, PROGRAMS / "parity.py", f"system.env={{RECORD_DIR: {seen}}}",
                 "system.trained={solver: solver}")
    engine = build_parts(cfg)
    tasks = engine.task.items("train", 0, 2)
    episodes = asyncio.run(rollout(engine.system, engine.agents, tasks, engine.rule))
    received = {r["id"]: r for r in (json.loads(p.read_text()) for p in seen.glob("*.json"))}
    calls = [c for _, c in trainable_calls(episodes)]
    assert len(calls) == len(received) == 8
    scored = score(episodes, cfg.algo)
    samples = scored.samples["solver"]
    assert len(samples) == 8  # the arrival-parity reward splits each group 2 to 2: every call has an advantage
    by_ids = {(tuple(r["prompt_token_ids"]), tuple(r["token_ids"])): r for r in received.values()}
    for s in samples:  # the ids the trainer scores are the ones the client was sent
        assert (s.prompt_ids, s.response_ids) in by_ids
    model = engine.models["solver"]
    with torch.no_grad():
        trainer, mask = model.response_logprobs([c.reply.prompt_ids for c in calls],
                                                [c.reply.response_ids for c in calls], "solver",
                                                cfg.rollout.temperature)  # fmt: skip
    for row, c in enumerate(calls):
        n = len(c.reply.response_ids)
        assert mask[row, :n].sum() == n
        sampled = torch.tensor(c.reply.logprobs, dtype=trainer.dtype)
        client = torch.tensor(received[_id_of(episodes, c, received)]["logprobs"], dtype=trainer.dtype)
        assert torch.allclose(trainer[row, :n], sampled, atol=1e-4, rtol=0)
        assert torch.allclose(client, sampled, atol=1e-6, rtol=0)


def _id_of(episodes, call, received) -> str:
    """The completion id the client saw for `call` (matched by its token ids)."""
    key = (list(call.reply.prompt_ids), list(call.reply.response_ids))
    return next(i for i, r in received.items() if (r["prompt_token_ids"], r["token_ids"]) == key)


def test_a_program_with_its_own_reward_updates_the_policy(run_dir, tmp_path):
    seen = tmp_path / "seen"
    seen.mkdir()
    args = overrides(run_dir, PROGRAMS / "parity.py", f"system.env={{RECORD_DIR: {seen}}}",
                     "system.trained={solver: solver}", "trainer.lr=1e-2", "eval.before=false")  # fmt: skip
    assert main(["train", str(SOLVER_CHECKER / "config.yaml"), *args]) == 0
    steps = [m for m in metrics(run_dir) if m["kind"] == "train"]
    # Every group splits 2 to 2 (parity.py), so every step trains on the program's reward.
    assert all(m["adv_abs_mean"] > 0 and m["solver/samples"] > 0 and m["reward/program"] == 0.5 for m in steps), steps


# ---------------------------------------------------------------- faults
def make_system(command: list[str], **kw) -> tuple[ProgramSystem, object]:
    task = build_task(load_config("single-arithmetic").task)
    cfg = ProgramConfig(command=command, trained={"solver": "shared", "checker": "shared"}, **kw)  # as tiny_engine
    return ProgramSystem(cfg, task), task


def program_and_system():
    """The solver-and-checker team twice: as the example program and as the built-in System (masrl.systems.team)."""
    from masrl.systems.team import SolverChecker

    system, task = make_system([PY, str(SOLVER_CHECKER / "solver_checker.py")])
    return system, SolverChecker(task), task


@pytest.fixture(scope="module")
def tiny_engine(tmp_path_factory):
    cfg = config(tmp_path_factory.mktemp("run") / "run", SOLVER_CHECKER / "solver_checker.py")
    return build_parts(cfg)


@pytest.mark.parametrize("mode, reason", [
    ("crash", "crash"), ("nojson", "no_json"), ("flood", "flood"), ("unknown", "unknown_model"),
    ("badreward", "no_json"),
])  # fmt: skip
def test_a_faulty_program_is_a_failed_run_with_its_reason(mode, reason, tiny_engine):
    system, task = make_system([PY, str(PROGRAMS / "faulty.py"), mode], max_output_bytes=4096)
    item = task.items("train", 0, 1)[0]
    episode = asyncio.run(expand(system, tiny_engine.agents, item, Parallel(2)))
    failed = [c for c in episode.calls if c.failed]
    assert len(failed) == 2 and all(c.error.startswith(reason + ":") for c in failed), failed
    assert episode.failed_ids() == {c.id for c in episode.calls}  # nothing of it is trained on
    m = fault_metrics([episode])
    assert m[f"program/failed_{reason}"] == 2 and m["program/failed"] == 2
    if mode == "unknown":
        assert "['checker', 'solver']" not in failed[0].error  # the reason names the model asked for
        assert "'gpt-4o'" in failed[0].error
    if mode == "crash":
        assert "boom: the program fell over" in failed[0].error


def test_a_hung_program_is_killed_at_its_timeout_with_what_it_started(tmp_path, tiny_engine):
    pid_file = tmp_path / "pids"
    system, task = make_system([PY, str(PROGRAMS / "faulty.py"), "hang"], timeout=3.0, env={"PID_FILE": str(pid_file)})
    item = task.items("train", 0, 1)[0]
    episode = asyncio.run(expand(system, tiny_engine.agents, item, Parallel(1)))
    (failed,) = episode.calls
    assert failed.error.startswith("timeout: still running after 3 s")
    program, child = map(int, pid_file.read_text().split())
    assert gone(program, child, seconds=5.0)  # the whole process group (the child is reaped by init)


def test_the_step_goes_on_when_some_runs_fail(run_dir):
    args = overrides(run_dir, f"{PROGRAMS / 'faulty.py'} halfcrash", "system.trained={solver: solver}",
                     "eval.before=false")
    assert main(["train", str(SOLVER_CHECKER / "config.yaml"), *args]) == 0
    steps = [m for m in metrics(run_dir) if m["kind"] == "train"]
    # tasks train/0..3: per step one task crashes in all 4 runs, one answers
    assert [(m["program/failed_crash"], m["failed"], m["trajectories"]) for m in steps] == [(4, 4, 8), (4, 4, 8)]


@pytest.mark.parametrize("command, missing", [("./no/such/program", "no/such/program"),
                                              ("python -u no_such_debate.py", "no_such_debate.py")])
def test_a_missing_program_is_one_line_naming_its_path(command, missing, run_dir, capsys):
    assert main(["train", str(SOLVER_CHECKER / "config.yaml"), *tiny_run(), f"run.dir={run_dir}",
                 f"system.command={command}"]) == 2  # fmt: skip
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [f"masrl: config error: system.command: no program {Path.cwd() / missing}"
                     + (" (nor './no/such/program' on PATH)" if command.startswith("./") else
                        " (relative paths are from system.cwd)")]  # fmt: skip
    assert not run_dir.exists()  # a run that never started leaves nothing behind


def test_python_as_the_program_is_the_interpreter_masrl_runs_on(run_dir, monkeypatch):
    # `.venv/bin/masrl train examples/.../config.yaml` from a shell whose PATH has no venv: the shipped
    # command `python solver_checker.py` must still start the venv's Python (it has `openai`).
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    engine = build_parts(load_config(str(SOLVER_CHECKER / "config.yaml"), [*tiny_run(), f"run.dir={run_dir}"]))
    assert engine.system.config.command == [PY, "examples/program-solver-checker/solver_checker.py"]
    assert interpreter(["python3", "-u", "x.py"]) == [PY, "-u", "x.py"]
    assert interpreter(["/opt/env/bin/python", "x.py"]) == ["/opt/env/bin/python", "x.py"]  # a path is kept


# ---------------------------------------------------------------- replay branching
def test_replay_detects_a_program_that_is_not_deterministic(tiny_engine):
    """per_turn_greedy replays the kept candidate's calls and samples the next one from K runs:
    a random prompt at call 0 breaks the replay (the gateway answers 409), at call 1 it makes the
    new candidate ask something other than its sibling; both are failed calls, counted."""
    for which, at_call in (("first", 0), ("second", 1)):
        system, task = make_system([PY, str(PROGRAMS / "noisy.py"), which])
        item = task.items("train", 0, 1)[0]
        episode = asyncio.run(expand(system, tiny_engine.agents, item, PerTurnGreedy(2)))
        bad = [c for c in episode.calls if c.failed]
        assert bad and all(c.error.startswith("nondeterministic:") for c in bad), [c.error for c in episode.calls]
        assert fault_metrics([episode])["program/failed_nondeterministic"] == len(bad)
        if at_call == 1:  # the root's two runs are fine; the replayed sibling at call 1 is dropped
            assert [c.id for c in bad] == ["0.1"]
            assert trainable_calls([episode])  # the rest of the tree still trains
        else:
            assert "replayed call 0" in bad[0].error


def test_a_deterministic_program_replays_the_system_s_tree(tiny_engine):
    """Greedy replies make both deterministic: the program's per-turn tree, grown by replay, is the
    tree the same team written as a masrl System samples (same ids, prompts, tokens, rewards)."""
    system, team, task = program_and_system()
    for item in task.items("train", 0, 2):
        ours = asyncio.run(expand(system, tiny_engine.eval_agents, item, PerTurnGreedy(2)))
        theirs = asyncio.run(expand(team, tiny_engine.eval_agents, item, PerTurnGreedy(2)))
        assert _shape(ours) == _shape(theirs)
        assert len(ours.calls) >= 4 and not any(c.failed for c in ours.calls)


def _shape(episode):
    return [(c.id, c.parent, c.agent, c.turn, c.messages, c.reply.prompt_ids, c.reply.response_ids, c.reward, c.done,
             dict(c.rewards)) for c in episode.calls]  # fmt: skip


def test_the_program_and_the_system_give_the_same_samples(tiny_engine):
    """Sampling at temperature 1 from the same seed, one run at a time: same tokens, same rewards."""
    system, team, task = program_and_system()
    items = task.items("train", 0, 3)
    out = []
    for s in (system, team):
        torch.manual_seed(7)
        out.append([asyncio.run(expand(s, tiny_engine.agents, item, Parallel(1))) for item in items])
    assert [_shape(e) for e in out[0]] == [_shape(e) for e in out[1]]
    assert len({c.reply.response_ids for e in out[0] for c in e.calls}) > 3  # really sampled


# ---------------------------------------------------------------- credit options on recorded runs
def recorded(run: str, agent: str, k: int):
    from masrl.systems.program.gateway import Recorded
    from masrl.types import Message, Reply

    reply = Reply("x", 1, 1, 0.0, prompt_ids=(1, k), response_ids=(2,), policy="shared")
    return Recorded(f"{run}-{k}", agent, (Message("user", f"{agent} {k}"),), reply)


def two_runs():
    """One task (20 - 1 = 19), two runs: A = solver, checker (accepts), answer 19 (right);
    B = solver, checker (sends back; the program rewards that call 0.5), solver, answer 7 (wrong)."""
    from masrl.systems.program.runner import Outcome
    from masrl.systems.program.system import Run
    from masrl.types import Episode

    system, task = make_system([PY, "-c", "pass"])
    item = task.items("train", 0, 1)[0]
    assert item.answer == "19"
    a = Run((recorded("a", "solver", 0), recorded("a", "checker", 1)), {}, Outcome("19", None, None, 0.0), None)
    b = Run((recorded("b", "solver", 0), recorded("b", "checker", 1), recorded("b", "solver", 2)), {"b-1": 0.5},
            Outcome("7", None, None, 0.0), None)  # fmt: skip
    calls = [*system.node("0", None, 0, a, item, None), *system.node("0.0", "0", 1, a, item, None),
             *system.node("1", None, 0, b, item, None), *system.node("1.0", "1", 1, b, item, None),
             *system.node("1.0.0", "1.0", 2, b, item, None)]  # fmt: skip
    return Episode(item, tuple(calls))


CREDIT_OPTIONS = {  # name -> the engine options it is (docs/program.md) and its hand-computed advantages (grpo_mean)
    # tree_q returns: A 1, 1; B 0.5, 0.5, 0 (the per-call 0.5 flows back); one group of 5, mean 0.6
    "run": (["algo.credit=tree_q", "algo.grouping=run"],
            {"0": 0.4, "0.0": 0.4, "1": -0.1, "1.0": -0.1, "1.0.0": -0.6}),
    # groups (solver, 0): 1 vs 0.5; (checker, 1): 1 vs 0.5; (solver, 2): alone
    "agent_turn": (["algo.credit=tree_q", "algo.grouping=agent_turn"],
                   {"0": 0.25, "0.0": 0.25, "1": -0.25, "1.0": -0.25, "1.0.0": 0.0}),
    # descendant_mean: a call's return is the mean final reward below it plus its own: A 1, 1; B 0, 0.5, 0
    "mhgpo": (["algo.credit=descendant_mean", "algo.grouping=task", "algo.sample_weight=per_agent",
               "algo.aggregation=seq_mean"],
              {"0": 0.5, "0.0": 0.25, "1": -0.5, "1.0": -0.25, "1.0.0": 0.0}),
}  # fmt: skip


@pytest.mark.parametrize("name", CREDIT_OPTIONS)
def test_credit_options_on_recorded_runs(name, run_dir):
    options, expected = CREDIT_OPTIONS[name]
    episode = two_runs()
    assert [c.reward for c in episode.calls] == [0.0, 1.0, 0.0, 0.5, 0.0]
    cfg = config(run_dir, "x.py", "algo.advantage=grpo_mean", "algo.skip_zero_advantage=false", *options)
    scored = score([episode], cfg.algo)
    assert {cid: round(a, 9) for (_, cid), a in scored.advantages.items()} == expected
    weights = [s.weight for s in scored.samples["shared"]]
    # MHGPO eq. 6: 5 samples, 3 solver and 2 checker ones: w = 5 / (2 agents * 3) and 5 / (2 * 2)
    assert weights == ([5 / 6, 5 / 4, 5 / 6, 5 / 4, 5 / 6] if name == "mhgpo" else [1.0] * 5)


def test_the_documented_program_runs_as_it_stands(tmp_path, tiny_engine):
    text = (ROOT / "docs" / "program.md").read_text()
    program = tmp_path / "program.py"
    program.write_text(text.split("```python\n", 1)[1].split("```", 1)[0])
    system, task = make_system([PY, str(program)])
    item = task.items("train", 0, 1)[0]
    episode = asyncio.run(expand(system, tiny_engine.agents, item, Parallel(2)))
    assert not any(c.failed for c in episode.calls)
    assert [c.agent for c in episode.calls if c.parent is None] == ["solver", "solver"]
    assert sum(c.done for c in episode.calls) == 2 and all("final" in c.rewards for c in episode.calls if c.done)


def test_a_run_past_its_call_budget_fails(tiny_engine):
    system, task = make_system([PY, str(SOLVER_CHECKER / "solver_checker.py")], max_calls=1)
    item = task.items("train", 0, 1)[0]
    episode = asyncio.run(expand(system, tiny_engine.agents, item, Parallel(1)))
    assert [(c.agent, c.error) for c in episode.calls] == [
        ("solver", None), ("program", "too_many_calls: more than 1 model calls")]
    assert episode.failed_ids() == {"0", "0.0"}


# ---------------------------------------------------------------- evaluation: concurrent runs, batched calls
def test_evaluation_runs_programs_concurrently_and_their_calls_are_one_batch(tmp_path, monkeypatch):
    """Four runs of barrier.py, which call only once all four are running (one at a time they never
    would: each would fail "the other runs never came"), two asking `solver` and two `checker`: the
    engine sees one batch of all four, and each greedy reply is what its call gets alone."""
    from masrl.evaluate import evaluate
    from masrl.generation.service import GenerationService

    barrier = tmp_path / "barrier"
    barrier.mkdir()
    engine = build_parts(config(tmp_path / "run", PROGRAMS / "barrier.py",
                                f"system.env={{BARRIER_DIR: '{barrier}', BARRIER_N: '4'}}"))  # fmt: skip
    service = engine.eval_agents["solver"].service
    seen = []

    def recording(generate):
        def generate_and_record(prompts, params, policy):
            seen.append([list(p) for p in prompts])
            return generate(prompts, params, policy)

        return generate_and_record

    monkeypatch.setattr(service, "_generate", recording(service._generate))
    monkeypatch.setattr(GenerationService, "hold", lambda self: 60.0)  # only `coming` ends the wait here
    result = evaluate(engine, engine.task.items("eval", 0, 4))

    calls = [c for ep in result.episodes for c in ep.calls]
    assert result.failed == 0 and all(c.reply is not None for c in calls)
    assert sorted(c.agent for c in calls) == ["checker", "checker", "solver", "solver"]
    assert len(seen) == 1 and sorted(seen[0]) == sorted(list(c.reply.prompt_ids) for c in calls)
    alone = [asyncio.run(engine.eval_agents[c.agent](c.messages)).response_ids for c in calls]
    assert [c.reply.response_ids for c in calls] == alone
