"""`train(config)`: sample, score, advantage, update, log, checkpoint.

One step:
1. sample  - expand an episode tree for each task of the batch (the sampler's
             branching rule; generation batched across all episodes);
2. score   - credit converts the tree's rewards into a return per call;
3. advantage - calls are grouped (which calls compare) and the advantage
             estimator normalises returns within each group; or, with
             `algo.advantage: gae` (PPO), the value model scores every
             response token and GAE runs along each root-to-leaf path
             (`score_gae`), giving per-token advantages to the policies
             and value targets to the value learner;
4. update  - every trainable call becomes a sample of its policy's batch; that
             policy's learner (masrl.learners) takes one optimiser step;
5. log     - metrics.jsonl, TensorBoard, a few episodes in samples.jsonl;
6. checkpoint - adapters, optimisers, RNG states and the data position,
             written atomically every N steps.

Failed calls (a frozen backend that timed out or answered garbage) end their
trajectory; those trajectories are left out of the update and counted. A step
in which every trajectory failed stops the run with a clear message.

With `trainer.processes=N` (or under torchrun) the same loop runs in N
processes (masrl.distributed): rank 0 samples and broadcasts the episodes,
every rank scores them, the learners update on their slices and sum
gradients, and rank 0 alone logs, evaluates and checkpoints.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from tqdm import tqdm

from masrl import distributed
from masrl.algos.advantages import ADVANTAGES, group_ids_from_keys
from masrl.algos.credit import CREDITS, GROUPINGS, per_agent_weights, trainable_calls
from masrl.algos.gae import token_gae, trajectories, whiten
from masrl.checkpoint import (
    atomic_write_text,
    capture_rng,
    complete_checkpoints,
    latest_checkpoint,
    read_meta,
    restore_rng,
    save_checkpoint,
    set_aside,
)
from masrl.config import Config, ConfigError
from masrl.engine import Engine, build_engine, engine_placement
from masrl.evaluate import evaluate_system, write_eval_items
from masrl.loading import dump_config, load_config, validate
from masrl.learners import CRITIC, ValueLearner
from masrl.rollout.tree import rollout
from masrl.types import Episode, Sample


class TrainingError(RuntimeError):
    """The run cannot go on (e.g. every episode of a step failed)."""


@dataclass(frozen=True)
class Scored:
    samples: dict[str, list[Sample]]  # policy -> batch
    advantages: dict[tuple[int, str], float]  # (episode index, call id) -> advantage
    metrics: dict[str, float]
    # What samples.jsonl records for the viewer's episode trees: each trainable call's return and
    # the group it was compared within (dense ids, numbered per step across the batch).
    returns: dict[tuple[int, str], float] = field(default_factory=dict)
    groups: dict[tuple[int, str], int] = field(default_factory=dict)


# ---------------------------------------------------------------- pure phases
def score(episodes: Sequence[Episode], config: Config, critic: ValueLearner | None = None) -> Scored:
    """Credit, grouping and advantages: episodes in, per-policy samples out.

    `algo.advantage: gae` is the token-level phase `score_gae` instead (it needs `critic`)."""
    algo = config.algo
    if algo.advantage == "gae":
        return score_gae(episodes, config, critic)
    returns = [CREDITS[algo.credit](ep, algo.gamma) for ep in episodes]
    calls = trainable_calls(episodes)
    if not calls:
        return Scored({}, {}, {})
    keys = GROUPINGS[algo.grouping](calls)
    ret = torch.tensor([returns[i][c.id] for i, c in calls], dtype=torch.float64)  # [N]
    group_ids = group_ids_from_keys(keys)  # [N]
    adv = ADVANTAGES[algo.advantage](ret, group_ids)  # [N]
    weights = [sample_weight(episodes[i], algo.sample_weight) for i, _ in calls]
    samples: dict[str, list[Sample]] = defaultdict(list)
    roles: dict[str, list[str]] = defaultdict(list)
    for (i, c), a, w in zip(calls, adv.tolist(), weights):
        if algo.skip_zero_advantage and a == 0.0:
            continue
        r = c.reply
        samples[r.policy].append(Sample(r.policy, r.prompt_ids or (), r.response_ids or (), a, w, r.payload,
                                        behavior_logprobs=r.logprobs, version=r.version))  # fmt: skip
        roles[r.policy].append(c.role)
    if algo.sample_weight == "per_agent":  # MHGPO eq. 6: mean over agents of each agent's per-sample mean
        for policy, batch in samples.items():
            samples[policy] = [replace(s, weight=w) for s, w in zip(batch, per_agent_weights(roles[policy]))]
    ids = [(i, c.id) for i, c in calls]
    return Scored(
        dict(samples),
        dict(zip(ids, adv.tolist())),
        {"return_mean": float(ret.mean()), "adv_abs_mean": float(adv.abs().mean())},
        returns=dict(zip(ids, ret.tolist())),
        groups=dict(zip(ids, group_ids.tolist())),
    )


def score_gae(episodes: Sequence[Episode], config: Config, critic: ValueLearner | None) -> Scored:
    """PPO's advantage phase (GAE from a learned value model, as CoRL trains its controller; masrl.algos.gae).

    The value model scores the state before every response token of every
    trainable call; GAE runs over each root-to-leaf path's concatenated
    response tokens (other agents' tokens are only context in later prompts,
    so they are never scored and never trained on); each policy gets per-token
    advantages (whitened over the batch when `critic.whiten_advantages`), and
    the value learner gets the per-token returns and the values it predicted."""
    if critic is None:
        raise TrainingError("algo.advantage 'gae' needs a value learner (the engine builds one for it)")
    algo = config.algo
    calls = trainable_calls(episodes)
    if not calls:
        return Scored({}, {}, {})
    tokenless = sorted({c.reply.policy for _, c in calls if not c.reply.response_ids})
    if tokenless:
        raise TrainingError(f"algo.advantage 'gae' scores response tokens; policies {tokenless} sampled none")
    values = critic.values([c.reply.prompt_ids for _, c in calls], [c.reply.response_ids for _, c in calls])
    old = {(i, c.id): v for (i, c), v in zip(calls, values)}
    targets = token_gae(trajectories(episodes), old, algo.gamma, algo.lam)
    keys = [(i, c.id) for i, c in calls]
    flat_adv = torch.tensor([a for k in keys for a in targets[k].advantages], dtype=torch.float64)  # [N tokens]
    if config.critic.whiten_advantages:
        flat_adv = whiten(flat_adv)
    flat_ret = torch.tensor([g for k in keys for g in targets[k].returns], dtype=torch.float64)
    flat_val = torch.tensor([v for k in keys for v in old[k]], dtype=torch.float64)
    samples: dict[str, list[Sample]] = defaultdict(list)
    advantages: dict[tuple[int, str], float] = {}
    returns: dict[tuple[int, str], float] = {}
    start = 0
    for (i, c), k in zip(calls, keys):
        r, n = c.reply, len(c.reply.response_ids)
        adv = tuple(flat_adv[start : start + n].tolist())
        start += n
        advantages[k] = sum(adv) / n
        returns[k] = sum(targets[k].returns) / n  # the viewer shows one number per call: the token mean
        target = Sample(CRITIC, r.prompt_ids, r.response_ids, 0.0, returns=targets[k].returns, values=tuple(old[k]))
        samples[CRITIC].append(target)
        if algo.skip_zero_advantage and not any(adv):
            continue
        w = sample_weight(episodes[i], algo.sample_weight)
        samples[r.policy].append(Sample(r.policy, r.prompt_ids, r.response_ids, adv, w,
                                        behavior_logprobs=r.logprobs, version=r.version))  # fmt: skip
    residual = (flat_ret - flat_val).var(unbiased=False)
    metrics = {
        "return_mean": float(flat_ret.mean()),
        "adv_abs_mean": float(flat_adv.abs().mean()),
        "value_mean": float(flat_val.mean()),
        # 1 - Var[R - V] / Var[R]: 1 when the value model predicts the returns exactly, <= 0 when useless.
        "value_explained_var": float(1.0 - residual / flat_ret.var(unbiased=False)) if flat_ret.var() > 0 else 0.0,
    }
    return Scored(dict(samples), advantages, metrics, returns=returns)


def sample_weight(episode: Episode, kind: str) -> float:
    """Loss scale of a sample from `episode`: 1, or 1/(leaves of its tree) (critique-routing paper, appendix E.2:
    each query's gradient is scaled by 1/|B_T| so a bushy tree does not outweigh a shallow one)."""
    if kind == "inverse_leaves":
        return 1.0 / max(1, len(episode.leaves()))
    return 1.0


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


def episode_record(step: int, ep: Episode, scored: Scored, index: int) -> dict:
    """One episode tree as samples.jsonl keeps it (what `masrl view` draws): every call's prompt and
    response, reward components, and for trainable calls the return, group and advantage it was
    trained with (`group` ids are shared by the calls of one step that were compared)."""
    key = lambda c: (index, c.id)  # noqa: E731
    return {
        "step": step,
        "episode": index,
        "task": {"id": ep.task.id, "question": ep.task.question, "answer": ep.task.answer},
        "calls": [
            {
                "id": c.id,
                "parent": c.parent,
                "agent": c.agent,
                "role": c.role,
                "turn": c.turn,
                "policy": c.reply.policy if c.reply else None,
                "prompt": [[m.role, m.content] for m in c.messages],
                "response": c.reply.text if c.reply else None,
                "tokens_in": c.reply.tokens_in if c.reply else 0,
                "tokens_out": c.reply.tokens_out if c.reply else 0,
                "cost": c.cost,
                "action": c.action if isinstance(c.action, (str, int, float, type(None))) else repr(c.action),
                "rewards": dict(c.rewards),
                "reward": c.reward,
                "return": scored.returns.get(key(c)),
                "group": scored.groups.get(key(c)),
                "advantage": scored.advantages.get(key(c)),
                "done": c.done,
                "error": c.error,
            }
            for c in ep.calls
        ],
    }


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
        place = engine_placement(config)  # a bad device or run directory fails here, before any spawn
        if place.device.type == "cuda" and processes > torch.cuda.device_count():
            raise ConfigError(f"trainer.processes={processes} needs one GPU each; torch sees {torch.cuda.device_count()}")
        _prepare_run_dir(run_dir, config, resume is not None)
        try:
            distributed.launch(_rank_train, processes, (config.model_dump(mode="json"), str(run_dir) if resume else None))
        except distributed.RankFailed as exc:
            raise TrainingError(f"{exc}. Continue from the last checkpoint with: masrl train --resume {run_dir}") from None
        return run_dir
    if distributed.launched():
        if processes > 1 and int(os.environ["WORLD_SIZE"]) != processes and distributed.rank() == 0:
            print(f"masrl: note: WORLD_SIZE={os.environ['WORLD_SIZE']} processes were started for the run; "
                  f"trainer.processes={processes} is ignored", file=sys.stderr)  # fmt: skip
        distributed.init_from_env(engine_placement(config).device, config.trainer.timeout_minutes)
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


def _train(config: Config, run_dir: Path, resuming: bool, model=None) -> Path:
    main = distributed.is_main()
    plan = None
    if main:  # rank 0 owns the run directory; every rank starts where it says
        try:
            start = _prepare_run_dir(run_dir, config, resuming)
            finished = start >= config.trainer.steps and _logged(run_dir / "metrics.jsonl", start, "eval")
            plan = (start, finished, None)
        except TrainingError as exc:
            plan = (0, False, str(exc))
    start, finished, error = distributed.broadcast(plan)
    if error is not None:
        raise TrainingError(error)
    if finished:
        return run_dir  # a finished run: resuming it changes nothing
    engine = build_engine(config, model=model)
    try:
        return _loop(engine, config, run_dir, start)
    finally:
        engine.close()  # rollout workers and server sessions end with the run, whatever ended it


def _loop(engine: Engine, config: Config, run_dir: Path, start: int) -> Path:
    main = distributed.is_main()
    roll_call = distributed.roll_call()
    if main and roll_call:
        print(f"masrl: {roll_call}", file=sys.stderr)
    if start > 0:  # rank 0 picks the checkpoint (an unreadable one falls back to the one before); all load it
        ckpt = _restore_newest(engine, run_dir) if main else None
        ckpt = distributed.broadcast(ckpt)
        if not main:
            _restore(engine, ckpt)
        start = int(read_meta(ckpt)["step"])
        engine.publish(start)  # remote engines generate with the restored adapters (version = step)
    logger = RunLogger(run_dir, purge_after=start) if main else None
    if start == 0 and config.eval.before and main:
        _log_eval(engine, logger, 0, "before")

    cfg = config.trainer
    # rollout.max_staleness = k > 0: the next k steps' episodes are generated on a background
    # thread while this one updates (the workers or servers do the model work).
    ahead = RolloutAhead(engine, config.rollout.max_staleness, cfg.steps) if config.rollout.max_staleness and main else None
    try:
        return _steps(engine, config, run_dir, start, logger, ahead)
    finally:
        if ahead:
            ahead.close()  # rollouts of steps past the end (a max_minutes stop) are dropped


def _steps(engine: Engine, config: Config, run_dir: Path, start: int, logger, ahead) -> Path:
    main, cfg = distributed.is_main(), config.trainer
    failures = remote_failures(engine)
    bar = tqdm(total=cfg.steps, initial=start, desc="train", unit="step", dynamic_ncols=True, disable=not main)
    last = start  # the last step trained (and checkpointed) by this loop
    trained_seconds = 0.0
    for step in range(start + 1, cfg.steps + 1):
        t0 = time.perf_counter()
        episodes, t_generate = None, 0.0
        if main:  # 1. sample (rank 0; the others receive its episodes)
            episodes, t_generate = ahead.episodes(step) if ahead else timed_sample_step(engine, step)
        episodes = distributed.broadcast(episodes)
        t_sample = time.perf_counter() - t0  # what this loop waited; less than t_generate when sampled ahead
        metrics = episode_metrics(episodes)
        if metrics["failed"] == metrics["trajectories"]:
            first = next(c.error for ep in episodes for c in ep.calls if c.error)
            raise TrainingError(f"step {step}: every episode failed; first error: {first}")
        scored = score(episodes, config, engine.critic)  # 2-3. score and advantage
        observe = getattr(engine.system, "observe", None)  # a system's own step metrics (e.g. usage, dual ascent)
        if observe is not None:
            metrics.update(observe(episodes))
        t1 = time.perf_counter()
        for policy, samples in scored.samples.items():  # 4. update (each rank its slice)
            upd = engine.learners[policy].update(samples)
            metrics.update({f"{policy}/{k}": v for k, v in upd.items()})
        t_update = time.perf_counter() - t1
        engine.publish(step)  # the adapters after this update are version `step`
        if engine.remotes:
            now = remote_failures(engine)
            metrics["rollout/failures"], failures = float(now - failures), now
            metrics.update(staleness(episodes, step))
        if ahead:
            metrics["rollout/generate_seconds"] = t_generate  # the step's sampling on the background thread
        gen_tokens = sum(c.reply.tokens_out for ep in episodes for c in ep.calls if c.reply)
        upd_tokens = sum(len(s.response_ids) for ss in scored.samples.values() for s in ss)
        metrics.update(scored.metrics)
        metrics.update(
            rss_gb=peak_rss_gb(),
            sample_seconds=t_sample,
            update_seconds=t_update,
            # the rate of the sampling itself: with rollouts ahead the loop may wait ~0 s for a whole step
            gen_tokens_per_s=gen_tokens / max(t_generate if main else t_sample, 1e-9),
            update_tokens_per_s=upd_tokens / max(t_update, 1e-9) if upd_tokens else 0.0,
        )
        if main:  # 5. log
            logger.log(step, metrics)
            if step % cfg.log_episodes_every == 0 or step == 1:  # the first step's trees, then every N-th
                logger.episodes(step, episodes[: cfg.log_episodes], scored)
            bar.set_postfix(reward=f"{metrics['reward']:.3f}", tok_s=f"{metrics['gen_tokens_per_s']:.0f}")
            bar.update(1)
        last = step
        step_seconds = time.perf_counter() - t0
        stop = distributed.broadcast(out_of_time(trained_seconds + step_seconds, step_seconds, cfg.max_minutes))
        final = step == cfg.steps or stop  # (the stop is rank 0's clock)
        if config.eval.every and step % config.eval.every == 0 and not final and main:
            if ahead:  # evaluation shares the generation services: nothing else may use them
                t_settle = time.perf_counter()
                ahead.settle()  # the rollouts finished meanwhile are training's (timed below, not the eval's)
                step_seconds += time.perf_counter() - t_settle
            _log_eval(engine, logger, step, f"step {step}")
        t_checkpoint = time.perf_counter()
        if step % cfg.checkpoint_every == 0 or final:  # 6. checkpoint
            # Rollouts sampled ahead are mid-batch on the workers: their generators cannot be read between
            # steps, and asking would wait for the batch; a resumed asynchronous run is not exact anyway.
            _checkpoint(engine, run_dir, step, worker_rngs=ahead is None)
        # A checkpoint is training time (evaluations are not): the allowance bounds the run's wall time,
        # and rollouts sampled ahead, which go on while it is written, get no untimed minutes.
        trained_seconds += step_seconds + time.perf_counter() - t_checkpoint
        if stop:
            if main:
                tqdm.write(f"trainer.max_minutes={cfg.max_minutes}: stopping after step {step} "
                           f"({trained_seconds / 60:.1f} min)")  # fmt: skip
            break
    bar.close()
    if ahead:
        ahead.close()
    if main:  # evaluation runs once
        _log_eval(engine, logger, last, "after", final=True)
        logger.close()
    return run_dir


def sample_step(engine: Engine, step: int) -> list[Episode]:
    """Phase 1: the episodes of training step `step` (its tasks come from the data position)."""
    n = engine.config.trainer.batch_size
    tasks = engine.task.items("train", (step - 1) * n, n)
    key = f"{engine.config.run.seed}:train:{step}" if engine.config.rollout.order == "place" else None
    return asyncio.run(rollout(engine.system, engine.agents, tasks, engine.rule, key, env=engine.env))


def timed_sample_step(engine: Engine, step: int) -> tuple[list[Episode], float]:
    """`sample_step` and the seconds it took."""
    t0 = time.perf_counter()
    episodes = sample_step(engine, step)
    return episodes, time.perf_counter() - t0


class RolloutAhead:
    """Asynchronous rollouts (AReaL's, bounded staleness; Fu et al. 2025, sec. 5.1): while step s
    updates, steps s+1 .. s+k are sampled one after another on a background thread with whatever
    adapters the remote engines hold when each batch is sent. Each reply records its adapter version
    and behaviour log-probs, so the loss corrects for the gap (UpdateSettings.decoupled)."""

    def __init__(self, engine: Engine, k: int, last_step: int):
        from concurrent.futures import ThreadPoolExecutor

        self.engine, self.k, self.last = engine, k, last_step
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="masrl-rollout-ahead")
        self.futures: dict = {}

    def episodes(self, step: int) -> tuple[list[Episode], float]:
        """Step `step`'s episodes and the seconds their sampling took (on the background thread)."""
        for s in range(step, min(step + self.k, self.last) + 1):
            if s not in self.futures:
                self.futures[s] = self.pool.submit(timed_sample_step, self.engine, s)
        return self.futures.pop(step).result()

    def settle(self) -> None:
        """Wait until every rollout queued so far has finished (nothing generates afterwards)."""
        for f in list(self.futures.values()):
            f.result()

    def close(self) -> None:
        for f in self.futures.values():
            f.cancel()
        self.pool.shutdown(wait=True)


