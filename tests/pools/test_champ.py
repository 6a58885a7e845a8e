"""The RECORDED CHAMP pool: hand grades from the package data, 270 problems and four graded models, truncated solutions, replay (its task: tests/tasks/test_champ.py)."""

import asyncio
import json

import pytest

from masrl.types import AgentError, Message


# ---- CHAMP recorded pool ------------------------------------------------------------------


def test_hand_grades_are_read_once_from_the_package_data_file():
    from importlib import resources

    from masrl.pools.champ import MODELS, hand_grades

    rows = json.loads(resources.files("masrl.pools").joinpath("data/champ_hand_grades.json").read_text())["grades"]
    grades = hand_grades()
    assert hand_grades() is grades  # cached: the file is read once
    assert len(grades) == len(rows) == 160  # no (problem, model) twice
    assert {model for _, model in grades} <= {m.name for m in MODELS}
    assert all(isinstance(v, bool) for v in grades.values())


def test_champ_pool_has_270_problems_and_four_graded_models(champ):
    summary, tasks, agents, rows = champ
    assert summary.problems == len(tasks) == len(rows) == 270
    assert len({t.id for t in tasks}) == 270
    # Weak to strong by graded accuracy; these counts are the hand-checked grades (docs/champ-pool.md).
    assert list(agents) == ["PaLM 2 Medium", "GPT-3.5", "GPT-4", "GPT-4 Turbo"]
    correct = {name: round(acc * 270) for name, acc in summary.accuracy.items()}
    assert correct == {"GPT-3.5": 76, "GPT-4": 110, "GPT-4 Turbo": 151, "PaLM 2 Medium": 39}
    assert summary.mean_cost["GPT-4"] > summary.mean_cost["GPT-4 Turbo"] > 10 * summary.mean_cost["GPT-3.5"]
    first = rows["P_Combinatorics_2"]
    assert first["answer"] == "C(10, 5), or equivalently 252"  # CHAMP's @@ math markers stripped
    for response in first["responses"].values():
        assert response["cost"] > 0 and response["tokens_in"] > 0 and response["tokens_out"] > 0
        assert response["graded_by"] in ("rule", "hand")


# Read by hand against the reference answers: (GPT-3.5, GPT-4, GPT-4 Turbo, PaLM 2 Medium).
SPOT_CHECKS = {
    "P_Combinatorics_1": (False, False, True, False),  # 239: says 29, 771, 239, 3
    "P_Combinatorics_14": (False, False, True, False),  # 5/14: 1/9, (cut off), "about 35.7143%", 1/8
    "P_Inequality_16": (False, False, True, False),  # 3/2: 1/2, 3, \frac{3}{2}, 1/6
    "P_Inequality_6": (True, False, True, True),  # No: GPT-4 Turbo says "A is less than 0.1"
    "P_Number-Theory_4": (False, False, True, False),  # x=6, y=5: GPT-4 adds (5, 6)
    "P_Number-Theory_31": (True, True, True, False),  # x=2, y=1: PaLM says no solutions
    "P_Sequence_37": (True, False, True, True),  # Yes, without saying "yes"
}


@pytest.mark.parametrize("problem", sorted(SPOT_CHECKS))
def test_champ_grades_match_hand_checked_problems(champ, problem):
    _, _, _, rows = champ
    models = ("GPT-3.5", "GPT-4", "GPT-4 Turbo", "PaLM 2 Medium")
    got = tuple(rows[problem]["responses"][m]["correct"] for m in models)
    assert got == SPOT_CHECKS[problem]


def test_champ_truncated_solution_has_no_summary_and_is_wrong(champ):
    _, _, _, rows = champ
    cut = rows["P_Combinatorics_14"]["responses"]["GPT-4"]
    assert cut["truncated"] and cut["summary"] is None and cut["correct"] is False
    assert cut["text"] == cut["solution"]


def test_champ_replay_returns_recorded_text(champ):
    _, tasks, agents, rows = champ
    task = next(t for t in tasks if t.id == "P_Number-Theory_31")
    prompt = f"Route this problem.\n\nProblem: {task.question}\n\nAnswer with a worked solution."
    for name, agent in agents.items():
        reply = asyncio.run(agent((Message("system", "You are a solver."), Message("user", prompt))))
        recorded = rows[task.id]["responses"][name]
        assert reply.text == recorded["text"]
        assert recorded["text"].endswith("Final answer: " + recorded["summary"])
        assert (reply.tokens_in, reply.tokens_out, reply.cost) == (
            recorded["tokens_in"],
            recorded["tokens_out"],
            pytest.approx(recorded["cost"]),
        )
        assert agent.correct(task.id) == recorded["correct"]
    with pytest.raises(AgentError, match="no CHAMP problem"):
        asyncio.run(agents["GPT-4"]((Message("user", "What is 2 + 2?"),)))
