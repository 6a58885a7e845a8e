"""The system registry: built-in specs, dotted paths, entry points, old config layouts, and what a
builder hands the engine (agents mapped to policies, learners per policy)."""

from __future__ import annotations

import re

import pytest

from masrl.config import ConfigError, config_model
from masrl.loading import load_config
from masrl.parts import build_parts
from masrl.learners import PolicyLearner
from masrl.registry import available_systems, resolve_system
from masrl.systems import BUILTIN
from masrl.systems.api import Built, SystemSpec
from masrl.systems.single import SingleAgentSystem, SingleConfig, build_single


def two_roles(config, task):
    return Built(SingleAgentSystem(task, "p", {}, agent="coder"), {"coder": "shared", "tester": "shared", "judge": "own"})


# Found by `system.kind: <this module>:TWO_ROLES`: pytest imports test files under a name of their path
# (importlib mode) and keeps them in sys.modules, where resolving the name finds this very module.
HERE = __name__
TWO_ROLES = SystemSpec(kind="two-roles", config=SingleConfig, build=two_roles)
NOT_A_SPEC = build_single


def test_every_builtin_name_resolves_to_its_package_spec():
    for kind in BUILTIN:
        spec = resolve_system(kind)
        assert isinstance(spec, SystemSpec)
        assert spec.kind == kind
        assert spec.config.model_fields["kind"].default == "single"  # every section is a SystemSection
    builtin = [row[0] for row in available_systems() if row[1] == "built in"]
    assert builtin == ["single", "team", "chain", "router", "budget", "search", "turns", "puppeteer", "program"]


def test_built_rejects_a_name_that_is_both_trainable_and_frozen():
    system = SingleAgentSystem(None, "p", {})
    with pytest.raises(ValueError, match="both trainable and frozen"):
        Built(system, {"solver": "solver"}, frozen={"solver": object()})
    with pytest.raises(ValueError, match="at least one trainable"):
        Built(system, {})


def test_roles_sharing_a_policy_get_one_learner(tiny_config, one_thread):
    """Two agent names on one policy: one adapter, one learner; each agent samples from that adapter."""
    config = tiny_config(f"system.kind={HERE}:TWO_ROLES")
    assert type(config.system) is SingleConfig and config.system.kind == f"{HERE}:TWO_ROLES"
    engine = build_parts(config)
    assert list(engine.learners) == ["shared", "own"]
    assert all(isinstance(x, PolicyLearner) for x in engine.learners.values())
    assert engine.model.policies == ("shared", "own")
    assert {n: engine.agents[n].policy for n in ("coder", "tester", "judge")} == {
        "coder": "shared", "tester": "shared", "judge": "own"
    }
    assert engine.eval_agents["coder"].params.greedy and not engine.agents["coder"].params.greedy


@pytest.mark.parametrize(
    "kind, message",
    [
        ("routr", "system.kind: unknown system 'routr'; did you mean 'router'? available: budget, chain, program"),
        ("no_such_module:SYSTEM", "system.kind: cannot import 'no_such_module'"),
        (f"{HERE}:MISSING", f"system.kind: module '{HERE}' has no 'MISSING'"),
        (f"{HERE}:NOT_A_SPEC", "is a function, not a system"),
        (f"{HERE}:", "is not of the form package.module:OBJECT"),
    ],
)
def test_a_kind_that_names_no_system_is_a_config_error(kind, message, tiny_config):
    with pytest.raises(ConfigError, match=re.escape(message)):
        tiny_config(f"system.kind={kind}")


def test_the_system_section_is_checked_against_the_systems_own_model(tiny_config):
    with pytest.raises(ConfigError) as err:
        tiny_config("system.kind=router", "system.max_turnz=2", "system.rho=3")
    text = str(err.value)
    assert "system.max_turnz: unknown key; did you mean 'max_turns'?" in text
    assert "system.rho: Input should be a valid dictionary" in text
    with pytest.raises(ConfigError, match="system.prompt: unknown key"):  # the single agent's key, not the router's
        tiny_config("system.kind=router", "system.prompt=hi")
    assert config_model(resolve_system("router").config) is config_model(resolve_system("router").config)


def test_an_installed_package_is_found_by_its_entry_point(tmp_path, monkeypatch, tiny_config, capsys):
    """A distribution on sys.path with a `masrl.systems` entry point, as `pip install` leaves it."""
    dist = tmp_path / "my_masrl_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: my-masrl-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        f"[masrl.systems]\ntwo-roles = {HERE}:TWO_ROLES\nbroken = no_such_module:SYSTEM\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    resolve_system.cache_clear()
    try:
        assert resolve_system("two-roles") is TWO_ROLES
        assert tiny_config("system.kind=two-roles").system.kind == "two-roles"
        from masrl.cli import main

        assert main(["systems"]) == 0
        out = capsys.readouterr().out
        assert f"two-roles        installed ({HERE}:TWO_ROLES)" in out
        assert "broken           installed (no_such_module:SYSTEM)" in out and "cannot be loaded" in out
    finally:
        resolve_system.cache_clear()


def test_a_task_family_resolves_by_dotted_path_too():
    from masrl.registry import resolve_task

    wc = pytest.importorskip("masrl_writer_critic", reason="scripts/setup.sh installs examples/writer-critic")
    assert resolve_task("masrl_writer_critic:LIST_SUM") is resolve_task("list-sum") is wc.LIST_SUM
    with pytest.raises(ConfigError, match="task.kind: 'masrl_writer_critic:SYSTEM' is a SystemSpec, not a task family"):
        resolve_task("masrl_writer_critic:SYSTEM")


def test_an_old_layout_config_loads_as_the_new_one_and_says_what_moved(tmp_path, capsys):
    old = tmp_path / "old.yaml"
    old.write_text(
        "system: {kind: router, max_turns: 2, prompt: ignored, prefill: false}\n"
        "pool: {kind: simulated, seed: 3}\n"
        "router: {dual_ascent: true, rho: {sim-strong: 0.2}}\n"
        "budget: {max_rounds: 5}\n"  # an old run directory saved every system's section
        "task: {kind: math, difficulty: mixed}\n"
    )
    new = tmp_path / "new.yaml"
    new.write_text(
        "system: {kind: router, max_turns: 2, prefill: false, dual_ascent: true, rho: {sim-strong: 0.2},\n"
        "         pool: {kind: simulated, seed: 3}}\n"
        "task: {kind: math, difficulty: mixed}\n"
    )
    assert load_config(old).model_dump() == load_config(new).model_dump()
    err = capsys.readouterr().err
    assert "the router: section is now system" in err and "the pool: section is now system.pool" in err
    assert "ignored the sections of other systems: budget" in err
    # An old override on a new config moves the same way (the docs' measured commands keep working).
    assert load_config(new, ["router.dual_lr=0.1", "pool.seed=4"]).system.pool.seed == 4
    search = load_config("search-fof", ["search.synthetic={people: 60}"])
    assert search.system.kind == "search" and search.task.config == {"synthetic": {"people": 60}}


def test_the_view_finds_the_runs_system_its_curves_and_views(tmp_path):
    from masrl.view import system_spec

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("system: {kind: search}\n")
    assert [key for key, _ in system_spec(run).page.curves][:2] == ["eval/f1", "calls_per_question"]
    (run / "config.yaml").write_text("system: {kind: router}\n")
    assert system_spec(run).page.curves == () and system_spec(run).page.views is not None
    (run / "config.yaml").write_text("system: {kind: gone_plugin:SYSTEM}\n")
    assert system_spec(run) is None  # an uninstalled plugin's run still gets the engine's curves
