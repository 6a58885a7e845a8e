"""Puppeteer's orchestration graphs: folding paths into one graph, self-loops and cycles (against networkx), DOT export."""

from __future__ import annotations

import pytest

from masrl.systems.puppeteer.topology import count_cycles, fold, to_dot

pytestmark = pytest.mark.usefixtures("one_thread")


# ---------------------------------------------------------------- topology
def test_folding_a_known_sequence():
    g = fold([["A", "B", "C", "A", "B"]])
    assert g.nodes == ("A", "B", "C")
    assert g.edges == {("A", "B"): 2, ("B", "C"): 1, ("C", "A"): 1}
    assert g.density == pytest.approx(3 / 6)  # 3 of the 3*2 possible directed links
    assert g.cycles == 1  # A -> B -> C -> A


def test_self_loops_and_two_cycles():
    g = fold([["A", "A", "B", "A"]])
    assert g.density == pytest.approx(2 / 2)  # A->B and B->A; the self-loop is no link
    assert g.cycles == 2  # A -> A, and A -> B -> A


def test_paths_of_a_task_fold_into_one_graph():
    g = fold([["A", "B"], ["B", "C"], ["C"]])
    assert g.nodes == ("A", "B", "C") and g.edges == {("A", "B"): 1, ("B", "C"): 1}
    assert g.cycles == 0 and g.density == pytest.approx(2 / 6)
    assert fold([["A"]]).density == 0.0 and fold([]).cycles == 0


def test_cycle_count_matches_networkx_on_a_dense_graph():
    nx = pytest.importorskip("networkx")
    nodes = ["a", "b", "c", "d"]
    edges = [(u, v) for u in nodes for v in nodes]  # complete, with self-loops
    want = sum(1 for _ in nx.simple_cycles(nx.DiGraph(edges)))
    assert count_cycles(nodes, edges) == want == 24  # 4 self-loops + 6 two-cycles + 8 three + 6 four


def test_dot_export():
    dot = to_dot(fold([["x:reasoning", "y \"q\""]]), name="t1")
    assert dot.startswith('digraph "t1" {')
    assert '"x:reasoning" -> "y \\"q\\"" [label=1];' in dot and dot.rstrip().endswith("}")
