"""The router served (masrl/systems/router/serving.py): a request's pool and caps checked against the
trained pool, the answer as the last draft, and the audit of who drafted and what the controller said."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from masrl.systems.api import ServeOptions
from masrl.systems.router.action import Action
from masrl.systems.router.serving import RequestLedger, answer, audit, configure, limits
from masrl.types import Call, Episode, Reply, TaskItem

ROUTER = SimpleNamespace(agents=("sim-weak", "sim-medium", "sim-strong"))


def test_a_requests_pool_and_caps_are_checked_against_the_trained_pool():
    assert limits(ROUTER, {}) == (frozenset(ROUTER.agents), {})
    assert limits(ROUTER, {"pool": ["sim-weak"], "caps": {"sim-weak": 2}}) == (frozenset({"sim-weak"}), {"sim-weak": 2})
    for fields, message in [({"pool": []}, "pool must be a non-empty list"), ({"caps": {"sim-weak": -1}}, "caps must map"),
                            ({"caps": {"sim-weak": True}}, "caps must map"), ({"pool": ["gpt"]}, "unknown agents ['gpt']"),
                            ({"pool": ["sim-weak"], "caps": {"sim-weak": 0}}, "leave no agent to call")]:  # fmt: skip
        with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
            limits(ROUTER, fields)


def test_the_ledger_allows_an_agent_in_the_pool_until_its_cap():
    ledger = RequestLedger(ROUTER.agents, {}, 1, pool=frozenset({"sim-weak", "sim-strong"}), caps={"sim-strong": 1})
    assert ledger.allowed("sim-weak") and ledger.allowed("sim-strong") and not ledger.allowed("sim-medium")
    ledger.calls["sim-strong"] = 1
    assert not ledger.allowed("sim-strong")
    assert configure(ROUTER, ServeOptions()) is ROUTER  # no limits asked: the trained router as it is


def call(id, parent, role, agent, turn, action=None, text="x"):
    return Call(id, parent, agent, role, turn, (), Reply(text, 1, 1, 0.0), action=action)


def test_the_answer_is_the_last_draft_and_the_audit_says_who_and_what():
    ep = Episode(TaskItem("q", "?", "4"), (
        call("0", None, "controller", "controller", 1, Action("route", agent="sim-weak")),
        call("0.0", "0", "agent", "sim-weak", 1, text="5"),
        call("0.0.0", "0.0", "controller", "controller", 2, Action("route", verdict=False, agent="sim-strong")),
        call("0.0.0.0", "0.0.0", "agent", "sim-strong", 2, text="4"),
        call("0.0.0.0.0", "0.0.0.0", "controller", "controller", 3, Action("stop", verdict=True)),
    ))  # fmt: skip
    assert answer(ep) == "4"
    assert audit(ep) == {"drafts_by": ["sim-weak", "sim-strong"], "verdicts": [False, True],
                         "routed_to": ["sim-weak", "sim-strong"]}  # fmt: skip
    assert answer(Episode(ep.task, ep.calls[:1])) == ""
