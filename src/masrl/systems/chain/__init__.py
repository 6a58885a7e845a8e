"""A chain of adders (`system.kind: chain`): a many-term sum split into two-term calls (system.py)."""

from __future__ import annotations

from pydantic import Field

from masrl.systems.api import Built, SystemSection, SystemSpec, Task
from masrl.systems.chain.system import AdderChain

ADDER = "Compute the result. Reply with the final answer as <answer>NUMBER</answer> and nothing else."


class ChainConfig(SystemSection):
    prompt: str = Field(
        ADDER, description="the adder's system prompt; each call's user message is one two-number problem, "
        "'Calculate TOTAL OP TERM.' (the default is single-arithmetic's prompt, so the two differ only in the split)",
    )


def build_chain(config, task: Task) -> Built:
    """One trainable policy answers every call of the chain, graded with the single agent's reward.weights."""
    chain = AdderChain(task, config.system.prompt, dict(config.reward.weights))
    return Built(chain, {"adder": "adder"}, stop=("</answer>",))


# `masrl serve` answers with the last call's reply, the chain's total: the default Serving.
SYSTEM = SystemSpec(
    kind="chain",
    config=ChainConfig,
    build=build_chain,
    summary="a many-term sum split into two-term calls of one adder, each on the last call's total",
)
