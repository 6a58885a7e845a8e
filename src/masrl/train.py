"""`train(config)`: sample, score, advantage, update, log, evaluate, checkpoint.

One step (`train_step`):
1. sample  - expand an episode tree for each task of the batch (the sampler's
             branching rule; generation batched across all episodes);
2. score   - credit converts the tree's rewards into a return per call;
3. advantage - calls are grouped (which calls compare) and the advantage
             estimator normalises returns within each group; or, with
             `algo.advantage: gae` (PPO), the value model scores every
             response token and GAE runs along each root-to-leaf path
             (masrl.scoring does 2 and 3);
4. update  - every trainable call becomes a sample of its policy's batch; that
             policy's learner (masrl.learners) takes one optimiser step.
The loop around it (`_loop`) then logs the step (masrl.runlog: metrics.jsonl,
TensorBoard, a few episodes in samples.jsonl), evaluates every `eval.every`
steps, checkpoints every `trainer.checkpoint_every` steps (masrl.resume: adapters,
optimisers, RNG states and the data position, written atomically) and stops
before a step that would overrun `trainer.max_minutes` or
`trainer.max_sampled_tokens` (equal-compute baselines: masrl.baseline).

Failed calls (a frozen backend that timed out or answered garbage) end their
trajectory; those trajectories are left out of the update and counted. A step
in which every trajectory failed stops the run with a clear message.

With `trainer.processes=N` (or under torchrun) the same loop runs in N
processes (masrl.distributed): rank 0 samples and broadcasts the episodes,
every rank scores them, the learners update on their slices and sum
gradients, and rank 0 alone logs, evaluates and checkpoints. With
`rollout.max_staleness: k` the next k steps are sampled ahead while this one
updates (masrl.rollout.ahead).
"""

from __future__ import annotations

import asyncio
import os
import resource
import signal
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch
from tqdm import tqdm

from masrl import distributed
from masrl.checkpoint import atomic_write_json, latest_checkpoint, read_meta
from masrl.compare import before_after
from masrl.config import Config, ConfigError
from masrl.parts import Parts, build_parts, config_placement
from masrl.evaluate import EVALS_DIR, evaluate_system, final_eval_path, read_eval_items, write_eval_items
from masrl.loading import load_config, validate
from masrl.resume import checkpoint, restore, restore_newest
from masrl.rollout.ahead import RolloutAhead, staleness, timed
from masrl.rollout.tree import rollout
from masrl.rundir import DISK_ERRNOS, disk_message, next_command, prepare_run_dir, undo_new_run
from masrl.runlog import RunLogger, logged
from masrl.scoring import Scored, score
from masrl.types import EnvironmentProblem, Episode, ExitCode, TrainingError


# ------------------------------------------------------------------ one step
@dataclass(frozen=True)
class TrainedStep:
    """What one training step leaves: its episodes, how they were scored, its metrics."""

    episodes: list[Episode]
    scored: Scored
    metrics: dict[str, float]


def train_step(
    engine: Parts, step: int, ahead: RolloutAhead | None = None, failures: FailureCount | None = None
) -> TrainedStep:
    """Sample the step's episodes (rank 0; the others receive them), score them, update every policy."""
    main = distributed.is_main()
    failures = failures or FailureCount(engine)
    t0 = time.perf_counter()
    episodes, t_generate = None, 0.0
    if main:  # 1. sample (rank 0; the others receive its episodes)
        episodes, t_generate = ahead.episodes(step) if ahead else timed(partial(sample_step, engine), step)
    episodes = distributed.broadcast(episodes)
    t_sample = time.perf_counter() - t0  # what this loop waited; less than t_generate when sampled ahead
    metrics = episode_metrics(episodes)
    if engine.errors.on_error == "drop":  # episodes dropped because the system's code raised in them
        metrics["dropped"] = float(sum(ep.dropped is not None for ep in episodes))
    if metrics["failed"] == metrics["trajectories"]:
        first = next(c.error for ep in episodes for c in ep.calls if c.error)
        raise TrainingError(f"step {step}: every episode failed; first error: {first}")
    scored = score(episodes, engine.config, engine.critic)  # 2-3. score and advantage
    if engine.hooks.observe is not None:  # a system's own step metrics (e.g. usage, dual ascent)
        metrics.update(engine.hooks.observe(episodes))
    t1 = time.perf_counter()
    for policy, samples in scored.samples.items():  # 4. update (each rank its slice)
        upd = engine.learners[policy].update(samples)
        metrics.update({f"{policy}/{k}": v for k, v in upd.items()})
    t_update = time.perf_counter() - t1
    engine.publish(step)  # the adapters after this update are version `step`
    if engine.remotes:
        metrics["rollout/failures"] = failures.new()
        metrics.update(staleness(episodes, step))
    if ahead:
        metrics["rollout/generate_seconds"] = t_generate  # the step's sampling on the background thread
    metrics.update(scored.metrics)
    # the rate of the sampling itself: with rollouts ahead the loop may wait ~0 s for a whole step
    metrics.update(machine_metrics(episodes, scored, t_sample, t_update, t_generate if main else t_sample))
    return TrainedStep(episodes, scored, metrics)


