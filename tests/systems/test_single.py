"""The single agent (masrl.systems.single): graded on its reply, or with `tool: calculator` on the value
the calculator gives for what the reply types into it."""

from __future__ import annotations

from masrl.loading import load_config
from masrl.registry import build_task
from masrl.systems.single import SingleAgentSystem
from masrl.types import Reply

WEIGHTS = {"correct": 1.0, "format": 0.1}


def answer(system: SingleAgentSystem, item, text: str):
    state = system.start(item)
    return system.advance(state, system.next_step(state), Reply(text, tokens_in=10, tokens_out=5, cost=0.0))


def test_with_the_calculator_the_value_of_the_typed_expression_is_the_answer():
    task = build_task(load_config("single-arithmetic").task)
    item = task.items("train", 0, 1)[0]
    expression = item.question.removeprefix("Calculate ").rstrip(".")
    with_tool = SingleAgentSystem(task, "p", WEIGHTS, tool="calculator")
    out = answer(with_tool, item, f"<calc>{expression}</calc>")
    assert out.reward == 1.1 and out.action == item.answer  # right and in the answer format
    plain = SingleAgentSystem(task, "p", WEIGHTS)
    assert answer(plain, item, f"<calc>{expression}</calc>").reward == 0.0  # without the tool it is no answer


def test_with_the_calculator_a_reply_it_cannot_read_is_graded_as_written():
    task = build_task(load_config("single-arithmetic").task)
    item = task.items("train", 0, 1)[0]
    with_tool = SingleAgentSystem(task, "p", WEIGHTS, tool="calculator")
    assert answer(with_tool, item, f"<answer>{item.answer}</answer>").reward == 1.1
    assert answer(with_tool, item, "__import__('os') <calc>open('x')</calc>").reward == 0.0