def remote_failures(engine: Engine) -> int:
    return sum(remote.failures for remote, _ in engine.remotes)


def staleness(episodes: Sequence[Episode], step: int) -> dict[str, float]:
    """How many updates behind the trainer (which starts step `step` from version step - 1) each
    trainable reply's adapters were: mean and max over the step's replies."""
    gaps = [step - 1 - c.reply.version for ep in episodes for c in ep.calls if c.reply and c.reply.version is not None]
    if not gaps:
        return {}
    return {"rollout/staleness_mean": sum(gaps) / len(gaps), "rollout/staleness_max": float(max(gaps))}


# ---------------------------------------------------------------- helpers
def out_of_time(trained_seconds: float, step_seconds: float, max_minutes: float | None) -> bool:
    """Whether another step, as long as the last one, would end past the time allowance.

    Stopping *before* the step that would overrun keeps a run's training time at
    most `max_minutes` (up to one step's variation), the "at most 45 minutes" of
    the issues' measured runs.
    """
    if max_minutes is None:
        return False
    return trained_seconds + step_seconds > max_minutes * 60.0


def peak_rss_gb() -> float:
    """Peak resident memory of this process so far (Linux reports KiB)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def _prepare_run_dir(run_dir: Path, config: Config, resuming: bool) -> int:
    """The step to continue from (0 for a new run)."""
    if resuming:
        ckpt = latest_checkpoint(run_dir)
        if ckpt is None:
            raise TrainingError(f"{run_dir} has no complete checkpoint to resume from")
        return int(read_meta(ckpt)["step"])
    if latest_checkpoint(run_dir) is not None:
        raise TrainingError(f"{run_dir} already holds a run; resume it with --resume {run_dir} or choose run.dir")
    run_dir.mkdir(parents=True, exist_ok=True)
    dump_config(config, run_dir / "config.yaml")
    return 0


def _checkpoint(engine: Engine, run_dir: Path, step: int, worker_rngs: bool = True) -> None:
    """Rank 0 writes the checkpoint; every rank's RNG state goes into it (a collective: all ranks call this),
    and with `worker_rngs` the rollout workers' sampling generators."""
    rngs = distributed.gather(capture_rng())
    if not distributed.is_main():
        return
    files = {}
    for learner in engine.learners.values():
        files.update(learner.checkpoint_files())
    files["rng.pt"] = lambda path: torch.save(rngs[0], path)
    workers = engine.remote_rng_states() if worker_rngs else None
    if workers is not None:  # rollout workers sample with generators of their own
        files["rng_workers.pt"] = lambda path: torch.save(workers, path)
    if len(rngs) > 1:  # ranks > 0 draw only for dropout, but a resumed run restores them too
        files["rng_ranks.pt"] = lambda path: torch.save(rngs, path)
    meta = {"data_position": step * engine.config.trainer.batch_size}
    if hasattr(engine.system, "state_dict"):  # a system's own state (e.g. Lagrange multipliers)
        meta["system"] = engine.system.state_dict()
    # Frozen agents with state (a simulated agent's attempt counts) resume where they were.
    meta["frozen"] = {n: a.state_dict() for n, a in engine.frozen.items() if hasattr(a, "state_dict")}
    save_checkpoint(run_dir, step, files, meta, keep=engine.config.trainer.keep_checkpoints)


