"""`masrl baseline`: a single agent trained with a finished team run's compute, end to end on the tiny model,
and its pure parts (what a run spent, the single agent's config, the token stopping rule) by hand."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

import masrl.train
from masrl.baseline import Spent, single_data, spent
from masrl.cli import main
from masrl.config import ConfigError
from masrl.loading import load_config
from masrl.run.files import read_metrics

pytestmark = pytest.mark.usefixtures("one_thread")

TEAM = ("model.name=tiny", "model.lora_rank=4", "model.lora_alpha=8", "trainer.steps=8", "trainer.batch_size=1",
        "sampler.group_size=2", "trainer.checkpoint_every=4", "rollout.max_new_tokens=6", "eval.max_new_tokens=6",
        "eval.size=4", "eval.before=false")  # fmt: skip
# the single agent's step on the tiny model as small as the team's, so the team's budget holds several of them
SMALL = ("trainer.batch_size=1", "sampler.group_size=2", "rollout.max_new_tokens=6", "trainer.checkpoint_every=4")


@pytest.fixture(scope="module")
def team(tmp_path_factory):
    import torch

    torch.set_num_threads(1)
    run = tmp_path_factory.mktemp("baseline") / "team"
    assert main(["train", "default", *TEAM, f"run.dir={run}"]) == 0
    return run


def test_spent_sums_the_training_steps_by_hand():
    rows = [
        {"step": 0, "kind": "eval", "eval/seconds": 9.0},  # evaluations are not training
        {"step": 1, "kind": "train", "sample_seconds": 1.5, "update_seconds": 0.5, "calls": 4.0, "response_tokens_mean": 5.5},
        {"step": 2, "kind": "train", "sample_seconds": 1.0, "update_seconds": 0.25, "calls": 3.0, "response_tokens_mean": 6.0},
    ]  # fmt: skip
    assert spent(rows) == Spent(steps=2, seconds=3.25, tokens=4 * 5.5 + 3 * 6.0)


def test_spent_takes_the_steps_whole_wall_time_where_it_was_logged():
    rows = [
        {"step": 1, "kind": "train", "sample_seconds": 1.5, "update_seconds": 0.5, "step_seconds": 2.75},
        {"step": 2, "kind": "train", "sample_seconds": 1.0, "update_seconds": 0.25, "step_seconds": 1.5},
    ]  # fmt: skip
    assert spent(rows).seconds == 2.75 + 1.5  # scoring and the host's work count too
    older = [{"step": 1, "kind": "train", "sample_seconds": 1.5, "update_seconds": 0.5}]  # logged before step_seconds
    assert spent(older).seconds == 2.0


def test_the_single_agent_keeps_the_runs_model_task_items_and_machine_and_takes_single_grpo():
    team = {"run": {"dir": "runs/team", "seed": 2}, "model": {"name": "tiny", "lora_rank": 4},
            "task": {"kind": "math", "dataset": "chain_sum"}, "system": {"kind": "team", "checker": "x"},
            "sampler": {"group_size": 4}, "algo": {"credit": "descendant_mean"}, "reward": {"weights": {"final": 1.0}},
            "rollout": {"max_new_tokens": 6, "engine": "hf"}, "eval": {"size": 7, "every": 3},
            "trainer": {"steps": 24, "batch_size": 4, "threads": 2, "max_minutes": 45.0}}  # fmt: skip
    single = {"system": {"kind": "single", "prompt": "P"}, "sampler": {"group_size": 8}, "algo": {"advantage": "grpo"},
              "rollout": {"max_new_tokens": 32, "temperature": 0.7}, "trainer": {"steps": 24, "batch_size": 8, "lr": 3e-4}}  # fmt: skip
    used = Spent(steps=24, seconds=120.0, tokens=5000.4)
    time = single_data(team, single, "time", used, "out-time-seed2")
    assert time["run"] == {"dir": "out-time-seed2", "seed": 2}  # the run's seed: the same held-out items
    assert (time["model"], time["task"]) == (team["model"], team["task"])
    assert time["eval"] == {"size": 7, "every": 0}
    assert (time["system"], time["sampler"], time["algo"]) == (single["system"], single["sampler"], single["algo"])
    assert "reward" not in time  # the team's reward terms are not the single agent's: its defaults
    assert time["rollout"] == {"max_new_tokens": 32, "engine": "hf", "temperature": 0.7}
    assert time["trainer"] == {"steps": 20 * 24, "batch_size": 8, "threads": 2, "lr": 3e-4, "max_minutes": 2.0,
                               "max_sampled_tokens": None}  # fmt: skip
    tokens = single_data(team, single, "tokens", used, "out-tokens-seed2")["trainer"]
    assert (tokens["max_minutes"], tokens["max_sampled_tokens"]) == (None, 5000)


def test_out_of_tokens_stops_before_a_step_that_would_overrun():
    assert not masrl.train.out_of_tokens(10_000.0, 500.0, None)  # no budget: never
    assert not masrl.train.out_of_tokens(50.0, 50.0, 100)  # 50 + 50 = 100: the next step still fits
    assert masrl.train.out_of_tokens(51.0, 50.0, 100)
    with pytest.raises(ConfigError, match="max_sampled_tokens"):
        load_config("single-arithmetic", ["trainer.max_sampled_tokens=0"])


def _train_rows(run):
    return [r for r in read_metrics(run) if r["kind"] == "train"]


def _eval(run):
    return next(d for d in json.loads(sorted((run / "evals").glob("step-*.json"))[-1].read_text())["per_item"])


def test_baseline_end_to_end_pairs_the_items_and_holds_both_budgets(team, capsys):
    capsys.readouterr()
    assert main(["baseline", str(team), *SMALL]) == 0
    out, err = capsys.readouterr()
    assert "masrl: baseline 1/2:" in err and "masrl: baseline 2/2:" in err  # progress
    cap = 20 * 8
    team_spent = spent(read_metrics(team))
    for budget in ("time", "tokens"):
        single = team.parent / f"team-single-{budget}-seed0"
        rows = _train_rows(single)
        steps = [r["step"] for r in rows]
        assert 1 <= len(steps) < cap  # the budget ended it, not the step cap
        assert f"equal {'training time' if budget == 'time' else 'sampled tokens'}: {team} against a single agent" in out
        assert f"| {team.parent / f'team-single-{budget}'} | policy | 0.000 [0.000, 0.000] | {len(steps)} (budget) |" in out
        # the same held-out items on both sides, paired by id
        assert _eval(single)["ids"] == _eval(team)["ids"] and len(_eval(team)["ids"]) == 4
        assert _eval(single)["scores"]["calls"] == [1.0] * 4  # one call answers an item
        assert all(t > 0 for t in _eval(single)["scores"]["prompt_tokens"])
        assert all(c >= 2 for c in _eval(team)["scores"]["calls"])  # a solver and a checker
        used = spent(read_metrics(single))
        tokens = [r["calls"] * r["response_tokens_mean"] for r in rows]
        if budget == "tokens":  # deterministic: the tiny model's replies are seeded
            assert used.tokens <= team_spent.tokens < used.tokens + tokens[-1]  # stopped before the step that overruns
        else:  # the single run counts whole steps and checkpoints against the team's step seconds;
            # trainer.max_minutes stops before a step as long as the last would overrun (up to one step's variation)
            step_seconds = [r["step_seconds"] for r in rows]
            assert used.seconds <= team_spent.seconds + max(step_seconds)
            saved = yaml.safe_load((single / "config.yaml").read_text())["trainer"]
            assert saved["max_minutes"] == pytest.approx(team_spent.seconds / 60) and saved["steps"] == cap
    assert out.count("team minus single, accuracy, paired on 4 common items: 0.000 [0.000, 0.000]") == 2
    assert "intervals: items (bootstrap over the held-out items; differences paired by item)" in out
    # a second call trains nothing: the runs are there with the same configs; --metric picks the tables' metric
    assert main(["baseline", str(team), *SMALL, "--budget", "time", "--metric", "tokens"]) == 0
    out, err = capsys.readouterr()
    assert "already trained with this config, reused" in err
    assert "| side | method | tokens [95% CI] |" in out and "team minus single, tokens, paired on 4 common items" in out


def test_dry_run_prints_the_configs_and_trains_nothing(team, capsys, tmp_path):
    capsys.readouterr()
    assert main(["baseline", str(team), *SMALL, "--dry-run", "--budget", "tokens", "--out", str(tmp_path / "s")]) == 0
    out = capsys.readouterr().out
    head, body = out.split("\n", 1)
    assert head.startswith(f"# {tmp_path / 's-tokens-seed0'}: single agent for {team}, equal tokens: "
                           "trainer.max_sampled_tokens=")  # fmt: skip
    data = yaml.safe_load(body)
    assert data["system"]["kind"] == "single" and data["model"]["name"] == "tiny" and data["eval"]["size"] == 4
    assert not (tmp_path / "s-tokens-seed0").exists()


def test_runs_without_a_single_agent_equivalent_are_one_line_errors(team, tmp_path, capsys):
    def refused(path, *extra) -> str:
        capsys.readouterr()
        assert main(["baseline", str(path), "--dry-run", *extra]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("masrl: ")
        return err

    assert "is neither a run directory nor the prefix of seed runs" in refused(tmp_path / "nothing")
    unfinished = tmp_path / "unfinished"
    shutil.copytree(team, unfinished)
    shutil.rmtree(unfinished / "evals")
    assert f"{unfinished} is not a finished run: no evaluation after its last step 8" in refused(unfinished)
    other = tmp_path / "planpath"
    shutil.copytree(team, other)
    saved = yaml.safe_load((other / "config.yaml").read_text())
    (other / "config.yaml").write_text(yaml.safe_dump({**saved, "task": {"kind": "planpath"}}))
    assert "no single-agent equivalent known for task.kind planpath" in refused(other)
    assert "(--single CONFIG; shipped for planpath: turns-planpath-single)" in refused(other)  # the way out
    assert "--single turns-math-single is written for task.kind math_turns; " in refused(other, "--single", "turns-math-single")
    assert "--single no-such-config: no such config file or shipped config" in refused(other, "--single", "no-such-config")
    (other / "config.yaml").write_text(yaml.safe_dump({**saved, "system": {"kind": "single"}}))
    assert "is already a single agent" in refused(other)
    assert "--seeds 2: " in refused(team, "--seeds", "2")


def test_a_single_run_stopped_before_its_first_checkpoint_is_continued_not_started_anew(team, tmp_path, capsys):
    from masrl.baseline import plan, train_planned
    from masrl.loading import dump_config
    from masrl.run.files import RunDir

    planned = plan(team, ["tokens"], out=str(tmp_path / "s"))
    started = RunDir(planned[0].run_dir)
    started.path.mkdir(parents=True)
    dump_config(planned[0].config.model_dump(mode="json"), started.config)  # killed before step 1's checkpoint
    calls = []
    train_planned(planned, lambda config, resume=None: calls.append((config, resume)))
    assert calls == [(None, planned[0].run_dir)]  # a new run may not write into its directory: it resumes
    other = planned[0].config.model_copy(update={"trainer": planned[0].config.trainer.model_copy(update={"lr": 1.0})})
    dump_config(other.model_dump(mode="json"), started.config)
    with pytest.raises(ConfigError, match="holds another run; remove it or choose --out"):
        train_planned(planned, lambda config, resume=None: calls.append((config, resume)))


def test_another_task_family_takes_the_single_agent_config_named_for_it(team, tmp_path, capsys):
    other = tmp_path / "planpath"
    shutil.copytree(team, other)
    saved = yaml.safe_load((other / "config.yaml").read_text())
    grid = {"height": 5, "width": 5, "wall_density": 0.0, "min_distance": 2}
    (other / "config.yaml").write_text(yaml.safe_dump({**saved, "task": {"kind": "planpath", "config": grid}}))
    capsys.readouterr()
    assert main(["baseline", str(other), "--single", "turns-planpath-single", "--budget", "time", "--dry-run"]) == 0
    data = yaml.safe_load(capsys.readouterr().out.split("\n", 1)[1])
    shipped = load_config("turns-planpath-single")
    assert data["task"] == {**shipped.task.model_dump(mode="json"), "config": grid}  # the run's task family and grid
    assert data["system"] == shipped.system.model_dump(mode="json")  # AT-GRPO's single agent: one planner, one turn
    assert (data["sampler"], data["algo"]) == (shipped.sampler.model_dump(mode="json"), shipped.algo.model_dump(mode="json"))
    assert data["rollout"]["max_new_tokens"] == shipped.rollout.max_new_tokens and data["model"]["name"] == "tiny"
    # the run's task section replaces the single config's, so who answers lives in the system section and survives
    math = tmp_path / "math"
    shutil.copytree(team, math)
    (math / "config.yaml").write_text(yaml.safe_dump({**saved, "task": {"kind": "math_turns"}}))
    assert main(["baseline", str(math), "--single", "turns-math-single-tool", "--budget", "time", "--dry-run"]) == 0
    data = yaml.safe_load(capsys.readouterr().out.split("\n", 1)[1])
    assert (data["system"]["agents"], data["system"]["answer_role"]) == (["tool"], "tool")


def test_a_search_run_takes_the_single_searcher(team, tmp_path, capsys):
    """A multi-agent search run (MHGPO): the default single agent's prompt does not fit, the refusal names the
    shipped single searcher, and `--single search-single` keeps the run's corpus and takes the one-call pipeline."""
    search = tmp_path / "search"
    shutil.copytree(team, search)
    saved = yaml.safe_load((search / "config.yaml").read_text())
    fof = load_config("search-fof", ["model.name=tiny"]).model_dump(mode="json")
    corpus = {"synthetic": {"people": 60, "train_questions": 40, "eval_questions": 10}}
    team_config = {**saved, "task": {"kind": "search", "config": corpus}, "system": fof["system"]}
    (search / "config.yaml").write_text(yaml.safe_dump({**team_config, "sampler": fof["sampler"], "algo": fof["algo"]}))
    capsys.readouterr()
    assert main(["baseline", str(search), "--dry-run"]) == 2
    assert "(--single CONFIG; shipped for search: search-single)" in capsys.readouterr().err
    assert main(["baseline", str(search), "--single", "search-single", "--budget", "tokens", "--dry-run"]) == 0
    data = yaml.safe_load(capsys.readouterr().out.split("\n", 1)[1])
    shipped = load_config("search-single")
    assert data["system"] == shipped.system.model_dump(mode="json") and data["system"]["roles"] == ["answerer"]
    assert data["task"]["kind"] == "search" and data["task"]["config"] == corpus  # the run's corpus and questions
    assert data["sampler"] == shipped.sampler.model_dump(mode="json") and data["algo"]["advantage"] == "grpo"
    assert data["model"]["name"] == "tiny" and data["trainer"]["max_sampled_tokens"] >= 1


