"""Agent pools: the calibrated SIMULATED pool and the RECORDED CHAMP pool (its grader: tests/tasks)."""

import asyncio
import json
import statistics

import pytest

from masrl.agents.base import Agent, approx_tokens
from masrl.pools.drafts import CONSISTENT, VISIBLE, DraftStyle, draft_style, visible_draft
from masrl.pools.simulated import (
    ItemIndex,
    SimulatedAgent,
    calibration_items,
    correct_probability,
    difficulty_score,
    expected_accuracy,
    measure_accuracy,
    simulated_pool,
)
from masrl.pools.slips import check_draft
from masrl.tasks.math import MathTask, MixedMathTask, extract_math_answer, math_equal
from masrl.types import AgentError, Message, Price, TaskItem

TARGETS = {"sim-weak": 0.35, "sim-medium": 0.60, "sim-strong": 0.85}


@pytest.fixture(scope="module")
def items():
    """The 300-item calibration mix: 100 each of basic_arithmetic easy / medium / hard."""
    return calibration_items(100, seed=0)


@pytest.fixture(scope="module")
def pool():
    return simulated_pool("three", seed=0)


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


def test_drafts_end_in_gold_or_in_a_number_that_is_not_gold(pool, items):
    mixed = items + MathTask("gsm_symbolic", seed=0, chunk_size=60).items("train", 0, 40)
    odd = [TaskItem(f"odd/{g}", f"Odd question {g}?", g) for g in ("0", "-3/4", "2.5", "1,000", "x+1", "abc")]
    weak = pool["sim-weak"]
    wrong = 0
    for item in mixed + odd:
        for attempt in range(2):
            reply = weak.reply_for(item, (Message("user", item.question),), attempt)
            answer = extract_math_answer(reply.text)
            assert reply.text.rstrip(".").endswith(f"<answer>{answer}</answer>")
            if weak.is_correct(item, attempt):
                assert math_equal(item.answer, answer), (item.answer, reply.text)
            else:
                wrong += 1
                assert answer and not math_equal(item.answer, answer), (item.answer, reply.text)
    assert wrong > 200


# ---- visible drafts ----------------------------------------------------------------


def test_visible_drafts_show_a_slip_in_exactly_the_wrong_drafts_drawn_visible(items):
    """Right drafts: every line true, the answer the last line's value. Wrong drafts: a checkable slip
    (check_draft) with probability visible_rate, split between false steps and answer mismatches by
    false_step_share; the rest work out a misread expression with nothing to see."""
    style = DraftStyle(visible_rate=0.6, false_step_share=0.75)
    weak = SimulatedAgent("sim-weak", 0.5, Price(), seed=0, task=items, drafts=style)
    right = wrong = visible = false_steps = 0
    for item in items:
        for attempt in range(3):
            reply = weak.reply_for(item, (Message("user", item.question),), attempt)
            answer = extract_math_answer(reply.text)
            report = check_draft(reply.text, answer)
            assert report.equations >= 1, reply.text
            if weak.is_correct(item, attempt):
                right += 1
                assert math_equal(item.answer, answer) and not report.visible, reply.text
                continue
            wrong += 1
            assert answer and not math_equal(item.answer, answer), reply.text
            visible += report.visible
            false_steps += report.false_steps > 0
    assert right > 200 and wrong > 400
    # binomial: 3 standard deviations of the share at these counts
    assert abs(visible / wrong - 0.6) < 3 * (0.6 * 0.4 / wrong) ** 0.5
    assert abs(false_steps / visible - 0.75) < 3 * (0.75 * 0.25 / visible) ** 0.5


