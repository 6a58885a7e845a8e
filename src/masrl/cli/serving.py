"""`masrl serve`: a trained run's system or policy, or a base model for rollout workers, behind masrl's
OpenAI-compatible HTTP server (masrl.http) until SIGINT or SIGTERM, which answer the requests in flight
and exit with 130 as every command does (docs/serving.md)."""

from __future__ import annotations

import signal
import sys
from contextlib import ExitStack
from pathlib import Path

from masrl.config import ConfigError
from masrl.types import STOP_SIGNALS, ExitCode, TrainingError

def serve(args) -> int:
    """`masrl serve RUN_DIR` (a trained system or policy) or `masrl serve --inference MODEL` (a base model for
    rollouts), until SIGINT or SIGTERM."""
    with ExitStack() as held:  # the run directory's lock while it serves (masrl.run.lock); the engine
        return _serve_run(args, held)


def _serve_run(args, held: ExitStack) -> int:
    from masrl.http import ServerSettings, create_app, run  # lazy: fastapi and uvicorn
    from masrl.run.files import RunDir  # lazy: torch
    from masrl.run.lock import hold  # lazy: with the other imports of the commands
    from masrl.run.trained import load_trained  # lazy: torch
    from masrl.serve import backend_for  # lazy: torch

    if not 0 <= args.port <= 65535:  # before a model loads (0: any free port)
        raise ConfigError(f"--port {args.port} is not a TCP port (0 to 65535)")
    if args.max_concurrency < 1 or args.max_body_bytes < 1:
        raise ConfigError("--max-concurrency and --max-body-bytes must be at least 1")
    if args.api_key is not None and not args.api_key.strip():
        raise ConfigError("--api-key (or MASRL_API_KEY) is empty")
    settings = ServerSettings(args.host, args.port, args.api_key, args.max_body_bytes, args.max_concurrency)
    if args.inference:
        return _serve_inference(args, settings)
    if args.run_dir is None:
        raise ConfigError("masrl serve needs a run directory (or --inference MODEL)")
    run_dir = Path(args.run_dir)
    if not RunDir(run_dir).config.exists():
        raise ConfigError(f"{run_dir} is not a run directory (no config.yaml)")
    held.enter_context(hold(RunDir(run_dir), "masrl serve"))  # one writer: a system's errors.log
    try:
        engine, _ = load_trained(run_dir)  # a damaged newest checkpoint passed over, with a line saying so
    except TrainingError as exc:
        print(f"masrl: {exc}", file=sys.stderr)
        return 1
    held.callback(engine.close)  # what the system holds (a program's zygote) ends with the server, however it stops
    name = args.name or run_dir.resolve().name
    backend = backend_for(engine, name, args.policy)
    what = f"policy {args.policy}" if args.policy else f"system {engine.config.system.kind}"
    print(f"masrl: serving {what} of {run_dir} as model {backend.models()[0].id!r} on http://{args.host}:{args.port}/v1"
          + (" (API key required)" if args.api_key else ""), file=sys.stderr)  # fmt: skip
    return _serve_until_stopped(run, create_app(backend, settings, title=f"masrl: {name}"), settings)


def _serve_inference(args, settings) -> int:
    import torch  # lazy: torch

    from masrl.http import run  # lazy: fastapi and uvicorn
    from masrl.inference import inference_app  # lazy: torch, fastapi
    from masrl.models import check_model_name, load_model  # lazy: torch

    if args.run_dir is not None or args.policy:
        raise ConfigError("--inference serves a base model, not a run: leave out the run directory and --policy")
    if args.max_adapters < 1:
        raise ConfigError("--max-adapters must be at least 1")
    problem = check_model_name(args.inference)
    if problem:
        raise ConfigError(problem)
    root = Path(args.adapter_root) if args.adapter_root else None
    if root is not None and not root.is_dir():
        raise ConfigError(f"--adapter-root {root} is not a directory")
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    app = inference_app(load_model(args.inference, seed=args.seed), args.name or args.inference, root, settings,
                        args.max_adapters)  # fmt: skip
    print(f"masrl: serving {args.inference} for rollouts on http://{args.host}:{args.port}/v1"
          + (f", adapters from {root}" if root else ", no adapter root (adapters refused)")
          + (" (API key required)" if args.api_key else ""), file=sys.stderr, flush=True)  # fmt: skip
    return _serve_until_stopped(run, app, settings)


def _serve_until_stopped(run, app, settings) -> int:
    """Serve until SIGINT or SIGTERM: exit code 130, as for every command. uvicorn answers the requests in
    flight, then raises the signal again and swallows the KeyboardInterrupt that `stop` raises for it: the
    signal is noted here."""
    stopped: list[str] = []

    def stop(signum: int, frame) -> None:
        stopped.append(signal.Signals(signum).name)
        raise KeyboardInterrupt(stopped[0])  # before uvicorn has its handlers: it stops the start

    before = [signal.signal(sig, stop) for sig in STOP_SIGNALS]
    try:
        run(app, settings)
    finally:
        for sig, handler in zip(STOP_SIGNALS, before, strict=True):
            signal.signal(sig, handler)
    if not stopped:
        return 0
    print(f"masrl: stopped serving ({stopped[0]}); the requests in flight were answered", file=sys.stderr)
    return ExitCode.INTERRUPTED
