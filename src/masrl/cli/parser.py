"""masrl's argument parser: every command's arguments and help (`masrl --help`, `masrl COMMAND --help`).

Its own commands first; then the ones systems add (`SystemSpec.commands`), found through the registry,
each under the name it claims unless a masrl command or an earlier system has it.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Collection

from masrl.registry import available_systems


def parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """The command line, with dotted overrides allowed after the options as well as before them
    (`masrl baseline RUN --budget tokens trainer.threads=1`): argparse ends a positional list at the first
    option, so the overrides after it come back unrecognised and join the command's own."""
    args, extra = parser.parse_known_args(argv)
    overrides = [a for a in extra if "=" in a and not a.startswith("-")]
    if extra and (len(overrides) < len(extra) or not hasattr(args, "overrides")):
        parser.parse_args(argv)  # argparse's own one-line error (exit 2) for what is not an override
    if overrides:
        args.overrides = [*args.overrides, *overrides]
    return args


def build_parser(own: Collection[str]) -> argparse.ArgumentParser:
    """masrl's argument parser: its own commands (`own`: their names), then those that systems add."""
    p = argparse.ArgumentParser(prog="masrl", description="Train multi-agent LLM systems with RL.")
    sub = p.add_subparsers(dest="command", required=True)
    _training_commands(sub)
    _result_commands(sub)
    g = sub.add_parser("config", help="every config key with its type, default and description (and a config's values)")
    g.add_argument("config", nargs="?", help="a YAML config or a shipped config's name: its values and its system's keys")
    g.add_argument("overrides", nargs="*", help="dotted overrides, e.g. system.kind=budget")
    g.add_argument("--markdown", action="store_true", help="print docs/config.md (the engine's keys as tables)")
    sub.add_parser("models", help="list the built-in models and whether they are ready")
    sub.add_parser("systems", help="list the systems and task families available, built in and installed")
    _serve_command(sub)
    for name, (spec, command) in system_commands(own).items():
        c = sub.add_parser(name, help=f"{command.help} (system {spec.kind})")
        command.arguments(c)
    return p


def _training_commands(sub) -> None:
    """`train` and `eval`."""
    t = sub.add_parser("train", help="train with a config (default: the packaged solver-and-checker team, "
                       "src/masrl/configs/default.yaml)")
    t.add_argument("config", nargs="?", help="YAML config file; omit for the default")
    t.add_argument("overrides", nargs="*", help="dotted overrides, e.g. trainer.lr=1e-5")
    t.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its latest checkpoint")
    t.add_argument("--seeds", type=int, metavar="N",
                   help="train N runs with seeds run.seed, run.seed+1, ... into RUN_DIR-seed<seed> (one after another)")

    e = sub.add_parser("eval", help="held-out evaluation (greedy; the system's own evaluation where it has one)")
    e.add_argument("target", nargs="?", help="a run directory, or a YAML config to evaluate untrained")
    e.add_argument("overrides", nargs="*", help="dotted overrides, e.g. eval.size=50 model.name=tiny")
    e.add_argument("--out", help="where to write the JSON result (default: RUN_DIR/eval.json)")


