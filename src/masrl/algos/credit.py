"""Credit assignment and grouping on episode trees: pure functions on calls.

Credit turns the rewards on a call tree into a return per call. `tree_q` is
the backward recursion Q(c) = r(c) + V(c), V(c) = mean over c's children that
did not fail of gamma^(turns between them) * Q(child) (0 for a call that ended
its trajectory). On a
tree that branches only at the root (parallel sampling) it is the plain
return-to-go of each trajectory; on a full tree it is the critique-and-routing
controller's recursion (Critique-and-routing (arXiv:2605.08686), appendix E.2).

Grouping decides which calls are compared: `task` compares calls of the same
task, role and turn (GRPO over G parallel episodes); `siblings` compares the
candidates drawn at the same tree node.

Turn-based cooperating agents (AT-GRPO (arXiv:2510.11062), sec. 4, Algorithm 1)
use `immediate` credit, R(c) = c.reward: each of the K candidates drawn at an
(environment, agent, turn) is scored by its own mixed team + local reward
(eq. 4), because under greedy continuation only the best one has a future
and a return-to-go would compare a trajectory with single actions. Their
grouping is `agent_turn`: the key hash(e, i, t) of Algorithm 1, line 11
(episode, agent, turn). Under the per-turn greedy tree (rollout.rules.PerTurnGreedy)
one node per (agent, turn) branches, so these groups are exactly the sibling
candidates drawn from one observation.

The multi-agent search pipeline (MHGPO (arXiv:2506.02718), "Method: MHGPO")
uses `descendant_mean` credit: a call's shared reward is the mean final
reward (`rewards["final"]`, the answer's F1) over the final calls that
descend from it (eq. 4 with Aggr = mean, applied over whole sub-trees), plus
its own agent-specific reward (`reward` minus any final part). Its groupings
are `task` (Fork-on-first: each agent's G outputs for one question form one
group, heterogeneous below the fork), `independent` (Independent Sampling:
only the fork agent's G candidates of each fork_on tree form a group), and `round_robin`: like `task`,
then the calls left alone in their group (before a round-robin fork) are
shuffled across the batch and regrouped, per agent, into groups of G
(Algorithm 5); the remainder stay alone (advantage 0: not trained on).

A sample weight scales each sample's loss: `none` (1), `inverse_leaves` (1 over its tree's
leaves) or `per_agent` (MHGPO eq. 6, which needs the whole batch: `per_agent_weights`).
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter, defaultdict
from collections.abc import Hashable, Sequence

from masrl.types import Call, Episode


def tree_q(episode: Episode, gamma: float = 1.0) -> dict[str, float]:
    failed = episode.failed_ids()
    q: dict[str, float] = {}
    for call in reversed(episode.calls):  # children are listed after parents
        if call.id in failed:
            continue
        # Discount per turn, not per call: a frozen agent's answer at the same
        # turn as the action that asked for it is part of that action's outcome.
        kids = [gamma ** (k.turn - call.turn) * q[k.id] for k in episode.children(call.id) if k.id in q]
        value = sum(kids) / len(kids) if kids and not call.done else 0.0
        q[call.id] = call.reward + value
    return q


def group_by_task(calls: Sequence[tuple[int, Call]]) -> list[Hashable]:
    """Same task (episode index), role and turn: GRPO over G parallel episodes."""
    return [(i, c.role, c.turn) for i, c in calls]


def immediate(episode: Episode, gamma: float = 1.0) -> dict[str, float]:
    """R(c) = c.reward: each candidate's own reward, no return-to-go (AT-GRPO, Algorithm 1, line 10).
    `gamma` is unused."""
    failed = episode.failed_ids()
    return {c.id: c.reward for c in episode.calls if c.id not in failed}


def group_by_agent_turn(calls: Sequence[tuple[int, Call]]) -> list[Hashable]:
    """Same environment instance (episode), agent and turn: AT-GRPO's key hash(e, i, t)."""
    return [(i, c.agent, c.turn) for i, c in calls]


def group_by_run(calls: Sequence[tuple[int, Call]]) -> list[Hashable]:
    """Every call of a task's runs in one group: with `tree_q` credit and a reward only at a run's
    end, each call's return is its run's reward, so every call of a run gets the run's one advantage
    (what Agent Lightning and ART give every call of a trajectory). The group statistics are over
    calls, so a run counts once per trainable call it made."""
    return [(i,) for i, _ in calls]


def group_by_siblings(calls: Sequence[tuple[int, Call]]) -> list[Hashable]:
    """The candidates drawn at the same tree node."""
    return [(i, c.parent) for i, c in calls]


FINAL = "final"  # the reward component a system sets on a final output; propagated backward


def descendant_mean(episode: Episode, gamma: float = 1.0) -> dict[str, float]:
    """R(c) = mean of rewards["final"] over the non-failed leaves at or below c
    + c's agent-specific reward (c.reward - c.rewards.get("final", 0)).

    MHGPO's backward propagation (eq. 4) with simple averaging; every final
    output below c counts once, so a call whose children lead to different
    numbers of finals weights each final, not each child, equally. `gamma`
    is unused: the pipeline's reward is undiscounted."""
    failed = episode.failed_ids()
    sums: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    out: dict[str, float] = {}
    for call in reversed(episode.calls):  # children before parents
        if call.id in failed:
            continue
        if counts[call.id] == 0:  # a leaf (or a call whose descendants all failed: then it is in `failed`)
            sums[call.id], counts[call.id] = call.rewards.get(FINAL, 0.0), 1
        own = call.reward - call.rewards.get(FINAL, 0.0)
        out[call.id] = sums[call.id] / counts[call.id] + own
        if call.parent is not None:
            sums[call.parent] += sums[call.id]
            counts[call.parent] += counts[call.id]
    return out


