"""The training parts of scripts/gpu_check.sh (docs/gpu.md), run on one device:

    python scripts/gpu_check_runs.py configs DEVICE ROOT              # two tiny steps of every shipped config
    python scripts/gpu_check_runs.py default DEVICE ROOT [OVERRIDES]  # `masrl train`, the real default run

`configs` trains each config of tests/support/seeded.py's CASES (the overrides the CPU suite runs them
with) on DEVICE. A config that needs what is not installed, an optional extra's package (pyproject.toml's
optional-dependencies, e.g. champ-dataset for router-champ) or a component masrl.preflight finds missing
(a model package, a dataset), is skipped with the reason, and the rest still run. Its last line counts
them: `masrl: configs on DEVICE: N trained, N skipped, N failed of N`; exit code 1 when one failed.
MASRL_GPU_CHECK_CONFIGS (names, space-separated) runs only those.

`default` runs the default config as a user does (`masrl train`, SmolLM2-135M, evaluations before and
after) on DEVICE when the SmolLM2 package is installed (skipped with the reason when it is not: the
check needs no network, so nothing is fetched), and prints the before/after table, the wall time and the
mean step-time breakdown (masrl.step_metrics). OVERRIDES shorten it for a dry run on the CPU.

Needs tests/support and src on PYTHONPATH (scripts/gpu_check.sh sets both).
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import time
import tomllib
import traceback
from pathlib import Path

from seeded import CASES  # tests/support: the overrides that make each shipped config 2 tiny steps

from masrl.cli import main
from masrl.components import missing_text
from masrl.loading import load_config
from masrl.preflight import needs

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"
BREAKDOWN = ("generation", "scoring", "update", "host")  # the parts of step_seconds


def optional_modules(pyproject: Path = PYPROJECT) -> dict[str, tuple[str, str]]:
    """The optional extras' packages by import name: `champ_dataset` -> ("champ-dataset", "champ"); a package
    in an extra of its own and in `dev` names its own."""
    extras = tomllib.loads(pyproject.read_text())["project"]["optional-dependencies"]
    found: dict[str, tuple[str, str]] = {}
    for extra in sorted(extras, key=lambda e: e == "dev"):  # dev last: a package's own extra wins
        for req in extras[extra]:
            package = re.split(r"[\s\[<>=!~;]", req, maxsplit=1)[0]
            found.setdefault(package.lower().replace("-", "_"), (package, extra))
    return found


def missing(name: str, overrides: list[str]) -> str | None:
    """Why config `name` cannot run here (a component it needs is not installed), or None."""
    absent = [c for c in needs(load_config(name, overrides)) if c.find() is None]
    return "; ".join(missing_text(c) for c in absent) or None


def optional_missing(exc: ModuleNotFoundError) -> str | None:
    """The reason to skip for an optional extra's package that is not installed; None for anything else
    (masrl's own module or a required dependency missing is a failure)."""
    optional = optional_modules().get((exc.name or "").split(".")[0])
    if optional is None:
        return None
    package, extra = optional
    return f"{package} is not installed (the optional extra {extra!r}: pip install 'masrl[{extra}]')"


def one_config(name: str, device: str, root: Path) -> tuple[str, str]:
    """Train config `name` two tiny steps: ("trained" | "skipped" | "failed", the reason or exit code)."""
    tmp = Path(tempfile.mkdtemp(prefix=f"masrl-{name}-"))  # the inputs a config reads (CHAMP's pool, caches)
    try:
        if name == "router-champ":
            from masrl.pools.champ import build_champ_pool  # lazy: only this config reads CHAMP's pool

            build_champ_pool(tmp / "champ.jsonl")
        args = [o.replace("{tmp}", str(tmp)).replace("{champ}", str(tmp / "champ.jsonl")) for o in CASES[name]]
        args += [f"trainer.device={device}", f"run.dir={root / name}"]
        reason = missing(name, args)
        if reason is not None:
            return "skipped", reason
        code = main(["train", name, *args])
    except ModuleNotFoundError as exc:
        reason = optional_missing(exc)
        if reason is None:
            traceback.print_exc()
            return "failed", f"{type(exc).__name__}: {exc}"
        return "skipped", reason
    except Exception as exc:  # noqa: BLE001 - one config's failure is reported; the others still run
        traceback.print_exc()
        return "failed", f"{type(exc).__name__}: {exc}"
    return ("trained" if code == 0 else "failed"), f"exit code {code}"


def configs(device: str, root: Path) -> int:
    names = os.environ.get("MASRL_GPU_CHECK_CONFIGS", "").split() or sorted(CASES)
    unknown = [n for n in names if n not in CASES]
    if unknown:
        sys.exit(f"masrl: MASRL_GPU_CHECK_CONFIGS names no shipped config: {', '.join(unknown)}")
    outcomes: dict[str, list[str]] = {"trained": [], "skipped": [], "failed": []}
    for name in names:
        outcome, why = one_config(name, device, root)
        print(f"masrl: {name} on {device}: {outcome} ({why})", flush=True)
        outcomes[outcome].append(name)
    named = "".join(f"; {k}: {', '.join(v)}" for k, v in outcomes.items() if k != "trained" and v)
    print(f"masrl: configs on {device}: {len(outcomes['trained'])} trained, {len(outcomes['skipped'])} skipped, "
          f"{len(outcomes['failed'])} failed of {len(names)}{named}")  # fmt: skip
    return 1 if outcomes["failed"] else 0


def default(device: str, root: Path, overrides: list[str]) -> int:
    run = root / "default-run"  # root/default is the configs part's two tiny steps of the same config
    args = [*overrides, f"trainer.device={device}", f"run.dir={run}"]
    reason = missing("default", args)
    if reason is not None:
        print(f"masrl: default run on {device}: skipped ({reason})")
        return 0
    t0 = time.perf_counter()
    code = main(["train", *args])  # prints the before/after table when it ends
    wall = time.perf_counter() - t0
    if code != 0:
        print(f"masrl: default run on {device}: failed (exit code {code}) after {wall:.0f} s")
        return 1
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [s for s in steps if s["kind"] == "train"]
    mean = {k: sum(s[f"{k}_seconds"] for s in steps) / len(steps) for k in ("step", *BREAKDOWN)}
    parts = ", ".join(f"{k} {mean[k]:.2f} s" for k in BREAKDOWN)
    many = "s" * (len(steps) != 1)
    print(f"masrl: default run on {device}: {wall:.0f} s wall ({wall / 60:.1f} min, evaluations included), "
          f"{len(steps)} step{many} of {mean['step']:.2f} s on average ({parts}); table in {run / 'results.json'}")  # fmt: skip
    return 0


if __name__ == "__main__":
    part, device, root = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    sys.exit(configs(device, root) if part == "configs" else default(device, root, sys.argv[4:]))
