"""The budget controller's parsed decision (masrl/systems/budget/action.py): kinds compare as their
names, and an action's repr names its kind and only the fields it sets."""

from __future__ import annotations

from masrl.systems.budget.action import Action, ActionKind, LabelStyle


def test_a_kind_given_as_its_name_becomes_the_kind():
    action = Action("call", agent="sim-mid")
    assert action.kind is ActionKind.CALL and action.kind == "call"
    assert LabelStyle("numbers") is LabelStyle.NUMBERS


def test_the_repr_gives_the_kind_and_the_fields_set():
    assert repr(Action(ActionKind.CALL, agent="sim-mid", query="6*7?")) == "Action(kind='call', agent='sim-mid', query='6*7?')"
    assert repr(Action("answer", answer="42")) == "Action(kind='answer', answer='42')"
    assert repr(Action("format_error", reason="empty <answer>")) == "Action(kind='format_error', reason='empty <answer>')"
    assert repr(Action("alone")) == "Action(kind='alone')"