def _restore(engine: Engine, ckpt: Path, weights_only: bool = False) -> None:
    for learner in engine.learners.values():
        learner.load(ckpt, weights_only=weights_only)
    if not weights_only:
        restore_rng(_rng_state(ckpt, distributed.rank()))
        if (ckpt / "rng_workers.pt").exists():
            engine.load_remote_rng_states(torch.load(ckpt / "rng_workers.pt", weights_only=False))
    meta = read_meta(ckpt)
    state = meta.get("system")
    if state is not None and hasattr(engine.system, "load_state_dict"):
        engine.system.load_state_dict(state)
    if not weights_only:
        for name, agent_state in meta.get("frozen", {}).items():
            engine.frozen[name].load_state_dict(agent_state)


def _restore_newest(engine: Engine, run_dir: Path) -> Path:
    """Load the newest checkpoint that reads back whole and return it. One that does not
    (a corrupt or truncated file) is set aside with a one-line warning and the one before is tried."""
    for ckpt in complete_checkpoints(run_dir):
        try:
            _restore(engine, ckpt)
        except Exception as exc:  # noqa: BLE001 - whatever the loaders raise on a damaged file
            aside = set_aside(ckpt)
            reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
            print(f"masrl: checkpoint {ckpt.name} is unreadable ({reason}); set aside as {aside.name}", file=sys.stderr)
            continue
        return ckpt
    raise TrainingError(f"{run_dir}: no checkpoint reads back whole")


