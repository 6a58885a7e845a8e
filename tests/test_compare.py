"""`masrl compare` on seed groups: two-level intervals (seeds, then items) where a side has several seed runs,
the pooled items' interval with --items-only, and a line under each table that says which (saved evaluations
written by hand; nothing is trained)."""

from __future__ import annotations

import yaml

from masrl.cli import main
from masrl.compare import difference, load_evaluated
from masrl.evaluate import ItemScores, SystemEval
from masrl.run.files import RunDir
from masrl.stats import bootstrap_mean, paired_difference, pool_seeds, two_level_difference, two_level_mean

IDS = tuple(f"q{i}" for i in range(8))


def saved(run, correct, seed: int | None = None) -> None:
    RunDir(run).write_eval(4, SystemEval({}, "", per_item=[ItemScores("policy", IDS, {"accuracy": tuple(correct)})]))
    if seed is not None:
        (run / "config.yaml").write_text(yaml.safe_dump({"run": {"seed": seed}}))


def test_seed_groups_get_two_level_intervals_and_say_so(tmp_path, capsys):
    team = [[1, 1, 1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1, 0, 0], [1, 0, 0, 0, 0, 0, 0, 0]]
    single = [[1, 1, 0, 0, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0, 1, 0]]
    for k in range(3):
        saved(tmp_path / f"team-seed{k}", team[k], seed=k)
        saved(tmp_path / f"single-seed{k}", single[k], seed=k)
    a, b = str(tmp_path / "team"), str(tmp_path / "single")
    assert main(["compare", a, b]) == 0
    out = capsys.readouterr().out
    both = two_level_difference(team, single, paired_seeds=True)  # the same seeds 0-2: paired by seed
    assert f"8 common items: {both.format()}" in out
    assert f"| {a} | policy | {two_level_mean(team).format()} (seeds 0.125-0.750) | 8 |" in out
    assert "intervals: seeds+items (two-level bootstrap over 3 seeds, then the held-out items; differences " \
           "paired by item and by seed)" in out  # fmt: skip
    assert main(["compare", a, b, "--items-only"]) == 0
    out = capsys.readouterr().out
    pooled = paired_difference(pool_seeds([IDS] * 3, team)[1], pool_seeds([IDS] * 3, single)[1])
    assert f"8 common items: {pooled.format()}" in out
    assert "intervals: items (bootstrap over the held-out items; 3 seeds pooled per item, their spread not counted" in out
    # the seeds disagree (team: 4, 6 and 1 of 8), so counting them widens the interval
    assert both.high - both.low > pooled.high - pooled.low


def test_sides_with_other_seeds_are_drawn_independently(tmp_path, capsys):
    team = [[1, 1, 1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1, 0, 0]]
    for k in range(2):
        saved(tmp_path / f"team-seed{k}", team[k], seed=k)
    saved(tmp_path / "single", [1, 1, 0, 0, 0, 0, 0, 0], seed=7)  # one run with another seed
    a, b = load_evaluated(tmp_path / "team")[0], load_evaluated(tmp_path / "single")[0]
    assert (a.seeds, b.seeds) == ((0, 1), (7,))
    iv = difference(a, b, "accuracy", two_level=True)
    assert iv == two_level_difference(team, [[1, 1, 0, 0, 0, 0, 0, 0]], paired_seeds=False)
    assert main(["compare", str(tmp_path / "team"), str(tmp_path / "single")]) == 0
    assert "over 1/2 seeds, then the held-out items; differences paired by item; sides' seeds drawn independently" \
        in capsys.readouterr().out  # fmt: skip


