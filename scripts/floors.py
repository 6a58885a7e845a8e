"""The lowest versions pyproject.toml declares for masrl's dependencies, for `.ci/run`'s floor job.

    python scripts/floors.py --except torch > constraints.txt   # name==floor, one a line: pip's -c file
    python scripts/floors.py --check --except torch             # exit 1 unless each installed version is its floor

The floor job installs masrl under these constraints, so every `>=` in pyproject.toml is a version
some run has used: a floor nothing installs is a promise nobody checked. torch is left out there: the
job keeps the one CPU build this machine has (docs/gpu.md says which torch versions were run).
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
FLOOR = re.compile(r"([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?\s*>=\s*([0-9][^,;\s]*)")


def floors(pyproject: Path = PYPROJECT) -> dict[str, str]:
    """name -> the version after `>=`, for each of the project's dependencies that has one."""
    deps = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    return {m.group(1): m.group(2) for m in (FLOOR.fullmatch(d.strip()) for d in deps) if m}


def normal(v: str) -> tuple[int, ...]:
    """'5.17' and '5.17.0' are one version: compare release numbers with trailing zeros dropped."""
    parts = [int(p) for p in re.match(r"[0-9]+(?:\.[0-9]+)*", v).group(0).split(".")]
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--except", dest="skip", nargs="*", default=[], help="dependencies to leave out (torch)")
    p.add_argument("--check", action="store_true", help="compare the installed versions with the floors")
    args = p.parse_args(argv)
    wanted = {name: v for name, v in floors().items() if name not in args.skip}
    if not args.check:
        print("\n".join(f"{name}=={v}" for name, v in wanted.items()))
        return 0
    wrong = []
    for name, v in wanted.items():
        try:
            got = version(name)
        except PackageNotFoundError:
            got = "not installed"
        if got == "not installed" or normal(got) != normal(v):
            wrong.append(f"{name} {got} (floor {v})")
    if wrong:
        print("masrl: the floor environment does not hold the declared floors: " + ", ".join(wrong), file=sys.stderr)
        return 1
    print(f"masrl: {len(wanted)} dependencies at their declared floors: "
          + ", ".join(f"{n} {v}" for n, v in wanted.items()), file=sys.stderr)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