def _rng_state(ckpt: Path, rank: int) -> dict:
    """This rank's saved RNG state; rank 0's when the run had fewer processes than `rank`."""
    ranks = ckpt / "rng_ranks.pt"
    if rank > 0 and ranks.exists():
        states = torch.load(ranks, weights_only=False)
        if rank < len(states):
            return states[rank]
    return torch.load(ckpt / "rng.pt", weights_only=False)


def load_trained(run_dir: Path, model=None) -> Engine:
    """An engine with the run's latest checkpoint loaded (for eval and serve)."""
    config = load_config(run_dir / "config.yaml")
    engine = build_engine(config, model=model)
    ckpt = latest_checkpoint(run_dir)
    if ckpt is None:
        raise TrainingError(f"{run_dir} has no checkpoint")
    _restore(engine, ckpt, weights_only=True)
    engine.publish(int(read_meta(ckpt)["step"]))  # workers or servers generate with the trained adapters
    return engine


def load_engine(target: str | None, overrides: Sequence[str] = ()) -> Engine:
    """A trained run's engine (a run directory: its saved config, latest checkpoint) or an untrained one
    (a config name or file, or None for the default, with dotted overrides)."""
    if target and Path(target).is_dir():
        if overrides:
            raise ConfigError(f"{target} is loaded with its saved config; pass no overrides")
        return load_trained(Path(target))
    return build_engine(load_config(target, overrides))


