"""The critique-and-routing controller (arXiv:2605.08686), in one package:

- `config`: its `system` section (turns, caps, multipliers, baselines, the pool);
- `system`: the controller's state machine over calls, prompts and the action parser;
- `rewards`: routing, verification and usage-penalty rewards, dual ascent (pure functions);
- `evaluation`: the capped evaluation of a controller or a one-shot router, confusion matrices;
- `baselines`: the one-shot baseline routers (single agent, random, MiniLM classifier and kNN);
- `results`: the engine-facing evaluation (controller + baselines, tables, results.md/json);
- `views`: its sections of the run page (`masrl view`): usage over training, confusion matrices.

Its pools (simulated, recorded CHAMP, your own agents) are shared with other systems: masrl.pools.
"""

from __future__ import annotations

from masrl.systems.api import Command, Page, Serving, SystemSpec, build_champ_pool, lazy
from masrl.systems.router.config import RouterConfig, check_router, router_needs
from masrl.systems.router.system import build_router


def _champ_pool_arguments(parser) -> None:
    parser.add_argument("out", help="path of the pool file to write, e.g. runs/champ-pool.jsonl")


def _champ_pool(args) -> int:
    print(build_champ_pool(args.out).table())
    return 0


SYSTEM = SystemSpec(
    kind="router",
    config=RouterConfig,
    build=build_router,
    summary="a controller routes each problem to a pool agent, verifies drafts, escalates (critique-routing paper)",
    evaluate=lazy("masrl.systems.router.results:evaluate_router"),
    check=check_router,
    needs=router_needs,
    page=Page(views=lazy("masrl.systems.router.views:router_views")),
    commands={
        "champ-pool": Command("build the recorded CHAMP agent pool file (needs champ-dataset)",
                              _champ_pool_arguments, _champ_pool),
    },  # fmt: skip
    serving=Serving(
        answer=lazy("masrl.systems.router.serving:answer"),
        audit=lazy("masrl.systems.router.serving:audit"),
        configure=lazy("masrl.systems.router.serving:configure"),
    ),
)
