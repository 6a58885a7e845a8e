"""The budget-controllable controller's state machine: its protocol parser, mode draw, episodes and their rewards, option numbering."""

from __future__ import annotations

import pytest
from budget_doubles import EXPERTS, MODES, PRICES, ExactTask, Scripted, run, system

from masrl.algos.gae import token_gae, trajectories
from masrl.systems.budget.rewards import path_cost
from masrl.systems.budget.system import BudgetMode, draw_mode, option_order, parse_action
from masrl.types import Message, Price, Reply, TaskItem


# ---------------------------------------------------------------- protocol
@pytest.mark.parametrize(
    "text, kind, expert, query, answer",
    [
        ("I can do this. <answer>42</answer>", "answer", None, "", "42"),
        ("Hard one. <call>pricey: what is 6*7?</call>", "call", "pricey", "what is 6*7?", None),
        ("<call>CHEAP</call>", "call", "cheap", "", None),
        ("<call>pri</call>", "call", "pricey", "", None),  # unique part of a name
        ("<call>cheap: x</call> then <answer>3</answer>", "call", "cheap", "x", None),  # first tag wins
        ("<answer>3</answer><call>cheap</call>", "answer", None, "", "3"),
    ],
)
def test_parse_answers_and_calls(text, kind, expert, query, answer):
    a = parse_action(text, EXPERTS, can_call=True)
    assert (a.kind, a.agent, a.query, a.answer) == (kind, expert, query, answer)


@pytest.mark.parametrize(
    "text, reason",
    [
        ("just words", "no <answer> or <call> tag"),
        ("<answer>  </answer>", "empty <answer>"),
        ("<call>oracle: hi</call>", "unknown expert 'oracle'"),
        ("<call>p</call>", "unknown expert 'p'"),  # part of both names: ambiguous
        ("<answer>4", "no <answer> or <call> tag"),  # unclosed
    ],
)
def test_malformed_output_is_a_format_failure(text, reason):
    a = parse_action(text, EXPERTS, can_call=True)
    assert a.kind == "format_error" and a.reason == reason


def test_a_call_in_the_last_round_is_a_format_failure():
    a = parse_action("<call>cheap</call>", EXPERTS, can_call=False)
    assert a.kind == "format_error" and a.reason == "a call in the last round"


def test_parser_never_raises_on_garbage():
    for text in ["", "<", "</call>", "<call></call>", "<call>:</call>", "<answer><call>x</call></answer>", "\x00" * 9]:
        assert parse_action(text, EXPERTS, can_call=True).kind in ("answer", "call", "format_error")


def test_mode_draw_is_reproducible_and_follows_the_weights():
    drawn = [draw_mode(0, f"train-{i}", MODES, (1.0, 1.0, 2.0)).name for i in range(4000)]
    assert drawn == [draw_mode(0, f"train-{i}", MODES, (1.0, 1.0, 2.0)).name for i in range(4000)]
    assert drawn.count("high") / 4000 == pytest.approx(0.5, abs=0.03)
    assert drawn.count("low") / 4000 == pytest.approx(0.25, abs=0.03)
    assert {draw_mode(0, f"t{i}", MODES, (0.0, 1.0, 0.0)).name for i in range(200)} == {"medium"}


# ---------------------------------------------------------------- episodes
def hand_episode(mode: str, prices=PRICES):
    """Round 1 asks cheap, round 2 asks pricey, round 3 answers right."""
    ctrl = Scripted("controller", ["<call>cheap: add them</call>", "<call>pricey</call>", "<answer>6</answer>"], 300, 20)
    cheap = Scripted("cheap", ["It is <answer>6</answer>."], 100, 50)
    pricey = Scripted("pricey", ["Surely <answer>6</answer>."], 200, 100)
    sys_ = system(prices=prices, fixed_mode=mode)
    ep = run(sys_, {"controller": ctrl, "cheap": cheap, "pricey": pricey}, TaskItem("q3", "What is 3 + 3?", "6"))
    return ep, ctrl, cheap, pricey