def _log_eval(engine: Engine, logger: "RunLogger", step: int, label: str, final: bool = False) -> dict[str, float]:
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


class RunLogger:
    """metrics.jsonl + TensorBoard + samples.jsonl; a resumed run drops lines past its checkpoint."""

    def __init__(self, run_dir: Path, purge_after: int):
        from torch.utils.tensorboard import SummaryWriter

        self.run_dir = run_dir
        self.metrics_path = run_dir / "metrics.jsonl"
        self.samples_path = run_dir / "samples.jsonl"
        for path in (self.metrics_path, self.samples_path):
            _truncate_after(path, purge_after)
        self.tb = SummaryWriter(str(run_dir / "tb"), purge_step=purge_after + 1 if purge_after else None)

    def log(self, step: int, metrics: dict[str, float], kind: str = "train") -> None:
        clean = {k: (v if math.isfinite(v) else None) for k, v in metrics.items()}
        with self.metrics_path.open("a") as f:
            f.write(json.dumps({"step": step, "kind": kind, **clean}) + "\n")
        for k, v in metrics.items():
            if math.isfinite(v):
                self.tb.add_scalar(k, v, step)
        self.tb.flush()

    def episodes(self, step: int, episodes: Sequence[Episode], scored: Scored) -> None:
        with self.samples_path.open("a") as f:
            for i, ep in enumerate(episodes):
                f.write(json.dumps(episode_record(step, ep, scored, i)) + "\n")

    def close(self) -> None:
        self.tb.close()


def _logged(path: Path, step: int, kind: str) -> bool:
    """Whether metrics.jsonl holds a `kind` line for `step` (e.g. a finished run's final eval)."""
    if not path.exists():
        return False
    records = _records(path.read_text().splitlines())
    return any(r["step"] == step and r["kind"] == kind for _, r in records)


def _truncate_after(path: Path, step: int) -> None:
    """Keep only lines with step <= `step` (lines from steps a crash lost are dropped)."""
    if not path.exists():
        return
    lines = [] if step == 0 else path.read_text().splitlines()  # a new run keeps nothing
    kept = [line for line, record in _records(lines) if record["step"] <= step]
    atomic_write_text(path, "".join(line + "\n" for line in kept))


def _records(lines: Sequence[str]) -> list[tuple[str, dict]]:
    """(line, record) of every whole JSON line: a kill in the middle of an append leaves a
    torn last line, which is dropped rather than failing the resume."""
    out = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and "step" in record:
            out.append((line, record))
    return out
