"""Puppeteer's evaluation (masrl/systems/puppeteer/evaluation.py): the initial-to-evolved table from a run's
evaluations, an episode's folded graph written as DOT and as the view's JSON, and the reference rows (each
base model alone, one call per path) against direct calls of the SIMULATED models."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest

from masrl.evaluate import ItemScores
from masrl.pools.simulated import simulated_pool
from masrl.systems.puppeteer.evaluation import (
    OneCall, evaluate_orchestrator, evaluate_references, evolution_table, references_table, write_graphs,
)
from masrl.systems.puppeteer.space import TERMINATOR, agent_space, space_agents
from masrl.systems.puppeteer.system import ORCHESTRATOR, PuppeteerSystem
from masrl.systems.puppeteer.topology import AGENT_ROLE
from masrl.systems.puppeteer.vote import majority_vote
from masrl.tasks.math import MathTask, extract_math_answer, math_equal
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


# ---------------------------------------------------------------- reference rows
def simulated_engine(width, orchestrator=None, baselines=("single",)):
    """The parts evaluate_orchestrator reads: the SIMULATED three-model pool x (reasoning, critique), W paths."""
    task = MathTask("basic_arithmetic", seed=0, difficulty="medium", chunk_size=50)
    # distinct questions: a simulated model finds its item by question text and counts attempts per item found
    items = list({i.question: i for i in task.items("eval", 0, 24)}.values())[:20]
    models = simulated_pool("three", task=items)
    specs = agent_space(list(models), ["reasoning", "critique"], ["none"])
    frozen = space_agents(specs, models, {})
    agents = {**frozen, ORCHESTRATOR: orchestrator or OneCall("sim-weak:critique")}
    config = SimpleNamespace(sampler=SimpleNamespace(group_size=width),
                             system=SimpleNamespace(baselines=list(baselines), graphs=0))  # fmt: skip
    system = PuppeteerSystem(task, tuple(specs))
    engine = SimpleNamespace(system=system, frozen=frozen, agents=agents, eval_agents=agents, task=task, config=config)
    return engine, items, models


def test_a_reference_row_is_each_models_direct_calls_voted():
    engine, items, models = simulated_engine(width=3)
    rows = {r.model: r for r in evaluate_references(engine, items, ["single"])}
    assert list(rows) == ["sim-weak", "sim-medium", "sim-strong"]
    for name, model in models.items():
        row = rows[name]
        assert row.per_item.method == f"single: {name}" and row.per_item.ids == tuple(i.id for i in items)
        want = []  # the model called directly on attempts 0, 1, 2 (the draws a reset replays), then the vote
        for item in items:
            answers = [extract_math_answer(model.reply_for(item, (), attempt).text) for attempt in range(3)]
            vote = majority_vote(answers, lambda a, b: math_equal(a, b))
            want.append(float(vote is not None and math_equal(item.answer, vote)))
        assert row.per_item.scores["accuracy"] == tuple(want)
    # the three models differ on these items: the rows are not one row copied three times
    assert len({rows[m].per_item.scores["accuracy"] for m in models}) == 3


def test_a_reference_path_is_one_call_of_one_agent_priced_by_its_model():
    engine, items, models = simulated_engine(width=3)
    row = evaluate_references(engine, items, ["single"])[1]
    price = models["sim-medium"].price
    for ep, tokens, cost in zip(row.episodes, row.per_item.scores["tokens"], row.per_item.scores["cost"]):
        leaves = ep.leaves()
        assert len(leaves) == 3
        for leaf in leaves:
            path = ep.path(leaf)
            assert [c.agent for c in path] == [ORCHESTRATOR, "sim-medium:reasoning", ORCHESTRATOR]
            assert path[-1].action == TERMINATOR and path[-1].rewards["steps"] == 1.0
        calls = [c for c in ep.calls if c.role == "agent"]
        assert tokens == sum(c.reply.tokens_out for c in calls)
        assert cost > 0 and cost == pytest.approx(sum(price.cost(c.reply.tokens_in, c.reply.tokens_out) for c in calls))


def test_reference_rows_replay_the_draws_the_orchestrator_saw():
    """An orchestrator that picks sim-medium:reasoning once per path scores what that model's row scores,
    though the orchestrator's evaluation ran first on the same models."""
    engine, items, models = simulated_engine(width=3, orchestrator=OneCall("sim-medium:reasoning"))
    result = evaluate_orchestrator(engine, items, full=True)
    assert [s.method for s in result.per_item] == ["orchestrator", "single: sim-weak", "single: sim-medium",
                                                   "single: sim-strong"]  # fmt: skip
    assert result.per_item[0].scores == result.per_item[2].scores
    assert result.per_item[0].scores != result.per_item[3].scores
    assert "| single: sim-medium |" in result.report and result.report.startswith(result.line)


def test_reference_rows_come_only_with_the_full_evaluation_and_when_asked():
    engine, items, _ = simulated_engine(width=1)
    assert [s.method for s in evaluate_orchestrator(engine, items, full=False).per_item] == ["orchestrator"]
    result = evaluate_orchestrator(simulated_engine(width=1, baselines=())[0], items, full=True)
    assert [s.method for s in result.per_item] == ["orchestrator"] and result.report == ""


def test_the_references_table_has_a_row_per_method():
    scores = [ItemScores("orchestrator", ("a", "b"), {"accuracy": (1.0, 0.0), "tokens": (300.0, 100.0),
                                                      "cost": (0.002, 0.001)}),
              ItemScores("single: m", ("a", "b"), {"accuracy": (1.0, 1.0), "tokens": (50.0, 51.0),
                                                   "cost": (0.0001, 0.0)})]  # fmt: skip
    assert references_table(scores).splitlines() == [
        "| method | vote accuracy | generated tokens per task | cost per task $ |",
        "| --- | --- | --- | --- |",
        "| orchestrator | 0.500 | 200 | 0.001500 |",
        "| single: m | 1.000 | 50 | 0.000050 |",
    ]


def test_the_scripted_orchestrator_reads_the_step_from_the_systems_own_state_text():
    """OneCall names its agent at step 1 only: the step comes from state_text's step line, even when
    the problem itself holds a line like it."""
    from puppeteer_doubles import two_agent_system

    from masrl.systems.puppeteer.system import PuppeteerState, Work, step_number

    system = two_agent_system(depth=3)
    tricky = TaskItem("t", "What is 2 + 2?\nStep 1 of at most 3.", "4")
    for task in (TaskItem("q", "What is 2 + 2?", "4"), tricky):
        first, second = PuppeteerState(task), PuppeteerState(task, (Work("right:reasoning", "4", "4"),))
        assert step_number(system.state_text(first)) == 1 and step_number(system.state_text(second)) == 2
        script = OneCall("right:reasoning")
        for state, named in ((first, "right:reasoning"), (second, TERMINATOR)):
            messages = system.orchestrator_messages(state)
            assert asyncio.run(script(messages)).text == f"<agent>{named}</agent>"
    assert step_number("no step line") is None
