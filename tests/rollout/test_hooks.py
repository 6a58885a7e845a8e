"""A system's optional methods (docs/api.md) are Protocols, found once when the engine builds the system."""

from __future__ import annotations

from smoke import tiny_run

from masrl.loading import load_config
from masrl.parts import build_parts
from masrl.registry import resolve_system
from masrl.rollout.hooks import Expands, Observes, Stateful, SystemHooks


class Plain:
    pass


class Everything:
    def __init__(self):
        self.state = {"lam": 0.5}

    def observe(self, episodes):
        return {"seen": float(len(episodes))}

    def state_dict(self):
        return dict(self.state)

    def load_state_dict(self, state):
        self.state = dict(state)

    def eval_metrics(self, episodes):
        return {"mine": 1.0}

    def eval_item_metrics(self, episode):
        return {"mine": 1.0}

    async def expand(self, agents, task, rule):
        raise NotImplementedError


class SavesOnly:
    observe = None  # set to None: absent, as `getattr(system, "observe", None)` read it

    def state_dict(self):
        return {}


def test_hooks_are_what_the_system_has():
    assert SystemHooks.of(Plain()) == SystemHooks()
    system = Everything()
    hooks = SystemHooks.of(system)
    assert hooks.observe([1, 2]) == {"seen": 2.0} and hooks.state is system
    assert hooks.eval_metrics([]) == {"mine": 1.0} and hooks.eval_item_metrics(None) == {"mine": 1.0}
    assert isinstance(system, Expands) and not isinstance(Plain(), Expands)


def test_a_method_set_to_none_and_half_of_a_state_pair_are_absent():
    assert not isinstance(SavesOnly(), Observes) and not isinstance(SavesOnly(), Stateful)
    assert SystemHooks.of(SavesOnly()) == SystemHooks()


def test_the_engine_keeps_its_spec_and_the_hooks_of_its_system(one_thread):
    search = build_parts(load_config("search-fof", tiny_run()))
    assert search.spec is resolve_system("search") and search.hooks == SystemHooks.of(search.system, search.errors)
    assert search.hooks.observe is not None and search.hooks.eval_item_metrics is not None
    assert search.hooks.state is None
    search.close()
    router = build_parts(load_config("router-dual-ascent", tiny_run()))
    assert router.spec is resolve_system("router") and router.hooks.state is router.system
    router.close()
