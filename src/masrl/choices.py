"""The names a config key may take, read from the tables where each choice is made.

The config schema (masrl.config, layer 0) types these keys as plain strings: it sits below the
algorithms and engines, so it cannot see their tables. `CHOICES` maps each such key to the table
that defines its names (a registry at the bottom of an algorithm module, a tuple beside the code
that chooses), so a name is written once, where its function registers. masrl.loading refuses any
other name before anything loads (`unknown_names`), and the config reference (masrl.reference)
lists them (tests/test_choices.py holds the three together).
"""

from __future__ import annotations

from collections.abc import Mapping

from masrl import device
from masrl.algos.advantages import ADVANTAGES, TOKEN_ADVANTAGES
from masrl.algos.credit import CREDITS, GROUPINGS, SAMPLE_WEIGHTS
from masrl.algos.losses import AGGREGATIONS
from masrl.generation.engine import ENGINES
from masrl.generation.llama import PRECISIONS
from masrl.rollout.rules import BRANCH_RULES

CHOICES: dict[str, tuple[str, ...]] = {
    "sampler.rule": tuple(BRANCH_RULES),
    "rollout.engine": ENGINES,
    "rollout.precision": tuple(PRECISIONS),
    "algo.advantage": (*ADVANTAGES, *TOKEN_ADVANTAGES),
    "algo.credit": tuple(CREDITS),
    "algo.grouping": tuple(GROUPINGS),
    "algo.aggregation": tuple(AGGREGATIONS),
    "algo.sample_weight": tuple(SAMPLE_WEIGHTS),
    "trainer.device": device.DEVICES,
    "trainer.precision": device.PRECISIONS,
}


def unknown_names(data: Mapping) -> list[str]:
    """One line per key of `data` (a config's sections, as read) whose string names nothing in its table:
    `algo.advantage: 'ppo' is not a registered name; registered: grpo, ...`. Values of another type are
    left to the schema, which says that a string is wanted."""
    problems = []
    for key, names in CHOICES.items():
        section, field = key.split(".")
        values = data.get(section)
        value = values.get(field) if isinstance(values, Mapping) else None
        if isinstance(value, str) and value not in names:
            problems.append(f"{key}: {value!r} is not a registered name; registered: {', '.join(names)}")
    return problems
