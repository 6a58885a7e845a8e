"""The config reference (issue 38, item 6): `masrl config [CONFIG]` and docs/config.md, both read from the schema.

Every key of the engine's sections and of every built-in system's section has a description; the page
is what `masrl config --markdown` prints now; `masrl config default` lists every key of the default
config, its system's own included; what two descriptions claim (reward.weights, task.dataset) holds.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import Field

from masrl.cli import main
from masrl.config import Config, Section
from masrl.loading import load_config
from masrl.reference import Key, config_markdown, keys
from masrl.registry import resolve_system
from masrl.systems import BUILTIN
from masrl.systems.single import SingleAgentSystem
from masrl.tasks.math import DIFFICULTY, MathTask, reasoning_gym_datasets
from masrl.types import Reply, TaskItem

ROOT = Path(__file__).resolve().parents[1]
REGENERATE = "PYTHONPATH=src python -m masrl.cli config --markdown > docs/config.md"


def test_every_key_has_a_description():
    models = {"the engine": Config, **{f"system.kind {kind}": resolve_system(kind).config for kind in BUILTIN}}
    bare = {where: [k.name for k in keys(model) if not k.description.strip()] for where, model in models.items()}
    bare = {where: names for where, names in bare.items() if names}
    assert not bare, f"give these config keys a description (Field(..., description=...)): {bare}"


def test_docs_config_md_is_current():
    page = (ROOT / "docs" / "config.md").read_text()
    assert page == config_markdown(), f"docs/config.md is not current; regenerate it: {REGENERATE}"


def test_masrl_config_markdown_prints_the_page(capsys):
    assert main(["config", "--markdown"]) == 0
    assert capsys.readouterr().out == config_markdown()


def test_masrl_config_router_lists_every_key_with_type_default_description_and_its_value(capsys):
    assert main(["config", "router"]) == 0
    out = capsys.readouterr().out
    config = load_config("router")
    every = keys(type(config), values=config)
    assert {k.name for k in every} >= {k.name for k in keys(Config)} | {"system.max_turns", "system.pool.kind"}
    listed = [line.split(":")[0] for line in out.splitlines() if line and not line.startswith((" ", "["))]
    assert listed == [k.name for k in every]
    lines = out.splitlines()
    at = lines.index('trainer.steps: int = 40  (here: 24)')  # router.yaml trains 24 steps
    assert lines[at + 1] == "    training steps (>= 1)"
    assert 'system.kind: str = "single"  (here: "router")' in lines
    assert "system.max_turns: int = 3" in lines


def test_masrl_config_without_a_config_lists_the_engine_keys(capsys):
    assert main(["config"]) == 0
    listed = [line.split(":")[0] for line in capsys.readouterr().out.splitlines() if line and line[0] not in " ["]
    assert listed == [k.name for k in keys(Config)]


def test_keys_walk_nested_sections_with_types_defaults_and_bounds():
    class Inner(Section):
        rate: float | None = Field(0.5, gt=0.0, le=1.0, description="a share")

    class Outer(Section):
        n: int = Field(3, ge=1, description="how many")
        inner: Inner = Inner()
        tags: tuple[str, ...] = Field(("a",), description="names")

    assert keys(Outer) == [
        Key("n", "int", 3, "how many", ">= 1"),
        Key("inner.rate", "float | None", 0.5, "a share", "> 0.0, <= 1.0"),
        Key("tags", "tuple[str, ...]", ["a"], "names"),
    ]
    assert [k.meaning for k in keys(Outer)] == ["how many (>= 1)", "a share (> 0.0, <= 1.0)", "names"]
    assert [k.value for k in keys(Outer, values=Outer(n=4))] == [4, 0.5, ["a"]]


# ---------------------------------------------------------------- what the descriptions claim
def test_reward_weights_make_the_single_systems_reward():
    task = MathTask("basic_arithmetic", seed=0, difficulty="easy")
    item = TaskItem("i", "2 + 2", "4")
    system = SingleAgentSystem(task, "p", {"correct": 1.0, "format": 0.1})
    state = system.start(item)
    step = system.next_step(state)

    def reward(text: str) -> float:
        return system.advance(state, step, Reply(text, 1, 1, 0.0)).reward

    assert reward("<answer>4</answer>") == pytest.approx(1.0 * 1 + 0.1 * 1.0)
    assert reward("<answer>5</answer>") == pytest.approx(0.1 * 1.0)
    assert reward("<answer>4</answer> done") == pytest.approx(1.0 * 1 + 0.1 * 0.5)  # text after the tag: format 0.5
    assert reward("it is 5") == 0.0
    only_correct = SingleAgentSystem(task, "p", {"correct": 1.0})  # a component left out weighs 0
    assert only_correct.advance(state, step, Reply("<answer>4</answer>", 1, 1, 0.0)).reward == 1.0


def test_reward_weights_are_read_by_the_single_and_chain_systems_alone():
    users = [p.relative_to(ROOT / "src").as_posix() for p in (ROOT / "src" / "masrl").rglob("*.py")
             if "reward.weights" in p.read_text() and p.name not in ("config.py", "loading.py")]  # fmt: skip
    assert sorted(users) == ["masrl/systems/chain/__init__.py", "masrl/systems/chain/system.py", "masrl/systems/single.py"]


def test_the_dataset_description_names_the_datasets():  # the error lists them all: tests/tasks/test_math.py
    description = Config.model_fields["task"].annotation.model_fields["dataset"].description
    names = reasoning_gym_datasets()
    assert all(name in description for name in DIFFICULTY)  # the datasets with levels of their own
    named = "gcd, lcm, decimal_arithmetic, fraction_simplification, simple_equations, prime_factorization"
    assert named in description and all(n in names for n in named.split(", "))
