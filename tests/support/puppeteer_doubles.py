"""Test doubles of the Puppeteer tests (tests/systems/puppeteer/): a task graded by exact match, agents
that always give one answer, and a two-agent orchestrator."""

from __future__ import annotations

import re

from masrl.agents.python_fn import FunctionAgent
from masrl.systems.puppeteer.space import AgentSpec
from masrl.systems.puppeteer.system import PuppeteerSystem
from masrl.types import Reply, TaskItem


class ExactTask:
    """A task whose answers are <answer>...</answer> and right when equal to the gold text."""

    name = "exact"

    def items(self, split, start, count):
        return [TaskItem(f"{split}/{i}", f"question {i}", "7") for i in range(start, start + count)]

    def extract_answer(self, text):
        found = re.findall(r"<answer>(.*?)</answer>", text)
        return found[-1].strip() if found else None

    def score(self, item, answer):
        return float(answer.strip() == item.answer)


def fixed_agent(name, text, tokens_in, tokens_out):
    return FunctionAgent(name, lambda msgs: Reply(text, tokens_in, tokens_out, 0.0))


def two_agent_system(depth=4, lam=0.1, prefill=False):
    specs = (AgentSpec("right", "reasoning"), AgentSpec("wrong", "reasoning"))
    return PuppeteerSystem(ExactTask(), specs, depth=depth, lam=lam, cost_unit=1000.0, prefill=prefill)


AGENTS = {
    "right:reasoning": fixed_agent("right:reasoning", "so <answer>7</answer>", 300, 100),
    "wrong:reasoning": fixed_agent("wrong:reasoning", "so <answer>8</answer>", 150, 50),
}
