"""The evolving orchestrator, Puppeteer (arXiv:2505.19591), in one package:

- `config`: its `system` section (agent space, policy, depth, cost weight lambda, the pool);
- `system`: the orchestrator's state machine (pick one agent per step from the whole state until
  the terminator or the depth limit; W parallel paths, majority vote);
- `space`: the agent space (models x reasoning patterns x tools, plus the terminator) and tools;
- `returns`: R_t = gamma R_(t+1) - lambda C_t, C_t = F log(1 + t/phi) (pure functions);
- `head`: the scoring-head policy (frozen encoder + trainable head, REINFORCE);
- `vote`, `topology`: majority vote; graph density and cycles of the orchestration;
- `evaluation`: W-path evaluation with topology and orchestration graphs;
- `notes/`: the few math notes its file-reading and search tools open.
- `views`: its sections of the run page (`masrl view`): orchestration graphs, initial to evolved.
"""

from __future__ import annotations

from masrl.systems.api import Page, SystemSpec, lazy
from masrl.systems.puppeteer.config import PuppeteerConfig, check_puppeteer, puppeteer_needs
from masrl.systems.puppeteer.system import build_puppeteer

SYSTEM = SystemSpec(
    kind="puppeteer",
    config=PuppeteerConfig,
    build=build_puppeteer,
    summary="an orchestrator picks the next agent (model x pattern x tool) until it stops; cost-aware returns",
    evaluate=lazy("masrl.systems.puppeteer.evaluation:evaluate_orchestrator"),
    check=check_puppeteer,
    needs=puppeteer_needs,
    rules=("parallel",),  # W independent paths per task, aggregated by vote (sec. 2.3)
    page=Page(views=lazy("masrl.systems.puppeteer.views:puppeteer_views")),
)
