"""`masrl train | eval | compare | baseline | view | models | systems | report | serve`, and the commands systems add.

Every failure a user can cause or fix prints one line starting `masrl:` that says what to do, and
exits with its `ExitCode` (docs/usage.md): 2 for a config or argument mistake, 3 for the machine (a
full or read-only disk, a permission, a broken run directory), 130 for SIGINT or SIGTERM (the last
finished step is checkpointed). A run that cannot go on otherwise exits with code 1 and says why.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import sys
import webbrowser
from contextlib import ExitStack
from pathlib import Path

from masrl.cli.serving import serve
from masrl.config import ConfigError
from masrl.types import STOP_SIGNALS, EnvironmentProblem, ExitCode, SystemCodeError, TrainingError

# Every other masrl module imports torch (seconds): the commands import what they use inside their
# functions (`# lazy: torch`), after `main` has installed its signal handlers, so that a Ctrl-C or a
# SIGTERM at start-up is one line and exit code 130, not a traceback or a death by the signal.


def _split_config(arg: str | None, overrides: list[str]) -> tuple[str | None, list[str]]:
    """`masrl train a.b=1` has an override where the config would be."""
    if arg is not None and "=" in arg and not Path(arg).exists():
        return None, [arg, *overrides]
    return arg, overrides


_DISK_ERRORS = frozenset((errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM))


def _stop_now(signum: int, frame) -> None:
    """SIGINT or SIGTERM where no training loop decides (start-up, loading, `eval`, `serve` once it has
    drained): stop now, as KeyboardInterrupt naming the signal; a later one while the command unwinds is
    ignored, so the unwinding ends in `main`'s one line, not a second KeyboardInterrupt."""
    _handle_stop_signals(_ignore)
    raise KeyboardInterrupt(signal.Signals(signum).name)


def _ignore(signum: int, frame) -> None:
    """A signal while the command already stops: it stops anyway."""


def _exit_now(signum: int, frame) -> None:
    """A signal once the command has returned (its line printed): end without Python's teardown, which a
    KeyboardInterrupt would turn into a traceback or a death by the signal."""
    os._exit(ExitCode.INTERRUPTED)


def _handle_stop_signals(handler) -> None:
    for sig in STOP_SIGNALS:
        if signal.getsignal(sig) is not signal.SIG_IGN:  # ignored by what started us (`nohup`, `cmd &`): it stays
            signal.signal(sig, handler)


def main(argv: list[str] | None = None) -> int:
    own_process = argv is None  # started from the command line, not called with a list
    if own_process:
        _handle_stop_signals(_stop_now)  # before the imports below, which take seconds
        # a restart under jemalloc (masrl.memory) blocked them across the exec: now they reach `_stop_now`
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    try:
        code = _command(argv, own_process)
        sys.stdout.flush()  # here, not at exit: a reader that went away is a BrokenPipeError for the clause below
        return code
    except BrokenPipeError:  # the reader of the output went away (`masrl models | head -1`): stop quietly
        # stdout's buffer still holds what could not be written: point it at /dev/null, so the flush at exit
        # does not raise again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return ExitCode.BROKEN_PIPE
    except KeyboardInterrupt as exc:  # `train` says what its checkpoint kept; the other commands write atomically
        print(f"masrl: interrupted ({exc.args[0] if exc.args else 'SIGINT'})", file=sys.stderr)
        return ExitCode.INTERRUPTED
    finally:
        if own_process:
            _handle_stop_signals(_exit_now)


