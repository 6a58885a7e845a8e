"""The config reference: every key with its type, default and description, read from the schema.

`keys(model)` walks a pydantic config model (masrl.config: the engine's sections, and a system's
own `system` section) into one `Key` per leaf field, dotted as a command-line override names it
(`trainer.batch_size`), with its type, default, description and bounds (`ge=1`: `>= 1`); a key
that names a registered function or engine shows its names, read from its table (masrl.choices). `masrl config [CONFIG]`
prints them (`config_text`, with the values a config gives where they differ from the default) and
docs/config.md is `config_markdown()` as it stands (tests/test_reference.py keeps the page
current), so the page, the command and the schema cannot drift apart.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import annotated_types
from pydantic import BaseModel, TypeAdapter
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from masrl.choices import CHOICES
from masrl.config import Config

# What the page says before its tables (the tables come from the schema).
INTRO = """\
# Config reference

A config is a YAML file of sections plus dotted overrides on the command line
(`masrl train my.yaml trainer.lr=1e-4 system.max_turns=2`). The engine's sections are below, one
table each, with every key's type, default and meaning, as `src/masrl/config.py` declares them.
This page is generated from those declarations (`masrl config --markdown`), and
`masrl config CONFIG` prints the same for one config: every key, the system's own section
included, with the value the config gives where it is not the default (`masrl config default`).
Unknown keys, wrong types and values out of range are config errors: masrl prints every problem
at once and exits with code 2 before any model loads ([usage.md](usage.md)). The resolved config
is saved as `RUN_DIR/config.yaml`; `masrl train --resume RUN_DIR` and `masrl eval RUN_DIR` read it
back.

The `system` section holds `kind` and that system's own keys; each system documents its keys on
its page and in its package's `config.py`:
[router](router.md) (`masrl/systems/router/config.py`),
[budget](budget.md#config-keys-the-system-section-of-kind-budget-masrlsystemsbudgetconfigpy),
[search](search.md#config-keys),
[puppeteer](puppeteer.md#config-keys-the-system-section-of-kind-puppeteer-masrlsystemspuppeteerconfigpy),
[turns](turns.md#config-keys-the-system-section-of-kind-turns-masrlsystemsturnsconfigpy),
[program](program.md) (`masrl/systems/program/config.py`); a plugin's section is its own
`SystemSpec.config` model ([api.md](api.md)). Configs written before systems became packages
(`router:`, `budget:`, `puppeteer:`, `search:`, `turns:`, `pool:` sections) still load, and masrl
prints where each key moved. Shipped configs are in `src/masrl/configs/` and are named without
`.yaml` on the command line (`masrl train budget-grpo`).
"""

_BOUNDS = ((annotated_types.Gt, "gt", ">"), (annotated_types.Ge, "ge", ">="), (annotated_types.Lt, "lt", "<"),
           (annotated_types.Le, "le", "<="))  # fmt: skip
_UNSET = object()


@dataclass(frozen=True)
class Key:
    """One leaf of a config: `trainer.batch_size`, `int`, 8, "tasks per step", ">= 1"."""

    name: str
    type: str
    default: Any  # as JSON would write it
    description: str  # the field's own; "" when it has none
    bounds: str = ""  # ">= 1", "> 0.0, <= 1.0"
    value: Any = _UNSET  # what a given config sets (keys(..., values=config)); _UNSET: not asked

    @property
    def meaning(self) -> str:
        """The description, its bounds appended: `tasks per step (>= 1)`."""
        return f"{self.description} ({self.bounds})".strip() if self.bounds else self.description


def keys(model: type[BaseModel], prefix: str = "", values: BaseModel | None = None) -> list[Key]:
    """Every leaf field of `model` (a field that is itself a model is walked into), dotted from `prefix`."""
    out: list[Key] = []
    dumped = values.model_dump(mode="json") if values is not None else {}
    for name, field in model.model_fields.items():
        inner = getattr(values, name) if values is not None else None
        section = type(inner) if isinstance(inner, BaseModel) else field.annotation
        if isinstance(section, type) and issubclass(section, BaseModel):
            out += keys(section, f"{prefix}{name}.", inner)
            continue
        value = dumped[name] if values is not None else _UNSET
        dotted = f"{prefix}{name}"
        names = CHOICES.get(dotted)
        kind = f"Literal[{', '.join(map(repr, names))}]" if names else type_name(field.annotation)
        out.append(Key(dotted, kind, default_of(field), field.description or "", bounds(field), value))
    return out


def sections(config: type[Config] | Config = Config) -> list[tuple[str, str, list[Key]]]:
    """(name, what the section's docstring says, its keys) per section of a config (model or values)."""
    values = config if isinstance(config, Config) else None
    model = type(config) if values is not None else config
    out = []
    for name, field in model.model_fields.items():
        section = type(getattr(values, name)) if values is not None else field.annotation
        out.append((name, " ".join(inspect.cleandoc(section.__doc__ or "").split()),
                    keys(section, f"{name}.", getattr(values, name) if values is not None else None)))  # fmt: skip
    return out


def type_name(annotation: Any) -> str:
    """`int`, `str | None`, `Literal['a', 'b']`, `list[PoolAgentConfig]`: as a reader writes the type."""
    if isinstance(annotation, type) and not getattr(annotation, "__args__", None):
        return annotation.__name__
    return re.sub(r"\b(?:[A-Za-z_]\w*\.)+([A-Za-z_]\w*)", r"\1", repr(annotation))  # typing.Any -> Any


def default_of(field: FieldInfo) -> Any:
    """The field's default as the JSON (and YAML) of a config writes it."""
    default = field.default_factory() if field.default_factory is not None else field.default
    if default is PydanticUndefined:
        return None
    return TypeAdapter(field.annotation).dump_python(default, mode="json")


def bounds(field: FieldInfo) -> str:
    """The field's bounds as a reader writes them: `>= 0.0, < 1.0`."""
    return ", ".join(f"{sign} {getattr(m, attr)}" for m in field.metadata for cls, attr, sign in _BOUNDS
                     if isinstance(m, cls))  # fmt: skip


def _json(value: Any) -> str:
    return json.dumps(value)


# ---------------------------------------------------------------- what `masrl config` prints
def config_text(config: Config | None = None) -> str:
    """Every key as `name: type = default`, its description below; with `config`, the system's own keys
    too and `(here: value)` where the config sets another value than the default."""
    lines = []
    for name, doc, rows in sections(config if config is not None else Config):
        lines.append(f"[{name}]" + (f"  {doc}" if doc else ""))
        for key in rows:
            differs = key.value is not _UNSET and key.value != key.default
            here = f"  (here: {_json(key.value)})" if differs else ""
            lines.append(f"{key.name}: {key.type} = {_json(key.default)}{here}")
            lines.append(f"    {key.meaning}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


# ---------------------------------------------------------------- docs/config.md
def config_markdown() -> str:
    """docs/config.md: the intro, then one table per engine section."""
    parts = [INTRO]
    for name, doc, rows in sections(Config):
        parts.append(f"## `{name}`\n")
        if doc:
            parts.append(f"{doc}\n")
        parts.append(_table(rows))
    return "\n".join(parts)


def _table(rows: Sequence[Key]) -> str:
    lines = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for key in rows:
        cells = (f"`{key.name}`", f"`{key.type}`", f"`{_json(key.default)}`", key.meaning)
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"
