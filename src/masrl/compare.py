"""Results with their intervals, read from saved per-item evaluations: `masrl compare` and the viewer.

A run's final evaluation (RUN_DIR/evals/step-N.json, or eval.json from
`masrl eval`) holds each method's per-item scores (masrl.evaluate.ItemScores).
A path that is not a run directory but the prefix of seed siblings
(`runs/router` for runs/router-seed0, runs/router-seed1, ... from
`masrl train --seeds N`) stands for all of them: each method's per-item
scores are averaged over the seeds (masrl.stats.pool_seeds), and where a side
has several seeds its intervals are two-level (masrl.stats.two_level_mean:
seeds, then items), so they count the seed-to-seed spread; two sides with
the same seeds (run.seed) pair by seed, others are drawn independently.
`--items-only` (`two_level=False`) resamples the pooled items alone. Every
table says which interval it uses (`interval_note`).

- `masrl compare RUN`: every method of the run's evaluation with its 95%
  interval, and the paired difference of the system's own method (listed
  first: the trained policy) against each other method on the same items;
  when the run also evaluated before training (step 0), the trained system
  against itself untrained on the same items (`before_after`).
- `masrl compare RUN --method M`: the same table with M set against each other method (the budget
  controller's `"controller: medium"` against the expert within that budget).
- `masrl compare RUN_A RUN_B`: the two runs' methods side by side and the
  paired difference A - B of one method (default: each run's first).
- `--step N` reads the evaluation after step N (`eval.every`) instead of the
  final one; `--step N --step M` reads A's after N and B's after M.

A RUN may also be one saved evaluation file: `masrl compare RUN
RUN/evals/step-000000.json` is the trained policy against the untrained one.

`before_after` is that comparison as training prints it at the end and saves it in
RUN_DIR/results.json, for systems evaluated by greedy episodes (the default run's table).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from masrl.evaluate import ItemScores, read_eval_items
from masrl.run.files import RunDir, final_eval_path
from masrl.stats import (
    Interval, align, bootstrap_mean, paired_difference, pool_seeds, seed_rows, two_level_difference, two_level_mean,
)


def seed_runs(path: Path) -> list[Path]:
    """The run directories `path` names: itself, or its seed siblings PATH-seedK (in seed order)."""
    path = Path(path)
    run = RunDir(path)
    if run.config.exists() or run.evals.is_dir() or run.eval_json.exists():
        return [path]
    siblings = [p for p in path.parent.glob(f"{path.name}-seed*") if p.is_dir() and p.name[len(path.name) + 5 :].isdigit()]
    if not siblings:
        raise FileNotFoundError(f"{path} is neither a run directory nor the prefix of seed runs ({path}-seed0, ...)")
    return sorted(siblings, key=lambda p: int(p.name[len(path.name) + 5 :]))


@dataclass(frozen=True)
class Evaluated:
    """One method's per-item scores, pooled over the seeds that evaluated it."""

    method: str
    ids: tuple[str, ...]
    scores: dict[str, list[float]]  # metric -> per item (mean over seeds)
    seed_means: dict[str, list[float]]  # metric -> one mean per seed (the seeds' spread)
    per_seed: dict[str, list[list[float]]] = field(default_factory=dict)  # metric -> [seed][item], items as `ids`
    seeds: tuple[int, ...] = (0,)  # each run's run.seed: two sides with the same seeds pair by seed


def load_evaluated(path: Path, step: int | None = None) -> list[Evaluated]:
    """The methods of a run's (or a seed group's) final evaluation, or the one after `step` in every run,
    in the evaluation's order; a path to one saved evaluation file (RUN/evals/step-000000.json: the
    untrained policy) reads that one."""
    if Path(path).is_file():
        return pool_methods([read_eval_items(Path(path))])
    runs = seed_runs(path)
    per_run = [read_eval_items(final_eval_path(r, step)) for r in runs]
    return pool_methods(per_run, tuple(run_seed(r, k) for k, r in enumerate(runs)))


def run_seed(run: Path, index: int) -> int:
    """The run.seed a run directory was trained with (its saved config), else its place in the group."""
    config = RunDir(run).config
    saved = (yaml.safe_load(config.read_text()) or {}) if config.is_file() else {}
    seed = (saved.get("run") or {}).get("seed")
    return int(seed) if isinstance(seed, int) else index


def pool_methods(per_run: Sequence[Sequence[ItemScores]], seeds: Sequence[int] = ()) -> list[Evaluated]:
    """Methods present in every run, each pooled per item over the runs, with each run's values kept
    (`seeds`: the runs' run.seed, default 0, 1, ...) (pure)."""
    names = [s.method for s in per_run[0] if all(any(o.method == s.method for o in run) for run in per_run)]
    out = []
    for name in names:
        runs = [next(s for s in run if s.method == name) for run in per_run]
        metrics = [k for k in runs[0].scores if all(k in r.scores for r in runs)]
        pooled, ids = {}, None
        for k in metrics:
            ids, pooled[k] = pool_seeds([r.ids for r in runs], [r.scores[k] for r in runs])
        seed_means = {k: [sum(r.scores[k]) / max(len(r.ids), 1) for r in runs] for k in metrics}
        rows = {k: seed_rows([r.ids for r in runs], [r.scores[k] for r in runs], ids)[1] for k in metrics}
        out.append(Evaluated(name, tuple(ids or ()), pooled, seed_means, rows, tuple(seeds) or tuple(range(len(runs)))))
    return out