def test_cost_sums_over_a_hand_computed_episode():
    priced = {**PRICES, "controller": Price(0.001, 0.002)}
    ep, *_ = hand_episode("high", priced)
    assert [c.agent for c in ep.calls] == ["controller", "cheap", "controller", "pricey", "controller"]
    # cheap  100 * 0.01 + 50 * 0.03   = 2.5   (per 1k tokens -> /1000)
    # pricey 200 * 0.1  + 100 * 0.3   = 50.0
    # controller 3 x (300 * 0.001 + 20 * 0.002) = 3 x 0.34 = 1.02
    expected = (2.5 + 50.0 + 1.02) / 1000
    final = ep.calls[-1]
    assert final.done and final.rewards["cost"] == pytest.approx(expected)
    assert path_cost(priced, ep.calls) == pytest.approx(expected)
    assert final.rewards["expert_calls"] == 2.0 and final.rewards["answered_alone"] == 0.0


@pytest.mark.parametrize("mode, reward", [("low", 0.0), ("medium", 0.0), ("high", 1.0)])
def test_reward_of_the_same_episode_under_each_mode(mode, reward):
    ep, *_ = hand_episode(mode)  # costs 0.0525 dollars: only high affords it
    final = ep.calls[-1]
    assert final.rewards["correct"] == 1.0 and final.reward == reward and final.rewards["hard"] == reward


def test_expert_replies_are_appended_and_the_mode_is_in_the_prompt():
    ep, ctrl, cheap, pricey = hand_episode("low")
    system_text, user_text = ctrl.seen[0][0].content, ctrl.seen[0][1].content
    assert "cheap" in system_text and "Budget mode" not in system_text
    # the mode ends the user turn, after the problem: next to the controller's decision
    assert user_text.startswith("Problem: What is 3 + 3?\n\nBudget mode: low (at most $0.001 per problem).")
    # the expert sees the problem and the sub-query; with no sub-query, the problem alone
    assert "What is 3 + 3?" in cheap.seen[0][1].content and "add them" in cheap.seen[0][1].content
    assert pricey.seen[0][1].content == "What is 3 + 3?"
    last = ctrl.seen[2]  # round 3: the whole exchange, then "answer now"
    assert [m.role for m in last] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert last[2].content == "<call>cheap: add them</call>" and "It is <answer>6</answer>." in last[3].content
    assert "Surely" in last[5].content and "No more calls" in last[5].content
    assert "No more calls" not in last[3].content


def test_answering_alone_and_format_failures_end_the_episode():
    item = TaskItem("q", "What is 1 + 1?", "2")
    ctrl = Scripted("controller", ["<answer>2</answer>"], 10, 5)
    ep = run(system(fixed_mode="low"), {"controller": ctrl}, item)
    assert len(ep.calls) == 1 and ep.calls[0].rewards["answered_alone"] == 1.0 and ep.calls[0].reward == 1.0
    bad = Scripted("controller", ["I think it is two."], 10, 5)
    ep = run(system(fixed_mode="high"), {"controller": bad}, item)
    assert ep.calls[0].done and ep.calls[0].rewards["format_error"] == 1.0 and ep.calls[0].reward == 0.0


def test_max_rounds_stops_calls():
    item = TaskItem("q", "What is 1 + 1?", "2")
    ctrl = Scripted("controller", ["<call>cheap</call>"], 10, 5)
    cheap = Scripted("cheap", ["<answer>2</answer>"], 10, 5)
    ep = run(system(fixed_mode="high", max_rounds=2), {"controller": ctrl, "cheap": cheap}, item)
    assert [c.agent for c in ep.calls] == ["controller", "cheap", "controller"]
    assert ep.calls[-1].action.reason == "a call in the last round" and ep.calls[-1].reward == 0.0


def test_prefill_is_part_of_the_prompt_and_of_the_parsed_text():
    item = TaskItem("q", "What is 1 + 1?", "2")
    ctrl = Scripted("controller", ["2</answer>"], 10, 5)
    ep = run(system(fixed_mode="high", prefill="<answer>"), {"controller": ctrl}, item)
    assert ctrl.seen[0][-1] == Message("assistant", "<answer>") and ep.calls[0].rewards["correct"] == 1.0


