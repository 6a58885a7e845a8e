"""The registry: the system or task family a config names, found by its kind, and the lists of both.

A kind (`system.kind`, `task.kind`) is looked up in this order:

1. a built-in name: `masrl.systems.BUILTIN` and `masrl.tasks.BUILTIN`, plain tables of
   "module:OBJECT" (each paper's system is one package, imported only when its kind is used);
2. a dotted path `package.module:OBJECT` (a user's system or task, no install needed);
3. an entry point named `kind` in the group `masrl.systems` (`masrl.tasks`) of an installed package.

The registry sits above the contract it checks against (`SystemSpec`, `TaskFamily`) and below
everything that turns a config into objects (config loading, the engine, the CLI); it imports
nothing above it (docs/architecture.md).
"""

from __future__ import annotations

import difflib
import functools
import importlib
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

from masrl.config import ConfigError
from masrl.systems import BUILTIN as BUILTIN_SYSTEMS
from masrl.systems.api import SystemSpec
from masrl.tasks import BUILTIN as BUILTIN_TASKS
from masrl.tasks.base import Task, TaskFamily

SYSTEM_PLUGINS = "masrl.systems"  # the entry-point group of installed systems
TASK_PLUGINS = "masrl.tasks"  # the entry-point group of installed task families

Listed = tuple[str, str, Any, str]  # (name, where it comes from, the loaded object or None, the error loading it)


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
    """The look-up that systems and task families share (built in, dotted path, entry point)."""
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


def listing(builtin: list[str], group: str, resolver: Callable[[str], Any]) -> list[Listed]:
    """(name, where it comes from, the loaded object or None, the error loading it) for the built-in
    names and every installed plugin of `group`; a plugin that fails to load is listed with its error."""
    rows: list[Listed] = [(name, "built in", resolver(name), "") for name in builtin]
    for name, target in sorted(plugin_targets(group).items()):
        try:
            rows.append((name, f"installed ({target})", resolver(name), ""))
        except ConfigError as exc:
            rows.append((name, f"installed ({target})", None, str(exc)))
    return rows


# ---------------------------------------------------------------- systems
@functools.cache
def resolve_system(kind: str) -> SystemSpec:
    return resolve(kind, BUILTIN_SYSTEMS, SYSTEM_PLUGINS, SystemSpec, "system", "system.kind")


def builtin_systems() -> dict[str, SystemSpec]:
    """Every built-in name -> its spec."""
    return {kind: resolve_system(kind) for kind in BUILTIN_SYSTEMS}


def available_systems() -> list[Listed]:
    """`listing` of the systems."""
    return listing(list(BUILTIN_SYSTEMS), SYSTEM_PLUGINS, resolve_system)


# ---------------------------------------------------------------- task families
@functools.cache
def resolve_task(kind: str) -> TaskFamily:
    return resolve(kind, BUILTIN_TASKS, TASK_PLUGINS, TaskFamily, "task family", "task.kind")


def build_task(spec: Any) -> Task:
    """The task of a config's `task` section (masrl.config.TaskConfig)."""
    try:
        return resolve_task(spec.kind).build(spec)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"task.config for {spec.kind}: {exc}") from None


def available_tasks() -> list[Listed]:
    """(kind, where it comes from, its family or None, the error loading it), built in and installed."""
    return listing(list(BUILTIN_TASKS), TASK_PLUGINS, resolve_task)
