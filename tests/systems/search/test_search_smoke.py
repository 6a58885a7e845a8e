"""Two-step runs of every shipped search config on the tiny model (the single searcher among them), and
`masrl eval` of a pipeline run."""

from __future__ import annotations

import json

import pytest

from masrl.checkpoint import latest_checkpoint
from masrl.cli import main
from seeded import volatile
from smoke import tiny_run

pytestmark = pytest.mark.usefixtures("one_thread")

SYNTHETIC = (
    "task.config={synthetic: {people: 60, cities: 12, countries: 3, rivers: 4, universities: 4, films: 12, books: 12,"
    " songs: 8, bands: 4, companies: 8, train_questions: 40, eval_questions: 10}}"
)
SMALL = (*tiny_run(batch_size=4, eval_size=4), SYNTHETIC)
# Agent calls per question at G = 4: FoF 3G; IS G (rewriter fork) + (1 + 2G) + (2 + G); MAPPO one trajectory.
CALLS = {"search-fof": {12.0}, "search-is": {27.0}, "search-mappo": {3.0}, "search-rr": {12.0, 9.0, 6.0}}


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("config", sorted(CALLS))
def test_shipped_search_configs_run_two_steps(config, tmp_path):
    run = tmp_path / "run"
    argv = ["train", config, *SMALL, f"run.dir={run}", f"system.cache_dir={tmp_path / 'cache'}"]
    assert main(argv) == 0
    rows = read_jsonl(run / "metrics.jsonl")
    train = [r for r in rows if r["kind"] == "train"]
    evals = [r for r in rows if r["kind"] == "eval"]
    assert len(train) == 2 and len(evals) == 2  # before and after
    for r in train:
        assert "rewriter/subqueries" in r and "reranker/selected" in r and "answerer/words" in r
        if config == "search-rr":  # a mean over 4 questions of 12, 9 or 6 calls
            assert 6.0 <= r["calls_per_question"] <= 12.0 and "rr/leftover" in r
        else:
            assert r["calls_per_question"] in CALLS[config]
    assert all(e["eval/calls_per_question"] == 3.0 and "eval/f1" in e and "eval/em" in e for e in evals)
    if config == "search-mappo":  # the critic trains on the same rollouts
        assert all(any(k.startswith("critic/") for k in r) and "value_explained_var" in r for r in train)
    assert latest_checkpoint(run) is not None
    assert list((tmp_path / "cache").glob("bm25-*"))  # the index was cached


def test_the_single_searcher_makes_one_call_per_question(tmp_path):
    """search-single on the tiny model: the answerer alone, G = 4 answers per training question, one per
    held-out question, no rewriter or reranker output."""
    run = tmp_path / "run"
    assert main(["train", "search-single", *SMALL, f"run.dir={run}", f"system.cache_dir={tmp_path / 'cache'}"]) == 0
    rows = read_jsonl(run / "metrics.jsonl")
    train = [r for r in rows if r["kind"] == "train"]
    evals = [r for r in rows if r["kind"] == "eval"]
    assert len(train) == 2 and len(evals) == 2
    assert all(r["calls_per_question"] == 4.0 and "answerer/words" in r for r in train)
    assert not any(k.startswith(("rewriter/", "reranker/")) for r in rows for k in r)
    assert all(e["eval/calls_per_question"] == 1.0 and "eval/f1" in e for e in evals)
    assert latest_checkpoint(run) is not None


def test_eval_of_a_pipeline_run_reports_em_and_f1(tmp_path, capsys):
    run = tmp_path / "run"
    common = [*SMALL, f"run.dir={run}", f"system.cache_dir={tmp_path / 'cache'}", "eval.before=false"]
    assert main(["train", "search-fof", *common]) == 0
    capsys.readouterr()
    assert main(["eval", str(run)]) == 0
    saved = json.loads((run / "eval.json").read_text())
    assert {"accuracy", "em", "f1", "calls_per_question"} <= set(saved) and saved["items"] == 4
    (policy,) = saved["per_item"]  # F1 per question (eval_item_metrics), so F1 gets an interval
    assert sum(policy["scores"]["f1"]) / 4 == pytest.approx(saved["f1"]) and len(policy["scores"]["em"]) == 4
    assert main(["report", str(run)]) == 0  # figure 8's per-agent curves
    page = (run / "report.html").read_text()
    assert "sub-queries written" in page and "documents selected" in page and "held-out F1" in page


def test_round_robin_run_resumes_exactly(tmp_path):
    """Resume equals uninterrupted under RR: the fork draws (seeded by question id) and the
    regrouping (seeded by the batch's prompts) come out the same after a restart."""
    import shutil

    from safetensors.torch import load_file

    clean = tmp_path / "clean"
    args = [*SMALL, "trainer.steps=4", "trainer.checkpoint_every=2", "trainer.keep_checkpoints=2",
            "eval.before=false", "trainer.lr=0.05", f"system.cache_dir={tmp_path / 'cache'}"]  # fmt: skip
    assert main(["train", "search-rr", *args, f"run.dir={clean}"]) == 0
    cut = tmp_path / "cut"  # the same run as if killed after the step-2 checkpoint
    shutil.copytree(clean, cut)
    shutil.rmtree(cut / "checkpoints" / "step_000004")
    (cut / "checkpoints" / "latest").write_text("step_000002\n")
    assert main(["train", "--resume", str(cut)]) == 0

    def rows(run):
        return [{k: v for k, v in r.items() if not volatile(k)} for r in read_jsonl(run / "metrics.jsonl")
                if r["kind"] == "train"]  # fmt: skip

    assert rows(cut) == rows(clean) and len(rows(clean)) == 4
    assert any(r["shared/samples"] > 0 for r in rows(clean) if "shared/samples" in r)  # updates happened
    a = load_file(str(clean / "checkpoints" / "step_000004" / "policy" / "shared.safetensors"))
    b = load_file(str(cut / "checkpoints" / "step_000004" / "policy" / "shared.safetensors"))
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)