def test_gae_runs_over_the_controller_tokens_only():
    """Two controller rounds of 2 and 3 tokens around an expert call, reward 1 at the end; gamma 1, lam 0.5.

    Values [0.1, 0.2 | 0.3, 0.4, 0.5]; rewards [0, 0 | 0, 0, 1]; the expert's reply is no time step:
    deltas: 0.2-0.1=0.1, 0.3-0.2=0.1, 0.4-0.3=0.1, 0.5-0.4=0.1, 1-0.5=0.5
    A_4 = 0.5, A_3 = 0.1 + 0.5*0.5 = 0.35, A_2 = 0.1 + 0.175 = 0.275, A_1 = 0.1 + 0.1375 = 0.2375,
    A_0 = 0.1 + 0.11875 = 0.21875."""
    ctrl = TrainableScripted(["<call>cheap</call>", "<answer>2</answer>"], [2, 3])
    cheap = Scripted("cheap", ["<answer>2</answer>"], 10, 5)
    ep = run(system(fixed_mode="high"), {"controller": ctrl, "cheap": cheap}, TaskItem("q", "What is 1 + 1?", "2"))
    paths = trajectories([ep])
    assert len(paths) == 1 and [c.agent for c in paths[0].calls] == ["controller", "controller"]
    values = {(0, "0"): [0.1, 0.2], (0, "0.0.0"): [0.3, 0.4, 0.5]}
    out = token_gae(paths, values, gamma=1.0, lam=0.5)
    assert out[(0, "0")].advantages == pytest.approx((0.21875, 0.2375))
    assert out[(0, "0.0.0")].advantages == pytest.approx((0.275, 0.35, 0.5))
    assert out[(0, "0.0.0")].returns == pytest.approx((0.575, 0.75, 1.0))


class TrainableScripted(Scripted):
    """A scripted controller whose replies carry token ids, as a trainable policy's do."""

    def __init__(self, texts, lengths):
        super().__init__("controller", texts, 7, 0)
        self.lengths = lengths

    async def __call__(self, messages):
        r = await super().__call__(messages)
        n = self.lengths[len(self.seen) - 1]
        return Reply(r.text, 7, n, 0.0, prompt_ids=(1,) * 7, response_ids=tuple(range(n)), policy="controller")


def test_the_answer_body_is_read_by_the_task():
    from masrl.tasks.math import MathTask

    sys_ = system(task_family=MathTask("basic_arithmetic", seed=0), fixed_mode="low")
    ctrl = Scripted("controller", ["<answer>The answer is $42.</answer>"], 10, 5)
    ep = run(sys_, {"controller": ctrl}, TaskItem("q", "What is 40 + 2?", "42"))
    assert ep.calls[0].rewards["correct"] == 1.0


def test_training_metrics_per_mode():
    sys_ = system()
    items = ExactTask().items("train", 0, 30)
    agents = {"controller": Scripted("controller", ["<answer>0</answer>"], 10, 5)}
    episodes = [run(sys_, agents, it) for it in items]
    m = sys_.observe(episodes)
    modes = {sys_.mode_for(it).name for it in items}
    assert {k.split("/")[1] for k in m} == modes
    assert sum(m[f"mode/{x}/trajectories"] for x in modes) == 30


def test_unknown_fixed_mode_is_an_error():
    with pytest.raises(ValueError, match="unknown budget mode"):
        system(fixed_mode="lavish")


# ---------------------------------------------------------------- decide-first protocol
def test_decide_first_answers_alone_in_two_prefilled_calls():
    item = TaskItem("q", "What is 1 + 1?", "2")
    ctrl = Scripted("controller", ["none</call>", "2</answer>"], 10, 5)
    ep = run(system(fixed_mode="low", decide_first=True), {"controller": ctrl}, item)
    assert [(c.role, c.turn) for c in ep.calls] == [("controller", 1), ("answer", 1)]
    assert ctrl.seen[0][-1] == Message("assistant", "low budget: <call>") and "<call>none</call>, <call>cheap</call>" in ctrl.seen[0][0].content
    assert [m.content for m in ctrl.seen[1][-3:]] == ["low budget: <call>none</call>", "Now give the final answer as <answer>ANSWER</answer>.", "<answer>"]
    final = ep.calls[-1]
    assert final.rewards["answered_alone"] == 1.0 and final.reward == 1.0 and ep.calls[0].reward == 0.0