def sample_step(engine: Parts, step: int) -> list[Episode]:
    """Phase 1: the episodes of training step `step` (its tasks come from the data position)."""
    n = engine.config.trainer.batch_size
    tasks = engine.task.items("train", (step - 1) * n, n)
    key = f"{engine.config.run.seed}:train:{step}" if engine.config.rollout.order == "place" else None
    return asyncio.run(rollout(engine.system, engine.agents, tasks, engine.rule, key, env=engine.env,
                               errors=engine.errors))  # fmt: skip


# ------------------------------------------------------------------ the loop
def train(config: Config | None, resume: str | Path | None = None, model=None) -> Path:
    """Train `config` (or continue the run directory `resume`); returns the run directory.

    With `trainer.processes=N > 1` this process starts N ranks, waits for them
    and stops them all when one fails (masrl.distributed.launch); under
    torchrun (WORLD_SIZE set) it is one rank of the group torchrun started."""
    run_dir = Path(resume) if resume else Path(config.run.dir)
    if resume:
        config = load_config(run_dir / "config.yaml")
    processes = config.trainer.processes
    if processes > 1 and not distributed.launched():
        if model is not None:
            raise TrainingError("a model object cannot be handed to trainer.processes=N processes; name it in model.name")
        place = config_placement(config)  # a bad device or run directory fails here, before any spawn
        if place.device.type == "cuda" and processes > torch.cuda.device_count():
            raise ConfigError(f"trainer.processes={processes} needs one GPU each; torch sees {torch.cuda.device_count()}")
        start = prepare_run_dir(run_dir, config, resume is not None)
        # A signal reaches the ranks too (one process group): the launcher waits while they checkpoint and
        # stop, then says what was kept. A second one stops it at once (the ranks get theirs as well).
        with Signals(note=False) as signals:
            signals.graceful = True
            args = (config.model_dump(mode="json"), str(run_dir) if resume else None)
            try:
                distributed.launch(_rank_train, processes, args)
            except distributed.RankFailed as exc:
                if signals.received is None:
                    raise TrainingError(f"{exc}. Continue from the last checkpoint with: "
                                        f"masrl train --resume {run_dir}") from None  # fmt: skip
                ckpt = latest_checkpoint(run_dir)
                saved = int(read_meta(ckpt)["step"]) if ckpt else 0
                raise Interrupted(interrupted_message(signals.received, saved, config.trainer.steps, start.step,
                                                      run_dir)) from None  # fmt: skip
        return run_dir
    if distributed.launched():
        if processes > 1 and int(os.environ["WORLD_SIZE"]) != processes and distributed.rank() == 0:
            print(f"masrl: note: WORLD_SIZE={os.environ['WORLD_SIZE']} processes were started for the run; "
                  f"trainer.processes={processes} is ignored", file=sys.stderr)  # fmt: skip
        distributed.init_from_env(config_placement(config).device, config.trainer.timeout_minutes)
    try:
        result = _train(config, run_dir, resume is not None, model)
    except BaseException:
        distributed.shutdown(wait_for_peers=False)
        raise
    distributed.shutdown()
    return result