def digits(metric: str) -> int:
    """Decimals a metric is printed with: dollars per item need six."""
    return 6 if metric == "cost" else 3


def interval(e: Evaluated, metric: str, two_level: bool = False, seed: int = 0) -> Interval:
    """The metric's mean with its interval: with `two_level` and several seeds, seeds then items; else
    the items of the pooled scores (what the run page's captions say: "seeds pooled per item")."""
    if two_level and len(e.seeds) > 1:
        return two_level_mean(e.per_seed[metric], seed=seed)
    return bootstrap_mean(e.scores[metric], seed=seed)


def difference(a: Evaluated, b: Evaluated, metric: str, two_level: bool = False, seed: int = 0) -> Interval:
    """mean(a - b) over the items both scored, paired by item id; with several seeds a side (and
    `two_level`), seeds then items, the seeds paired when both sides have the same ones."""
    if two_level and max(len(a.seeds), len(b.seeds)) > 1:
        common = align(a.ids, a.ids, b.ids, b.ids)[0]  # the ids both scored, in a's order
        rows_a = seed_rows([a.ids] * len(a.seeds), a.per_seed[metric], common)[1]
        rows_b = seed_rows([b.ids] * len(b.seeds), b.per_seed[metric], common)[1]
        return two_level_difference(rows_a, rows_b, paired_seeds=a.seeds == b.seeds, seed=seed)
    x, y = align(a.ids, a.scores[metric], b.ids, b.scores[metric])
    return paired_difference(x, y, seed=seed)


def interval_note(sides: Sequence[Evaluated], two_level: bool = True) -> str:
    """The line under a table that says which interval it uses."""
    counts = sorted({len(e.seeds) for e in sides})
    seeds = "/".join(str(c) for c in counts)
    if two_level and counts[-1] > 1:
        paired = "" if len(sides) < 2 or len({e.seeds for e in sides}) == 1 else "; sides' seeds drawn independently"
        return (f"intervals: seeds+items (two-level bootstrap over {seeds} seeds, then the held-out items; "
                f"differences paired by item{'' if paired else ' and by seed'}{paired})")  # fmt: skip
    pooled = f"; {seeds} seeds pooled per item, their spread not counted" if counts[-1] > 1 else ""
    return f"intervals: items (bootstrap over the held-out items{pooled}; differences paired by item)"


def _metric_of(methods: Sequence[Evaluated], metric: str) -> None:
    missing = [m.method for m in methods if metric not in m.scores]
    if missing:
        have = sorted({k for m in methods for k in m.scores})
        raise ValueError(f"no per-item {metric!r} for {missing}; saved metrics: {have}")


def _seeds_cell(e: Evaluated, metric: str) -> str:
    means, d = e.seed_means[metric], digits(metric)
    return "" if len(means) < 2 else f" (seeds {min(means):.{d}f}-{max(means):.{d}f})"


def within_run_table(methods: Sequence[Evaluated], metric: str = "accuracy", two_level: bool = True,
                     method: str | None = None) -> str:  # fmt: skip
    """Markdown: each method's metric with its interval, and `method` (default: the first, the trained
    policy) minus it (paired; a method alone has nothing to be set against). A system evaluated under
    several settings (the budget controller's modes) sets each against its reference by naming it."""
    _metric_of(methods, metric)
    first, d = _named(methods, method) if method else methods[0], digits(metric)
    if len(methods) == 1:
        lines = [f"| method | {metric} [95% CI] |", "|---|---|",
                 f"| {first.method} | {interval(first, metric, two_level).format(d)}{_seeds_cell(first, metric)} |"]
        return "\n".join([*lines, "", interval_note(methods, two_level)])
    lines = [f"| method | {metric} [95% CI] | {first.method} minus it [95% CI] |", "|---|---|---|"]
    for m in methods:
        diff = "" if m is first else difference(first, m, metric, two_level).format(d)
        lines.append(f"| {m.method} | {interval(m, metric, two_level).format(d)}{_seeds_cell(m, metric)} | {diff} |")
    return "\n".join([*lines, "", interval_note(methods, two_level)])


def _find(methods: Sequence[Evaluated], method: str) -> Evaluated | None:
    return next((m for m in methods if m.method == method), None)


def _named(methods: Sequence[Evaluated], method: str) -> Evaluated:
    found = _find(methods, method)
    if found is None:
        raise ValueError(f"no method {method!r} in the evaluation; its methods: {[m.method for m in methods]}")
    return found


