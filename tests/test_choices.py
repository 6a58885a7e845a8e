"""The names a config key may take (masrl.choices): written once, in the table where each choice is made.

Every name of every table passes loading's names check and the schema, and the config reference lists it;
the schema types these keys as plain strings (so it holds no second copy of the names); an unknown name is
one line naming the key, the value and the registered names, reported with the schema's own problems.
"""

from __future__ import annotations

import pytest

from masrl.algos.advantages import ADVANTAGES
from masrl.algos.credit import CREDITS, GROUPINGS, SAMPLE_WEIGHTS
from masrl.algos.losses import AGGREGATIONS
from masrl.choices import CHOICES, unknown_names
from masrl.config import Config, ConfigError
from masrl.loading import load_config
from masrl.reference import keys
from masrl.registry import resolve_system
from masrl.systems import BUILTIN

EVERY = [(key, name) for key, names in CHOICES.items() for name in names]


@pytest.mark.parametrize("key, name", EVERY, ids=[f"{k}={n}" for k, n in EVERY])
def test_every_registered_name_passes_loading(key, name):
    """A name may still not fit the rest of the default config (a sampler rule of another system, the openai
    engine without servers): those are the cross-checks' refusals, never the names check's or the schema's."""
    try:
        config = load_config(None, [f"{key}={name}"])
    except ConfigError as exc:
        assert "not a registered name" not in str(exc) and "problem(s)\n  config: Value error" in str(exc), exc
    else:
        section, field = key.split(".")
        assert getattr(getattr(config, section), field) == name


def test_most_names_load_with_the_default_config():
    """The cross-checks' refusals above are the exception: a test of names that all fail would test nothing."""
    loaded = 0
    for key, name in EVERY:
        try:
            load_config(None, [f"{key}={name}"])
            loaded += 1
        except ConfigError:
            pass
    assert loaded >= len(EVERY) - 6, f"{loaded} of {len(EVERY)}"


def test_the_algorithm_registries_are_the_tables():
    assert set(CHOICES["algo.advantage"]) == {*ADVANTAGES, "gae"}
    assert CHOICES["algo.credit"] == tuple(CREDITS) and CHOICES["algo.grouping"] == tuple(GROUPINGS)
    assert CHOICES["algo.aggregation"] == tuple(AGGREGATIONS)
    assert CHOICES["algo.sample_weight"] == tuple(SAMPLE_WEIGHTS)


@pytest.mark.parametrize("key", sorted(CHOICES))
def test_the_schema_types_each_key_as_a_string_and_the_reference_lists_its_names(key):
    section, field = key.split(".")
    assert Config.model_fields[section].annotation.model_fields[field].annotation is str
    (listed,) = [k for k in keys(Config) if k.name == key]
    assert listed.type == "Literal[" + ", ".join(repr(n) for n in CHOICES[key]) + "]"
    assert listed.default in CHOICES[key]  # the schema's default is a registered name


@pytest.mark.parametrize("key", sorted(CHOICES))
def test_an_unknown_name_is_one_line_naming_the_key_the_value_and_the_names(key):
    with pytest.raises(ConfigError) as info:
        load_config(None, [f"{key}=no_such_name"])
    header, line = str(info.value).splitlines()
    assert header.endswith(": 1 problem(s)")
    assert line == f"  {key}: 'no_such_name' is not a registered name; registered: {', '.join(CHOICES[key])}"


def test_an_unknown_name_is_reported_with_the_schemas_problems():
    with pytest.raises(ConfigError) as info:
        load_config(None, ["trainer.steps=0", "algo.credit=tree-q", "rollout.engine=vllm"])
    lines = str(info.value).splitlines()
    assert lines[0].endswith(": 3 problem(s)") and lines[1].startswith("  trainer.steps:")
    assert lines[2:] == [
        "  rollout.engine: 'vllm' is not a registered name; registered: auto, hf, lean, openai",
        "  algo.credit: 'tree-q' is not a registered name; registered: tree_q, descendant_mean, immediate",
    ]


def test_values_of_another_type_are_left_to_the_schema():
    assert unknown_names({"algo": {"credit": 3}, "rollout": "not a section"}) == []
    with pytest.raises(ConfigError, match=r"algo.credit: Input should be a valid string"):
        load_config(None, ["algo.credit=3"])


def test_every_built_in_systems_rules_are_registered_rules():
    """A system names the sampler rules it supports (SystemSpec.rules): each must be one of BRANCH_RULES."""
    stray = {kind: set(resolve_system(kind).rules) - set(CHOICES["sampler.rule"]) for kind in BUILTIN}
    assert not {kind: rules for kind, rules in stray.items() if rules}
