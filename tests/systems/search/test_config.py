"""The search system's `system` section (masrl/systems/search/config.py): the dense retriever needs
MiniLM, BM25 nothing."""

from __future__ import annotations

from masrl.components import MINILM
from masrl.loading import load_config
from masrl.systems.search.config import SearchConfig, search_needs


def test_the_dense_retriever_alone_needs_minilm():
    bm25 = load_config("search-fof", ["model.name=tiny"])
    assert isinstance(bm25.system, SearchConfig) and bm25.system.retriever == "bm25"
    assert search_needs(bm25) == ()
    assert search_needs(load_config("search-fof", ["model.name=tiny", "system.retriever=dense"])) == (MINILM,)