def _result_commands(sub) -> None:
    """`compare`, `baseline`, `view`, `report`: reading (and for `baseline`, matching) finished runs."""
    c = sub.add_parser("compare", help="results with 95%% intervals; paired differences on the same items")
    c.add_argument("runs", nargs="+", metavar="RUN",
                   help="one run (its methods against each other, and trained against untrained when it was "
                        "evaluated before step 1) or two (A - B); a prefix of seed runs pools them")
    c.add_argument("--metric", default="accuracy", help="a per-item metric of the evaluation (default: accuracy)")
    c.add_argument("--method", help="with one run: the method set against each other one; with two: the method "
                   "to compare (default: each run's first)")
    c.add_argument("--step", type=int, action="append", default=[], metavar="N",
                   help="read the evaluation after step N (eval.every) instead of the final one; "
                        "give it twice for A's and B's steps")  # fmt: skip
    c.add_argument("--items-only", action="store_true",
                   help="resample the seeds' pooled items only, not seeds then items (the default for several seeds)")
    b = sub.add_parser("baseline", help="train a single agent with a finished multi-agent run's compute (equal "
                       "training time, equal sampled tokens) and print the paired table",
                       description="For each seed run of RUN: a single agent on its base model, task family, held-out "
                       "items and machine settings, trained as single-arithmetic (or --single CONFIG) trains it, "
                       "for the run's training step seconds or its sampled tokens; then team minus single with intervals "
                       "and the inference cost per item (docs/usage.md)")  # fmt: skip
    b.add_argument("run", metavar="RUN", help="a finished run directory, or the prefix of its seed runs (RUN-seed0..)")
    b.add_argument("overrides", nargs="*", help="dotted overrides of the single agent's config, e.g. system.prompt=...")
    b.add_argument("--budget", choices=("time", "tokens", "both"), default="both",
                   help="equal training time (trainer.max_minutes), equal sampled tokens, or both (default)")
    b.add_argument("--seeds", type=int, metavar="N", help="match the first N seed runs of RUN (default: all)")
    b.add_argument("--out", metavar="PREFIX", help="train into PREFIX-time-seedK and PREFIX-tokens-seedK "
                   "(default PREFIX: RUN-single)")  # fmt: skip
    b.add_argument("--single", default="single-arithmetic", metavar="CONFIG",
                   help="the single agent's algorithm: a shipped config or YAML file written for RUN's task family "
                   "(default: single-arithmetic, for math; turns-planpath-single for Plan-Path; search-single for "
                   "multi-agent search)")  # fmt: skip
    b.add_argument("--metric", default="accuracy", help="the per-item metric of the tables, e.g. f1 for search "
                   "(default: accuracy)")  # fmt: skip
    b.add_argument("--dry-run", action="store_true", help="print the configs it would train, and stop")

    v = sub.add_parser("view", help="a page of one or more runs: curves, evaluations with intervals, episode trees")
    v.add_argument("runs", nargs="+", metavar="RUN", help="run directories (or prefixes of seed runs), overlaid")
    v.add_argument("--out", help="the HTML file to write (default: RUN/view.html for one run, else masrl-view.html)")
    v.add_argument("--no-open", action="store_true", help="only write the file; do not open a browser")
    r = sub.add_parser("report", help="write RUN_DIR/report.html (`masrl view`'s page as one file) and print the curve")
    r.add_argument("run_dir", help="a run directory")


def _serve_command(sub) -> None:
    s = sub.add_parser("serve", help="serve a run's trained system over an OpenAI-compatible HTTP API "
                       "(or, with --inference MODEL, a model that loads LoRA adapters at runtime)")  # fmt: skip
    s.add_argument("run_dir", nargs="?", help="a run directory (not with --inference)")
    s.add_argument("--inference", metavar="MODEL",
                   help="serve MODEL (as model.name: tiny, smollm2, a directory) for rollouts: /v1/completions with "
                   "token ids and log-probs, /v1/load_lora_adapter, /v1/unload_lora_adapter (vLLM's protocol)")
    s.add_argument("--adapter-root", help="--inference: adapters are loaded only from under this directory")
    s.add_argument("--max-adapters", type=int, default=16, help="--inference: adapters held at once")
    s.add_argument("--threads", type=int, default=0, help="--inference: torch CPU threads (0: torch's default)")
    s.add_argument("--seed", type=int, default=0, help="--inference: seed of the model (tiny) and of sampling")
    s.add_argument("--policy", help="serve this trained agent alone as a chat model instead of the system")
    s.add_argument("--name", help="the model name clients send (default: the run directory's name)")
    s.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--api-key", default=os.environ.get("MASRL_API_KEY"),
                   help="require Authorization: Bearer KEY (default: $MASRL_API_KEY; unset: no key)")
    s.add_argument("--max-concurrency", type=int, default=64, help="requests answered at once; more get 429")
    s.add_argument("--max-body-bytes", type=int, default=1 << 20, help="larger request bodies get 413")


def system_commands(own: Collection[str]) -> dict:
    """`masrl NAME` commands that systems add (SystemSpec.commands), built in and installed: name ->
    (spec, command). The first to claim a name keeps it; masrl's own commands come before all."""
    commands: dict = {}
    for _, _, spec, _ in available_systems():
        for name, cmd in (spec.commands if spec is not None else {}).items():
            if name not in own:
                commands.setdefault(name, (spec, cmd))
    return commands