def _rank_train(config_data: dict, resume: str | None) -> None:
    """One rank that `distributed.launch` started (it set torchrun's environment variables)."""
    try:
        train(None if resume else validate(config_data), resume=resume)
    except TrainingError as exc:
        raise distributed.RankFailed(str(exc)) from None
    except Interrupted:  # every rank stopped with rank 0 (its signal is broadcast); the launcher says what was kept
        sys.exit(ExitCode.INTERRUPTED)


def _train(config: Config, run_dir: Path, resuming: bool, model=None) -> Path:
    try:
        with Signals() as signals:
            return _prepare_and_run(config, run_dir, resuming, model, signals)
    except OSError as exc:
        if exc.errno not in DISK_ERRNOS:
            raise
        # a full or read-only disk, or a permission: the machine's to fix, then the run goes on
        raise EnvironmentProblem(disk_message(exc, run_dir, config.trainer.steps)) from None


def _prepare_and_run(config: Config, run_dir: Path, resuming: bool, model, signals: Signals) -> Path:
    plan = None
    if distributed.is_main():  # rank 0 owns the run directory; every rank starts where it says
        try:
            plan = (prepare_run_dir(run_dir, config, resuming), None)
        except (TrainingError, ConfigError, EnvironmentProblem) as exc:
            plan = (None, exc)
    start, error = distributed.broadcast(plan)
    if error is not None:
        raise error
    if start.finished:  # resuming it changes nothing: say so, and how to train it further
        if distributed.is_main():
            print(f"masrl: {run_dir} finished at step {start.step} of {config.trainer.steps}; nothing to resume. "
                  f"To train further, raise trainer.steps in {run_dir / 'config.yaml'} and run "
                  f"masrl train --resume {run_dir}", file=sys.stderr)  # fmt: skip
        return run_dir
    try:
        engine = build_parts(config, model=model)
    except BaseException as exc:  # a config error found while building (a user's data file), or Ctrl-C
        if not resuming and distributed.is_main():
            undo_new_run(run_dir, start)  # no directory holding only config.yaml is left behind
        if isinstance(exc, KeyboardInterrupt):
            raise Interrupted(f"interrupted while loading; {next_command(run_dir, config.trainer.steps)}") from None
        raise
    try:
        signals.graceful = True  # from here a first signal stops after the step in progress
        return _run(engine, config, run_dir, start.step, signals)
    except KeyboardInterrupt:  # a second signal outside the loop's steps (restoring, an evaluation)
        raise Interrupted(f"stopped at once; {next_command(run_dir, config.trainer.steps)}") from None
    finally:
        engine.close()  # rollout workers and server sessions end with the run, whatever ended it


def _run(engine: Parts, config: Config, run_dir: Path, start: int, signals: Signals) -> Path:
    """Restore a resumed run, evaluate before training, then the loop (with rollouts ahead when asked)."""
    main = distributed.is_main()
    roll_call = distributed.roll_call()
    if main and roll_call:
        print(f"masrl: {roll_call}", file=sys.stderr)
    if start > 0:  # rank 0 picks the checkpoint (an unreadable one falls back to the one before); all load it
        ckpt = restore_newest(engine, run_dir) if main else None
        ckpt = distributed.broadcast(ckpt)
        if not main:
            restore(engine, ckpt)
        start = int(read_meta(ckpt)["step"])
        engine.publish(start)  # remote engines generate with the restored adapters (version = step)
    logger = RunLogger(run_dir, purge_after=start) if main else None
    if start == 0 and config.eval.before and main:
        _log_eval(engine, logger, 0, "before")
    elif main and eval_due(config, start) and not logged(run_dir / "metrics.jsonl", start, "eval"):
        _log_eval(engine, logger, start, f"step {start}")  # the evaluation a signal skipped to stop sooner
    # rollout.max_staleness = k > 0: the next k steps' episodes are generated on a background
    # thread while this one updates (the workers or servers do the model work), step t's with the
    # adapters of version max(start, t - 1 - k), whatever the trainer has published meanwhile.
    k = config.rollout.max_staleness
    ahead = RolloutAhead(partial(sample_step, engine), k, config.trainer.steps, first=start) if k and main else None
    try:
        return _loop(engine, config, run_dir, start, logger, ahead, signals)
    finally:
        if ahead:
            ahead.close()  # rollouts of steps past the end (a max_minutes stop) are dropped
        if logger is not None:
            logger.close()


