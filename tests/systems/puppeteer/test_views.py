"""Puppeteer's section of the run page (masrl/systems/puppeteer/views.py): the initial-to-evolved table
from metrics.jsonl and the folded graphs of the first and the latest evaluation, two tasks each."""

from __future__ import annotations

import json

from masrl.systems.puppeteer.views import graph_figure, puppeteer_views


def test_a_graph_is_lines_for_hand_offs_and_rings_for_self_loops():
    fig = graph_figure(["a", "b"], [["a", "b", 2], ["b", "b", 1]], "t")
    *hand_offs, agents = fig.data
    assert [h.text for h in hand_offs] == ["a -> b: 2", "b -> b: 1"] and hand_offs[0].line.width == 3
    assert list(agents.text) == ["a", "b"] and list(agents.marker.line.width) == [0, 2]


def test_the_table_and_the_first_and_latest_graphs(tmp_path):
    rows = [{"kind": "train", "step": 1}, {"kind": "eval", "step": 0, "eval/graph_density": 0.5},
            {"kind": "eval", "step": 2, "eval/graph_density": 0.25}]  # fmt: skip
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    graph = {"nodes": ["a", "b"], "edges": [["a", "b", 1]]}
    for step in (0, 2, 4):
        folder = tmp_path / "graphs" / f"step{step}"
        folder.mkdir(parents=True)
        (folder / "graphs.json").write_text(json.dumps([{"task": f"t{i}", **graph} for i in range(3)]))
    table, graphs = puppeteer_views(tmp_path)
    assert table.tables[0].columns == ("metric", "step 0", "step 2")
    assert ("graph density", "0.500", "0.250") in table.tables[0].rows
    assert [f.layout.title.text for f in graphs.figures] == ["step0: task t0", "step0: task t1", "step4: task t0",
                                                             "step4: task t1"]  # fmt: skip
