"""What a router controller could earn with a verifier of a given kind, before training one.

Scripted controllers play the trained controller's part in the router's own evaluation (the same
held-out items, pool draws and usage caps as `masrl train` reports): each routes turn 1 by a rule
and gives the turn-2 verdict by a rule. Rules:

- routes: every single agent, and the MiniLM classifier baseline's choice per item;
- verdicts: ``always True`` (no verification), ``visible slips`` (False exactly when
  `masrl.pools.slips.check_draft` finds a false step or an answer that does not match the last
  line: a perfect checker of what the draft shows), ``truth`` (False exactly when the draft is wrong).

Each row is set against the best one-shot baseline with a paired bootstrap interval, and gives the
verdict's true-positive rate (right drafts called True) and true-negative rate (wrong ones called
False). If even a perfect checker of visible slips cannot clear a bar, no controller trained to
check them can.

    python scripts/router_bounds.py router system.pool.drafts=visible system.labels=numbers \\
        system.final_verification=false --items 300
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Mapping, Sequence

from masrl.agents.python_fn import FunctionAgent
from masrl.pools.slips import check_draft
from masrl.systems.router.evaluation import RouterEval, evaluate_controller
from masrl.systems.router.system import RouterSystem
from masrl.tasks.base import Task
from masrl.types import Message, TaskItem

Route = Callable[[str], str]  # question -> agent
Verify = Callable[[str, str], bool]  # question, draft -> verdict


def template_fields(template: str, text: str) -> dict[str, str] | None:
    """The values `template`'s {fields} took in `text` (None if `text` is not an instance of it).

    Every field but the last matches as little as it can, so a draft that contains the template's
    later literal text still parses as long as the template ends with a field or a literal."""
    parts = re.split(r"\{(\w+)\}", template)
    pattern = "".join(re.escape(p) if i % 2 == 0 else f"(?P<{p}>.*?)" for i, p in enumerate(parts))
    found = re.fullmatch(pattern, text, flags=re.DOTALL)
    return None if found is None else found.groupdict()


def scripted_controller(system: RouterSystem, route: Route, verify: Verify) -> FunctionAgent:
    """A controller that decides by `route` at turn 1 and `verify` after, writing what the system's
    parser reads after its prefilled tag. Needs `system.prefill` (the tag tells the turn apart)."""
    if not system.prefill:
        raise ValueError("scripted_controller needs system.prefill: the prefilled tag tells turn 1 from later turns")
    options = system.options  # the prompts of its label style, which the rules read the question and draft from

    def decide(messages: Sequence[Message]) -> str:
        user = messages[1].content
        if messages[-1].content == "<model>":
            fields = template_fields(options.route_user, user)
            if fields is None:
                raise ValueError(f"not a routing prompt: {user[:80]!r}")
            return f"{system.label(route(fields['question']))}</model>"
        fields = template_fields(options.verify_user, user)
        if fields is None:
            raise ValueError(f"not a verification prompt: {user[:80]!r}")
        return f"{verify(fields['question'], fields['draft'])}</verdict>"

    return FunctionAgent("controller", decide)


def verifiers(task: Task, items: Sequence[TaskItem]) -> dict[str, Verify]:
    gold = {it.question.strip(): it for it in items}

    def visible_slips(question: str, draft: str) -> bool:
        return not check_draft(draft, task.extract_answer(draft)).visible

    def truth(question: str, draft: str) -> bool:
        answer = task.extract_answer(draft)
        return answer is not None and task.score(gold[question], answer) > 0

    return {"always True": lambda q, d: True, "visible slips": visible_slips, "truth": truth}


def rates(result: RouterEval) -> tuple[float, float]:
    """(TPR, TNR) of the turn-2 verdicts: right drafts called True, wrong drafts called False."""
    right = result.verification_confusion.get("draft correct", {})
    wrong = result.verification_confusion.get("draft wrong", {})
    tpr = right.get("True", 0) / max(1, sum(right.values()))
    tnr = wrong.get("False", 0) / max(1, sum(wrong.values()))
    return tpr, tnr


def bounds(
    system: RouterSystem, pool: Mapping, task: Task, items: Sequence[TaskItem], rho: Mapping[str, float],
    routes: Mapping[str, Route], solvers=None,
) -> list[RouterEval]:  # fmt: skip
    """Every route rule with every verdict rule, under the caps."""
    out = []
    rules = verifiers(task, items)
    for route_name, route in routes.items():
        for verify_name, verify in rules.items():
            controller = scripted_controller(system, route, verify)
            out.append(evaluate_controller(system, controller, pool, items, rho, solvers=solvers,
                                           method=f"{route_name} + {verify_name}"))  # fmt: skip
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", help="a router config name or file")
    parser.add_argument("overrides", nargs="*", help="config overrides")
    parser.add_argument("--items", type=int, default=300, help="held-out items (default 300)")
    args = parser.parse_args(argv)

    from masrl.config import ConfigError
    from masrl.run.trained import TrainingError, load_parts
    from masrl.stats import paired_difference
    from masrl.systems.router.evaluation import evaluate_one_shot, solver_profile
    from masrl.systems.router.results import baseline_routers

    try:
        engine = load_parts(args.target, args.overrides)
    except (ConfigError, TrainingError) as exc:
        raise SystemExit(f"router_bounds: {exc}")
    if engine.config.system.kind != "router":
        raise SystemExit("router_bounds: needs the router system")
    system, pool, task = engine.system, engine.frozen, engine.task
    items = task.items("eval", 0, args.items)
    rho = system.multipliers.rho
    solvers = solver_profile(pool, task, items)
    routers = baseline_routers(engine, ["single", "random", "classifier", "knn"])
    baselines = [evaluate_one_shot(r, pool, task, items, rho, solvers=solvers) for r in routers]
    best = max(baselines, key=lambda r: r.accuracy)
    classifier = next(r for r in routers if r.name == "embedding-classifier")
    choice = dict(zip((it.question.strip() for it in items), classifier.choose(items)))
    routes: dict[str, Route] = {f"all to {a}": (lambda q, a=a: a) for a in system.agents}
    routes["classifier"] = choice.__getitem__
    agents = " / ".join(system.agents)
    print(f"{len(items)} held-out items, caps {' / '.join(f'{rho[a]:.2f}' for a in system.agents)} ({agents})")
    print(f"| method | accuracy | usage {agents} | verdict TPR | TNR | minus {best.method} [95% CI] |")
    print("|---|---|---|---|---|---|")
    for r in baselines:
        print(f"| {r.method} | {r.accuracy:.3f} | {' / '.join(f'{v:.2f}' for v in r.usage.values())} | | | |")
    for r in bounds(system, pool, task, items, rho, routes, solvers):
        tpr, tnr = rates(r)
        d = paired_difference([float(t.correct) for t in r.traces], [float(t.correct) for t in best.traces])
        print(f"| {r.method} | {r.accuracy:.3f} | {' / '.join(f'{v:.2f}' for v in r.usage.values())} | {tpr:.3f} | "
              f"{tnr:.3f} | {d.estimate:+.3f} [{d.low:+.3f}, {d.high:+.3f}] |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
