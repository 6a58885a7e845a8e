"""`masrl view` / `masrl report` / `masrl compare` / `--seeds` on tiny-model runs; the page opened in headless
Chromium (Debian's `chromium`, installed by scripts/setup.sh, driven by playwright) with no console error."""

from __future__ import annotations

import json
import re
import shutil
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from masrl.cli import main
from masrl.stats import bootstrap_mean
from masrl.view import smooth
from smoke import tiny_run

pytestmark = pytest.mark.usefixtures("one_thread")

ROUTER = (*tiny_run(batch_size=2, eval_size=6), "system.baselines=[single,random]", "trainer.log_episodes=2")


@contextmanager
def opened(path, width: int = 1300):
    """The page in Debian's headless chromium (driven by playwright; its own browser download is not needed),
    and every console message and uncaught error it produced. Opened per test: playwright's sync API holds
    an event loop on this thread, and training (asyncio.run) cannot run beside it."""
    from playwright.sync_api import sync_playwright

    exe = shutil.which("chromium")
    assert exe, "the viewer's test needs Debian's chromium (scripts/setup.sh installs it: apt-get install chromium)"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": width, "height": 900})
        console: list[str] = []
        page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
        page.on("pageerror", lambda e: console.append(f"uncaught: {e}"))
        page.goto(Path(path).resolve().as_uri())
        page.wait_for_load_state("load")
        try:
            yield page, console
        finally:
            browser.close()


@pytest.fixture(scope="module")
def router_run(tmp_path_factory):
    import torch

    torch.set_num_threads(1)
    run = tmp_path_factory.mktemp("view") / "router"
    assert main(["train", "router", *ROUTER, f"run.dir={run}"]) == 0
    return run


def test_the_console_check_catches_a_javascript_error(tmp_path):
    path = tmp_path / "broken.html"
    path.write_text("<html><body><p id=p>before</p><script>document.getElementById('p').textContent='ran';"
                    "console.error('said so'); null.field;</script></body></html>")  # fmt: skip
    with opened(path) as (page, console):
        assert page.text_content("#p") == "ran"  # the script ran before it threw
    assert console[0] == "error: said so" and "Cannot read properties of null" in console[1], console


def test_the_run_page_renders_charts_tables_and_a_tree_without_console_errors(router_run):
    assert main(["view", str(router_run), "--no-open"]) == 0
    path = router_run / "view.html"
    with opened(path) as (page, console):
        check_router_page(page, console, path.read_text(), router_run)


def check_router_page(page, console, source, router_run):
    figures = source.count("Plotly.newPlot(")
    dom = page.content()
    assert console == []  # no JavaScript error, nor any other console output
    # Every figure drew (plotly replaces each div's content with its plot container).
    assert figures >= 20 and dom.count('class="plot-container plotly"') == figures
    rows = [json.loads(line) for line in (router_run / "metrics.jsonl").read_text().splitlines()]
    metrics = {k for r in rows if r["kind"] == "train" for k in r} - {"step", "kind"}
    assert {"reward", "usage/sim-strong", "xi/sim-strong"} <= metrics
    titles = set(re.findall(r'class="gtitle"[^>]*>([^<]+)<', dom))
    assert metrics <= titles  # every training metric has its chart
    # Each step's time, stacked: the logged parts of every step, which add up to its step_seconds.
    train = [r for r in rows if r["kind"] == "train"]
    bars = page.evaluate("() => document.getElementById('steptime0').data"
                         ".map(t => [t.name, Array.from(t.x), Array.from(t.y)])")
    assert [b[0] for b in bars] == ["generation", "scoring", "update", "host"]
    assert all(b[1] == [r["step"] for r in train] for b in bars)
    assert bars[0][2] == [r["generation_seconds"] for r in train] and bars[3][2] == [r["host_seconds"] for r in train]
    assert [sum(b[2][i] for b in bars) for i in range(len(train))] == pytest.approx([r["step_seconds"] for r in train])
    assert any(t.startswith(f"{router_run}: step time, ") and "generation " in t for t in titles)
    # The final evaluation's table: every method with an interval, paired differences against the controller.
    final = re.search(r"<caption>[^<]*evaluation at step 2, 6 items</caption>(.*?)</table>", dom, re.S)
    assert final, "no table of the final evaluation"
    rows = re.findall(r"<tr><td>([^<]+)</td><td>([^<]+)</td>", final.group(1))
    assert [r[0] for r in rows] == ["masrl controller", "single:sim-weak", "single:sim-medium", "single:sim-strong", "random"]
    saved = json.loads((router_run / "evals" / "step-000002.json").read_text())
    controller = saved["per_item"][0]["scores"]["accuracy"]
    assert rows[0][1] == bootstrap_mean(controller).format()  # the page shows masrl.stats' interval of the saved items
    # The system's own views: usage over training and the confusion matrices.
    assert "usage per agent over training" in dom and "routing: weakest solver" in dom
    # Episode trees: the first logged step is shown, the other hidden; calls carry return, group, advantage.
    shown = re.findall(r'<div class="step" id="(r0s\d+)"( hidden="")?>', dom)
    assert shown == [("r0s1", ""), ("r0s2", ' hidden=""')]
    step1 = dom.split('id="r0s1"')[1].split('id="r0s2"')[0]
    assert step1.count('class="tree"') == 2 and 'class="call"' in step1 and "advantage <b>" in step1
    assert page.locator("#r0s1 .tree").first.is_visible() and not page.locator("#r0s2").is_visible()
    # Clicking a call highlights exactly the calls of its group (G = 2 siblings), nothing else.
    call = page.locator("#r0s1 .call").first
    group = call.get_attribute("data-group")
    assert re.fullmatch(r"r0s1-g\d+", group)
    call.locator(".grp").first.click()
    assert call.evaluate("e => e.open")  # the badge highlights; it does not fold the call
    highlighted = page.locator(".call.hl")
    assert highlighted.count() == 2 and {highlighted.nth(i).get_attribute("data-group") for i in range(2)} == {group}
    page.select_option("#step-pick", "r0s2")  # another step: its trees show, step 1's hide
    assert page.locator("#r0s2 .tree").first.is_visible() and not page.locator("#r0s1").is_visible()
    assert console == []


