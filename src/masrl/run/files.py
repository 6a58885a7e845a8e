"""The run directory: every file a run writes, named once, and reading them back.

`RunDir` is the one object that knows where a run keeps its files (RUN/config.yaml,
metrics.jsonl, samples.jsonl, tb/, evals/step-N.json, eval.json, results.json, report.html, .lock; its
checkpoints/ through masrl.checkpoint) and says what is on disk: the newest checkpoint,
whether a step's line was logged, every saved evaluation. The rest of masrl asks it for a
path instead of spelling a file's name. The modules beside it act on a run through it:
`run.log` writes the logs, `run.prepare` makes or continues the directory, `run.resume`
checkpoints and restores an engine's state, `run.trained` loads a trained run for eval and
serve, `run.stop` stops a run on a signal, its time allowance or a failed rank.

`Table` and `View` are the plain data a system's views hand the run page
(SystemSpec.page.views). The page builder (masrl.view), the report and the systems' own views all
read through this module; it imports nothing above the evaluation layer, so the system API
can name `View` without importing the page (docs/architecture.md).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from masrl.checkpoint import CHECKPOINTS, atomic_write_json, complete_checkpoints, latest_checkpoint, read_meta
from masrl.evaluate import ItemScores, SystemEval, eval_record, read_eval_items


@dataclass(frozen=True)
class RunDir:
    """A run directory: where each of its files lives, and what they hold now."""

    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    def __str__(self) -> str:  # messages name the directory as the user gave it
        return str(self.path)

    def __fspath__(self) -> str:
        return str(self.path)

    # ------------------------------------------------------------ its files
    @property
    def config(self) -> Path:
        """The resolved config the run started with; `masrl train --resume` and `masrl eval` read it."""
        return self.path / "config.yaml"

    @property
    def checkpoints(self) -> Path:
        """The directory of the run's checkpoints (masrl.checkpoint writes and reads them)."""
        return self.path / CHECKPOINTS

    @property
    def metrics(self) -> Path:
        """One JSON line per step (`kind: train`) and per evaluation (`kind: eval`)."""
        return self.path / "metrics.jsonl"

    @property
    def samples(self) -> Path:
        """A step's first episode trees every few steps (what `masrl view` draws)."""
        return self.path / "samples.jsonl"

    @property
    def tensorboard(self) -> Path:
        """The metrics again, as TensorBoard event files."""
        return self.path / "tb"

    @property
    def evals(self) -> Path:
        """One file per held-out evaluation of the run (`eval_path`)."""
        return self.path / "evals"

    def eval_path(self, step: int) -> Path:
        """The per-item results of the evaluation after `step` (0: before training)."""
        return self.evals / f"step-{step:06d}.json"

    def eval_files(self) -> list[Path]:
        """Every evaluation saved under evals/, in step order."""
        return sorted(self.evals.glob("step-*.json"))

    @property
    def eval_json(self) -> Path:
        """What `masrl eval RUN_DIR` writes by default."""
        return self.path / "eval.json"

    @property
    def results(self) -> Path:
        """The trained system against itself untrained, with the paired interval (written after training)."""
        return self.path / "results.json"

    @property
    def report(self) -> Path:
        """`masrl report RUN_DIR`'s page, one self-contained file."""
        return self.path / "report.html"

    @property
    def errors(self) -> Path:
        """The tracebacks of a system's code that raised (masrl.rollout.system_errors)."""
        return self.path / "errors.log"

    @property
    def lock(self) -> Path:
        """Held by the one process writing the run (masrl.run.lock); it names that process."""
        return self.path / ".lock"

    # ------------------------------------------------------------ what is on disk
    def run_files(self) -> list[Path]:
        """The files and folders of a run that are here (not the lock): a new run may write where there are none."""
        named = (self.config, self.checkpoints, self.metrics, self.samples, self.tensorboard, self.evals,
                 self.eval_json, self.results, self.report, self.errors)  # fmt: skip
        return [p for p in named if p.exists()]

    def latest_checkpoint(self) -> Path | None:
        """The newest complete checkpoint (masrl.checkpoint.latest_checkpoint), None before the first."""
        return latest_checkpoint(self.path)

    def complete_checkpoints(self) -> list[Path]:
        """Every complete checkpoint, newest first (the fallbacks when one is unreadable)."""
        return complete_checkpoints(self.path)

    def saved_step(self) -> int:
        """The step the newest checkpoint holds; 0 when there is none."""
        ckpt = self.latest_checkpoint()
        return int(read_meta(ckpt)["step"]) if ckpt else 0

    def logged(self, step: int, kind: str) -> bool:
        """Whether metrics.jsonl holds a `kind` line for `step` (e.g. a finished run's final eval)."""
        if not self.metrics.exists():
            return False
        return any(r["step"] == step and r["kind"] == kind for _, r in records(self.metrics.read_text().splitlines()))

    def logged_steps(self, kind: str = "train") -> list[int]:
        """The steps metrics.jsonl holds a `kind` line for, in the file's order."""
        if not self.metrics.exists():
            return []
        return [r["step"] for _, r in records(self.metrics.read_text().splitlines()) if r["kind"] == kind]

    def write_eval(self, step: int, result: SystemEval) -> Path:
        """Save an evaluation's per-item results: intervals and `masrl compare` read them."""
        path = self.eval_path(step)
        atomic_write_json(path, eval_record(step, result))
        return path


