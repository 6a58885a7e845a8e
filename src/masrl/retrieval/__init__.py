"""Retrieval environment: a synthetic multi-hop encyclopedia, user-corpus loaders, and search indexes."""

from masrl.retrieval.corpus import (
    Corpus,
    Entity,
    Page,
    SyntheticConfig,
    load_pages_jsonl,
    load_questions_jsonl,
    write_jsonl,
)
from masrl.retrieval.index import BM25Index, DenseIndex, minilm_encoder, search_many
from masrl.retrieval.solver import read_fact, solve_from_pages
from masrl.retrieval.synthetic import generate_corpus

__all__ = [
    "BM25Index",
    "Corpus",
    "DenseIndex",
    "Entity",
    "Page",
    "SyntheticConfig",
    "generate_corpus",
    "load_pages_jsonl",
    "load_questions_jsonl",
    "minilm_encoder",
    "read_fact",
    "search_many",
    "solve_from_pages",
    "write_jsonl",
]
