"""The calibrated SIMULATED pool: priced agents weak to strong, calibration, seeded draws and attempts, finding an item in a prompt, cost."""

import asyncio
import json
import statistics

import pytest

from masrl.agents.base import Agent, approx_tokens
from masrl.pools.simulated import (
    ItemIndex,
    SimulatedAgent,
    correct_probability,
    difficulty_score,
    expected_accuracy,
    measure_accuracy,
    simulated_pool,
)
from masrl.tasks.math import MathTask, MixedMathTask, extract_math_answer, math_equal
from masrl.types import AgentError, Message, Price, TaskItem

TARGETS = {"sim-weak": 0.35, "sim-medium": 0.60, "sim-strong": 0.85}


def ask(agent, text):
    return asyncio.run(agent((Message("system", "Solve the problem."), Message("user", text))))


# ---- simulated pool ------------------------------------------------------------


def test_simulated_pool_is_three_priced_agents_weak_to_strong(pool):
    assert list(pool) == ["sim-weak", "sim-medium", "sim-strong"]
    assert all(isinstance(a, Agent) for a in pool.values())
    abilities = [a.ability for a in pool.values()]
    prices = [a.price.output_per_1k for a in pool.values()]
    assert abilities == sorted(abilities)
    assert prices[1] == pytest.approx(10 * prices[0]) and prices[2] == pytest.approx(10 * prices[1])
    with pytest.raises(ValueError, match="unknown simulated pool"):
        simulated_pool("seven")


def test_calibration_within_tolerance_on_300_items(pool, items):
    assert len(items) == 300
    for name, agent in pool.items():
        assert measure_accuracy(agent, items) == pytest.approx(TARGETS[name], abs=0.06), name
        assert expected_accuracy(agent, items) == pytest.approx(TARGETS[name], abs=0.04), name


def test_same_seed_same_draws_and_replies(items):
    a, b = simulated_pool(seed=3)["sim-medium"], simulated_pool(seed=3)["sim-medium"]
    for item in items[::10]:
        for attempt in range(3):
            assert a.is_correct(item, attempt) == b.is_correct(item, attempt)
            assert a.reply_for(item, (), attempt) == b.reply_for(item, (), attempt)
    other = simulated_pool(seed=4)["sim-medium"]
    assert [a.is_correct(i) for i in items] != [other.is_correct(i) for i in items]


def test_attempts_are_independent_draws(pool, items):
    agent = pool["sim-medium"]
    first = [agent.is_correct(i, 0) for i in items]
    second = [agent.is_correct(i, 1) for i in items]
    # Independent Bernoulli draws disagree with probability 2p(1-p) on each item.
    disagree = statistics.mean(x != y for x, y in zip(first, second))
    expected = statistics.mean(2 * p * (1 - p) for p in (correct_probability(agent, i) for i in items))
    assert disagree == pytest.approx(expected, abs=0.07)
    assert disagree > 0.15


def test_calls_count_attempts_per_item_and_reset_replays(items):
    task_items = items[:5]
    agent = simulated_pool(seed=0, task=task_items)["sim-weak"]
    item = task_items[2]
    replies = [ask(agent, item.question).text for _ in range(4)]
    assert replies == [agent.reply_for(item, (), k).text for k in range(4)]
    agent.reset()
    assert ask(agent, item.question).text == replies[0]


def test_attempt_counts_survive_a_state_dict_round_trip_through_json(items):
    task_items = items[:5]
    agent = simulated_pool(seed=0, task=task_items)["sim-weak"]
    item = task_items[2]
    first = [ask(agent, item.question).text for _ in range(2)]
    saved = json.loads(json.dumps(agent.state_dict()))  # checkpoints keep it in meta.json
    fresh = simulated_pool(seed=0, task=task_items)["sim-weak"]
    fresh.load_state_dict(saved)
    assert agent.reply_for(item, (), 2).text != first[0]  # so a fresh count (attempt 0) would show
    assert ask(fresh, item.question).text == agent.reply_for(item, (), 2).text
    assert fresh.state_dict() == {"attempts": {item.id: 3}}


