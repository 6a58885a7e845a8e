"""Two-step runs of every shipped Puppeteer config on the tiny model, resume, and `masrl eval` of a run."""

from __future__ import annotations

import json

import pytest

from masrl.checkpoint import latest_checkpoint
from masrl.cli import main
from masrl.systems.puppeteer.evaluation import evolution_table
from smoke import minilm_installed, tiny_run

pytestmark = pytest.mark.usefixtures("one_thread")

SMALL = tiny_run()
TINY_POOL = (
    "system.pool.agents=[{name: sim-medium, backend: simulated, ability: 1.62},"
    " {name: local, backend: hf, model: tiny, max_new_tokens: 8}]"
)
SIMULATED = ("sim-weak", "sim-medium", "sim-strong")  # the SIMULATED three-model pool, weak to strong
TOPOLOGY = ("graph_density", "graph_cycles", "path_length", "agents_per_task", "tokens_per_task", "vote_accuracy")


def encoder() -> str:
    """MiniLM where its package is installed, else the base model's hidden state (same code path after)."""
    return "system.encoder=" + ("minilm" if minilm_installed() else "base")


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize(
    "config, extra",
    [
        ("puppeteer-llm", ()),
        ("puppeteer-head", ()),
        ("puppeteer-tools", (TINY_POOL,)),
        ("puppeteer-smollm2", (TINY_POOL,)),
    ],
)
def test_shipped_puppeteer_configs_run_two_steps(config, extra, tmp_path, capsys):
    run = tmp_path / "run"
    extra = (*extra, encoder()) if config != "puppeteer-llm" else extra
    assert main(["train", config, *SMALL, f"run.dir={run}", *extra]) == 0
    out = capsys.readouterr().out
    assert "vote accuracy" in out and "tokens/task" in out
    rows = read_jsonl(run / "metrics.jsonl")
    train = [r for r in rows if r["kind"] == "train"]
    assert len(train) == 2 and all(all(k in r for k in TOPOLOGY) for r in train)
    evals = [r for r in rows if r["kind"] == "eval"]
    assert [r["step"] for r in evals] == [0, 2] and all(r["eval/items"] == 3 for r in evals)
    assert (run / "graphs" / "step00002" / "task000.dot").read_text().startswith("digraph")
    assert latest_checkpoint(run) is not None
    table = evolution_table(rows)
    assert table.splitlines()[0] == "| metric | step 0 | step 2 |" and "| graph density |" in table
    page = (run / "puppeteer.html").read_text()
    assert page.count("<svg") >= 4 and "step00000" in page and "step00002" in page
    # the reference rows (each base model alone) come with the final evaluation only, and on the page
    methods = [[d["method"] for d in json.loads((run / "evals" / f"step-00000{s}.json").read_text())["per_item"]]
               for s in (0, 2)]  # fmt: skip
    assert methods[0] == ["orchestrator"] and methods[1][0] == "orchestrator" and len(methods[1]) > 1
    assert all(m.startswith("single: ") and f"<td>{m}</td>" in page for m in methods[1][1:])
    assert main(["report", str(run)]) == 0  # the generic report reads a puppeteer run too


def test_llm_orchestrator_is_updated(tmp_path, monkeypatch):
    """The tiny model never writes an agent's name; read its choice from the parity of its
    bytes instead, so paths differ, advantages are not 0 and the LoRA orchestrator trains."""
    import masrl.systems.puppeteer.system as pp

    def parity_choice(text, actions):
        return actions[sum(text.encode()) % 2]  # sim-weak:planning or sim-weak:reasoning

    monkeypatch.setattr(pp, "parse_choice", parity_choice)
    run = tmp_path / "run"
    assert main(["train", "puppeteer-llm", *SMALL, f"run.dir={run}", "eval.before=false", "system.depth=2"]) == 0
    train = [r for r in read_jsonl(run / "metrics.jsonl") if r["kind"] == "train"]
    assert all(r["orchestrator/samples"] > 0 and "orchestrator/loss" in r for r in train)
    assert all(r["path_length"] == 2 for r in train)  # never the terminator: every path runs to the depth limit


def test_head_run_evaluates_from_its_checkpoint(tmp_path, capsys):
    run = tmp_path / "run"
    argv = ["train", "puppeteer-head", *SMALL, "trainer.steps=1", f"run.dir={run}", "system.encoder=base"]
    assert main(argv) == 0
    ckpt = latest_checkpoint(run)
    assert (ckpt / "head" / "orchestrator.safetensors").exists()
    capsys.readouterr()
    assert main(["eval", str(run)]) == 0
    summary = json.loads((run / "eval.json").read_text())
    assert summary["items"] == 3 and 0.0 <= summary["accuracy"] <= 1.0 and "graph_cycles" in summary
    orchestrator, *rows = summary["per_item"]  # the vote's correctness per task, as the summary counts it
    assert sum(orchestrator["scores"]["accuracy"]) / 3 == summary["accuracy"]
    assert sum(orchestrator["scores"]["cost"]) == pytest.approx(summary["cost"])
    assert [r["method"] for r in rows] == [f"single: {m}" for m in SIMULATED]  # each base model alone
    assert all(r["ids"] == orchestrator["ids"] for r in rows)
    out = capsys.readouterr().out
    assert all(f"| single: {m} |" in out for m in SIMULATED)
    assert main(["compare", str(run)]) == 0  # the orchestrator minus each row, paired
    out = capsys.readouterr().out
    assert all(f"single: {m}" in out for m in SIMULATED)
    capsys.readouterr()
    assert main(["serve", str(run), "--policy", "orchestrator"]) == 2  # a scoring head is no chat model
    assert "no trained language-model agent 'orchestrator'" in capsys.readouterr().err