def test_decide_first_chooses_again_after_a_reply():
    item = TaskItem("q", "What is 1 + 1?", "2")
    ctrl = Scripted("controller", ["cheap</call>", "none</call>", "2</answer>"], 10, 5)
    cheap = Scripted("cheap", ["It is <answer>2</answer>."], 100, 50)
    ep = run(system(fixed_mode="high", decide_first=True, max_rounds=3), {"controller": ctrl, "cheap": cheap}, item)
    assert [(c.role, c.turn) for c in ep.calls] == [("controller", 1), ("expert", 1), ("controller", 2), ("answer", 2)]
    assert "Choose again: <call>none</call>" in ctrl.seen[1][-2].content and ctrl.seen[1][-1].content == "high budget: <call>"
    assert ep.calls[-1].reward == 1.0 and ep.calls[-1].rewards["answered_alone"] == 0.0


def test_decide_first_calls_then_answers_in_the_last_round():
    item = TaskItem("q", "What is 1 + 1?", "2")
    ctrl = Scripted("controller", ["cheap</call>", "2</answer>"], 10, 5)
    cheap = Scripted("cheap", ["It is <answer>2</answer>."], 100, 50)
    ep = run(system(fixed_mode="low", decide_first=True, max_rounds=2), {"controller": ctrl, "cheap": cheap}, item)
    assert [(c.agent, c.role, c.turn) for c in ep.calls] == [
        ("controller", "controller", 1), ("cheap", "expert", 1), ("controller", "answer", 2)]
    assert ctrl.seen[1][-1] == Message("assistant", "<answer>") and "No more calls" in ctrl.seen[1][-2].content
    final = ep.calls[-1]
    assert final.rewards["cost"] == pytest.approx(0.0025) and final.reward == 0.0  # over the low budget
    assert final.rewards["correct"] == 1.0 and final.rewards["expert_calls"] == 1.0


@pytest.mark.parametrize("decision", ["nobody</call>", "</call>", "gibberish"])
def test_decide_first_bad_decisions_are_format_failures(decision):
    ctrl = Scripted("controller", [decision], 10, 5)
    ep = run(system(fixed_mode="high", decide_first=True), {"controller": ctrl}, TaskItem("q", "1 + 1?", "2"))
    assert len(ep.calls) == 1 and ep.calls[0].done and ep.calls[0].rewards["format_error"] == 1.0


@pytest.mark.parametrize(
    "body, kind, expert",
    [("0", "alone", None), ("1", "call", "cheap"), (" 2 ", "call", "pricey"), ("3", "format_error", None),
     ("-1", "format_error", None), ("cheap", "format_error", None), ("none", "alone", None), ("", "format_error", None),
     # a digit to str.isdigit that int refuses, and a number past int's 4,300 digits: both raised
     ("²", "format_error", None), ("9" * 5000, "format_error", None), ("١", "call", "cheap")],
)  # fmt: skip
def test_numbered_options_map_0_to_alone_and_k_to_the_kth_expert(body, kind, expert):
    a = parse_action(f"<call>{body}</call>", EXPERTS, can_call=True, alone="none", numbered=True)
    assert (a.kind, a.agent) == (kind, expert)


def test_numbered_decide_lists_numbers_and_reaches_the_numbered_expert():
    item = TaskItem("q", "What is 1 + 1?", "2")
    ctrl = Scripted("controller", ["2</call>", "0</call>", "2</answer>"], 10, 5)
    pricey = Scripted("pricey", ["It is <answer>2</answer>."], 100, 50)
    sys_ = system(fixed_mode="high", decide_first=True, numbered=True, max_rounds=3)
    ep = run(sys_, {"controller": ctrl, "pricey": pricey}, item)
    assert [(c.agent, c.role) for c in ep.calls] == [
        ("controller", "controller"), ("pricey", "expert"), ("controller", "controller"), ("controller", "answer")]
    prompt = ctrl.seen[0][0].content
    assert "<call>0</call> you answer yourself; <call>1</call> cheap ($0.03/1k out); <call>2</call> pricey ($0.3/1k out)" in prompt
    assert "Choose again: <call>0</call>" in ctrl.seen[1][-2].content
    assert ep.calls[-1].reward == 1.0 and ep.calls[-1].rewards["expert_calls"] == 1.0
    with pytest.raises(ValueError, match="numbered options need decide_first"):
        system(numbered=True)


