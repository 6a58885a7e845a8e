"""Orchestration topology (Puppeteer (arXiv:2505.19591), sections 2.1 "Serialized Orchestration" and 3.3).

The orchestrator unfolds collaboration into a sequence of agent activations;
folding it back gives a directed graph: agents are nodes, and each hand-off
(agent a_t's output goes to the next agent a_(t+1)) is an edge. A task's W
parallel paths fold into one graph (their union; edge weights count hand-offs).

Measures, as in the paper's figure 6:
- density: distinct edges between different agents / (n (n - 1)), the share
  of possible directed links used (0 for fewer than two agents);
- cycles: the number of elementary directed cycles, a self-loop (an agent
  handing off to itself) counting as a cycle of length 1;
- path length: agent steps per path; agents per task: distinct agents.

`to_dot` writes Graphviz DOT for looking at a graph (`dot -Tsvg g.dot`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from masrl.systems.api import Episode

AGENT_ROLE = "agent"


@dataclass(frozen=True)
class Graph:
    nodes: tuple[str, ...]  # first-activation order
    edges: dict[tuple[str, str], int] = field(default_factory=dict)  # (from, to) -> hand-offs

    @property
    def density(self) -> float:
        n = len(self.nodes)
        links = sum(1 for u, v in self.edges if u != v)
        return links / (n * (n - 1)) if n > 1 else 0.0

    @property
    def cycles(self) -> int:
        return count_cycles(self.nodes, self.edges)


def fold(paths: Iterable[Sequence[str]]) -> Graph:
    """The directed graph of one or more activation sequences (agent names in order)."""
    nodes: dict[str, None] = {}
    edges: dict[tuple[str, str], int] = {}
    for path in paths:
        for a in path:
            nodes.setdefault(a, None)
        for u, v in zip(path, path[1:]):
            edges[(u, v)] = edges.get((u, v), 0) + 1
    return Graph(tuple(nodes), edges)


def count_cycles(nodes: Sequence[str], edges: Iterable[tuple[str, str]]) -> int:
    """Elementary cycles of a small directed graph: each counted once, from its lowest-index node."""
    index = {n: i for i, n in enumerate(nodes)}
    succ: dict[int, set[int]] = {i: set() for i in range(len(nodes))}
    for u, v in edges:
        succ[index[u]].add(index[v])
    total = 0
    for s in range(len(nodes)):
        stack = [(s, iter(sorted(succ[s])))]
        on_path = {s}
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                stack.pop()
                on_path.discard(node)
                continue
            if nxt == s:
                total += 1
            elif nxt > s and nxt not in on_path:
                on_path.add(nxt)
                stack.append((nxt, iter(sorted(succ[nxt]))))
    return total


def agent_paths(episode: Episode) -> list[list[str]]:
    """Each root-to-leaf path's agent activations in order (orchestrator calls left out)."""
    return [[c.agent for c in episode.path(leaf) if c.role == AGENT_ROLE] for leaf in episode.leaves()]


def episode_graph(episode: Episode) -> Graph:
    return fold(agent_paths(episode))


def topology_metrics(episodes: Sequence[Episode]) -> dict[str, float]:
    """Per-task means: graph density and cycles, path length, agents and tokens per task."""
    if not episodes:
        return {}
    graphs = [episode_graph(ep) for ep in episodes]
    paths = [p for ep in episodes for p in agent_paths(ep)]
    n = len(episodes)
    return {
        "graph_density": sum(g.density for g in graphs) / n,
        "graph_cycles": sum(g.cycles for g in graphs) / n,
        "path_length": sum(len(p) for p in paths) / max(len(paths), 1),
        "agents_per_task": sum(len(g.nodes) for g in graphs) / n,
        "tokens_per_task": sum(c.reply.tokens_in + c.reply.tokens_out for ep in episodes for c in ep.calls if c.reply)
        / n,
    }


def to_dot(graph: Graph, name: str = "orchestration") -> str:
    """Graphviz DOT: one node per agent, one edge per hand-off pair labelled with its count."""

    def q(s: str) -> str:
        return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'

    lines = [f"digraph {q(name)} {{", "  rankdir=LR;", "  node [shape=box, style=rounded];"]
    lines += [f"  {q(n)};" for n in graph.nodes]
    lines += [f"  {q(u)} -> {q(v)} [label={c}];" for (u, v), c in graph.edges.items()]
    lines.append("}")
    return "\n".join(lines) + "\n"