def _loop(engine: Parts, config: Config, run_dir: Path, start: int, logger: RunLogger | None,
          ahead: RolloutAhead | None, signals: Signals) -> Path:  # fmt: skip
    main, cfg = distributed.is_main(), config.trainer
    failures = FailureCount(engine)
    bar = tqdm(total=cfg.steps, initial=start, desc="train", unit="step", dynamic_ncols=True, disable=not main)
    last = saved = start  # the last step trained by this loop, and the last one checkpointed
    trained_seconds = sampled_tokens = 0.0  # the budgets' counts: trainer.max_minutes, max_sampled_tokens
    signalled = None  # the signal that stops the run, as rank 0 received it (every rank acts on rank 0's)
    try:  # the bar is closed whatever ends the loop, so a message after it gets a line of its own
        for step in range(start + 1, cfg.steps + 1):
            signalled = distributed.broadcast(signals.received)  # one during the last step's eval or checkpoint
            if signalled is not None:
                break
            t0 = time.perf_counter()
            trained = train_step(engine, step, ahead, failures)  # 1-4. sample, score, advantage, update
            if main:  # 5. log
                _log_step(logger, bar, config, step, trained)
            last = step
            step_seconds = time.perf_counter() - t0
            step_tokens = trained.metrics["calls"] * trained.metrics["response_tokens_mean"]  # generated this step
            sampled_tokens += step_tokens
            # rank 0's clock and signals decide for every rank
            stop, signalled = distributed.broadcast(
                (out_of_time(trained_seconds + step_seconds, step_seconds, cfg.max_minutes)
                 or out_of_tokens(sampled_tokens, step_tokens, cfg.max_sampled_tokens), signals.received))  # fmt: skip
            final = step == cfg.steps or stop or signalled is not None
            if eval_due(config, step) and not final and main:  # 6. evaluate (a signal's: when resumed, in _run)
                step_seconds += _settle(ahead)
                _log_eval(engine, logger, step, f"step {step}")
            t_checkpoint = time.perf_counter()
            if step % cfg.checkpoint_every == 0 or final:  # 7. checkpoint
                # Rollouts sampled ahead are mid-batch on the workers: their generators cannot be read between
                # steps, and asking would wait for the batch; a resumed asynchronous run is not exact anyway.
                checkpoint(engine, run_dir, step, worker_rngs=ahead is None)
                saved = step
            # A checkpoint is training time (evaluations are not): the allowance bounds the run's wall time,
            # and rollouts sampled ahead, which go on while it is written, get no untimed minutes.
            trained_seconds += step_seconds + time.perf_counter() - t_checkpoint
            if stop and signalled is None:  # 8. time or token limit
                if main:
                    limit = (f"trainer.max_minutes={cfg.max_minutes}" if cfg.max_sampled_tokens is None else
                             f"trainer.max_minutes={cfg.max_minutes}, max_sampled_tokens={cfg.max_sampled_tokens}")
                    tqdm.write(f"{limit}: stopping after step {step} ({trained_seconds / 60:.1f} min, "
                               f"{sampled_tokens:.0f} sampled tokens)")  # fmt: skip
                break
            if signalled is not None:
                break
        if signalled is not None and last > saved:  # the signal came after the step's checkpoint phase
            checkpoint(engine, run_dir, last, worker_rngs=ahead is None)
            saved = last
        if signalled is not None:  # ranks > 0 wait until rank 0 has written it: the launcher stops the
            distributed.broadcast(saved)  # others as soon as one rank has exited
    except KeyboardInterrupt:  # a second signal: stop at once; what the last checkpoint holds stays
        raise Interrupted(f"stopped at once during step {last + 1} of {cfg.steps}; "
                          f"{next_command(run_dir, cfg.steps)}") from None  # fmt: skip
    finally:
        bar.close()
    if ahead:
        ahead.close()
    if signalled is not None:
        raise Interrupted(interrupted_message(signalled, saved, cfg.steps, start, run_dir))
    if main:  # evaluation runs once
        _log_eval(engine, logger, last, "after", final=True)
        if engine.spec.evaluate is None:  # a system with its own evaluation reports its own results
            _report_before_after(run_dir, last)
    return run_dir