def test_one_seed_a_side_is_the_item_interval_as_before(tmp_path, capsys):
    saved(tmp_path / "a", [1, 1, 1, 0, 0, 0, 1, 0])
    saved(tmp_path / "b", [1, 0, 1, 0, 0, 0, 0, 0])
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    assert f"8 common items: {paired_difference([1, 1, 1, 0, 0, 0, 1, 0], [1, 0, 1, 0, 0, 0, 0, 0]).format()}" in out
    assert f"| {tmp_path / 'a'} | policy | {bootstrap_mean([1, 1, 1, 0, 0, 0, 1, 0]).format()} | 8 |" in out
    assert "intervals: items (bootstrap over the held-out items; differences paired by item)" in out


def test_a_run_alone_is_set_against_itself_untrained(tmp_path, capsys):
    """A program run has one method (no baselines): `masrl compare RUN` prints it without an empty "minus it"
    column, then the trained system against itself before training on the same items."""
    before, after = [0, 0, 1, 0, 0, 0, 1, 0], [1, 0, 1, 1, 0, 0, 1, 1]
    run = tmp_path / "run"
    for step, correct in ((0, before), (4, after)):
        scores = ItemScores("policy", IDS, {"accuracy": tuple(correct)})
        RunDir(run).write_eval(step, SystemEval({}, "", per_item=[scores]))
    assert main(["compare", str(run)]) == 0
    out = capsys.readouterr().out
    assert "minus it" not in out and f"| policy | {bootstrap_mean(after).format()} |" in out
    assert f"| untrained (step 0) | {bootstrap_mean(before).format()} |" in out
    assert f"| trained (step 4) | {bootstrap_mean(after).format()} |" in out
    assert f"| trained minus untrained, paired | {paired_difference(after, before).format()} (" in out
    assert main(["compare", str(run), "--step", "4"]) == 0  # a step asked for: that evaluation alone
    assert "untrained" not in capsys.readouterr().out


def test_one_run_sets_the_method_it_names_against_each_other(tmp_path, capsys):
    """The budget controller evaluates itself under every mode beside each expert: `--method` picks the row
    set against the others (here the medium mode against the expert within the medium budget), on 3 seeds."""
    medium = [[1, 1, 1, 0, 0, 0, 1, 0], [1, 1, 0, 0, 0, 0, 1, 0], [1, 1, 1, 1, 0, 0, 1, 0]]
    expert = [[1, 1, 1, 0, 0, 0, 1, 0], [1, 1, 1, 0, 0, 0, 1, 0], [1, 1, 1, 0, 0, 0, 1, 0]]
    low = [[1, 0, 0, 0, 0, 0, 0, 0]] * 3
    for k in range(3):
        methods = [ItemScores(name, IDS, {"accuracy": tuple(c[k])})
                   for name, c in (("controller: low", low), ("controller: medium", medium), ("single:sim-mid", expert))]
        run = tmp_path / f"budget-seed{k}"
        RunDir(run).write_eval(18, SystemEval({}, "", per_item=methods))
        (run / "config.yaml").write_text(yaml.safe_dump({"run": {"seed": k}}))
    assert main(["compare", str(tmp_path / "budget"), "--method", "controller: medium"]) == 0
    out = capsys.readouterr().out
    assert "| method | accuracy [95% CI] | controller: medium minus it [95% CI] |" in out
    # rows of the same seed run pair by seed and by item: medium minus the expert is 0, -1/8, +1/8 by seed
    assert f"| single:sim-mid | {two_level_mean(expert).format()} (seeds 0.500-0.500) | " \
           f"{two_level_difference(medium, expert, paired_seeds=True).format()} |" in out  # fmt: skip
    assert f"| controller: low | {two_level_mean(low).format()} (seeds 0.125-0.125) | " \
           f"{two_level_difference(medium, low, paired_seeds=True).format()} |" in out  # fmt: skip
    assert two_level_difference(medium, expert, paired_seeds=True).estimate == 0.0
    assert main(["compare", str(tmp_path / "budget"), "--method", "controller: high"]) == 2
    assert "no method 'controller: high' in the evaluation; its methods: ['controller: low'" in capsys.readouterr().err
