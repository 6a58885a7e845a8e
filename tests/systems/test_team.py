"""The built-in solver-and-checker team (masrl.systems.team): who acts when, what ends an episode,
what it is scored on, and how MHGPO's credit reaches the checker through the solver's answer."""

from __future__ import annotations

from masrl.algos.credit import descendant_mean
from masrl.loading import load_config
from masrl.registry import build_task
from masrl.systems.team import SolverChecker, final_draft, sends_back
from masrl.types import Call, Episode, Reply


def reply(text: str) -> Reply:
    return Reply(text, tokens_in=10, tokens_out=5, cost=0.0)


def team():
    task = build_task(load_config("default").task)
    item = task.items("train", 0, 1)[0]
    return SolverChecker(task), item, item.answer


def play(system, item, texts):
    """Run the episode on scripted replies; the agents asked, in order, and the final transition."""
    state, asked, out = system.start(item), [], None
    for text in texts:
        step = system.next_step(state)
        asked.append(step.agent)
        out = system.advance(state, step, reply(text))
        state = out.state
        if out.done:
            break
    return asked, out


def test_the_checker_sends_back_only_on_a_clear_revise():
    assert sends_back("<verdict>revise</verdict>") and sends_back("<verdict> Revise")
    assert not sends_back("<verdict>accept</verdict>")
    assert not sends_back("revise")  # no verdict tag: accepted
    assert not sends_back("")


def test_an_accepted_draft_ends_after_two_calls_scored_on_the_draft():
    system, item, answer = team()
    asked, out = play(system, item, [f"<answer>{answer}</answer>", "<verdict>accept</verdict>"])
    assert asked == ["solver", "checker"] and out.done
    assert out.reward == 1.0 and out.rewards == {"correct": 1.0, "final": 1.0}


def test_a_sent_back_draft_gets_one_more_try_and_only_the_last_counts():
    system, item, answer = team()
    wrong = f"<answer>{int(float(answer)) + 1}</answer>"
    asked, out = play(system, item, [f"<answer>{answer}</answer>", "<verdict>revise</verdict>", wrong, "unused"])
    assert asked == ["solver", "checker", "solver"] and out.done
    assert out.reward == 0.0  # the right first draft was revised into a wrong one
    step = system.next_step(out.state)  # had it gone on, the solver sees its draft and the checker's doubt
    assert [m.role for m in step.messages] == ["system", "user", "assistant", "user"]
    assert step.messages[2].content == wrong


def test_descendant_mean_carries_the_final_answer_back_to_the_checker_and_the_first_draft():
    # One run, revised into a right answer: every call that led to it gets the final reward 1
    # (the checker's "own" reward is 0), which is what lets the checker learn from the outcome.
    def call(id, parent, agent, **kw):
        return Call(id, parent, agent, agent, 0, (), reply("x"), **kw)

    won = {"correct": 1.0, "final": 1.0}
    calls = (call("0", None, "solver"), call("0.0", "0", "checker"), call("0.0.0", "0.0", "solver", rewards=won, reward=1.0))
    assert descendant_mean(Episode(None, calls)) == {"0": 1.0, "0.0": 1.0, "0.0.0": 1.0}
    # Without "final" the outcome would stay on the last call: the team's rewards must name it.
    alone = (*calls[:2], call("0.0.0", "0.0", "solver", rewards={"correct": 1.0}, reward=1.0))
    assert descendant_mean(Episode(None, alone)) == {"0": 0.0, "0.0": 0.0, "0.0.0": 1.0}


def test_a_served_request_answers_with_the_solvers_last_draft_not_the_verdict():
    def call(id, parent, agent, text):
        return Call(id, parent, agent, agent, 0, (), reply(text))

    accepted = (call("0", None, "solver", "<answer>7</answer>"), call("0.0", "0", "checker", "<verdict>accept</verdict>"))
    assert final_draft(Episode(None, accepted)) == "<answer>7</answer>"
    revised = (*accepted[:1], call("0.0", "0", "checker", "<verdict>revise</verdict>"),
               call("0.0.0", "0.0", "solver", "<answer>8</answer>"))  # fmt: skip
    assert final_draft(Episode(None, revised)) == "<answer>8</answer>"


def calculator_team():
    task = build_task(load_config("default").task)
    item = task.items("train", 0, 1)[0]
    return SolverChecker(task, checker="calculator"), item, item.answer


def test_the_calculator_checker_keeps_a_draft_its_expression_agrees_with():
    system, item, answer = calculator_team()
    expression = item.question.removeprefix("Calculate ").rstrip(".")
    asked, out = play(system, item, [f"<answer>{answer}</answer>", f"<calc>{expression}</calc>"])
    assert asked == ["solver", "checker"] and out.done and out.reward == 1.0


def test_the_calculator_checker_sends_a_wrong_draft_back_with_the_value():
    system, item, answer = calculator_team()
    expression = item.question.removeprefix("Calculate ").rstrip(".")
    wrong = f"<answer>{int(answer) + 1}</answer>"
    state = system.start(item)
    for text in (wrong, f"<calc>{expression}</calc>"):
        out = system.advance(state, system.next_step(state), reply(text))
        state = out.state
    assert not out.done
    step = system.next_step(state)  # the solver sees its draft and the calculator's value
    assert step.agent == "solver"
    assert step.messages[-1].content == f"A calculator gives {expression} = {answer}. Reply with the final answer as <answer>NUMBER</answer>."
    out = system.advance(state, step, reply(f"<answer>{answer}</answer>"))
    assert out.done and out.reward == 1.0  # the solver used the value: the team is right


def test_a_calculator_call_that_is_not_arithmetic_leaves_the_draft_as_it_is():
    """An unreadable call keeps the draft, as an unreadable verdict does; code in the call is never run."""
    system, item, answer = calculator_team()
    wrong = f"<answer>{int(answer) + 1}</answer>"
    for call in ("<calc>__import__('os').system('true')</calc>", "no call at all", "<calc>9**999999</calc>"):
        asked, out = play(system, item, [wrong, call])
        assert asked == ["solver", "checker"] and out.done and out.reward == 0.0


def test_a_checker_that_agrees_with_every_draft_earns_nothing_for_a_wrong_one():
    """The checker's reward is the team's final answer: copying the draft into the call keeps a wrong answer."""
    system, item, answer = calculator_team()
    wrong = int(answer) + 1
    asked, out = play(system, item, [f"<answer>{wrong}</answer>", f"<calc>{wrong}</calc>"])
    assert out.done and out.reward == 0.0
