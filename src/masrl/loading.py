"""Reading a config: a YAML file plus dotted command-line overrides, checked before anything heavy loads.

`load_config(path, overrides)` merges, moves an old layout into the current one (masrl.migration),
validates and returns a frozen `Config` (masrl.config, the schema) before any model loads. Every
mistake (unknown key, wrong type, value out of range, sections that do not fit each other or the
chosen system and task family, missing file) becomes one `ConfigError` whose message names each
bad field; the CLI prints it and exits with code 2. The resolved config is saved in the run
directory (`dump_config`), so `masrl train --resume RUN_DIR` and `masrl eval RUN_DIR` need nothing else.

This module sits above the registry (it resolves the system and task family a config names) and
below the engine (docs/architecture.md).
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import yaml
from pydantic import BaseModel, ValidationError

from masrl.checkpoint import atomic_write_text
from masrl.choices import unknown_names
from masrl.config import DEFAULT_CONFIG, PACKAGED, Config, ConfigError, SystemSection, config_model
from masrl.generation.engine import check_engine
from masrl.migration import migrate
from masrl.registry import resolve_system, resolve_task
from masrl.run.files import RunDir
from masrl.systems.api import SystemSpec


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Read YAML (or the packaged default), apply `a.b=value` overrides, validate."""
    path = Path(path) if path else DEFAULT_CONFIG
    if not path.exists() and (PACKAGED / f"{path}.yaml").exists():
        path = PACKAGED / f"{path}.yaml"  # a shipped config by name: `masrl train single-arithmetic`
    if not path.exists():
        shipped = ", ".join(sorted(p.stem for p in PACKAGED.glob("*.yaml")))
        raise ConfigError(f"config file {path} does not exist (shipped configs: {shipped})")
    if path.is_dir():  # `masrl train runs/x`: a run directory, or a folder of configs
        resume = f"; to continue the run in it: masrl train --resume {path}" if RunDir(path).config.exists() else ""
        raise ConfigError(f"{path} is a directory, not a YAML config file{resume}")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of sections, got {type(data).__name__}")
    for item in overrides:
        apply_override(data, item)
    for note in migrate(data):
        print(f"masrl: note: {path}: {note}", file=sys.stderr)
    return validate(data, source=str(path))


def apply_override(data: dict, item: str) -> None:
    """`trainer.lr=1e-5`: the value is parsed as YAML (numbers, lists, booleans)."""
    if "=" not in item:
        raise ConfigError(f"override {item!r} must look like section.key=value")
    key, raw = item.split("=", 1)
    parts = key.strip().split(".")
    if not all(parts):
        raise ConfigError(f"override {item!r} has an empty key")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    if isinstance(value, (dict, list)) and not raw.strip().startswith(("{", "[")):
        value = raw  # "Format: <answer>N</answer>" is a string with a colon, not a mapping
    node = data
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"override {item!r}: {part} is not a section")
    node[parts[-1]] = value


def validate(data: dict, source: str = "config") -> Config:
    """The typed config of `data`: its `system` section checked against the chosen system's own model,
    then the sections against each other, the system and the task family (`cross_checks`), then files."""
    system = data.get("system") or {}
    if not isinstance(system, dict):
        raise ConfigError(f"{source}: system must be a section (kind: ..., and the system's keys)")
    spec = resolve_system(str(system.get("kind", SystemSection().kind)))
    model = config_model(spec.config)
    names = unknown_names(data)  # the keys the schema types as str, checked against their tables (masrl.choices)
    try:
        config = model.model_validate({**data, "system": {**system, "kind": system.get("kind", spec.kind)}})
    except ValidationError as exc:
        raise ConfigError(_explain(exc, source, model, names)) from None
    if names:
        raise ConfigError("\n".join([f"{source}: {len(names)} problem(s)", *(f"  {line}" for line in names)]))
    try:
        cross_checks(config)
    except ValueError as exc:  # worded as the schema's own validation errors were when it ran these checks
        raise ConfigError(f"{source}: 1 problem(s)\n  config: Value error, {exc}{_task_hint(config, exc)}") from None
    problems = _check_files(config)
    if problems:
        raise ConfigError(f"{source}: " + "; ".join(problems))
    return config


# ---------------------------------------------------------------- cross-checks
def cross_checks(config: Config) -> None:
    """What no single field can say: raise ValueError at the first section that does not fit the
    chosen system, its task family or another section (the system's own `check` last)."""
    spec = resolve_system(config.system.kind)
    if config.model.lora_dropout > 0 and (config.algo.epochs > 1 or config.rollout.max_staleness > 0):
        # update.py computes the proximal log-probs without dropout and the current ones with it, and a
        # sampler never drops out: the ratio would carry dropout's noise (not 1 at the first epoch).
        raise ValueError("model.lora_dropout > 0 with algo.epochs > 1 or rollout.max_staleness > 0: the loss's "
                         "ratios compare two policies' log-probs, and dropout in one forward pass but not the "
                         "other makes them differ by its noise alone; set model.lora_dropout=0")  # fmt: skip
    _check_task(config, spec)
    _check_sampler(config, spec)
    check_engine(config.rollout, lora_rank=config.model.lora_rank, bases=config.model.bases,
                 behavior_cap=config.algo.behavior_cap)  # fmt: skip
    if config.algo.advantage == "gae" and config.model.lora_rank == 0:
        raise ValueError("algo.advantage 'gae' puts the value head on its own LoRA adapter: set model.lora_rank > 0")
    if spec.check is not None:
        spec.check(config)


