"""Turn-based cooperating agents, AT-GRPO (arXiv:2510.11062), in one package:

- `config`: its `system` section (roles, shared or per-role policies, turns, reward mix);
- `system`: the turn loop (every agent acts in order each turn; the environment steps; stop when
  the goal is met, the agents agree, or after T turns), code roles run in the sandbox.

Its environments (Sudoku, Sokoban, Plan-Path, math with a tool, code with tests) and their team and
local rewards are task families (masrl.tasks: TurnTask, team.py); its per-turn greedy tree is a
branching rule (masrl.rollout.rules.PerTurnGreedy) and its (environment, agent, turn) groups a
grouping rule (masrl.algos.credit).
"""

from __future__ import annotations

from masrl.systems.api import SystemSpec
from masrl.systems.turns.config import TurnsConfig
from masrl.systems.turns.system import build_turns

SYSTEM = SystemSpec(
    kind="turns",
    config=TurnsConfig,
    build=build_turns,
    summary="agents act in turn on an environment; per-turn trees, team + local rewards (AT-GRPO)",
    own_tasks=True,
)
