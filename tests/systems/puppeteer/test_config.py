"""Puppeteer's `system` section: the mistakes its check names, and the components it needs."""

from __future__ import annotations

import re

import pytest

from masrl.cli import main
from masrl.config import ConfigError
from masrl.components import MINILM
from masrl.loading import load_config
from masrl.systems.puppeteer.config import puppeteer_needs

pytestmark = pytest.mark.usefixtures("one_thread")


# ---------------------------------------------------------------- config
@pytest.mark.parametrize(
    "override, message",
    [
        ("system.patterns=[dance]", "system.patterns has unknown entries"),
        ("system.tools=[none, read_file]", "need system.folder"),
        ("sampler.rule=full_tree", "does not fit system.kind 'puppeteer'; its rules: parallel"),
        ("system.folder=/no/such/folder", "not a directory"),
        ("system.depth=0", "system.depth"),
        ("system.patterns=[reasoning, reasoning]", "twice"),
        ("system.baselines=[single, best]", "system.baselines has unknown entries ['best']; known: single"),
    ],
)
def test_config_mistakes_are_named(override, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config("puppeteer-head", [override])


def test_an_unknown_reference_row_is_one_config_error_line(capsys):
    assert main(["eval", "puppeteer-head", "system.baselines=[random]"]) == 2
    err = capsys.readouterr().err
    assert "  config: Value error, system.baselines has unknown entries ['random']; known: single\n" in err
    assert "Traceback" not in err


def test_the_head_policy_needs_minilm_only_when_it_encodes_with_it():
    def needs(*overrides):
        return puppeteer_needs(load_config("puppeteer-head", ["model.name=tiny", *overrides]))

    assert MINILM in needs("system.policy=head", "system.encoder=minilm")
    assert MINILM not in needs("system.policy=head", "system.encoder=base")
    assert MINILM not in needs("system.policy=llm", "system.encoder=minilm")
