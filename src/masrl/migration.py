"""Configs written before systems became packages, moved into the current layout.

Then each system had a top-level section of its own, named after it (`router:`, `budget:`,
`puppeteer:`, `search:`, `turns:`), beside a `system` section of a few keys of several systems
and a shared `pool:` section; now all of it is the one `system` section. `LEGACY` says, for each
built-in system, which old sections and keys were its own; `migrate` moves them, drops the
sections of other systems (every old run directory saved all of them) and says what it moved.

This is the only module that knows the old layout; it sits above the registry (it resolves the
system a config names to find its old layout in `LEGACY`) and below config loading.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from masrl.config import SystemSection
from masrl.registry import builtin_systems, resolve_system


@dataclass(frozen=True)
class Legacy:
    """Where a built-in system's settings lived before systems became packages."""

    sections: Mapping[str, str] = field(default_factory=dict)  # old top-level section -> key in system ("" = flat)
    system_keys: tuple[str, ...] = ()  # old `system.*` keys that were this system's
    moves: Mapping[str, str] = field(default_factory=dict)  # old dotted key -> new dotted key


# built-in system kind -> where its settings lived (plugins never had an old layout)
LEGACY: dict[str, Legacy] = {
    "single": Legacy(system_keys=("prompt",)),
    "router": Legacy(sections={"router": "", "pool": "pool"}, system_keys=("max_turns", "prefill")),
    "budget": Legacy(sections={"budget": "", "pool": "pool"}),
    "search": Legacy(
        sections={"search": ""},
        moves={f"search.{k}": f"task.config.{k}" for k in ("pages", "train_questions", "eval_questions", "synthetic")},
    ),
    "turns": Legacy(sections={"turns": ""}),
    "puppeteer": Legacy(sections={"puppeteer": "", "pool": "pool"}, system_keys=("prefill",)),
}


def migrate(data: dict) -> list[str]:
    """Move a config in the old layout into the current one, in place; one note per move, for the user."""
    system = data.get("system")
    if system is not None and not isinstance(system, dict):
        return []  # validation says what is wrong
    system = dict(system or {})
    notes = []
    kind = str(system.get("kind", SystemSection().kind))
    spec = resolve_system(kind)
    builtin = builtin_systems()
    old_sections = {name for legacy in LEGACY.values() for name in legacy.sections}
    if not old_sections & set(data):
        return notes
    legacy = LEGACY.get(spec.kind, Legacy()) if builtin.get(spec.kind) is spec else Legacy()
    for source, target in legacy.moves.items():
        value = _pop_path(data, source)
        if value is not _MISSING:
            _set_path(data, target, value)
            notes.append(f"{source} is now {target}")
    other_keys = {k for other in LEGACY.values() for k in other.system_keys} - set(legacy.system_keys)
    system = {k: v for k, v in system.items() if k not in other_keys}
    for section, target in legacy.sections.items():
        if section in data:
            values = data.pop(section)
            if target:
                system[target] = _merge(system.get(target) or {}, values or {})
            else:
                system = _merge(system, values or {})
            notes.append(f"the {section}: section is now system{'.' + target if target else ''}")
    dropped = sorted(old_sections & set(data))
    for section in dropped:
        del data[section]
    if dropped:
        notes.append(f"ignored the sections of other systems: {', '.join(dropped)}")
    data["system"] = system
    return notes


_MISSING = object()


def _pop_path(data: dict, dotted: str) -> Any:
    *parents, leaf = dotted.split(".")
    node = data
    for part in parents:
        node = node.get(part) if isinstance(node, dict) else None
    return node.pop(leaf, _MISSING) if isinstance(node, dict) else _MISSING


def _set_path(data: dict, dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node = data
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value


def _merge(base: dict, top: dict) -> dict:
    """`top` over `base`, merging nested mappings (an old `pool:` over a new `system.pool:`)."""
    out = dict(base)
    for k, v in top.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out
