"""masrl's argument parser (masrl/cli/parser.py): its own commands, and the commands systems add, where
masrl's own names come first. (Every command the docs show parses: tests/test_docs_commands.py.)"""

from __future__ import annotations

import pytest

from masrl.cli.parser import build_parser, system_commands


def test_train_takes_a_config_overrides_and_resume():
    args = build_parser(()).parse_args(["train", "router", "trainer.steps=2", "model.name=tiny", "--resume", "runs/r"])
    assert (args.command, args.config, args.overrides, args.resume) == ("train", "router", ["trainer.steps=2",
                                                                        "model.name=tiny"], "runs/r")  # fmt: skip
    assert build_parser(()).parse_args(["train"]).config is None  # the packaged default


def test_a_systems_command_is_a_command_unless_masrl_owns_the_name():
    spec, command = system_commands(())["champ-pool"]
    assert spec.kind == "router"
    assert build_parser(()).parse_args(["champ-pool", "out.jsonl"]).out == "out.jsonl"
    assert "champ-pool" not in system_commands(("champ-pool",))


def test_an_unknown_command_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        build_parser(()).parse_args(["fly"])
    assert info.value.code == 2 and "invalid choice: 'fly'" in capsys.readouterr().err