# ------------------------------------------------------------------ the loop's phases
def _log_step(logger: RunLogger, bar: tqdm, config: Config, step: int, trained: TrainedStep) -> None:
    """The step's metrics; its first episode trees on the first step and every `log_episodes_every`-th."""
    logger.log(step, trained.metrics)
    if step % config.trainer.log_episodes_every == 0 or step == 1:
        logger.episodes(step, trained.episodes[: config.trainer.log_episodes], trained.scored)
    metrics = trained.metrics
    bar.set_postfix(reward=f"{metrics['reward']:.3f}", tok_s=f"{metrics['gen_tokens_per_s']:.0f}")
    bar.update(1)


def _settle(ahead: RolloutAhead | None) -> float:
    """Before an evaluation, which shares the generation services: let the rollouts sampled ahead finish
    (nothing else may use the services meanwhile); the seconds waited, which are training's, not the eval's."""
    if ahead is None:
        return 0.0
    t0 = time.perf_counter()
    ahead.settle()
    return time.perf_counter() - t0


def _report_before_after(run_dir: Path, last: int) -> None:
    """The trained system against itself untrained on the same held-out items, with the paired interval:
    printed, and saved as RUN_DIR/results.json (nothing when the run did not evaluate before step 1)."""
    first = run_dir / EVALS_DIR / "step-000000.json"
    if last == 0 or not first.exists():
        return
    result = before_after(read_eval_items(first), read_eval_items(final_eval_path(run_dir)), (0, last))
    atomic_write_json(run_dir / "results.json", result.to_json())
    tqdm.write(f"\n{result.table()}\n(saved in {run_dir / 'results.json'}; `masrl compare` reads the same files)")


def _log_eval(engine: Parts, logger: RunLogger, step: int, label: str, final: bool = False) -> dict[str, float]:
    """Evaluate on the held-out items, log eval/<metric>, write the system's files; at the end also its report."""
    items = engine.task.items("eval", 0, engine.config.eval.size)
    result = evaluate_system(engine, items, full=final)
    logger.log(step, {f"eval/{k}": v for k, v in result.metrics.items()}, kind="eval")
    write_eval_items(logger.run_dir, step, result)  # per-item results: intervals and `masrl compare` read them
    if result.write is not None:
        result.write(logger.run_dir, step)
    tqdm.write(f"eval {label}: {result.line}")
    if final and result.report:
        tqdm.write(result.report)
    return dict(result.metrics)


def eval_due(config: Config, step: int) -> bool:
    """Whether `eval.every` asks for an evaluation after `step` (the last step's is the final one)."""
    return bool(config.eval.every) and step % config.eval.every == 0 and 0 < step < config.trainer.steps


# ---------------------------------------------------------------- stopping on a signal
class Interrupted(Exception):
    """SIGINT or SIGTERM stopped the run (exit code 130); the message says what was kept and what to run next."""


