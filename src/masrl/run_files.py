"""Reading a run directory's files: metrics, episode trees, saved evaluations, the saved system kind.

What a run writes (RUN/metrics.jsonl, RUN/samples.jsonl, RUN/config.yaml, RUN/evals/step-N.json)
is read here, and `Table` and `View` are the plain data a system's views hand the run page
(SystemSpec.page.views). The page builder (masrl.view), the report and the systems' own views all
read through this module; it imports nothing above the evaluation layer, so the system API
can name `View` without importing the page (docs/architecture.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import yaml

from masrl.evaluate import EVALS_DIR, ItemScores, read_eval_items


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


def read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def read_metrics(run_dir: Path) -> list[dict]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: is {run_dir} a run directory?")
    return read_jsonl(path)


def series(rows: list[dict], key: str) -> list[tuple[int, float]]:
    """(step, value) of one metric, over the rows that logged it."""
    return [(r["step"], r[key]) for r in rows if r.get(key) is not None]


def system_kind(run_dir: Path) -> str:
    path = Path(run_dir) / "config.yaml"
    saved = (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}
    return str((saved.get("system") or {}).get("kind", "single"))


def saved_evaluations(run_dir: Path) -> list[tuple[int, list[ItemScores]]]:
    """Every evaluation a run saved per item, (step, [ItemScores]) in step order (for systems' views)."""
    out = []
    for f in sorted((Path(run_dir) / EVALS_DIR).glob("step-*.json")):
        try:
            out.append((int(f.stem.split("-")[1]), read_eval_items(f)))
        except ValueError:
            continue
    return out
