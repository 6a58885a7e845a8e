"""The multi-agent search system of MHGPO (arXiv:2506.02718, "Multi-Agent Search System").

One shared policy plays three roles in a fixed pipeline:

1. Rewriter: question -> sub-queries, one per line (a numbered list);
2. retrieval: the top k pages of each sub-query, deduplicated in order
   (masrl.retrieval.index.search_many); not an agent call;
3. Reranker: question + candidate pages -> the ids of the useful pages, most
   useful first;
4. Answerer: question + the chosen pages -> a short answer in <answer> tags.

Rewards (paper eq. 4 and appendix B). The answerer's call carries the final
reward `final` = F1 of its answer against gold; `descendant_mean` credit
propagates it back to the reranker and rewriter outputs above it. Each call
also carries its agent-specific penalty (appendix B, after Chen et al. 2025):

- Rewriter: -0.5 when it writes more than `max_subqueries` sub-queries (the
  list is cut) or none at all (the question itself is searched);
- Reranker: -0.5 for a duplicated or out-of-range id, or no id at all (the
  first `max_docs` retrieved pages are used);
- Answerer: -1.0 when the answer is longer than `answer_max_words` words, or
  empty. The paper penalises only length; without the empty case, short
  SmolLM2 runs of RR and IS (rare non-zero F1) learned to avoid the length
  penalty by answering nothing (answers of 0 words, F1 0), the same hole the
  rewriter and reranker penalties above close for their roles.

Parsers never raise: every malformed output still leads to a next step, so
an episode always ends with an answer to grade.

The tree depth of a call is its position among the pipeline's agent calls
(rewriter 0, reranker 1, answerer 2 with all three), which is what the samplers fork on (masrl.rollout.rules: ForkAt,
IndependentSampling, RoundRobin).

`roles` names which of the three are agent calls. A missing rewriter: the
question itself is the one query; a missing reranker: the answerer reads the
first `max_docs` pages in retrieval order. `roles: [answerer]` is the single
searcher, the standard one-call RAG baseline (retrieve with the question,
answer from the pages) that the paper's "Single LLM" rows stand for (MHGPO,
Table 1), with the same retrieval as the team.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from masrl.systems.api import (
    BM25Index, Built, ConfigError, CorpusPage, DenseIndex, Episode, FINAL, Message, Reply, Retriever, SearchTask,
    Step, TaskItem, Transition, extract_short_answer, option_number, qa_metrics, round_robin_groups, search_many,
    trainable_calls,
)
from masrl.systems.search.config import ROLES

POLICY = "shared"

REWRITER_PROMPT = (
    "Split the question into at most {n} short search queries that together find the answer. "
    "Write one query per line, numbered, and nothing else."
)
RERANKER_PROMPT = (
    "Choose the documents that help answer the question. Reply with their numbers only, most useful first, "
    "separated by commas (for example: 2, 0)."
)
ANSWERER_PROMPT = (
    "Answer the question using the documents. Give only the answer (a name, a year or a number) "
    "inside <answer></answer>."
)


# ---------------------------------------------------------------- parsed actions
@dataclass(frozen=True)
class Rewrite:
    queries: tuple[str, ...]
    written: int  # sub-queries the model wrote (before cutting to the maximum)
    penalty: float


@dataclass(frozen=True)
class Rerank:
    ids: tuple[int, ...]  # valid, distinct ids in the model's order (before the max_docs cut)
    duplicates: int
    out_of_range: int
    fallback: bool  # no valid id: the retrieval order was used
    penalty: float


@dataclass(frozen=True)
class Answer:
    text: str
    words: int
    penalty: float


_ITEM_PREFIX = re.compile(r"^\s*(?:[-*\u2022]+|\(?\d+[.):\]]|(?:sub-?)?quer(?:y|ies)\s*\d*\s*[:.-])\s*", re.IGNORECASE)


def parse_subqueries(text: str, question: str, max_queries: int, penalty: float) -> Rewrite:
    """Sub-queries from a numbered/bulleted list, a JSON list of strings, or plain lines.

    Empty items and exact repeats are dropped. None at all: the question is
    searched as is, with the penalty; more than `max_queries`: the first ones
    are kept, with the penalty."""
    items: list[str] = []
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            loaded = json.loads(stripped)
            if isinstance(loaded, list):
                items = [str(x) for x in loaded]
        except (ValueError, RecursionError):  # not JSON; an int past 4,300 digits; nesting past the parser's depth
            pass
    if not items:
        items = [_ITEM_PREFIX.sub("", line) for line in stripped.splitlines()]
    seen: dict[str, None] = {}
    for item in items:
        q = item.strip().strip("\"'`").strip()
        if q and q.lower() not in {s.lower() for s in seen}:
            seen[q] = None
    queries = list(seen)
    if not queries:
        return Rewrite((question,), 0, -penalty)
    too_many = len(queries) > max_queries
    return Rewrite(tuple(queries[:max_queries]), len(queries), -penalty if too_many else 0.0)


# One piece of an id list: a separator, a label word, or an id ("2", "[2]", "Document 2", "#2").
_ID_PIECE = re.compile(
    r"\s*(?:[,;&/]|and\b|(?:documents?|docs?|ids?)\s*[:#]?|#?\[?\s*(\d+)\s*\]?[.:)]?)", re.IGNORECASE
)


def parse_ids(text: str, n_docs: int, max_docs: int, penalty: float) -> Rerank:
    """Document ids in the order written ("2, 0", "[2] [0]", "Document 2 and Document 0").

    Only the leading run of ids counts: a small model often goes on to copy a
    document ("[0] Krunnu: ... released in 2018"), and numbers inside that text
    are not choices. A repeated id or one outside 0..n_docs-1 costs the penalty
    (once) and is skipped; no valid id at all also costs it (unless there was
    nothing to choose from), and the first `max_docs` candidates are used in
    retrieval order."""
    ids: list[int] = []
    dup = bad = 0
    pos = 0
    while (m := _ID_PIECE.match(text, pos)) and m.end() > pos:
        pos = m.end()
        if m.group(1) is None:
            continue
        i = option_number(m.group(1))
        if i is None or i >= n_docs:  # None: longer than any index
            bad += 1
        elif i in ids:
            dup += 1
        else:
            ids.append(i)
    fallback = not ids
    chosen = tuple(range(min(max_docs, n_docs))) if fallback else tuple(ids)
    bad_output = dup > 0 or bad > 0 or (fallback and n_docs > 0)  # with no candidates, silence is right
    return Rerank(chosen, dup, bad, fallback, -penalty if bad_output else 0.0)


def parse_answer(text: str, max_words: int, penalty: float) -> Answer:
    answer = extract_short_answer(text) or ""
    words = len(answer.split())
    return Answer(answer, words, -penalty if words > max_words or words == 0 else 0.0)


# ---------------------------------------------------------------- the system
@dataclass(frozen=True)
class PipelineState:
    task: TaskItem
    stage: int = 0  # index into the pipeline's roles of the agent about to act
    queries: tuple[str, ...] = ()
    candidates: tuple[CorpusPage, ...] = ()
    chosen: tuple[CorpusPage, ...] = ()


@dataclass(frozen=True)
class PipelineSettings:
    top_k: int = 3
    max_subqueries: int = 4
    max_docs: int = 3
    snippet_chars: int = 300
    answer_max_words: int = 10
    rewriter_penalty: float = 0.5
    reranker_penalty: float = 0.5
    answerer_penalty: float = 1.0
    prefill: bool = True


# What `prefill` starts each agent's reply with, as far as its parser needs it (the reranker's "Document ids:"
# label is not part of the ids).
PARSED_PREFILL = {"rewriter": "1.", "reranker": "", "answerer": "<answer>"}


@dataclass(frozen=True)
class SearchPipeline:
    retriever: Retriever
    settings: PipelineSettings = PipelineSettings()
    regroup: bool = False  # round-robin sampling: report the regrouping's leftovers
    roles: tuple[str, ...] = ROLES  # the agent calls, in pipeline order (config: system.roles)

    def start(self, task: TaskItem) -> PipelineState:
        state = PipelineState(task)
        if "rewriter" in self.roles:
            return state
        return self._retrieved(state, (task.question.strip(),))  # no rewriter: the question is the one query

    def _retrieved(self, state: PipelineState, queries: tuple[str, ...]) -> PipelineState:
        """`state` with the pages retrieved for `queries`; with no reranker, the answerer's pages are the first
        `max_docs` of them in retrieval order (what the reranker's own fallback picks)."""
        candidates = tuple(search_many(self.retriever, queries, self.settings.top_k))
        chosen = state.chosen if "reranker" in self.roles else candidates[: self.settings.max_docs]
        return replace(state, queries=queries, candidates=candidates, chosen=chosen)

    # -- prompts
    def next_step(self, state: PipelineState) -> Step:
        role = self.roles[state.stage]
        messages = getattr(self, f"_{role}_messages")(state)
        return Step(agent=role, role=role, turn=state.stage, messages=messages)

    def _prefilled(self, system: str, user: str, prefill: str) -> tuple[Message, ...]:
        messages = (Message("system", system), Message("user", user))
        return messages + ((Message("assistant", prefill),) if self.settings.prefill else ())

    def _docs(self, pages: Sequence[CorpusPage]) -> str:
        n = self.settings.snippet_chars
        return "\n".join(f"[{i}] {p.title}: {_cut(p.text, n)}" for i, p in enumerate(pages))

    def _rewriter_messages(self, state: PipelineState) -> tuple[Message, ...]:
        system = REWRITER_PROMPT.format(n=self.settings.max_subqueries)
        return self._prefilled(system, f"Question: {state.task.question.strip()}", "1.")

    def _reranker_messages(self, state: PipelineState) -> tuple[Message, ...]:
        user = f"Question: {state.task.question.strip()}\n\nDocuments:\n{self._docs(state.candidates)}"
        return self._prefilled(RERANKER_PROMPT, user, "Document ids:")

    def _answerer_messages(self, state: PipelineState) -> tuple[Message, ...]:
        q = state.task.question.strip()
        user = f"Documents:\n{self._docs(state.chosen)}\n\nQuestion: {q}"
        return self._prefilled(ANSWERER_PROMPT, user, "<answer>")

    # -- transitions
    def advance(self, state: PipelineState, step: Step, reply: Reply) -> Transition:
        s = self.settings
        role = self.roles[state.stage]
        text = PARSED_PREFILL[role] + reply.text if s.prefill else reply.text
        if role == "rewriter":
            rw = parse_subqueries(text, state.task.question.strip(), s.max_subqueries, s.rewriter_penalty)
            nxt = self._retrieved(replace(state, stage=state.stage + 1), rw.queries)
            return Transition(nxt, rw, {"penalty": rw.penalty}, rw.penalty)
        if role == "reranker":
            rr = parse_ids(text, len(state.candidates), s.max_docs, s.reranker_penalty)
            chosen = tuple(state.candidates[i] for i in rr.ids[: s.max_docs])
            nxt = replace(state, stage=state.stage + 1, chosen=chosen)
            return Transition(nxt, rr, {"penalty": rr.penalty}, rr.penalty)
        ans = parse_answer(text, s.answer_max_words, s.answerer_penalty)
        m = qa_metrics(ans.text, state.task.answer) if ans.text else {"accuracy": 0.0, "em": 0.0, "f1": 0.0}
        terms = {FINAL: m["f1"], "correct": m["accuracy"], "em": m["em"], "f1": m["f1"], "penalty": ans.penalty}
        return Transition(state, ans, terms, m["f1"] + ans.penalty, done=True)

    # -- metrics
    def observe(self, episodes: Sequence[Episode]) -> dict[str, float]:
        """Per-agent output statistics of this step (paper, figure 8), agent calls per
        question, and for round-robin sampling the singletons left out by regrouping."""
        out = pipeline_metrics(episodes)
        if self.regroup:
            calls = trainable_calls(episodes)
            keys, left = round_robin_groups(calls)
            singles = sum(1 for k in keys if isinstance(k, tuple) and k and k[0] == "regrouped")
            out["rr/regrouped"] = float(singles)
            out["rr/leftover"] = float(len(left))
        return out

    def eval_metrics(self, episodes: Sequence[Episode]) -> dict[str, float]:
        return pipeline_metrics(episodes)

    def eval_item_metrics(self, episode: Episode) -> dict[str, float]:
        """The final answer's F1 and exact match (0 when the pipeline failed before answering): saved per
        item with each evaluation, so F1 gets its interval."""
        final = episode.leaves()[0] if episode.calls else None
        if final is None or final.failed or not isinstance(final.action, Answer):
            return {"f1": 0.0, "em": 0.0}
        return {"f1": float(final.rewards.get("f1", 0.0)), "em": float(final.rewards.get("em", 0.0))}


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[:n].rsplit(" ", 1)[0] + " ..."


def pipeline_metrics(episodes: Sequence[Episode]) -> dict[str, float]:
    """Means over calls of each agent: sub-queries written, pages chosen, answer words,
    penalty rate; over final answers: EM and F1; and agent calls per question."""
    stats: dict[str, list[float]] = defaultdict(list)
    for ep in episodes:
        stats["calls_per_question"].append(float(len(ep.calls)))
        for c in ep.calls:
            if c.failed:
                continue
            a = c.action
            stats[f"{c.role}/penalized"].append(float(c.rewards.get("penalty", 0.0) < 0))
            if isinstance(a, Rewrite):
                stats["rewriter/subqueries"].append(float(a.written))
            elif isinstance(a, Rerank):
                stats["reranker/selected"].append(float(len(a.ids)))
            elif isinstance(a, Answer):
                stats["answerer/words"].append(float(a.words))
                for k in ("em", "f1"):  # accuracy is the task's `correct` (evaluate, reward/correct)
                    stats[k].append(c.rewards.get(k, 0.0))
    return {k: sum(v) / len(v) for k, v in stats.items() if v}


# ---------------------------------------------------------------- builder
def build_retriever(task: SearchTask, config) -> Retriever:
    sc = config.system
    cache = Path(sc.cache_dir).expanduser() if sc.cache_dir else Path.home() / ".cache" / "masrl" / "retrieval"
    if sc.retriever == "dense":
        return DenseIndex(task.corpus.pages, cache)
    return BM25Index(task.corpus.pages, cache)


def build_search(config, task) -> Built:
    """Rewriter, reranker and answerer (those of `system.roles`) all sample from one shared policy (paper:
    parameter sharing)."""
    if not isinstance(task, SearchTask):
        raise ConfigError(f"system.kind 'search' needs a SearchTask (task.kind: search), got {task.name!r}")
    sc = config.system
    settings = PipelineSettings(
        top_k=sc.top_k, max_subqueries=sc.max_subqueries, max_docs=sc.max_docs, snippet_chars=sc.snippet_chars,
        answer_max_words=sc.answer_max_words, rewriter_penalty=sc.rewriter_penalty,
        reranker_penalty=sc.reranker_penalty, answerer_penalty=sc.answerer_penalty, prefill=sc.prefill,
    )  # fmt: skip
    regroup = config.algo.grouping == "round_robin"
    system = SearchPipeline(build_retriever(task, config), settings, regroup=regroup, roles=tuple(sc.roles))
    return Built(system, {role: POLICY for role in system.roles}, stop=("</answer>",))