def _command(argv: list[str] | None, own_process: bool) -> int:
    from masrl.cli.parser import build_parser, parse, system_commands  # lazy: torch (main's handlers come first)
    from masrl.components import MissingComponent  # lazy: with the other imports of the commands
    from masrl.sandbox import SandboxError  # lazy: with the other imports of the commands

    args = parse(build_parser(_COMMANDS), argv)
    args.own_process = own_process
    try:
        if args.command not in _COMMANDS:
            return system_commands(_COMMANDS)[args.command][1].run(args)
        return _COMMANDS[args.command](args)
    except MissingComponent as exc:  # not a mistake in the config: something to install (masrl.preflight)
        print(f"masrl: {exc}", file=sys.stderr)
        return ExitCode.CONFIG
    except ConfigError as exc:
        print(f"masrl: config error: {exc}", file=sys.stderr)
        return ExitCode.CONFIG
    except SandboxError as exc:
        # no isolation for agent code on this machine: the user chooses (sandbox.limits_only)
        print(f"masrl: sandbox: {exc}", file=sys.stderr)
        return ExitCode.CONFIG
    except EnvironmentProblem as exc:  # the machine's to fix; the message says how and what to run then
        print(f"masrl: {exc}", file=sys.stderr)
        return ExitCode.ENVIRONMENT
    except OSError as exc:
        if exc.errno not in _DISK_ERRORS:
            raise
        # a read-only or full disk outside a training run (a run's own says how to resume): no traceback
        print(f"masrl: cannot write {exc.filename or 'a file'}: {exc.strerror}; free space or choose a writable "
              "place, then run the same command again", file=sys.stderr)  # fmt: skip
        return ExitCode.ENVIRONMENT
    except SystemCodeError as exc:  # the user's system raised (rollout.on_system_error: stop): its traceback is in
        # RUN_DIR/errors.log
        print(f"masrl: {exc}", file=sys.stderr)
        return ExitCode.SYSTEM


def _saved_config(run_dir: Path) -> Path:
    """The config.yaml a run directory was trained with: a directory without one is not a run (a mistaken
    argument), or a run that lost it (its checkpoints or metrics are there: the directory is incomplete)."""
    from masrl.run.files import RunDir  # lazy: torch

    run = RunDir(run_dir)
    if run.config.is_file():
        return run.config
    if not run_dir.is_dir():
        raise ConfigError(f"{run_dir} is not a run directory (no such directory)")
    if run.checkpoints.is_dir() or run.metrics.exists():
        raise EnvironmentProblem(f"{run_dir} is an incomplete run directory: its config.yaml is missing; put back "
                                 "the config it was trained with (run.dir included) as config.yaml")  # fmt: skip
    raise ConfigError(f"{run_dir} is not a run directory (no config.yaml)")


def _under_jemalloc(args) -> None:
    """`masrl train` and `eval` started from the command line re-execute themselves once with jemalloc
    preloaded (masrl.memory: glibc keeps freed activations and caches). Called once the config has
    loaded, so a config error is still one message and nothing restarts for it."""
    from masrl.memory import reexec_with_jemalloc  # lazy: with the other imports of the commands, after main's

    if getattr(args, "own_process", False):
        reexec_with_jemalloc(sys.argv[1:])


def _train(args) -> int:
    from masrl import distributed  # lazy: torch
    from masrl.loading import load_config  # lazy: torch
    from masrl.preflight import preflight  # lazy: torch
    from masrl.run.stop import Interrupted  # lazy: torch
    from masrl.train import train  # lazy: torch

    try:
        if args.resume:
            if args.config or args.overrides:
                raise ConfigError("--resume takes the run's saved config; pass no config or overrides")
            if args.seeds is not None:
                raise ConfigError("--resume continues one run; resume each RUN_DIR-seed<k> on its own")
            # a broken saved config fails here, before a restart; then what the run needs, before step 1
            preflight(load_config(_saved_config(Path(args.resume))))
            _under_jemalloc(args)
            run_dir = train(None, resume=args.resume)
        else:
            path, overrides = _split_config(args.config, args.overrides)
            config = load_config(path, overrides)
            preflight(config)  # every model, embedder and dataset the run needs, before step 1
            _under_jemalloc(args)
            if args.seeds is not None:
                for seeded in seed_configs(config, args.seeds):
                    print(f"masrl: seed {seeded.run.seed} -> {seeded.run.dir}", file=sys.stderr)
                    train(seeded)
                run_dir = f"{config.run.dir}-seed* ({args.seeds} runs; `masrl view {config.run.dir}` pools them)"
            else:
                run_dir = train(config)
    except TrainingError as exc:
        print(f"masrl: training stopped: {exc}", file=sys.stderr)
        return 1
    except Interrupted as exc:  # SIGINT or SIGTERM: what the checkpoint kept and what --resume will do
        print(f"masrl: {exc}", file=sys.stderr)
        return ExitCode.INTERRUPTED
    print(f"masrl: run directory {run_dir}")
    if distributed.launched():  # one rank of torchrun's group: skip the teardown that gloo can abort in
        distributed.leave_now()
    return 0


