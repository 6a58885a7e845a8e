"""masrl.systems.api's SystemSpec: the core and the typed optional parts, and the flat keywords docs/api.md
first documented (`curves=`, `views=`) taken into the page."""

from __future__ import annotations

from dataclasses import replace

import pytest

from masrl.systems.api import Command, Page, Serving, SystemSpec
from masrl.systems.single import SingleConfig, build_single


def views(run_dir):
    return []


CURVES = (("eval/f1", "held-out F1"),)


def test_the_flat_page_keywords_are_the_typed_page():
    flat = SystemSpec(kind="k", config=SingleConfig, build=build_single, curves=CURVES, views=views)
    typed = SystemSpec(kind="k", config=SingleConfig, build=build_single, page=Page(curves=CURVES, views=views))
    assert flat == typed and flat.page == Page(CURVES, views)
    assert SystemSpec(kind="k", config=SingleConfig, build=build_single, views=views).page == Page((), views)
    assert replace(flat, summary="s").page == flat.page and replace(flat, page=Page()).page == Page()
    with pytest.raises(TypeError, match="not both"):
        SystemSpec(kind="k", config=SingleConfig, build=build_single, page=Page(views=views), curves=CURVES)


def test_every_documented_keyword_still_constructs_a_spec():
    """docs/api.md's keywords, and its positional order up to `serving` as it stood before `page`."""
    commands = {"x": Command("help", lambda parser: None, lambda args: 0)}
    keywords = dict(kind="k", config=SingleConfig, build=build_single, summary="s", evaluate=None, check=None,
                    rules=("parallel",), own_tasks=True, commands=commands, curves=CURVES, views=views,
                    serving=Serving())  # fmt: skip
    spec = SystemSpec(**keywords)
    assert SystemSpec(*keywords.values()) == spec
    assert (spec.commands, spec.page, spec.serving, spec.own_tasks) == (commands, Page(CURVES, views), Serving(), True)
