"""Typed records that cross module boundaries: messages, replies, calls, episodes.

Vocabulary (see docs/usage.md, "The engine in one paragraph"):
- a **Reply** is what any agent backend returns: text, token counts, cost, and
  for a trainable policy the token ids it sampled;
- a **Call** is one agent invocation inside an episode, with its prompt, reply,
  parsed action and immediate rewards; calls are the unit of training data;
- an **Episode** is the tree of calls drawn for one task: parallel sampling is a
  tree that branches only at the root, so one shape serves every sampler.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any


@dataclass(frozen=True)
class Message:
    role: str  # "system" | "user" | "assistant" | "tool"
    content: str


@dataclass(frozen=True)
class Price:
    """Dollars per 1,000 input and output tokens."""

    input_per_1k: float = 0.0
    output_per_1k: float = 0.0

    def cost(self, tokens_in: int, tokens_out: int) -> float:
        return tokens_in * self.input_per_1k / 1000.0 + tokens_out * self.output_per_1k / 1000.0


@dataclass(frozen=True)
class Reply:
    """What one agent invocation returns, whatever the backend."""

    text: str
    tokens_in: int
    tokens_out: int
    cost: float
    finish_reason: str = "stop"  # "stop" | "length"
    # Trainable policies only: the exact token ids of prompt and sampled
    # response, and the policy (adapter) that produced them.
    prompt_ids: tuple[int, ...] | None = None
    response_ids: tuple[int, ...] | None = None
    policy: str | None = None
    # A trainable policy that is not a token sampler (e.g. a scoring head over
    # agents) keeps here what its learner needs to recompute the choice's log-prob.
    payload: Any = None
    # Each response token's log-prob under the weights that sampled it, when recorded (remote
    # generation, or SamplingParams.logprobs: the gateway), and that adapter version. Asynchronous
    # training corrects stale samples with them (masrl.algos.losses.behavior_weights).
    logprobs: tuple[float, ...] | None = None
    version: int | None = None

    @property
    def trainable(self) -> bool:
        return self.policy is not None and (self.response_ids is not None or self.payload is not None)


class AgentError(RuntimeError):
    """A backend failed to produce a usable reply (timeout, HTTP error, garbage).

    The rollout records the failure on the call and marks the trajectory failed;
    it never propagates into the training step.
    """


class TrainingError(RuntimeError):
    """The run cannot go on (e.g. every episode of a step failed, or no checkpoint reads back)."""


class ExitCode(IntEnum):
    """What `masrl` exits with, so a script or a scheduler can tell who has to act (docs/usage.md)."""

    OK = 0
    BUG = 1  # a bug in masrl (a traceback, to be reported), or a run that cannot go on (every episode failed)
    CONFIG = 2  # the run cannot start as asked: config, arguments, a missing component; fix it and run again
    ENVIRONMENT = 3  # the machine failed the run: a full disk, a permission, a broken run directory
    SYSTEM = 4  # the user's system code raised (rollout.on_system_error: stop)
    INTERRUPTED = 130  # SIGINT or SIGTERM: the last finished step is checkpointed; --resume continues
    BROKEN_PIPE = 141  # the reader of the output went away (`masrl models | head -1`): quiet, as a Unix tool


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)  # what stops any command: exit code INTERRUPTED, one line


class EnvironmentProblem(RuntimeError):
    """The machine, not the config, stops the run (exit code 3); the message says what to do."""


class SystemCodeError(RuntimeError):
    """The system's own code raised, or asked for an agent nobody serves, and the run stops (exit code 4).

    The message is one line naming the system, its hook, the file and line and the exception; the
    traceback is in the run directory's errors.log (masrl.rollout.system_errors.SystemErrors)."""


@dataclass(frozen=True)
class TaskItem:
    """One problem instance. The task family that made it owns its verification."""

    id: str
    question: str
    answer: str
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Call:
    """One agent invocation in an episode tree.

    `id` is the node's path in the tree ("0", "0.2", "0.2.1"); `parent` is the
    id of the call whose outcome this call continues from, None at the root.
    """

    id: str
    parent: str | None
    agent: str
    role: str
    turn: int
    messages: tuple[Message, ...]
    reply: Reply | None  # None when the backend failed (see `error`)
    action: Any = None
    rewards: Mapping[str, float] = field(default_factory=dict)  # components, unweighted
    reward: float = 0.0  # immediate reward: weighted sum of the components
    done: bool = False  # this call ended its trajectory
    error: str | None = None

    @property
    def failed(self) -> bool:
        return self.error is not None

    @property
    def cost(self) -> float:
        return self.reply.cost if self.reply else 0.0


@dataclass(frozen=True)
class Episode:
    """All calls drawn for one task, as a tree (calls listed parents first)."""

    task: TaskItem
    calls: tuple[Call, ...]
    # Why the rollout dropped it (the system raised; rollout.on_system_error: drop): its calls are kept
    # for their cost, each marked failed, so none is trained on or counted right. None: it ran.
    dropped: str | None = None

    def children(self, call_id: str | None) -> list[Call]:
        return [c for c in self.calls if c.parent == call_id]

    def leaves(self) -> list[Call]:
        parents = {c.parent for c in self.calls}
        return [c for c in self.calls if c.id not in parents]

    def path(self, leaf: Call) -> list[Call]:
        """The trajectory from the root to `leaf`, root first."""
        by_id = {c.id: c for c in self.calls}
        out = [leaf]
        while out[-1].parent is not None:
            out.append(by_id[out[-1].parent])
        return out[::-1]

    def failed_ids(self) -> set[str]:
        """Calls on a trajectory that hit a backend failure: ancestors of a failed
        leaf whose every descendant leaf failed, and the failed calls themselves."""
        failed: set[str] = set()
        for call in reversed(self.calls):  # children before parents
            kids = self.children(call.id)
            if call.failed or (kids and all(k.id in failed for k in kids)):
                failed.add(call.id)
        return failed

    @property
    def cost(self) -> float:
        return sum(c.cost for c in self.calls)


@dataclass(frozen=True)
class Sample:
    """One trainable call flattened for the update: token ids and its advantage.

    `advantage` is one number for the whole response, or one per response
    token (GAE). A value learner's samples carry instead, per response token,
    the value target `returns` and the `values` it predicted when the batch
    was scored (for PPO's value clipping).
    """

    policy: str
    prompt_ids: tuple[int, ...]
    response_ids: tuple[int, ...]
    advantage: float | tuple[float, ...]
    weight: float = 1.0  # per-sample loss scale (e.g. 1/leaves in the router's tree)
    payload: Any = None  # Reply.payload of a non-token policy
    returns: tuple[float, ...] = ()  # value learners: target per response token
    values: tuple[float, ...] = ()  # value learners: prediction per response token at scoring time
    behavior_logprobs: tuple[float, ...] | None = None  # log-probs of the policy that sampled it (async rollouts)
    version: int | None = None  # the adapter version that sampled it
    # False: advantage 0, left out of the forward and backward passes (it adds nothing to the policy
    # gradient) but counted in the loss's mean (algo.mean_over: batch; masrl.update.update_policy)
    trained: bool = True