def seed_configs(config, n: int) -> list:
    """`--seeds N`: the config with run.seed = seed + k and run.dir = DIR-seed<seed + k>, k < N."""
    if n < 1:
        raise ConfigError(f"--seeds must be at least 1, got {n}")
    seeds = [config.run.seed + k for k in range(n)]
    runs = [config.run.model_copy(update={"seed": s, "dir": f"{config.run.dir}-seed{s}"}) for s in seeds]
    return [config.model_copy(update={"run": run}) for run in runs]


def _eval(args) -> int:
    with ExitStack() as held:  # a run directory's lock, once the target is one (masrl.run.lock); the engine
        return _evaluate(args, held)


def _evaluate(args, held: ExitStack) -> int:
    from masrl.checkpoint import atomic_write_json, read_meta  # lazy: with the other imports of the commands
    from masrl.evaluate import eval_record, evaluate_system  # lazy: torch
    from masrl.loading import load_config  # lazy: torch
    from masrl.run.lock import hold  # lazy: with the other imports of the commands
    from masrl.parts import build_parts  # lazy: torch
    from masrl.preflight import preflight  # lazy: torch
    from masrl.run.files import RunDir  # lazy: torch
    from masrl.run.trained import check_eval_overrides, load_trained  # lazy: torch

    target, overrides = _split_config(args.target, args.overrides)
    step = ckpt = None  # what was evaluated: a run's checkpoint, or an untrained config (None)
    try:
        if target and Path(target).is_dir():
            run = Path(target)
            _saved_config(run)
            held.enter_context(hold(RunDir(run), "masrl eval"))  # one writer: its eval.json, errors.log
            check_eval_overrides(overrides)  # before the restart under jemalloc: a mistake is one message
            preflight(load_config(RunDir(run).config))  # its evaluation's needs too (MiniLM baselines)
            ckpt = RunDir(run).latest_checkpoint()
            if ckpt is None:
                config = RunDir(run).config
                raise EnvironmentProblem(f"{run} has no checkpoint to evaluate yet; train it (masrl train {config}), "
                                         f"or evaluate its config untrained: masrl eval {config}")  # fmt: skip
            _under_jemalloc(args)
            engine, ckpt = load_trained(run, overrides=overrides)  # eval.* overrides alone; a damaged newest passed over
            step, ckpt = int(read_meta(ckpt)["step"]), ckpt.relative_to(run).as_posix()
            out = Path(args.out) if args.out else RunDir(run).eval_json
        else:
            config = load_config(target, overrides)
            preflight(config)
            _under_jemalloc(args)
            engine = build_parts(config)
            out = Path(args.out) if args.out else None
    except TrainingError as exc:
        print(f"masrl: {exc}", file=sys.stderr)
        return 1
    held.callback(engine.close)  # what the system holds (a program's zygote) ends with the command, however it ends
    items = engine.task.items("eval", 0, engine.config.eval.size)
    result = evaluate_system(engine, items, full=True)
    print(result.report or json.dumps(dict(result.metrics), indent=2))
    summary = dict(result.payload) if result.payload is not None else dict(result.metrics)
    summary.update(eval_record(step, result))  # summary metrics and per-item results: `masrl compare` reads them
    summary["checkpoint"] = ckpt  # which weights: "checkpoints/step_000024" of the run, or None (untrained)
    if out is not None:
        atomic_write_json(out, summary)
        print(f"masrl: wrote {out}", file=sys.stderr)
    return 0


def _compare(args) -> int:
    from masrl.compare import compare_runs  # lazy: torch

    try:
        print(compare_runs([Path(r) for r in args.runs], args.metric, args.method, args.step, not args.items_only))
    except (FileNotFoundError, ValueError) as exc:  # not a run, or runs that cannot be compared: an argument mistake
        print(f"masrl: {exc}", file=sys.stderr)
        return ExitCode.CONFIG
    return 0


