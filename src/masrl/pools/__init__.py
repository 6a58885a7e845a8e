"""Agent pools for multi-agent systems: sets of priced agents ordered weak to strong.

- `simulated`: SIMULATED agents for fast CPU work. No model runs; each answer's
  correctness is an item-response draw calibrated to weak / medium / strong
  accuracies on reasoning-gym math, written up as a worked solution (`drafts`).
- `champ`: a RECORDED pool. Four real models' (GPT-3.5, GPT-4, GPT-4 Turbo,
  PaLM 2) answers to CHAMP's 270 competition problems, graded against the
  reference answers and replayed with historical per-token prices. Build the
  pool file once with ``python -m masrl.pools.champ OUT.jsonl`` (docs/champ-pool.md).

Both give agents that implement the one agent protocol (`masrl.agents.base`),
so a system cannot tell them from live backends.
"""

from typing import Any

from masrl.pools.simulated import (
    ItemIndex,
    SimulatedAgent,
    correct_probability,
    measure_accuracy,
    simulated_pool,
)

_CHAMP = ("PoolSummary", "RecordedChampAgent", "build_champ_pool", "load_champ_pool")

__all__ = [
    "ItemIndex",
    "PoolSummary",
    "RecordedChampAgent",
    "SimulatedAgent",
    "build_champ_pool",
    "correct_probability",
    "load_champ_pool",
    "measure_accuracy",
    "simulated_pool",
]


def __getattr__(name: str) -> Any:
    if name in _CHAMP:
        from masrl.pools import champ  # lazy: so `python -m masrl.pools.champ` runs it fresh

        return getattr(champ, name)
    raise AttributeError(f"module 'masrl.pools' has no attribute {name!r}")
