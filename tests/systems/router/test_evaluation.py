"""The router's capped evaluation: the cap ledger's redirects, a one-shot router and the controller under usage caps."""

from __future__ import annotations

from dataclasses import replace

import pytest

from masrl.agents.python_fn import FunctionAgent
from masrl.pools.simulated import simulated_pool
from masrl.systems.router.baselines import SingleAgentRouter
from masrl.systems.router.evaluation import CapLedger, evaluate_controller, evaluate_one_shot, solver_profile
from masrl.systems.router.rewards import Multipliers, default_caps, default_multipliers
from masrl.systems.router.system import RouterSystem
from masrl.tasks.math import MathTask

AGENTS = ("weak", "medium", "strong")


def scripted_controller(turn1: str, later: str) -> FunctionAgent:
    """A controller that always writes the same continuation of its prefilled tag."""
    return FunctionAgent("controller", lambda m: turn1 if m[-1].content == "<model>" else later)


# ---------------------------------------------------------------- usage caps at evaluation
def test_cap_ledger_redirects_to_the_next_best_available_agent():
    ledger = CapLedger(AGENTS, {"weak": 1.0, "medium": 0.5, "strong": 0.25}, items=8)
    got = [ledger.assign("strong") for _ in range(8)]
    assert got == ["strong", "strong", "medium", "medium", "medium", "medium", "weak", "weak"]
    assert ledger.calls == {"strong": 2, "medium": 4, "weak": 2} and ledger.redirected == 6


def test_cap_ledger_reroutes_stay_above_the_author_or_end():
    ledger = CapLedger(AGENTS, {"weak": 1.0, "medium": 0.5, "strong": 0.25}, items=2)
    assert ledger.assign("weak") == "weak" and ledger.assign("weak") == "weak"
    # 2 calls so far: strong may take 1 when a third call happens (1 <= 0.25 * 3? no) -> medium
    assert ledger.assign("strong", author="weak") == "medium"
    assert ledger.assign("strong", author="medium") == "strong"  # 1 <= 0.25 * 4
    assert ledger.assign("strong", author="medium") is None  # strong capped, nothing above medium


def test_one_shot_router_under_caps_on_the_simulated_pool():
    task = MathTask("basic_arithmetic", seed=0, difficulty="easy")
    its = task.items("eval", 0, 40)
    pool = simulated_pool(seed=0, task=its)
    rho = default_caps(tuple(pool))
    result = evaluate_one_shot(SingleAgentRouter("sim-strong"), pool, task, its, rho)
    assert result.usage == {"sim-weak": 0.25, "sim-medium": 0.5, "sim-strong": 0.25}
    assert result.calls_per_item == 1.0 and result.redirected == 30
    # the first 10 items go to strong, the next 20 to medium, the last 10 to weak: each answer is that agent's draw
    expected = [pool["sim-strong"].is_correct(i, 0) for i in its[:10]]
    expected += [pool["sim-medium"].is_correct(i, 0) for i in its[10:30]]
    expected += [pool["sim-weak"].is_correct(i, 0) for i in its[30:]]
    assert result.accuracy == pytest.approx(sum(expected) / 40)
    profile = solver_profile(pool, task, its)
    assert profile[its[0].id] == [pool[a].is_correct(its[0], 0) for a in pool]


def test_controller_evaluation_respects_caps_and_reports_turns():
    task = MathTask("basic_arithmetic", seed=0, difficulty="easy")
    its = task.items("eval", 0, 20)
    pool = simulated_pool(seed=0, task=its)
    names = tuple(pool)
    system = RouterSystem(task, names, Multipliers(default_multipliers(names), default_caps(names)), max_turns=3)
    # always weak first, always "False" + strong: strong wanted on every item
    controller = scripted_controller("sim-weak</model>", "False</verdict><model>sim-strong</model>")
    result = evaluate_controller(system, controller, pool, its, default_caps(names))
    assert result.usage["sim-strong"] <= 0.25 + 1e-9
    assert result.calls_per_item == pytest.approx(2.0)  # every item: a weak draft and one re-route
    assert result.exhausted == 1.0  # every episode reached the verify-only third turn
    assert len(result.accuracy_by_turn) == 3 and result.accuracy_by_turn[1] == result.accuracy_by_turn[2]
    # the verification matrix counts every item's turn-2 verdict
    assert sum(sum(v.values()) for v in result.verification_confusion.values()) == 20
    # with a max of 1 turn, only the first routing happens
    one = evaluate_controller(system, controller, pool, its, default_caps(names), max_turns=1)
    assert one.calls_per_item == 1.0 and one.usage["sim-weak"] == 1.0
    # without the final verification: the same drafts and answers, one controller call fewer per item
    calls = []
    counting = FunctionAgent("controller", lambda m: calls.append(m) or controller.fn(m))
    short = evaluate_controller(replace(system, final_verification=False), counting, pool, its, default_caps(names))
    assert [t.answered_by for t in short.traces] == [t.answered_by for t in result.traces]
    assert short.accuracy == result.accuracy and len(calls) == 2 * len(its) and short.exhausted == 0.0
    assert result.format_failures == 0.0
    garbled = evaluate_controller(system, scripted_controller("sim-weak</model>", "Maybe"), pool, its, default_caps(names))
    assert garbled.format_failures == pytest.approx(0.5)  # every turn-2 reply of 20 routes + 20 verdicts
