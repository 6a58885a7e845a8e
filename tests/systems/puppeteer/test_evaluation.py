"""Puppeteer's evaluation files (masrl/systems/puppeteer/evaluation.py): the initial-to-evolved table from
a run's evaluations, and an episode's folded graph written as DOT and as the view's JSON."""

from __future__ import annotations

import json

from masrl.systems.puppeteer.evaluation import evolution_table, write_graphs
from masrl.systems.puppeteer.topology import AGENT_ROLE
from masrl.types import Call, Episode, Reply, TaskItem


def eval_row(step, density):
    return {"kind": "eval", "step": step, "eval/accuracy": 0.5, "eval/graph_density": density}


def test_the_evolution_table_has_a_column_per_evaluation():
    assert evolution_table([{"kind": "train", "step": 1}]) == "no puppeteer evaluations in this run"
    lines = evolution_table([eval_row(0, 0.25), {"kind": "train", "step": 1}, eval_row(4, 0.125)]).splitlines()
    assert lines[:3] == ["| metric | step 0 | step 4 |", "| --- | --- | --- |", "| vote accuracy | 0.500 | 0.500 |"]
    assert "| graph density | 0.250 | 0.125 |" in lines and "| path accuracy | nan | nan |" in lines


def agent(id, parent, name):
    return Call(id, parent, name, AGENT_ROLE, 0, (), Reply("x", 1, 1, 0.0))


def test_the_first_episodes_graphs_are_written_as_dot_and_json(tmp_path):
    calls = (agent("0", None, "a"), agent("0.0", "0", "b"), agent("0.0.0", "0.0", "b"))  # a -> b -> b: a self-loop
    episodes = [Episode(TaskItem(f"t{i}", "q", "a"), calls) for i in range(3)]
    paths = write_graphs(episodes, tmp_path / "graphs" / "step4", count=2)
    assert [p.name for p in paths] == ["task000.dot", "task001.dot"] and paths[0].read_text().startswith("digraph")
    records = json.loads((tmp_path / "graphs" / "step4" / "graphs.json").read_text())
    assert [r["task"] for r in records] == ["t0", "t1"]
    assert records[0]["nodes"] == ["a", "b"] and sorted(map(tuple, records[0]["edges"])) == [("a", "b", 1), ("b", "b", 1)]