def _check_task(config: Config, spec: SystemSpec) -> None:
    family = resolve_task(config.task.kind)
    task, kind = config.task.kind, config.system.kind
    if family.needs_path and not config.task.path:
        raise ValueError(f"task.path is required when task.kind is {task!r}")
    if family.system is not None and family.system != spec.kind:
        raise ValueError(f"task.kind {task!r} is made for system.kind {family.system!r}; system.kind is {kind!r}")
    if spec.own_tasks and family.system != spec.kind:
        raise ValueError(f"system.kind {kind!r} runs only task families made for it "
                         f"(TaskFamily(system={spec.kind!r})); task.kind {task!r} is not one")  # fmt: skip


def _task_hint(config: Config, problem: ValueError) -> str:
    """When a cross-check refused the task (a user's JSONL file with a turn-based config): the shipped
    configs that run this very task section, so the user need not try them one by one."""
    if "task.kind" not in str(problem):
        return ""
    task = config.task.model_dump(mode="json")
    fits = [path.stem for path in sorted(PACKAGED.glob("*.yaml")) if _runs_task(yaml.safe_load(path.read_text()), task)]
    return f"; task.kind {config.task.kind!r} runs with the shipped configs {', '.join(fits)}" if fits else ""


def _runs_task(data: dict, task: dict) -> bool:
    """Whether the shipped config `data` passes its schema and cross-checks with `task` as its task section."""
    system = data.get("system") or {}
    try:
        spec = resolve_system(str(system.get("kind", SystemSection().kind)))
        config = config_model(spec.config).model_validate({**data, "task": task})
        cross_checks(config)
    except (ValidationError, ValueError):
        return False
    return True


def _check_sampler(config: Config, spec: SystemSpec) -> None:
    s = config.sampler
    if s.rule not in spec.rules:
        raise ValueError(f"sampler.rule {s.rule!r} does not fit system.kind {config.system.kind!r}; "
                         f"its rules: {', '.join(spec.rules)}")  # fmt: skip


def _check_files(config: Config) -> list[str]:
    from masrl.models import check_model_name  # lazy: masrl.models loads torch (~1 s); only a config's check needs it

    problems = []
    # A family that declares task.path among its needs says itself how the file is built (masrl.preflight).
    family = resolve_task(config.task.kind)
    own_file = family.needs is not None and any(c.name == config.task.path for c in family.needs(config.task))
    if config.task.path and not own_file and not Path(config.task.path).expanduser().exists():
        problems.append(f"task.path: file {config.task.path} does not exist")
    named = {"model.name": config.model.name, **{f"model.bases.{p}": n for p, n in config.model.bases.items()}}
    for key, name in named.items():
        model_problem = check_model_name(name)
        if model_problem:
            problems.append(f"{key}: {model_problem}")
    return problems


# ---------------------------------------------------------------- messages
def _explain(exc: ValidationError, source: str, model: type[BaseModel] = Config, names: Sequence[str] = ()) -> str:
    """Every problem at once: the schema's, then the unknown names (`masrl.choices.unknown_names`)."""
    lines = [f"{source}: {exc.error_count() + len(names)} problem(s)"]
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            lines.append(f"  {loc}: unknown key{_did_you_mean(err['loc'], model)}")
        else:
            got = err.get("input")
            shown = "" if isinstance(got, dict) else f" (got {got!r})"
            lines.append(f"  {loc or 'config'}: {err['msg']}{shown}")
    return "\n".join([*lines, *(f"  {line}" for line in names)])


def _did_you_mean(loc: tuple, section: type[BaseModel] = Config) -> str:
    for part in loc[:-1]:
        field = section.model_fields.get(str(part))
        if field is None or not isinstance(field.annotation, type) or not issubclass(field.annotation, BaseModel):
            return ""
        section = field.annotation
    close = difflib.get_close_matches(str(loc[-1]), list(section.model_fields), n=1)
    known = ", ".join(section.model_fields)
    return f"; did you mean '{close[0]}'?" if close else f"; known keys: {known}"


def dump_config(data: Mapping, path: Path) -> None:
    """Write a resolved config's data (`config.model_dump(mode="json")`) as YAML that `load_config` reads back."""
    atomic_write_text(path, yaml.safe_dump(dict(data), sort_keys=False))
