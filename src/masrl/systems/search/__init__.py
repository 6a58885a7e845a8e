"""The multi-agent search system, MHGPO (arXiv:2506.02718), in one package:

- `config`: its `system` section (retriever, limits, the agent-specific penalties);
- `system`: Rewriter -> retriever -> Reranker -> Answerer over one shared policy, its rewards
  (F1, the agent-specific penalties of appendix B) and metrics;
- `views`: its section of the run page (`masrl view`): F1 and EM by evaluation, with intervals.

Its samplers (FoF, IS, RR) are branching rules of the engine (masrl.rollout.tree) and its
backward propagation and heterogeneous groups are credit and grouping rules (masrl.algos.credit);
the task (multi-hop questions over a corpus) is masrl.tasks.search.
"""

from __future__ import annotations

from masrl.systems.api import GENERAL_RULES, Page, SystemSpec, lazy
from masrl.systems.search.config import SearchConfig, check_search, search_needs
from masrl.systems.search.system import build_search

SYSTEM = SystemSpec(
    kind="search",
    config=SearchConfig,
    build=build_search,
    summary="Rewriter, Reranker and Answerer around a retriever, one shared policy (MHGPO)",
    rules=(*GENERAL_RULES, "independent", "round_robin"),  # IS and RR fork at the pipeline's agents
    own_tasks=True,
    needs=search_needs,
    check=check_search,
    page=Page(
        curves=(  # the paper's figure 8: each agent's output pattern over training
            ("eval/f1", "held-out F1 (greedy)"),
            ("calls_per_question", "agent calls per question (training trees)"),
            ("rewriter/subqueries", "rewriter: sub-queries written (MHGPO fig. 8)"),
            ("reranker/selected", "reranker: documents selected (MHGPO fig. 8)"),
            ("answerer/words", "answerer: answer length in words (MHGPO fig. 8)"),
        ),
        views=lazy("masrl.systems.search.views:search_views"),
    ),
)