@pytest.mark.parametrize(
    "decide_first, numbered, expected",
    [
        (True, True, {"low": "yourself (0) when you can; call only the cheapest expert (1)",
                      "medium": "mid-priced expert (2) when", "high": "strongest expert (2) whenever"}),
        (True, False, {"low": "yourself (none) when you can; call only the cheapest expert (cheap)",
                       "medium": "mid-priced expert (pricey) when", "high": "strongest expert (pricey) whenever"}),
        (False, False, {"low": "yourself (<answer>)", "high": "strongest expert (pricey) whenever"}),
    ],
)  # fmt: skip
def test_each_mode_names_its_options_as_the_controller_writes_them(decide_first, numbered, expected):
    for mode, text in expected.items():
        sys_ = system(fixed_mode=mode, decide_first=decide_first, numbered=numbered)
        prompt = sys_.controller_messages(sys_.start(TaskItem("q", "What is 1 + 1?", "2")))[1].content
        assert text in prompt
    with pytest.raises(ValueError, match="at least one expert"):
        system(experts=())


def test_shuffled_options_keep_their_numbers_in_an_order_drawn_per_task():
    orders = {tuple(option_order(0, f"t{i}", 3)) for i in range(40)}
    assert all(sorted(o) == [0, 1, 2] for o in orders) and len(orders) == 6  # permutations, all of them drawn
    assert option_order(0, "t1", 3) == option_order(0, "t1", 3)
    firsts = set()
    for i in range(12):
        sys_ = system(fixed_mode="high", decide_first=True, numbered=True, shuffled=True)
        prompt = sys_.controller_messages(sys_.start(TaskItem(f"t{i}", "What is 1 + 1?", "2")))[0].content
        listed = prompt.split("one number: ")[1].split(". Experts")[0].split("; ")
        assert sorted(listed) == sorted(["<call>0</call> you answer yourself", "<call>1</call> cheap ($0.03/1k out)",
                                         "<call>2</call> pricey ($0.3/1k out)"])  # fmt: skip
        firsts.add(listed[0][:14])
    assert firsts == {"<call>0</call>", "<call>1</call>", "<call>2</call>"}
    with pytest.raises(ValueError, match="shuffled options need numbered"):
        system(decide_first=True, shuffled=True)


def test_none_is_an_unknown_expert_in_the_free_protocol():
    assert parse_action("<call>none</call>", EXPERTS, can_call=True).kind == "format_error"
    assert parse_action("<call>None</call>", EXPERTS, can_call=True, alone="none").kind == "alone"


def test_an_episode_spending_exactly_its_budget_is_rewarded_and_one_ulp_less_budget_is_not():
    import math

    spent = 0.0 + 0.0025 + 0.05  # the hand episode's spend, summed in the order the episode spends it
    modes = (BudgetMode("exact", spent), BudgetMode("short", math.nextafter(spent, 0.0)))
    ctrl_texts = ["<call>cheap</call>", "<call>pricey</call>", "<answer>6</answer>"]
    rewards = {}
    for mode in ("exact", "short"):
        agents = {"controller": Scripted("controller", ctrl_texts, 300, 20),
                  "cheap": Scripted("cheap", ["a"], 100, 50), "pricey": Scripted("pricey", ["b"], 200, 100)}
        sys_ = system(modes=modes, mode_probs=(1.0, 1.0), fixed_mode=mode)
        final = run(sys_, agents, TaskItem("q3", "What is 3 + 3?", "6")).calls[-1]
        assert final.rewards["cost"] == spent
        rewards[mode] = final.reward
    assert rewards == {"exact": 1.0, "short": 0.0}
