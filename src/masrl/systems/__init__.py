"""Systems: who acts next and how the state changes (DESIGN.md, "System").

Each system declares itself with one `SystemSpec` (masrl.systems.api). `resolve_system(kind)`
finds the spec a config's `system.kind` names, in this order:

1. a built-in system (`BUILTIN`: each paper's system is one package here, imported when used);
2. a dotted path `package.module:OBJECT` to a `SystemSpec` (a user's system, no install needed);
3. an entry point named `kind` in the group `masrl.systems` of an installed package.
"""

from __future__ import annotations

import difflib
import functools
import importlib
from importlib.metadata import entry_points
from typing import Any

from masrl.config import ConfigError
from masrl.systems.api import Built, SystemSpec

__all__ = [
    "BUILTIN", "ENTRY_POINTS", "Built", "SystemSpec", "available_systems", "builtin_systems", "listing", "resolve",
    "resolve_system",
]

ENTRY_POINTS = "masrl.systems"

# kind -> "module:object"; `pipeline` is the search system's name before it became a package.
BUILTIN: dict[str, str] = {
    "single": "masrl.systems.single:SYSTEM",
    "router": "masrl.systems.router:SYSTEM",
    "budget": "masrl.systems.budget:SYSTEM",
    "search": "masrl.systems.search:SYSTEM",
    "pipeline": "masrl.systems.search:SYSTEM",
    "turns": "masrl.systems.turns:SYSTEM",
    "puppeteer": "masrl.systems.puppeteer:SYSTEM",
    "program": "masrl.systems.program:SYSTEM",
}


def load_object(target: str, expected: type, what: str, key: str):
    """The object at `module:attribute`, checked to be an `expected`; a ConfigError naming `key` if not."""
    module, _, attr = target.partition(":")
    if not module or not attr:
        raise ConfigError(f"{key}: {target!r} is not of the form package.module:OBJECT")
    try:
        obj = getattr(importlib.import_module(module), attr)
    except ImportError as exc:
        raise ConfigError(f"{key}: cannot import {module!r} for {target!r}: {exc}") from None
    except AttributeError:
        raise ConfigError(f"{key}: module {module!r} has no {attr!r}") from None
    if not isinstance(obj, expected):
        raise ConfigError(f"{key}: {target!r} is a {type(obj).__name__}, not a {what}")
    return obj


def plugin_targets(group: str) -> dict[str, str]:
    """Installed plugins of an entry-point group: name -> "module:object"."""
    return {ep.name: ep.value for ep in entry_points(group=group)}


def resolve(kind: str, builtin: dict[str, str], group: str, expected: type, what: str, key: str):
    """The registry look-up that systems and task families share (built in, dotted path, entry point)."""
    if kind in builtin:
        return load_object(builtin[kind], expected, what, key)
    if ":" in kind:
        return load_object(kind, expected, what, key)
    installed = plugin_targets(group)
    if kind in installed:
        return load_object(installed[kind], expected, what, key)
    known = sorted({*builtin, *installed})
    close = difflib.get_close_matches(kind, known, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise ConfigError(
        f"{key}: unknown {what} {kind!r}; {hint}available: {', '.join(known)} "
        f"(or package.module:OBJECT, or a package installed with a {group!r} entry point)"
    )


@functools.cache
def resolve_system(kind: str) -> SystemSpec:
    return resolve(kind, BUILTIN, ENTRY_POINTS, SystemSpec, "system", "system.kind")


def builtin_systems() -> dict[str, SystemSpec]:
    """Every built-in name (old names too) -> its spec."""
    return {kind: resolve_system(kind) for kind in BUILTIN}


def listing(builtin: list[str], group: str, resolver) -> list[tuple[str, str, Any, str]]:
    """(name, where it comes from, the loaded object or None, the error loading it) for the built-in
    names and every installed plugin of `group`; a plugin that fails to load is listed with its error."""
    rows: list[tuple[str, str, Any, str]] = [(name, "built in", resolver(name), "") for name in builtin]
    for name, target in sorted(plugin_targets(group).items()):
        try:
            rows.append((name, f"installed ({target})", resolver(name), ""))
        except ConfigError as exc:
            rows.append((name, f"installed ({target})", None, str(exc)))
    return rows


def available_systems() -> list[tuple[str, str, SystemSpec | None, str]]:
    """`listing` of the systems; old built-in names are listed under their new name only."""
    current = [kind for kind, spec in builtin_systems().items() if spec.kind == kind]
    return listing(current, ENTRY_POINTS, resolve_system)
