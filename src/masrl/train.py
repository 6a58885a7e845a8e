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
The loop around it (`_steps`) then logs the step (masrl.run.log: metrics.jsonl,
TensorBoard, a few episodes in samples.jsonl), evaluates every `eval.every`
steps, checkpoints every `trainer.checkpoint_every` steps (masrl.run.resume: adapters,
optimisers, RNG states and the data position, written atomically) and stops
before a step that would overrun `trainer.max_minutes` or `trainer.max_sampled_tokens`
(equal-compute baselines: masrl.baseline), or after the step a signal came in (masrl.run.stop).

Failed calls (a frozen backend that timed out or answered garbage) end their
trajectory; those trajectories are left out of the update and counted. A step
in which every trajectory failed stops the run with a clear message.

With `trainer.processes=N` (or under torchrun) the same loop runs in N
processes (masrl.distributed; masrl.run.stop starts and stops them): rank 0
samples and broadcasts the episodes, every rank scores them, the learners
update on their slices and sum gradients, and rank 0 alone logs, evaluates
(masrl.run.evals) and checkpoints. With `rollout.max_staleness: k` the next k
steps are sampled ahead while this one updates (masrl.rollout.ahead).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from tqdm import tqdm

from masrl import distributed
from masrl.checkpoint import read_meta
from masrl.config import Config, ConfigError, TrainerConfig
from masrl.loading import load_config
from masrl.parts import Parts, build_parts, config_placement
from masrl.rollout.ahead import RolloutAhead, staleness, timed
from masrl.rollout.tree import rollout
from masrl.run.evals import eval_due, final_eval, log_eval
from masrl.run.files import RunDir
from masrl.run.lock import hold
from masrl.run.log import RunLogger
from masrl.run.prepare import DISK_ERRNOS, disk_message, next_command, prepare_run_dir, undo_new_run
from masrl.run.resume import checkpoint, restore, restore_newest
from masrl.run.stop import (
    Interrupted, Signals, budget_note, interrupted_message, launch_ranks, out_of_time, out_of_tokens, signal_name,
)
from masrl.scoring import Scored, score
from masrl.step_metrics import FailureCount, StepTimes, episode_metrics, machine_metrics
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
    failures = failures or FailureCount(engine.remote_failures)
    t0, busy0 = time.perf_counter(), engine.generation.seconds()
    episodes, t_generate = None, 0.0
    if main:  # 1. sample (rank 0; the others receive its episodes)
        episodes, t_generate = ahead.episodes(step) if ahead else timed(partial(sample_step, engine), step)
    episodes = distributed.broadcast(episodes)
    t_sample = time.perf_counter() - t0  # what this loop waited; less than t_generate when sampled ahead
    t_generation = engine.generation.seconds() - busy0  # of it, the seconds inside generation calls
    metrics = episode_metrics(episodes)
    if engine.errors.on_error == "drop":  # episodes dropped because the system's code raised in them
        metrics["dropped"] = float(sum(ep.dropped is not None for ep in episodes))
    if metrics["failed"] == metrics["trajectories"]:
        first = next(c.error for ep in episodes for c in ep.calls if c.error)
        raise TrainingError(f"step {step}: every episode failed; first error: {first}")
    t1 = time.perf_counter()
    config = engine.config
    scored = score(episodes, config.algo, engine.critic, config.critic.whiten_advantages)  # 2-3. score and advantage
    t_scoring = time.perf_counter() - t1
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
    times = StepTimes(time.perf_counter() - t0, t_sample, t_generate if main else t_sample, t_generation,
                      t_scoring, t_update)  # fmt: skip
    metrics.update(machine_metrics(episodes, scored, times))
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
    and stops them all when one fails (masrl.run.stop.launch_ranks); under
    torchrun (WORLD_SIZE set) it is one rank of the group torchrun started."""
    run = RunDir(resume if resume else config.run.dir)
    if resume:
        config = load_config(run.config)
    processes = config.trainer.processes
    if processes > 1 and not distributed.launched():
        launch_ranks(_rank_train, config.model_dump(mode="json"), config.trainer, run, resume is not None, model)
        return run.path
    if distributed.launched():
        if processes > 1 and int(os.environ["WORLD_SIZE"]) != processes and distributed.rank() == 0:
            print(f"masrl: note: WORLD_SIZE={os.environ['WORLD_SIZE']} processes were started for the run; "
                  f"trainer.processes={processes} is ignored", file=sys.stderr)  # fmt: skip
        distributed.init_from_env(config_placement(config.trainer).device, config.trainer.timeout_minutes)
    try:
        result = _train(config, run, resume is not None, model)
    except BaseException:
        distributed.shutdown(wait_for_peers=False)
        raise
    distributed.shutdown()
    return result


def _rank_train(run_dir: str) -> None:
    """One rank that `distributed.launch` started (it set torchrun's environment variables): it continues the
    run directory the launcher prepared (a new run's from step 0), under the launcher's lock."""
    try:
        train(None, resume=run_dir)
    except TrainingError as exc:
        raise distributed.RankFailed(str(exc)) from None
    except Interrupted:  # every rank stopped with rank 0 (its signal is broadcast); the launcher says what was kept
        sys.exit(ExitCode.INTERRUPTED)


def _train(config: Config, run: RunDir, resuming: bool, model=None) -> Path:
    try:
        with Signals() as signals, ExitStack() as held:  # held: the run directory's lock, on rank 0
            return _prepare_and_run(config, run, resuming, model, signals, held)
    except OSError as exc:
        if exc.errno not in DISK_ERRNOS:
            raise
        # a full or read-only disk, or a permission: the machine's to fix, then the run goes on
        raise EnvironmentProblem(disk_message(exc, run, config.trainer.steps)) from None


def _prepare_and_run(config: Config, run: RunDir, resuming: bool, model, signals: Signals, held: ExitStack) -> Path:
    plan = None
    if distributed.is_main():  # rank 0 owns the run directory; every rank starts where it says
        try:
            held.enter_context(hold(run, "masrl train"))  # one writer; under trainer.processes=N, the launcher's
            plan = (prepare_run_dir(run, config.model_dump(mode="json"), config.trainer.steps, resuming), None)
        except (TrainingError, ConfigError, EnvironmentProblem) as exc:
            plan = (None, exc)
    start, error = distributed.broadcast(plan)
    if error is not None:
        raise error
    if start.finished:  # resuming it changes nothing: say so, and how to train it further
        if distributed.is_main():
            print(f"masrl: {run} finished at step {start.step} of {config.trainer.steps}; nothing to resume. "
                  f"To train further, raise trainer.steps in {run.config} and run "
                  f"masrl train --resume {run}", file=sys.stderr)  # fmt: skip
        return run.path
    try:
        engine = build_parts(config, model=model)
    except BaseException as exc:  # a config error found while building (a user's data file), or Ctrl-C
        if not resuming and distributed.is_main():
            undo_new_run(run, start)  # no directory holding only config.yaml is left behind
        if isinstance(exc, KeyboardInterrupt):
            raise Interrupted(f"interrupted ({signal_name(exc)}) while loading; "
                              f"{next_command(run, config.trainer.steps)}") from None  # fmt: skip
        raise
    try:
        signals.graceful = True  # from here a first signal stops after the step in progress
        return _run(engine, config, run, start.step, signals)
    except KeyboardInterrupt as exc:  # a second signal outside the loop's steps (restoring, an evaluation)
        raise Interrupted(f"stopped at once ({signal_name(exc)}); {next_command(run, config.trainer.steps)}") from None
    finally:
        engine.close()  # rollout workers and server sessions end with the run, whatever ended it


def _run(engine: Parts, config: Config, run: RunDir, start: int, signals: Signals) -> Path:
    """Restore a resumed run, evaluate before training, then the loop (with rollouts ahead when asked)."""
    main = distributed.is_main()
    roll_call = distributed.roll_call()
    if main and roll_call:
        print(f"masrl: {roll_call}", file=sys.stderr)
    if start > 0:  # rank 0 picks the checkpoint (an unreadable one falls back to the one before); all load it
        ckpt = restore_newest(engine, run) if main else None
        ckpt = distributed.broadcast(ckpt)
        if not main:
            restore(engine, ckpt)
        start = int(read_meta(ckpt)["step"])
        engine.publish(start)  # remote engines generate with the restored adapters (version = step)
    logger = RunLogger(run, purge_after=start) if main else None
    if start == 0 and config.eval.before and main:
        log_eval(engine, config.eval, logger, 0, "before", held=signals.held)
    elif main and eval_due(config.eval, start, config.trainer.steps) and not run.logged(start, "eval"):
        log_eval(engine, config.eval, logger, start, f"step {start}", held=signals.held)  # the one a signal skipped
    # rollout.max_staleness = k > 0: the next k steps' episodes are generated on a background
    # thread while this one updates (the workers or servers do the model work), step t's with the
    # adapters of version max(start, t - 1 - k), whatever the trainer has published meanwhile.
    k = config.rollout.max_staleness
    ahead = RolloutAhead(partial(sample_step, engine), k, config.trainer.steps, first=start) if k and main else None
    try:
        return _loop(engine, config, run, start, logger, ahead, signals)
    finally:
        if ahead:
            ahead.close()  # rollouts of steps past the end (a max_minutes stop) are dropped
        if logger is not None:
            logger.close()


def _loop(engine: Parts, config: Config, run: RunDir, start: int, logger: RunLogger | None,
          ahead: RolloutAhead | None, signals: Signals) -> Path:  # fmt: skip
    """The steps (`_steps`), then what ends the run: the signal that stopped it, or the final evaluation."""
    main, cfg = distributed.is_main(), config.trainer
    bar = tqdm(total=cfg.steps, initial=start, desc="train", unit="step", dynamic_ncols=True, disable=not main)
    try:  # the bar is closed whatever ends the loop, so a message after it gets a line of its own
        last, saved, signalled = _steps(engine, config, run, start, logger, ahead, signals, bar)
    finally:
        bar.close()
    if ahead:
        ahead.close()
    if signalled is not None:
        raise Interrupted(interrupted_message(signalled, saved, cfg.steps, start, run))
    if main:  # evaluation runs once
        final_eval(engine, config.eval, config.trainer.steps, logger, run, last, signals)
    return run.path


def _steps(engine: Parts, config: Config, run: RunDir, start: int, logger: RunLogger | None,
           ahead: RolloutAhead | None, signals: Signals, bar: tqdm) -> tuple[int, int, str | None]:  # fmt: skip
    """Steps start+1 to `trainer.steps`, until the time allowance or a signal ends them:
    the last step trained, the last one checkpointed, and the signal that stopped the run (or None)."""
    main, cfg = distributed.is_main(), config.trainer
    failures = FailureCount(engine.remote_failures)
    last = saved = start  # the last step trained by this loop, and the last one checkpointed
    trained_seconds = sampled_tokens = 0.0  # the budgets' counts: trainer.max_minutes, max_sampled_tokens
    signalled = None  # the signal that stops the run, as rank 0 received it (every rank acts on rank 0's)
    step = start + 1
    try:
        for step in range(start + 1, cfg.steps + 1):
            signalled = distributed.broadcast(signals.received)  # one during the last step's eval or checkpoint
            if signalled is not None:
                break
            t0 = time.perf_counter()
            trained = train_step(engine, step, ahead, failures)  # 1-4. sample, score, advantage, update
            if main:  # 5. log
                with signals.held():
                    _log_step(logger, bar, cfg, step, trained)
            last = step
            step_seconds = time.perf_counter() - t0
            step_tokens = trained.metrics["calls"] * trained.metrics["response_tokens_mean"]  # generated this step
            sampled_tokens += step_tokens
            # rank 0's clock and signals decide for every rank
            stop, signalled = distributed.broadcast(
                (out_of_time(trained_seconds + step_seconds, step_seconds, cfg.max_minutes)
                 or out_of_tokens(sampled_tokens, step_tokens, cfg.max_sampled_tokens), signals.received))  # fmt: skip
            final = step == cfg.steps or stop or signalled is not None
            if eval_due(config.eval, step, cfg.steps) and not final and main:  # 6. evaluate (a signal's: when resumed, in _run)
                step_seconds += _settle(ahead)
                log_eval(engine, config.eval, logger, step, f"step {step}", held=signals.held)
            t_checkpoint = time.perf_counter()
            if step % cfg.checkpoint_every == 0 or final:  # 7. checkpoint
                # Rollouts sampled ahead are mid-batch on the workers: their generators cannot be read between
                # steps, and asking would wait for the batch; a resumed asynchronous run is not exact anyway.
                with signals.held():  # a second signal meanwhile stops once the checkpoint is whole
                    checkpoint(engine, run, step, worker_rngs=ahead is None)
                saved = step
            # A checkpoint is training time (evaluations are not): the allowance bounds the run's wall time,
            # and rollouts sampled ahead, which go on while it is written, get no untimed minutes.
            trained_seconds += step_seconds + time.perf_counter() - t_checkpoint
            if stop and signalled is None:  # 8. time or token limit
                if main:
                    tqdm.write(budget_note(cfg.max_minutes, cfg.max_sampled_tokens, step, trained_seconds, sampled_tokens))
                break
            if signalled is not None:
                break
        if signalled is not None and last > saved:  # the signal came after the step's checkpoint phase
            with signals.held():
                checkpoint(engine, run, last, worker_rngs=ahead is None)
            saved = last
        if signalled is not None:  # ranks > 0 wait until rank 0 has written it: the launcher stops the
            distributed.broadcast(saved)  # others as soon as one rank has exited
    except KeyboardInterrupt:  # a second signal: stop at once; what the last checkpoint holds stays
        raise Interrupted(f"stopped at once during step {step} of {cfg.steps}; "
                          f"{next_command(run, cfg.steps)}") from None  # fmt: skip
    return last, saved, signalled


# ------------------------------------------------------------------ the loop's phases
def _log_step(logger: RunLogger, bar: tqdm, trainer: TrainerConfig, step: int, trained: TrainedStep) -> None:
    """The step's metrics; its first episode trees on the first step and every `log_episodes_every`-th."""
    logger.log(step, trained.metrics)
    if step % trainer.log_episodes_every == 0 or step == 1:
        logger.episodes(step, trained.episodes[: trainer.log_episodes], trained.scored)
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