class Signals:
    """SIGINT (Ctrl-C) and SIGTERM (a cluster's preemption) while `train` runs, in the main thread.

    While the engine loads a signal stops at once (KeyboardInterrupt: nothing is trained yet). Once the
    loop runs (`graceful`), the first one only asks it to stop: the step in progress finishes and is
    checkpointed, so no finished step is lost and `--resume` continues exactly; a second signal stops
    at once, keeping what the last checkpoint holds. With `trainer.processes=N` every rank and the
    launcher hold one; rank 0's signal decides for every rank (the loop broadcasts it)."""

    def __init__(self, note: bool = True) -> None:
        self.received: str | None = None  # the first signal's name, once one came while graceful
        self.graceful = False
        # one note per run: from this process, unless it is a rank > 0 or a launcher that leaves it to rank 0
        self.note = note and os.environ.get("RANK", "0") == "0"
        self._before: dict[int, object] = {}

    def __enter__(self) -> Signals:
        if threading.current_thread() is threading.main_thread():  # only the main thread may set handlers
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._before[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._before.items():
            signal.signal(sig, handler)

    def _handle(self, signum: int, frame) -> None:
        name = signal.Signals(signum).name
        if not self.graceful or self.received is not None:
            raise KeyboardInterrupt
        self.received = name
        if not self.note:
            return
        # os.write, not print: a handler may run inside a write to stderr, which print would re-enter.
        # The newline first puts the note on a line of its own, below the progress bar.
        os.write(2, f"\nmasrl: {name}: stopping after the step in progress, which is then checkpointed; "
                    f"{name} again stops at once\n".encode())  # fmt: skip


def interrupted_message(name: str, saved: int, steps: int, start: int, run_dir: Path) -> str:
    """What a graceful stop kept (`saved`: the step last checkpointed) and the command that goes on."""
    if saved == 0:
        return f"interrupted ({name}) before step 1 finished; no step to keep; {next_command(run_dir, steps)}"
    kept = "checkpoint written" if saved > start else f"step {saved}'s checkpoint kept"
    return f"interrupted ({name}) after step {saved} of {steps}; {kept}; {next_command(run_dir, steps)}"


# ---------------------------------------------------------------- a step's metrics
def episode_metrics(episodes: Sequence[Episode]) -> dict[str, float]:
    leaves = [leaf for ep in episodes for leaf in ep.leaves()]
    ok = [leaf for leaf in leaves if not leaf.failed]
    calls = [c for ep in episodes for c in ep.calls if c.reply is not None]
    out = {
        "trajectories": float(len(leaves)),
        "failed": float(len(leaves) - len(ok)),
        "calls": float(len(calls)),  # answered calls of the step, every agent's (what sampling cost)
        "cost": sum(ep.cost for ep in episodes),
        "response_tokens_mean": sum(c.reply.tokens_out for c in calls) / max(len(calls), 1),
        "reward": sum(sum(c.reward for c in ep.path(leaf)) for ep in episodes for leaf in ep.leaves() if not leaf.failed)
        / max(len(ok), 1),
    }
    # Each component summed along its trajectory (as `reward` is), then averaged over all
    # trajectories; a component a trajectory never met counts 0 there. Leaf-only terms such as
    # `correct` are thereby the final state's value.
    paths = [ep.path(leaf) for ep in episodes for leaf in ep.leaves() if not leaf.failed]
    keys = dict.fromkeys(k for path in paths for c in path for k in c.rewards)
    out.update({f"reward/{k}": sum(c.rewards.get(k, 0.0) for p in paths for c in p) / max(len(paths), 1) for k in keys})
    return out


def machine_metrics(episodes: Sequence[Episode], scored: Scored, t_sample: float, t_update: float,
                    t_generate: float) -> dict[str, float]:  # fmt: skip
    """Measurements of the machine, not of the run: peak memory, the step's seconds, tokens per second."""
    gen_tokens = sum(c.reply.tokens_out for ep in episodes for c in ep.calls if c.reply)
    upd_tokens = sum(len(s.response_ids) for ss in scored.samples.values() for s in ss if s.trained)
    return dict(
        rss_gb=peak_rss_gb(),
        sample_seconds=t_sample,
        update_seconds=t_update,
        gen_tokens_per_s=gen_tokens / max(t_generate, 1e-9),
        update_tokens_per_s=upd_tokens / max(t_update, 1e-9) if upd_tokens else 0.0,
    )


class FailureCount:
    """Generation requests the remote engines failed (`rollout/failures`): how many since the last `new()`."""

    def __init__(self, engine: Parts):
        self.engine, self.seen = engine, engine.remote_failures()

    def new(self) -> float:
        now = self.engine.remote_failures()
        new, self.seen = now - self.seen, now
        return float(new)


def peak_rss_gb() -> float:
    """Peak resident memory of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def out_of_time(trained_seconds: float, step_seconds: float, max_minutes: float | None) -> bool:
    """Whether another step, as long as the last one, would end past the time allowance.

    Stopping *before* the step that would overrun keeps a run's training time at
    most `max_minutes` (up to one step's variation), the "at most 45 minutes" of
    the issues' measured runs.
    """
    if max_minutes is None:
        return False
    return trained_seconds + step_seconds > max_minutes * 60.0


def out_of_tokens(sampled_tokens: float, step_tokens: float, max_sampled_tokens: int | None) -> bool:
    """Whether another step that samples as many tokens as the last would end past `max_sampled_tokens`
    (the equal-token budget of a baseline: it stops before the step that would overrun, as `out_of_time`)."""
    if max_sampled_tokens is None:
        return False
    return sampled_tokens + step_tokens > max_sampled_tokens