def test_report_writes_the_same_page_and_a_screenshot_shows_it(router_run):
    assert main(["report", str(router_run)]) == 0
    report = router_run / "report.html"
    assert "Plotly.newPlot(" in report.read_text() and "<script src=" not in report.read_text()  # self-contained
    with opened(report) as (page, console):
        assert page.screenshot()[:8] == b"\x89PNG\r\n\x1a\n" and console == []


def test_samples_record_what_the_trees_need(router_run):
    records = [json.loads(line) for line in (router_run / "samples.jsonl").read_text().splitlines()]
    assert [(r["step"], r["episode"]) for r in records] == [(1, 0), (1, 1), (2, 0), (2, 1)]
    calls = records[0]["calls"]
    trained = [c for c in calls if c["policy"] == "controller"]
    assert trained and all(c["return"] is not None and c["group"] is not None for c in trained)
    # siblings grouping: a group's advantages are its returns minus their mean (grpo_mean)
    by_group: dict[int, list[dict]] = {}
    for c in trained:
        by_group.setdefault(c["group"], []).append(c)
    for members in by_group.values():
        mean = sum(c["return"] for c in members) / len(members)
        assert all(abs(c["advantage"] - (c["return"] - mean)) < 1e-9 for c in members)
    assert any(len(members) == 2 for members in by_group.values())  # G = 2 candidates per decision


def test_log_episodes_every_keeps_the_first_step_and_every_nth(tmp_path):
    run = tmp_path / "run"
    argv = ["train", "router", *tiny_run(batch_size=1, eval_size=2), "trainer.steps=3", "trainer.log_episodes=1",
            "trainer.log_episodes_every=2", "eval.before=false", f"run.dir={run}", "system.baselines=[]"]  # fmt: skip
    assert main(argv) == 0
    steps = [json.loads(line)["step"] for line in (run / "samples.jsonl").read_text().splitlines()]
    assert steps == [1, 2]


def test_compare_two_runs_and_seeds(tmp_path, capsys):
    base = tmp_path / "r"
    argv = ["train", "router", *tiny_run(batch_size=1, eval_size=4), "trainer.steps=1", "eval.before=false",
            "system.baselines=[single]", f"run.dir={base}", "--seeds", "2"]  # fmt: skip
    assert main(argv) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r-seed0", "r-seed1"]
    assert [yaml.safe_load((tmp_path / f"r-seed{k}" / "config.yaml").read_text())["run"]["seed"] for k in (0, 1)] == [0, 1]
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "r-seed0"), str(tmp_path / "r-seed1")]) == 0
    out = capsys.readouterr().out
    # the simulated pool's draws do not depend on the controller: single:sim-weak is the same in both seeds
    assert "paired difference" in out and "4 common items" in out
    assert main(["compare", str(base)]) == 0  # the prefix pools both seeds
    out = capsys.readouterr().out
    assert "| masrl controller |" in out and "(seeds " in out
    assert main(["compare", str(tmp_path / "nothing")]) == 2  # not a run: an argument mistake (ExitCode.CONFIG)
    seed0 = tmp_path / "r-seed0"
    assert main(["compare", str(seed0), str(seed0 / "evals" / "step-000001.json")]) == 0  # a saved file is a run too
    assert "4 common items: 0.000 [0.000, 0.000] (the interval holds 0)" in capsys.readouterr().out  # itself
    page = tmp_path / "seeds.html"
    assert main(["view", str(base), "--no-open", "--out", str(page)]) == 0  # both seeds overlaid, evaluations pooled
    text = page.read_text()
    assert "evaluation at step 1, 4 items, 2 seeds pooled per item" in text and "(r-seed1)" in text


