"""A training step's metrics: what its episodes show, and what the machine did.

`episode_metrics` counts a step's trajectories, failures, calls and cost and
averages its reward (and each reward component) over the trajectories that did
not fail; `machine_metrics` measures the machine, not the run: peak memory,
where the step's seconds went (`StepTimes`: generation, scoring, update, and
the host's own work, which add up to the step), tokens per second; `FailureCount` the generation requests remote
engines failed. `train_step` (masrl.train) logs them every step.
"""

from __future__ import annotations

import resource
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from masrl.scoring import Scored
from masrl.types import Episode


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


@dataclass(frozen=True)
class StepTimes:
    """Where a training step's wall time went, in seconds (masrl.train.train_step measures them)."""

    step: float  # the whole step: sample, score, update, publish, its metrics
    sample: float  # what the loop waited for the step's episodes (~0 when they were sampled ahead)
    sampling: float  # the sampling's own wall time (on the background thread when sampled ahead)
    generation: float  # of `sample`, the seconds a generation call was running (masrl.generation.service.BusyClock)
    scoring: float  # credit, groups, advantages (masrl.scoring)
    update: float  # every policy's optimiser step


def machine_metrics(episodes: Sequence[Episode], scored: Scored, times: StepTimes) -> dict[str, float]:
    """Measurements of the machine, not of the run: peak memory, the step's seconds, tokens per second.

    The breakdown adds up: generation + scoring + update + host = step, where `host_seconds` is what
    is left: the system's own code, the tree expansion, batching, the step's bookkeeping."""
    gen_tokens = sum(c.reply.tokens_out for ep in episodes for c in ep.calls if c.reply)
    upd_tokens = sum(len(s.response_ids) for ss in scored.samples.values() for s in ss if s.trained)
    return dict(
        rss_gb=peak_rss_gb(),
        sample_seconds=times.sample,
        update_seconds=times.update,
        step_seconds=times.step,
        generation_seconds=times.generation,
        scoring_seconds=times.scoring,
        host_seconds=times.step - times.generation - times.scoring - times.update,
        gen_tokens_per_s=gen_tokens / max(times.sampling, 1e-9),
        update_tokens_per_s=upd_tokens / max(times.update, 1e-9) if upd_tokens else 0.0,
    )


class FailureCount:
    """Generation requests the remote engines failed (`rollout/failures`): how many since the last `new()`.

    `failed` gives the engines' running count (the engine's `remote_failures`)."""

    def __init__(self, failed: Callable[[], int]):
        self.failed, self.seen = failed, failed()

    def new(self) -> float:
        now = self.failed()
        new, self.seen = now - self.seen, now
        return float(new)


def peak_rss_gb() -> float:
    """Peak resident memory of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
