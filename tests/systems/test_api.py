"""masrl.systems.api's SystemSpec: the core and the typed optional parts; the page is given only as `page=Page(...)`."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from masrl.systems import api
from masrl.systems.api import Command, Page, Serving, SystemSpec
from masrl.systems.single import SingleConfig, build_single


def views(run_dir):
    return []


CURVES = (("eval/f1", "held-out F1"),)


def test_the_page_is_one_typed_part():
    spec = SystemSpec(kind="k", config=SingleConfig, build=build_single, page=Page(curves=CURVES, views=views))
    assert spec.page == Page(CURVES, views)
    assert replace(spec, summary="s").page == spec.page and replace(spec, page=Page()).page == Page()
    with pytest.raises(TypeError, match="curves"):  # the flat keywords of the page's first version are gone
        SystemSpec(kind="k", config=SingleConfig, build=build_single, curves=CURVES)


def test_every_documented_keyword_constructs_a_spec():
    """docs/api.md's keywords, as its `Declaring it` block gives them."""
    commands = {"x": Command("help", lambda parser: None, lambda args: 0)}
    spec = SystemSpec(kind="k", config=SingleConfig, build=build_single, summary="s", evaluate=None, check=None,
                      rules=("parallel",), own_tasks=True, page=Page(CURVES, views), serving=Serving(),
                      commands=commands)  # fmt: skip
    assert (spec.commands, spec.page, spec.serving, spec.own_tasks) == (commands, Page(CURVES, views), Serving(), True)


def test_every_exported_name_exists_and_docs_api_names_it():
    """The page is the API's reference: a name added to `__all__` gets its line in docs/api.md."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()
    prose = re.sub(r"```.*?```", "", doc, flags=re.DOTALL)  # the code blocks aside, every `name` the text quotes
    quoted = " ".join(re.findall(r"`([^`]+)`", prose))
    assert [n for n in api.__all__ if not hasattr(api, n)] == []
    assert [n for n in api.__all__ if not re.search(rf"\b{n}\b", quoted)] == []
