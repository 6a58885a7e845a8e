"""The budget controller served (masrl/systems/budget/serving.py): the request's mode fixes the system's,
the answer is the final <answer>, and the audit names the experts consulted and the episode's cost."""

from __future__ import annotations

from budget_doubles import system

from masrl.systems.api import ServeOptions
from masrl.systems.budget.action import Action
from masrl.systems.budget.serving import answer, audit, configure, modes
from masrl.types import Call, Episode, Reply, TaskItem


def test_a_request_runs_in_the_mode_it_names():
    budget = system()
    assert modes(budget) == ("low", "medium", "high")
    assert configure(budget, ServeOptions(mode="low")).fixed_mode == "low"
    assert configure(budget, ServeOptions()).fixed_mode is None  # none named: drawn per task as in training


def call(id, parent, role, agent, action=None, rewards=None):
    return Call(id, parent, agent, role, 0, (), Reply("x", 1, 1, 0.0), action=action, rewards=rewards or {})


def test_the_answer_and_the_audit_of_an_episode():
    ep = Episode(TaskItem("q", "?", "42"), (
        call("0", None, "controller", "controller", Action("call", agent="cheap")),
        call("0.0", "0", "expert", "cheap"),
        call("0.0.0", "0.0", "controller", "controller", Action("answer", answer="42"), {"cost": 0.003}),
    ))  # fmt: skip
    assert answer(ep) == "42"
    assert audit(ep) == {"experts": ["cheap"], "format_ok": True, "cost": 0.003}
    broken = Episode(ep.task, (call("0", None, "controller", "controller", Action("format_error", reason="?")),))
    assert answer(broken) == "" and audit(broken) == {"experts": [], "format_ok": False}
