"""Check a served run against its evaluation, through a real `masrl serve` process and the `openai` client.

    python scripts/serve_check.py RUN_DIR [--items 30]

Starts `masrl serve RUN_DIR` on a free loopback port, sends the run's first N
held-out questions, and prints what docs/serving.md reports:

- a router run: for each item, whether the served episode (who drafted, in
  order, and whether the final draft is correct) equals the capped evaluation
  `masrl eval` runs (`evaluate_controller`, the run's caps), and the count of
  calls the evaluation's caps redirected (a served request has no caps unless
  it sends some, so a redirect is the one allowed difference);
- a budget run: for each mode, the served mean cost per query and accuracy
  over the same N questions, and whether cost is ordered low < medium < high;
- any other system: accuracy and mean cost of the served answers.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import openai

from masrl.http import wait_healthy


@contextlib.contextmanager
def served(run_dir: Path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k != "MASRL_API_KEY"}
    proc = subprocess.Popen([sys.executable, "-m", "masrl.cli", "serve", str(run_dir), "--port", str(port)],
                            env=env, stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, timeout=300, every=0.5)
    except RuntimeError as exc:
        raise SystemExit(f"masrl serve: {exc}") from None
    try:
        yield openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=600)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


def ask(api: openai.OpenAI, model: str, question: str, **extra):
    reply = api.chat.completions.create(model=model, messages=[{"role": "user", "content": question}],
                                        extra_body=extra or None)  # fmt: skip
    return reply.masrl


def check_router(run_dir: Path, n: int) -> dict:
    from masrl.systems.router.evaluation import evaluate_controller
    from masrl.run.trained import load_trained

    engine, _ = load_trained(run_dir)
    items = engine.task.items("eval", 0, n)
    system = engine.system
    expected = evaluate_controller(system, engine.eval_agents["controller"], engine.frozen, items,
                                   rho=system.multipliers.rho)  # fmt: skip
    with served(run_dir) as api:
        model = api.models.list().data[0].id
        records = [ask(api, model, it.question) for it in items]
    same = [r["drafts_by"] == t.answered_by and r["correct"] == t.correct for r, t in zip(records, expected.traces)]
    return {"system": "router", "items": n, "served_equal_eval": sum(same), "eval_redirected_by_caps": expected.redirected,
            "served_accuracy": sum(r["correct"] for r in records) / n, "eval_accuracy": expected.accuracy,
            "served_cost_per_item": sum(r["cost"] for r in records) / n}  # fmt: skip


def check_modes(run_dir: Path, n: int) -> dict:
    from masrl.run.trained import load_trained

    engine, _ = load_trained(run_dir)
    items = engine.task.items("eval", 0, n)
    out: dict = {"system": engine.config.system.kind, "items": n, "modes": {}}
    with served(run_dir) as api:
        model = api.models.list().data[0].id
        modes = api.models.list().data[0].masrl["modes"]
        for mode in modes or [None]:
            records = [ask(api, model, it.question, **({"budget": mode} if mode else {})) for it in items]
            out["modes"][mode or "-"] = {"cost_per_query": sum(r["cost"] for r in records) / n,
                                  "accuracy": sum(r["correct"] for r in records) / n,
                                  "expert_calls": sum(len(r.get("experts", ())) for r in records) / n}  # fmt: skip
    if modes:
        costs = [out["modes"][m]["cost_per_query"] for m in modes]
        out["cost_ordered"] = all(a < b for a, b in zip(costs, costs[1:]))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir", type=Path)
    p.add_argument("--items", type=int, default=30)
    args = p.parse_args(argv)
    from masrl.loading import load_config

    kind = load_config(args.run_dir / "config.yaml").system.kind
    result = check_router(args.run_dir, args.items) if kind == "router" else check_modes(args.run_dir, args.items)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