def test_finds_the_item_inside_a_longer_prompt_from_a_math_task():
    task = MathTask("basic_arithmetic", seed=0, difficulty="medium", chunk_size=20)
    agent = simulated_pool(seed=0, task=task)["sim-strong"]
    item = task.items("train", 3, 1)[0]  # generated after the pool was made
    reply = ask(agent, f"Here is a problem.\n\n{item.question}\n\nEnd your answer with <answer>X</answer>.")
    correct = math_equal(item.answer, extract_math_answer(reply.text))
    assert correct == agent.is_correct(item, 0)
    with pytest.raises(AgentError, match="knows no task item"):
        ask(agent, "What is the airspeed of an unladen swallow?")


def test_a_miss_rebuilds_the_task_item_list_only_when_the_task_has_new_items(monkeypatch):
    task = MixedMathTask("basic_arithmetic", seed=0, chunk_size=20)
    first = task.items("train", 0, 3)
    builds = []
    real = task.known_items
    monkeypatch.setattr(task, "known_items", lambda: builds.append(1) or real())
    index = ItemIndex(task)
    assert task.known_count() == len(real()) >= 3
    assert index.find(f"Solve: {first[1].question}") == first[1] and len(builds) == 1
    for i in range(3):  # misses with nothing new generated: no rebuild
        assert index.find(f"unrelated prompt {i}") is None
    assert len(builds) == 1
    later = task.items("train", 60, 1)[0]  # the task generates more: the next miss rebuilds once
    assert index.find(f"Now: {later.question}") == later and len(builds) == 2


def test_stronger_agent_never_less_likely_and_more_accurate(pool, items):
    weak, medium, strong = pool.values()
    for item in items:
        assert correct_probability(weak, item) < correct_probability(medium, item) < correct_probability(strong, item)
    accuracy = [measure_accuracy(a, items) for a in (weak, medium, strong)]
    assert accuracy == sorted(accuracy) and accuracy[0] < accuracy[2] - 0.3


def test_harder_items_lower_accuracy(pool, items):
    by_level = {level: [i for i in items if i.id.startswith(level)] for level in ("easy", "medium", "hard")}
    mean_score = {level: statistics.mean(map(difficulty_score, its)) for level, its in by_level.items()}
    assert mean_score["easy"] < mean_score["medium"] < mean_score["hard"]
    for agent in pool.values():
        acc = [measure_accuracy(agent, by_level[level]) for level in ("easy", "medium", "hard")]
        assert acc[0] > acc[1] > acc[2], agent.name
    # An explicit difficulty_score is used as given.
    easy = TaskItem("x/1", "Q1", "7", {"difficulty_score": -2.0})
    hard = TaskItem("x/2", "Q2", "7", {"difficulty_score": 5.0})
    assert difficulty_score(hard) == 5.0
    assert correct_probability(pool["sim-medium"], easy) > correct_probability(pool["sim-medium"], hard)


def test_cost_is_price_on_counted_tokens(items):
    price = Price(input_per_1k=0.5, output_per_1k=2.0)
    agent = SimulatedAgent("sim-test", 1.0, price, seed=0, task=items)
    messages = (Message("system", "Be careful."), Message("user", "Problem:\n" + items[7].question))
    reply = asyncio.run(agent(messages))
    assert reply.tokens_in == sum(approx_tokens(m.content) for m in messages)
    assert reply.tokens_out == approx_tokens(reply.text)
    assert reply.cost == pytest.approx(price.cost(reply.tokens_in, reply.tokens_out))


def test_fix_request_mentions_previous_draft_but_keeps_own_draw(pool, items):
    strong = pool["sim-strong"]
    item = items[250]
    fix = (
        Message("user", f"{item.question}\n\nPrevious draft: ... so the answer is <answer>123456</answer>."),
        Message("user", "Critique: the second step is wrong. Write a corrected solution."),
    )
    reply = strong.reply_for(item, fix, 0)
    assert "previous draft concluded 123456" in reply.text
    assert math_equal(item.answer, extract_math_answer(reply.text)) == strong.is_correct(item, 0)


def test_answer_format_in_the_system_prompt_is_not_a_previous_draft(pool, items):
    """The agents' instructions show the format "<answer>ANSWER</answer>"; a first call has no draft."""
    from masrl.systems.router.system import AGENT_PROMPT

    item = items[3]
    reply = pool["sim-weak"].reply_for(item, (Message("system", AGENT_PROMPT), Message("user", item.question)), 0)
    assert "<answer>ANSWER</answer>" in AGENT_PROMPT
    assert "previous draft" not in reply.text.lower()