def _baseline(args) -> int:
    """`masrl baseline RUN`: plan the single-agent runs (one per seed run and budget), train them, print the tables."""
    from masrl.baseline import BUDGETS, dry_run_text, plan, tables, train_planned  # lazy: torch
    from masrl.preflight import preflight  # lazy: torch

    budgets = BUDGETS if args.budget == "both" else (args.budget,)
    planned = plan(Path(args.run), budgets, args.seeds, args.out, args.overrides, args.single)
    if args.dry_run:
        print(dry_run_text(planned))
        return 0
    from masrl.train import Interrupted, train  # lazy: torch

    preflight(planned[0].config)  # the model and dataset every planned run needs (they share both)
    try:
        train_planned(planned, train)
    except TrainingError as exc:
        print(f"masrl: training stopped: {exc}", file=sys.stderr)
        return 1
    except Interrupted as exc:  # SIGINT or SIGTERM: the run in progress was checkpointed; run the command again
        print(f"masrl: {exc}", file=sys.stderr)
        return ExitCode.INTERRUPTED
    print(tables(Path(args.run), planned, args.metric))
    return 0


def _view(args) -> int:
    from masrl.view import write_page  # lazy: torch

    runs = [Path(r) for r in args.runs]
    one_run = len(runs) == 1 and runs[0].is_dir()
    out = Path(args.out) if args.out else (runs[0] / "view.html" if one_run else Path("masrl-view.html"))
    try:
        path = write_page(runs, out)
    except (FileNotFoundError, ValueError) as exc:  # not a run: an argument mistake
        print(f"masrl: {exc}", file=sys.stderr)
        return ExitCode.CONFIG
    print(f"masrl: wrote {path}", file=sys.stderr)
    if not args.no_open:
        webbrowser.open(path.resolve().as_uri())
    return 0


def _config(args) -> int:
    """`masrl config [CONFIG]`: the reference of every key; with a config, its values and its system's keys."""
    from masrl.loading import load_config  # lazy: torch
    from masrl.reference import config_markdown, config_text  # lazy: torch

    if args.markdown:
        if args.config or args.overrides:
            raise ConfigError("--markdown prints the engine's keys (docs/config.md); pass no config")
        print(config_markdown(), end="")
        return 0
    path, overrides = _split_config(args.config, args.overrides)
    if path is None and not overrides:
        print(config_text(), end="")
        return 0
    print(config_text(load_config(path, overrides)), end="")
    return 0


def _models(args) -> int:
    from masrl.components import cache_dir, status  # lazy: with the other imports of the commands
    from masrl.preflight import shipped_models  # lazy: torch

    cache = cache_dir()  # first: a cache that is a file is one line, before any model is called ready
    for component, configs in sorted(shipped_models().values(), key=lambda m: m[0].model or m[0].name):
        print(f"{component.model or component.name:10s} {component.what}, from the package {component.package}\n"
              f"{'':10s} {status(component)}\n{'':10s} used by: {', '.join(configs)}")  # fmt: skip
    print(f"{'tiny':10s} a random 2-layer Llama with a byte tokenizer, built in memory (tests, smoke runs)\n"
          f"{'':10s} ready")  # fmt: skip
    print(f"{'<path>':10s} any local HF model directory (config.json and weights) as model.name")
    print(f"cache: {cache} (set MASRL_CACHE to move it); MASRL_FETCH=0: never install a model package")
    return 0


def _systems(args) -> int:
    from masrl.registry import available_systems, available_tasks  # lazy: torch

    for title, rows in (("systems (system.kind)", available_systems()), ("task families (task.kind)", available_tasks())):
        print(title)
        for kind, where, spec, error in rows:
            line = spec.summary if spec is not None else f"cannot be loaded: {error}"
            print(f"  {kind:16s} {where}\n  {'':16s} {line}")
    return 0


def _report(args) -> int:
    from masrl.report import curve_table, write_report  # lazy: torch
    from masrl.run.files import read_metrics  # lazy: torch

    try:
        rows = read_metrics(Path(args.run_dir))
    except FileNotFoundError as exc:  # not a run: an argument mistake
        print(f"masrl: {exc}", file=sys.stderr)
        return ExitCode.CONFIG
    print(curve_table(rows))
    print(f"masrl: wrote {write_report(Path(args.run_dir))}", file=sys.stderr)
    return 0


_COMMANDS = {
    "train": _train, "eval": _eval, "compare": _compare, "baseline": _baseline, "view": _view, "config": _config, "models": _models,
    "systems": _systems,
    "report": _report, "serve": serve,
}  # fmt: skip