def test_smoothing_is_a_debiased_moving_average():
    # w = 0.5: s1 = 0.5*1 / (1 - 0.5) = 1; s2 = (0.25 + 0.5*3) / (1 - 0.25) = 7/3
    assert smooth([1.0, 3.0], 0.5) == [1.0, pytest.approx(7 / 3)]


SYSTEMS = {  # a 1-step tiny-model run of each system with views of its own; the view title the page must show
    "budget-grpo": (("system.protocol=free", "system.labels=names", "system.shuffle_options=false",
                     "system.prefill=<call>sim-nano: check this</call>", "system.max_rounds=3"),
                    "cost-accuracy per budget mode"),
    "puppeteer-llm": ((), "orchestration graphs, first and latest evaluation"),
    "search-fof": (("task.config={synthetic: {people: 60, cities: 12, countries: 3, rivers: 4, universities: 4, films: 12,"
                    " books: 12, songs: 8, bands: 4, companies: 8, train_questions: 40, eval_questions: 10}}",),
                   "F1 by evaluation, sampler fork_on_first"),
}  # fmt: skip


@pytest.mark.parametrize("config", list(SYSTEMS))
def test_each_systems_views_render_in_the_browser(config, tmp_path):
    extra, title = SYSTEMS[config]
    run = tmp_path / "run"
    argv = ["train", config, *tiny_run(batch_size=2, eval_size=3), "trainer.steps=1", f"run.dir={run}",
            f"system.cache_dir={tmp_path / 'cache'}" if config.startswith("search") else "trainer.log_episodes=1", *extra]  # fmt: skip
    assert main(argv) == 0
    assert main(["report", str(run)]) == 0
    path = run / "report.html"
    with opened(path) as (page, console):
        dom = page.content()
    assert console == []
    assert dom.count('class="plot-container plotly"') == path.read_text().count("Plotly.newPlot(")
    assert title in dom and "[95% CI]" in dom


def test_compare_reads_the_evaluation_after_a_given_step(tmp_path, capsys):
    from masrl.evaluate import ItemScores, SystemEval
    from masrl.run.files import RunDir

    def saved(run: str, step: int, correct: list[float]) -> None:
        ids = tuple(f"q{i}" for i in range(len(correct)))
        RunDir(tmp_path / run).write_eval(step, SystemEval({}, "", per_item=[ItemScores("policy", ids, {"accuracy": tuple(correct)})]))

    for seed in (0, 1):  # two seeds each: `--step` reads the same step in every seed run
        saved(f"a-seed{seed}", 6, [1, 0, 1, 0])
        saved(f"a-seed{seed}", 12, [1, 1, 1, 1])
        saved(f"b-seed{seed}", 6, [1, 0, 1, 0])
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    assert main(["compare", a, b, "--step", "6"]) == 0  # equal steps: the same answers, difference 0 exactly
    out = capsys.readouterr().out
    assert f"({a} (step 6): policy) - ({b} (step 6): policy), accuracy, 4 common items: 0.000 [0.000, 0.000]" in out
    assert main(["compare", a, b, "--step", "12", "--step", "6"]) == 0  # A after 12 steps against B after 6
    assert "4 common items: 0.500 [" in capsys.readouterr().out  # items q1, q3 gained: (0 + 1 + 0 + 1) / 4
    assert main(["compare", a, b, "--step", "18"]) == 2  # an argument mistake: the steps that have one are named
    assert "has no evaluation after step 18 (saved after steps: [6, 12])" in capsys.readouterr().err
    assert main(["compare", a, b, "--step", "6", "--step", "6", "--step", "6"]) == 2
    assert "give one --step for every run or one for all: 3 for 2 runs" in capsys.readouterr().err


def test_a_system_evaluated_alone_is_set_against_itself_untrained_on_the_page(tmp_path):
    from masrl.evaluate import ItemScores, SystemEval
    from masrl.run.files import RunDir
    from masrl.stats import paired_difference
    from masrl.view import eval_tables

    ids = tuple(f"q{i}" for i in range(6))
    before, after = [0, 0, 1, 0, 0, 0], [1, 0, 1, 1, 0, 1]
    for step, correct in ((0, before), (3, after)):
        scores = ItemScores("policy", ids, {"accuracy": tuple(correct)})
        RunDir(tmp_path).write_eval(step, SystemEval({}, "", per_item=[scores]))
    untrained, trained = eval_tables("run", [tmp_path])
    assert untrained.columns == ("method", "accuracy [95% CI]")  # nothing to set it against: no empty column
    assert trained.columns[-1] == "policy minus untrained (step 0), accuracy [95% CI]"
    assert trained.rows[0][-1] == paired_difference(after, before).format()