# ---------------------------------------------------------------- what a system's views hand the page
@dataclass(frozen=True)
class Table:
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    caption: str = ""


@dataclass(frozen=True)
class View:
    """A section a system adds to the page: plotly figures and tables, read from a run directory's files."""

    title: str
    figures: tuple = ()  # plotly.graph_objects.Figure
    tables: tuple[Table, ...] = ()
    note: str = ""


# ---------------------------------------------------------------- reading
def read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def records(lines: Sequence[str]) -> list[tuple[str, dict]]:
    """(line, record) of every whole JSON line: a kill in the middle of an append leaves a
    torn last line, which is dropped rather than failing the resume."""
    out = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and "step" in record:
            out.append((line, record))
    return out


def read_metrics(run_dir: Path) -> list[dict]:
    path = RunDir(run_dir).metrics
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: is {run_dir} a run directory?")
    return read_jsonl(path)


def series(rows: list[dict], key: str) -> list[tuple[int, float]]:
    """(step, value) of one metric, over the rows that logged it."""
    return [(r["step"], r[key]) for r in rows if r.get(key) is not None]


def system_kind(run_dir: Path) -> str:
    path = RunDir(run_dir).config
    saved = (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}
    return str((saved.get("system") or {}).get("kind", "single"))


def saved_evaluations(run_dir: Path) -> list[tuple[int, list[ItemScores]]]:
    """Every evaluation a run saved per item, (step, [ItemScores]) in step order (for systems' views)."""
    out = []
    for f in RunDir(run_dir).eval_files():
        try:
            out.append((int(f.stem.split("-")[1]), read_eval_items(f)))
        except ValueError:
            continue
    return out


def final_eval_path(run_dir: Path, step: int | None = None) -> Path:
    """A run's last saved evaluation: the highest step under evals/, else eval.json from `masrl eval`;
    with `step`, the evaluation after that step (`eval.every`, 0 = before training)."""
    run = RunDir(run_dir)
    if step is not None:
        path = run.eval_path(step)
        if not path.exists():
            saved = sorted(int(p.stem.removeprefix("step-")) for p in run.eval_files())
            raise FileNotFoundError(f"{run_dir} has no evaluation after step {step} (saved after steps: {saved or 'none'})")
        return path
    steps = run.eval_files()
    if steps:
        return steps[-1]
    if run.eval_json.exists():
        return run.eval_json
    raise FileNotFoundError(f"{run_dir} has no saved evaluation ({run.evals.name}/step-*.json or {run.eval_json.name})")
