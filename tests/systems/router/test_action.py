"""The router controller's parsed decision (masrl/systems/router/action.py): kinds compare as their
names, and an action's repr names its kind and only the fields it sets."""

from __future__ import annotations

import pytest

from masrl.systems.router.action import Action, ActionKind, LabelStyle


@pytest.mark.parametrize(
    "action, shown",
    [
        (Action("route", verdict=False, agent="sim-strong"), "Action(kind='route', verdict=False, agent='sim-strong')"),
        (Action(ActionKind.STOP, verdict=True), "Action(kind='stop', verdict=True)"),
        (Action("format_error", reason="no <model> tag"), "Action(kind='format_error', reason='no <model> tag')"),
    ],
)
def test_an_action_is_its_kind_and_shows_the_fields_it_sets(action, shown):
    assert isinstance(action.kind, ActionKind) and action.kind == shown.split("'")[1]
    assert repr(action) == shown
    assert LabelStyle("numbers") is LabelStyle.NUMBERS
