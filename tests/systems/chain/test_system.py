"""The chain of adders (masrl.systems.chain): how a question is split into two-number calls, what each
call is asked, what the chain is scored on, and what degenerate replies earn."""

from __future__ import annotations

from masrl.algos.credit import descendant_mean
from masrl.loading import load_config
from masrl.registry import build_task
from masrl.systems.chain import ADDER
from masrl.systems.chain.system import AdderChain, split_terms
from masrl.types import Call, Episode, Reply, TaskItem


def reply(text: str) -> Reply:
    return Reply(text, tokens_in=10, tokens_out=5, cost=0.0)


def chain(weights=None):
    return AdderChain(build_task(load_config("chain-sum").task), ADDER, weights or {"correct": 1.0})


def play(system, item, texts):
    """Run the episode on scripted replies: the user message of every call made, and the last transition."""
    state, asked, out = system.start(item), [], None
    for text in texts:
        step = system.next_step(state)
        asked.append(step.messages[-1].content)
        out = system.advance(state, step, reply(text))
        state = out.state
        if out.done:
            break
    return asked, out


def item(question: str, answer: str) -> TaskItem:
    return TaskItem("t/0", question, answer, {})


def test_the_splitter_reads_the_terms_of_reasoning_gyms_questions():
    chain_sum = "State the final answer to the following arithmetic problem: 4 - 1 - 17 + 7 ="
    assert split_terms(chain_sum) == (("+", "4"), ("-", "1"), ("-", "17"), ("+", "7"))
    assert split_terms("Calculate -5 + 12.") == (("-", "5"), ("+", "12"))
    assert split_terms("Calculate 12.") is None  # one term: nothing to chain
    assert split_terms("Calculate 3 * 4 + 5.") is None  # the chain is part of a product: its sum is not the answer
    assert split_terms("Calculate (3 + 4) * 5.") is None


def test_each_call_adds_the_next_term_to_the_total_the_last_call_wrote():
    system = chain()
    problem = item("State the final answer to the following arithmetic problem: 4 - 1 - 17 + 7 =", "-7")
    # 4 - 1 = 3, 3 - 17 = -14, -14 + 7 = -7: three calls, each on the last call's answer.
    asked, out = play(system, problem, ["<answer>3</answer>", "So <answer>-14.0</answer>", "<answer>-7</answer>"])
    assert asked == ["Calculate 4 - 1.", "Calculate 3 - 17.", "Calculate -14 + 7."]  # -14.0 is written -14
    assert out.done and out.reward == 1.0 and out.action == "-7"
    assert out.rewards == {"correct": 1.0, "format": 1.0, "final": 1.0}


def test_each_call_earns_its_own_format_term_and_only_the_last_the_answer():
    # The single agent's weights: correct 1 on the chain's final answer, format 0.1 on every call's own reply.
    system = chain({"correct": 1.0, "format": 0.1})
    problem = item("Calculate 4 - 1 - 17 + 7.", "-7")
    state, got = system.start(problem), []
    for text in ["<answer>3</answer>", "3 - 17 is -14", "<answer>-7</answer> done"]:
        out = system.advance(state, system.next_step(state), reply(text))
        got.append((out.reward, dict(out.rewards)))
        state = out.state
    assert got == [
        (0.1, {"format": 1.0}),
        (0.0, {"format": 0.0}),  # no tag: the last number is the total, as the task reads an answer
        (1.0 + 0.05, {"correct": 1.0, "format": 0.5, "final": 1.0}),  # text after the tag: half the format term
    ]
    assert system.next_step(system.start(problem)).messages[0].content == ADDER


def test_a_wrong_partial_sum_is_carried_on_and_only_the_last_answer_is_scored():
    system = chain()
    problem = item("Calculate 4 - 1 - 17 + 7.", "-7")
    asked, out = play(system, problem, ["<answer>5</answer>", "<answer>-12</answer>", "<answer>-5</answer>"])
    assert asked == ["Calculate 4 - 1.", "Calculate 5 - 17.", "Calculate -12 + 7."]
    assert out.done and out.reward == 0.0
    # A wrong partial sum can still end right (two slips that cancel): scored 1, the system grades no step.
    _, lucky = play(system, problem, ["<answer>5</answer>", "<answer>-14</answer>", "<answer>-7</answer>"])
    assert lucky.reward == 1.0


def test_degenerate_replies_earn_nothing():
    system = chain()
    problem = item("Calculate 4 - 1 - 17 + 7.", "-7")
    for degenerate in ("", "I cannot compute this.", "<answer></answer>", "<answer>minus seven</answer>"):
        asked, out = play(system, problem, [degenerate, "<answer>-7</answer>", "<answer>-7</answer>"])
        assert len(asked) == 1 and out.done and out.reward == 0.0, degenerate  # the chain stops at 0
    # An expression is no total: the system does not compute the adder's sum for it (it would be a calculator).
    asked, out = play(system, problem, ["<answer>4 - 1</answer>", "<answer>-14</answer>", "<answer>-7</answer>"])
    assert len(asked) == 1 and out.done and out.reward == 0.0


def test_a_question_the_splitter_cannot_read_goes_to_the_adder_whole():
    system = chain()
    problem = item("Calculate 3 * 4 + 5.", "17")
    asked, out = play(system, problem, ["<answer>17</answer>", "unused"])
    assert asked == ["Calculate 3 * 4 + 5."] and out.done and out.reward == 1.0


def test_descendant_mean_carries_the_chains_final_answer_back_to_its_first_call():
    def call(id, parent, **kw):
        return Call(id, parent, "adder", "adder", 0, (), reply("x"), **kw)

    won = {"correct": 1.0, "final": 1.0}
    calls = (call("0", None), call("0.0", "0"), call("0.0.0", "0.0", rewards=won, reward=1.0))
    assert descendant_mean(Episode(None, calls)) == {"0": 1.0, "0.0": 1.0, "0.0.0": 1.0}


def test_the_shipped_config_splits_its_own_items_into_three_calls():
    system = chain()
    for problem in system.task.items("eval", 0, 20):
        terms = split_terms(problem.question)
        assert terms is not None and len(terms) == 4, problem.question