def between_runs_text(a_name: str, a: Sequence[Evaluated], b_name: str, b: Sequence[Evaluated],
                      metric: str = "accuracy", method: str | None = None, two_level: bool = True) -> str:  # fmt: skip
    """Both runs' methods with intervals, then the paired difference A - B of `method` (default: each first)."""
    _metric_of([*a, *b], metric)
    lines = [f"| run | method | {metric} [95% CI] | items |", "|---|---|---|---|"]
    for name, methods in ((a_name, a), (b_name, b)):
        for m in methods:
            cell = f"{interval(m, metric, two_level).format(digits(metric))}{_seeds_cell(m, metric)}"
            lines.append(f"| {name} | {m.method} | {cell} | {len(m.ids)} |")
    pick = (lambda ms: _find(ms, method)) if method else (lambda ms: ms[0])
    ma, mb = pick(a), pick(b)
    if ma is None or mb is None:
        raise ValueError(f"method {method!r} is not in both runs: {[m.method for m in a]} / {[m.method for m in b]}")
    diff = difference(ma, mb, metric, two_level)
    lines += ["", f"paired difference ({a_name}: {ma.method}) - ({b_name}: {mb.method}), {metric}, "
              f"{diff.n} common items: {diff.format(digits(metric))}" + ("" if diff.excludes_zero() else " (the interval holds 0)")]  # fmt: skip
    return "\n".join([*lines, interval_note([ma, mb], two_level)])


def compare_runs(paths: Sequence[Path], metric: str = "accuracy", method: str | None = None,
                 steps: Sequence[int | None] = (), two_level: bool = True) -> str:  # fmt: skip
    """`steps`: the evaluation after which step each path's runs are read (one for all, or one per path;
    none: the final ones), e.g. two runs at equal steps, or at the steps each reached in equal time."""
    if len(steps) > 1 and len(steps) != len(paths):
        raise ValueError(f"give one --step for every run or one for all: {len(steps)} for {len(paths)} runs")
    at = list(steps) * len(paths) if len(steps) == 1 else list(steps) or [None] * len(paths)
    if len(paths) == 1:
        table = within_run_table(load_evaluated(paths[0], at[0]), metric, two_level, method)
        trained = since_untrained(paths[0], metric) if at[0] is None and method is None else None
        return table if trained is None else f"{table}\n\n{trained.table()}"
    if len(paths) == 2:
        a, b = (f"{p}" + (f" (step {s})" if s is not None else "") for p, s in zip(paths, at))
        return between_runs_text(a, load_evaluated(paths[0], at[0]), b, load_evaluated(paths[1], at[1]),
                                 metric, method, two_level)  # fmt: skip
    raise ValueError(f"compare takes one or two runs, got {len(paths)}")


@dataclass(frozen=True)
class BeforeAfter:
    """One method's metric before training and after it on the same items, and the paired difference."""

    method: str
    metric: str
    steps: tuple[int, int]  # the two evaluations' steps (0 and the last)
    before: Interval
    after: Interval
    difference: Interval  # after - before, paired by item

    def table(self) -> str:
        d, (s0, s1) = digits(self.metric), self.steps
        verdict = "excludes 0" if self.difference.excludes_zero() else "holds 0: no resolvable difference"
        return "\n".join([
            f"| {self.method}, {self.difference.n} held-out items | {self.metric} [95% CI] |", "|---|---|",
            f"| untrained (step {s0}) | {self.before.format(d)} |",
            f"| trained (step {s1}) | {self.after.format(d)} |",
            f"| trained minus untrained, paired | {self.difference.format(d)} ({verdict}) |",
        ])  # fmt: skip

    def to_json(self) -> dict:
        def one(i: Interval) -> dict:
            return {"estimate": i.estimate, "low": i.low, "high": i.high, "items": i.n, "level": i.level}

        return {"method": self.method, "metric": self.metric, "steps": list(self.steps), "before": one(self.before),
                "after": one(self.after), "difference": one(self.difference),
                "excludes_zero": self.difference.excludes_zero()}  # fmt: skip


def before_after(before: Sequence[ItemScores], after: Sequence[ItemScores], steps: tuple[int, int],
                 metric: str = "accuracy") -> BeforeAfter:  # fmt: skip
    """The system's own method (each evaluation's first) before and after training, paired by item (pure)."""
    a, b = pool_methods([after])[0], pool_methods([before])[0]
    if a.method != b.method:
        raise ValueError(f"the evaluations' first methods differ: {b.method!r} before, {a.method!r} after")
    _metric_of([a, b], metric)
    x, y = align(a.ids, a.scores[metric], b.ids, b.scores[metric])
    return BeforeAfter(a.method, metric, steps, bootstrap_mean(y), bootstrap_mean(x), paired_difference(x, y))


def since_untrained(run: Path, metric: str = "accuracy") -> BeforeAfter | None:
    """A run directory's final evaluation against its evaluation before training (None without both)."""
    r = RunDir(run)
    saved = r.eval_files()
    if not run.is_dir() or len(saved) < 2 or saved[0] != r.eval_path(0):
        return None
    before, after = read_eval_items(saved[0]), read_eval_items(saved[-1])
    if before[0].method != after[0].method:  # not the same system evaluated twice
        return None
    return before_after(before, after, (0, int(saved[-1].stem.removeprefix("step-"))), metric)
