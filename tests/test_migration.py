"""Configs in the layout from before systems were packages (masrl/migration.py): a system's old
top-level section moves into `system`, other systems' sections are dropped, each move is noted."""

from __future__ import annotations

from masrl.migration import migrate


def test_the_routers_old_sections_move_into_system_and_the_others_are_dropped():
    data = {"system": {"kind": "router", "max_turns": 3, "prompt": "single's"}, "router": {"baselines": ["single"]},
            "pool": {"kind": "simulated", "seed": 2}, "budget": {"reward": "soft"}, "model": {"name": "tiny"}}  # fmt: skip
    notes = migrate(data)
    assert data == {"system": {"kind": "router", "max_turns": 3, "baselines": ["single"],
                               "pool": {"kind": "simulated", "seed": 2}}, "model": {"name": "tiny"}}  # fmt: skip
    assert notes == ["the router: section is now system", "the pool: section is now system.pool",
                     "ignored the sections of other systems: budget"]  # fmt: skip


def test_searchs_corpus_keys_move_to_the_task():
    data = {"system": {"kind": "search"}, "search": {"retriever": "bm25", "pages": "p.jsonl"}}
    assert migrate(data) == ["search.pages is now task.config.pages", "the search: section is now system"]
    assert data == {"system": {"kind": "search", "retriever": "bm25"}, "task": {"config": {"pages": "p.jsonl"}}}


def test_a_config_in_the_current_layout_is_left_alone():
    data = {"system": {"kind": "router", "baselines": ["single"]}, "model": {"name": "tiny"}}
    assert migrate(data) == [] and data == {"system": {"kind": "router", "baselines": ["single"]}, "model": {"name": "tiny"}}
    assert migrate({"system": "router"}) == []  # not a mapping: validation says what is wrong