def regroup_singletons(
    keys: Sequence[Hashable], partition: Sequence[Hashable], size: int, rng: random.Random
) -> tuple[list[Hashable], list[int]]:
    """Algorithm 5's regrouping. Samples whose key occurs once are shuffled within
    their `partition` value and cut into groups of `size`, each with a new key
    ("regrouped", partition, n); the remainder keep their singleton keys.
    Returns the new keys and the indices of the remainder (dropped from training)."""
    if size < 2:
        return list(keys), []
    counts = Counter(keys)
    pools: dict[Hashable, list[int]] = defaultdict(list)
    for i, k in enumerate(keys):
        if counts[k] == 1:
            pools[partition[i]].append(i)
    out, left = list(keys), []
    for part, members in pools.items():
        rng.shuffle(members)
        full = len(members) - len(members) % size
        for j in range(full):
            out[members[j]] = ("regrouped", part, j // size)
        left.extend(members[full:])
    return out, sorted(left)


def group_round_robin(calls: Sequence[tuple[int, Call]]) -> list[Hashable]:
    """`task` groups, then singletons regrouped per agent (role) into groups of G, where
    G is the largest group of the batch (the fork group). The shuffle is seeded by
    the batch's prompts, so the same batch regroups the same way."""
    keys, _ = round_robin_groups(calls)
    return keys


def round_robin_groups(calls: Sequence[tuple[int, Call]]) -> tuple[list[Hashable], list[int]]:
    keys: list[Hashable] = [(i, c.role) for i, c in calls]
    size = max(Counter(keys).values(), default=1)
    digest = hashlib.sha256()
    for _, c in calls:
        digest.update((c.messages[-1].content if c.messages else "").encode("utf-8", "replace"))
    rng = random.Random(int.from_bytes(digest.digest()[:8], "big"))
    return regroup_singletons(keys, [c.role for _, c in calls], size, rng)


def group_independent(calls: Sequence[tuple[int, Call]]) -> list[Hashable]:
    """Independent Sampling (Algorithm 4): the G candidates drawn at each fork point form one
    homogeneous group; every other call is alone (advantage 0: not trained on).

    An IS episode is a forest of fork_on trees that all start at the root, so roots of
    different trees share parent None. In a fork_on tree branching happens once, at the
    fork, so a fork candidate is a call with no branching at or below it; a call with a
    branch below it is a prefix before a later fork and stays alone."""
    kids: dict[tuple[int, str | None], int] = Counter((i, c.parent) for i, c in calls)
    branching = {(i, parent) for (i, parent), n in kids.items() if n > 1 and parent is not None}
    keys: list[Hashable] = []
    for i, c in calls:
        below = any(j == i and (p == c.id or p.startswith(c.id + ".")) for j, p in branching)
        keys.append(("alone", i, c.id) if below else (i, c.parent))
    return keys


def per_agent_weights(roles: Sequence[Hashable]) -> list[float]:
    """Sample weights that turn a per-sample mean (`seq_mean`) into MHGPO's eq. 6
    average: 1/n sum_k 1/G_k sum_i (n agents, G_k samples of agent k). With N
    samples, w_i = N / (n * G_k(i))."""
    counts = Counter(roles)
    n, total = len(counts), len(roles)
    return [total / (n * counts[r]) for r in roles]


def unweighted(episode: Episode) -> float:
    """Every sample weighs 1."""
    return 1.0


def inverse_leaves(episode: Episode) -> float:
    """1/(leaves of the sample's tree) (critique-routing paper, appendix E.2: each query's gradient is scaled
    by 1/|B_T| so a bushy tree does not outweigh a shallow one)."""
    return 1.0 / max(1, len(episode.leaves()))


CREDITS = {"tree_q": tree_q, "descendant_mean": descendant_mean, "immediate": immediate}
# One signature: the batch's trainable calls as (episode index, call) -> one group key per call.
# Batch-level, so a grouping may also regroup across episodes.
GROUPINGS = {
    "task": group_by_task,
    "siblings": group_by_siblings,
    "independent": group_independent,
    "round_robin": group_round_robin,
    "agent_turn": group_by_agent_turn,
    "run": group_by_run,
}
# One signature: an episode -> the loss scale of each of its samples. per_agent's weights depend on the
# whole batch, so each sample starts at 1 and masrl.scoring applies `per_agent_weights` to the batch.
SAMPLE_WEIGHTS = {"none": unweighted, "inverse_leaves": inverse_leaves, "per_agent": unweighted}


def trainable_calls(episodes: Sequence[Episode]) -> list[tuple[int, Call]]:
    """(episode index, call) for every trainable call on a trajectory that did not fail."""
    out = []
    for i, ep in enumerate(episodes):
        failed = ep.failed_ids()
        out.extend((i, c) for c in ep.calls if c.id not in failed and c.reply is not None and c.reply.trainable)
    return out
