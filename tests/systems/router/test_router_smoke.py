"""Two-step runs of every shipped router config on the tiny model, and `masrl eval` of a router run."""

from __future__ import annotations

import json

import pytest
from smoke import minilm_installed, tiny_run

from masrl.checkpoint import latest_checkpoint, read_meta
from masrl.cli import main

pytestmark = pytest.mark.usefixtures("one_thread")

SMALL = tiny_run(batch_size=2, eval_size=6)
LEARNED = ("classifier", "knn")


def baselines() -> str:
    names = ["single", "random", *(LEARNED if minilm_installed() else ())]
    return f"system.baselines=[{','.join(names)}]"


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("config", ["router", "router-single-turn", "router-dual-ascent"])
def test_shipped_router_configs_run_two_steps(config, tmp_path, capsys):
    run = tmp_path / "run"
    argv = ["train", config, *SMALL, f"run.dir={run}", baselines(), "system.label_items=12"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "| method | accuracy |" in out and "| masrl controller |" in out and "| random |" in out
    for agent in ("sim-weak", "sim-medium", "sim-strong"):
        assert f"| single:{agent} |" in out
    if minilm_installed():
        assert "| embedding-classifier |" in out and "| nearest-neighbour |" in out
    rows = read_jsonl(run / "metrics.jsonl")
    train = [r for r in rows if r["kind"] == "train"]
    assert len(train) == 2 and all("usage/sim-strong" in r and "xi/sim-strong" in r for r in train)
    results = json.loads((run / "results.json").read_text())
    assert results[0]["method"] == "masrl controller" and results[0]["items"] == 6
    meta = read_meta(latest_checkpoint(run))
    assert set(meta["system"]) == {"sim-weak", "sim-medium", "sim-strong"}  # the multipliers travel with it
    assert set(meta["frozen"]) == {"sim-weak", "sim-medium", "sim-strong"}  # and the agents' attempt counts


def test_router_solver_baseline_config_runs(tmp_path):
    run = tmp_path / "run"
    assert main(["train", "router-solver", *SMALL, f"run.dir={run}"]) == 0
    assert (run / "checkpoints" / "latest").exists()


def test_champ_config_runs_on_a_built_pool(tmp_path, capsys):
    pytest.importorskip("champ_dataset")
    from masrl.pools.champ import build_champ_pool

    pool_file = tmp_path / "champ.jsonl"
    build_champ_pool(pool_file)
    run = tmp_path / "run"
    argv = ["train", "router-champ", *SMALL, f"run.dir={run}", f"task.path={pool_file}", "system.baselines=[single]"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "| single:GPT-4 Turbo |" in out and "| masrl controller |" in out


def test_eval_of_a_router_run_prints_the_table(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "router", *SMALL, f"run.dir={run}", "system.baselines=[random]", "eval.before=false"]) == 0
    capsys.readouterr()
    assert main(["eval", str(run)]) == 0
    out = capsys.readouterr().out
    assert "| masrl controller |" in out and "| random |" in out and "accuracy by max turns" in out
    saved = json.loads((run / "eval.json").read_text())
    assert [r["method"] for r in saved["results"]] == ["masrl controller", "random"]


def test_unknown_pool_names_in_caps_are_a_config_error(tmp_path, capsys):
    argv = ["train", "router", *SMALL, f"run.dir={tmp_path / 'run'}", "system.rho={sim-giant: 0.1}"]
    assert main(argv) == 2
    assert "sim-giant" in capsys.readouterr().err


def test_router_over_real_llm_agents_local_and_http(tmp_path, capsys):
    """A pool of real model backends: a local HF model and an OpenAI-compatible endpoint
    (masrl.serve in front of another tiny model, over real HTTP), trained and evaluated."""
    from servers import running

    from masrl.agents.policy import SamplingParams
    from masrl.generation.hf_local import HFLocalAgent
    from masrl.models import LoadedModel, build_tiny_model
    from masrl.serve import agent_app

    model, tok = build_tiny_model(seed=1)
    served = HFLocalAgent("served", LoadedModel(model, tok, "tiny"), SamplingParams(max_new_tokens=6, temperature=0.0))
    with running(agent_app(served, "tiny")) as url:
        pool = (
            "system.pool.agents=[{name: local, backend: hf, model: tiny, max_new_tokens: 6, price_out: 0.5},"
            f" {{name: remote, backend: openai, base_url: '{url}/v1', model: tiny, price_in: 1.0, price_out: 2.0}}]"
        )
        run = tmp_path / "run"
        argv = ["train", "router", *SMALL, f"run.dir={run}", "system.pool.kind=agents", pool, "system.baselines=[single]",
                "system.label_items=4"]
        assert main(argv) == 0
    out = capsys.readouterr().out
    assert "| single:local |" in out and "| single:remote |" in out
    results = {r["method"]: r for r in json.loads((run / "results.json").read_text())}
    # Default caps for two agents: the stronger (last) 0.25, the weaker uncapped.
    remote = results["single:remote"]
    assert remote["usage"]["remote"] <= 0.25 + 1e-9 and remote["redirected"] > 0
    assert remote["cost"] > 0  # priced per token as the endpoint reported them
    assert results["single:local"]["usage"] == {"local": 1.0, "remote": 0.0} and results["single:local"]["cost"] > 0
    assert results["masrl controller"]["items"] == 6


def test_the_routers_own_command_builds_the_champ_pool(tmp_path, capsys):
    """`masrl champ-pool OUT`: a command the router's SystemSpec adds to the CLI."""
    pytest.importorskip("champ_dataset")
    out = tmp_path / "pool.jsonl"
    assert main(["champ-pool", str(out)]) == 0
    assert len(out.read_text().splitlines()) == 270 and "GPT-4 Turbo" in capsys.readouterr().out