def test_false_steps_write_numbers_wrong_in_the_measured_mix(items):
    """The first false step of visible wrong drafts, classified as the calibration classified SmolLM2's
    (slips.slip_kind), follows SLIP_MIX; a single digit changed can also read as near or off by one."""
    from collections import Counter
    from fractions import Fraction

    from masrl.pools.drafts import SLIP_MIX
    from masrl.pools.slips import equations, slip_kind

    weak = SimulatedAgent("sim-weak", -3.0, Price(), seed=1, task=items, drafts=DraftStyle(1.0, 1.0))
    kinds = Counter()
    for item in items:
        for attempt in range(4):
            text = weak.reply_for(item, (Message("user", item.question),), attempt).text
            bad = next((e for e in equations(text) if not e.holds), None)
            if bad is not None:
                kinds[slip_kind(bad.value, Fraction(bad.stated))] += 1
    n = sum(kinds.values())
    assert n > 900 and kinds["none"] == 0 and kinds["magnitude"] / n < 0.01  # an "other" can land on x10
    for kind, share in SLIP_MIX:
        slack = 0.05 if kind in ("other", "sign") else 0.09
        assert abs(kinds[kind] / n - share) < slack, (kind, kinds)


def test_a_false_step_is_carried_into_every_later_line():
    item = TaskItem("t/1", "Calculate ( 14 + 30 ) * 2 - 8.", "80", {"expression": "( 14 + 30 ) * 2 - 8"})
    drafts = {}
    for seed in range(60):  # draw until each slipped step appears
        text = visible_draft(item, False, (seed, "w", item.id, item.question, 0), DraftStyle(1.0, 1.0), None)
        lines = [line for line in text.splitlines() if "=" in line and "<answer>" not in line]
        first_false = next(i for i, line in enumerate(lines) if not check_draft(line, None).false_steps == 0)
        drafts.setdefault(first_false, text)
        # every later line starts from the value the line before wrote
        for before, after in zip(lines, lines[1:]):
            assert after.split(" ")[0] == before.split("= ")[-1], text
        assert extract_math_answer(text) == lines[-1].split("= ")[-1]
    assert set(drafts) == {0, 1, 2}


def test_the_draft_style_changes_the_text_never_the_draw(items):
    plain = SimulatedAgent("sim-medium", 1.62, Price(), seed=3, task=items)
    shown = SimulatedAgent("sim-medium", 1.62, Price(), seed=3, task=items, drafts=VISIBLE)
    assert plain.drafts is CONSISTENT
    for item in items[:120]:
        a, b = (agent.reply_for(item, (Message("user", item.question),), 0).text for agent in (plain, shown))
        assert "Reading the expression as" in a and "Reading the expression as" not in b
        assert math_equal(item.answer, extract_math_answer(a)) == math_equal(item.answer, extract_math_answer(b))


def test_draft_style_by_name():
    assert draft_style("consistent") is CONSISTENT and draft_style("visible") is VISIBLE
    assert draft_style("visible", 0.25) == DraftStyle(0.25, VISIBLE.false_step_share)
    with pytest.raises(ValueError, match="unknown draft style"):
        draft_style("loud")


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


@pytest.fixture(scope="module")
def champ(tmp_path_factory):
    pytest.importorskip("champ_dataset")
    from masrl.pools.champ import build_champ_pool, load_champ_pool

    path = tmp_path_factory.mktemp("champ") / "champ_pool.jsonl"
    summary = build_champ_pool(path)  # about 3 s: the 72 MB JSON, then grading 1,080 summaries
    tasks, agents = load_champ_pool(path)
    rows = {row["id"]: row for row in map(json.loads, path.read_text(encoding="utf-8").splitlines())}
    return summary, tasks, agents, rows


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


def test_champ_task_scores_replayed_responses_by_their_recorded_grade(champ):
    from masrl.tasks.champ import ChampTask
    from masrl.tasks.base import Task, grade

    summary, tasks, agents, rows = champ
    task = ChampTask(summary.path)
    assert isinstance(task, Task)
    train, held = task.items("train", 0, 400), task.items("eval", 0, 400)
    assert len(held) + len({t.id for t in train}) == 270 and not {t.id for t in held} & {t.id for t in train}
    for item in tasks[::9]:
        assert item.metadata["correct"] == {m: r["correct"] for m, r in rows[item.id]["responses"].items()}
        for name, agent in agents.items():
            text = agent.recordings[item.id].text
            assert grade(task, item, text).correct == rows[item.id]["responses"][name]["correct"]
    item = next(t for t in tasks if t.id == "P_Combinatorics_1")
    assert task.score(item, "So there are 239 such strings of length 6.") == 1.0
    assert task.score(item, "So there are 238 such strings of length 6.") == 0.0