def test_the_table_says_what_ended_the_single_runs_and_what_was_not_recorded():
    from masrl.baseline import Side, table
    from masrl.compare import Evaluated

    ids = ("a", "b")
    team = Evaluated("controller", ids, {"accuracy": [1.0, 0.0]}, {"accuracy": [0.5]}, {"accuracy": [[1.0, 0.0]]})
    single = Evaluated("policy", ids, {"accuracy": [0.0, 0.0], "tokens": [3.0, 5.0], "calls": [1.0, 1.0]},
                       {}, {"accuracy": [[0.0, 0.0]], "tokens": [[3.0, 5.0]], "calls": [[1.0, 1.0]]})  # fmt: skip
    text = table(Side("runs/r", team, (Spent(24, 60.0, 900.0),)), Side("runs/s", single, (Spent(40, 58.0, 700.0),)),
                 "tokens", cap=40)  # fmt: skip
    assert "equal sampled tokens: runs/r against a single agent (trained as single-arithmetic), 1 seed a side" in text
    assert "| runs/r | controller | 0.500 [0.000, 1.000] | 24 | 60.0 | 900 | n/a | n/a |" in text  # its own evaluation
    assert "| runs/s | policy | 0.000 [0.000, 0.000] | 40 (step cap) | 58.0 | 700 | 4.0 | 1.0 |" in text
    assert "team minus single, accuracy, paired on 2 common items: 0.500 [0.000, 1.000] (the interval holds 0)" in text
