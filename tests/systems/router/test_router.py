"""The router package's spec (masrl/systems/router/__init__.py): its `masrl champ-pool OUT` command builds
the recorded CHAMP pool file and prints its table."""

from __future__ import annotations

import argparse

from masrl.systems.router import SYSTEM


class Built:
    def table(self):
        return "| model | accuracy |"


def test_the_champ_pool_command_writes_the_file_it_is_given(monkeypatch, capsys):
    written = []
    monkeypatch.setattr("masrl.systems.router.build_champ_pool", lambda out: written.append(out) or Built())
    command = SYSTEM.commands["champ-pool"]
    parser = argparse.ArgumentParser()
    command.arguments(parser)
    assert command.run(parser.parse_args(["runs/champ-pool.jsonl"])) == 0
    assert written == ["runs/champ-pool.jsonl"] and capsys.readouterr().out == "| model | accuracy |\n"
    assert SYSTEM.kind == "router" and SYSTEM.evaluate is not None and SYSTEM.serving is not None
