"""How the lean engine's loop runs a model: a prefill, then one step per token (masrl.generation.lean).

Three ways, one interface (`prefill`, `step`, `keep`, `drops_rows`):
`HFForward` runs any architecture through its own forward and HF's cache;
`PlainForward` runs a Llama-family decoder (masrl.generation.llama) over a
KV cache allocated once at its final length, dropping finished rows;
`GraphForward` runs the same decoder with every shape fixed for the call and,
on a GPU, replays each step as one CUDA graph.
"""

from __future__ import annotations

import contextlib

import torch

from masrl.generation.llama import KVCache, LlamaDecoder
from masrl.hf_compat import cache_kwargs, output_cache


class HFForward:
    """Prefill and steps through the model's own forward and HF's cache (any architecture)."""

    drops_rows = True  # `keep` shrinks the batch to the rows still running

    def __init__(self, model):
        self.model = model
        self.cache = None
        self.attn: torch.Tensor | None = None  # [B, P + t]

    def prefill(self, ids: torch.Tensor, mask: torch.Tensor, owner: torch.Tensor, max_new: int) -> torch.Tensor:
        pos = (mask.cumsum(-1) - 1).clamp(min=0)  # [U, P]: positions as generate() numbers left-padded prompts
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, logits_to_keep=1)
        self.cache = output_cache(out)
        self.cache.reorder_cache(owner)  # [U, ...] -> [B, ...]
        self.attn = mask[owner]
        return out.logits[owner, -1]  # [B, V]

    def step(self, token: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        self.attn = torch.cat([self.attn, self.attn.new_ones(len(token), 1)], 1)
        out = self.model(input_ids=token.unsqueeze(1), attention_mask=self.attn, position_ids=pos.unsqueeze(1),
                         **cache_kwargs(self.cache), use_cache=True)  # fmt: skip
        return out.logits[:, -1]

    def keep(self, rows: torch.Tensor) -> None:
        self.cache.batch_select_indices(rows)
        self.attn = self.attn[rows]


class PlainForward:
    """Prefill and steps through `LlamaDecoder` and a KV cache allocated once at its final length."""

    drops_rows = True

    def __init__(self, decoder: LlamaDecoder):
        self.decoder = decoder
        self.cache: KVCache | None = None

    def prefill(self, ids: torch.Tensor, mask: torch.Tensor, owner: torch.Tensor, max_new: int) -> torch.Tensor:
        # The last sampled token is never fed back: the cache needs P + max_new - 1 positions.
        self.cache = KVCache(self.decoder, len(owner), ids.shape[1] + max(max_new - 1, 0), self.decoder.embed)
        return self.decoder.prefill(ids, mask, self.cache, owner)

    def step(self, token: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        return self.decoder.step(token, pos, self.cache)

    def keep(self, rows: torch.Tensor) -> None:
        self.cache.keep(rows)


class GraphForward:
    """`PlainForward`'s steps with every shape fixed for the call (`LlamaDecoder.step_static`), replayed
    as one CUDA graph per call on a GPU (`graphs=True`).

    On a GPU a decode step of a small model is a few hundred short kernels, each launched by Python
    (HF `generate` spent about 50 ms a step on an H100 for a 0.5B model, docs/gpu.md). A CUDA graph
    records the step's kernels once and launches them as one. It needs fixed shapes and addresses:
    the cache is allocated once at its final length, no row leaves the batch (finished rows keep
    decoding and are ignored), and the token, position and step index are copied into the graph's
    own input tensors before each replay. Capturing costs a warm-up step and a recorded one per call
    (prompt length and rows fix the shapes). Without `graphs` (CPU, tests) the same fixed-shape step
    runs eagerly."""

    drops_rows = False

    def __init__(self, decoder: LlamaDecoder, graphs: bool):
        self.decoder, self.graphs = decoder, graphs
        self.cache: KVCache | None = None
        self.graph = None

    def prefill(self, ids: torch.Tensor, mask: torch.Tensor, owner: torch.Tensor, max_new: int) -> torch.Tensor:
        self.cache = KVCache(self.decoder, len(owner), ids.shape[1] + max(max_new - 1, 0), self.decoder.embed, static=True)
        logits = self.decoder.prefill(ids, mask, self.cache, owner)
        self.t = torch.zeros(1, dtype=torch.long, device=ids.device)
        return logits

    def step(self, token: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        self.t.fill_(self.cache.generated)
        self.cache.generated += 1
        if not self.graphs:
            return self.decoder.step_static(token, pos, self.t, self.cache)
        if self.graph is None:
            self._capture(token, pos)
        self.token.copy_(token)
        self.pos.copy_(pos)
        self.graph.replay()
        return self.logits

    def _capture(self, token: torch.Tensor, pos: torch.Tensor) -> None:
        """Record one step into a CUDA graph, after a warm-up on a side stream (cuBLAS sets up its
        workspace on first use, which a capture may not do). The warm-up writes the step's keys at
        index t, which the first replay writes again."""
        self.token, self.pos = token.clone(), pos.clone()
        run = lambda: self.decoder.step_static(self.token, self.pos, self.t, self.cache)  # noqa: E731
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), _no_autocast_cache():
            run()
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph), _no_autocast_cache():
            self.logits = run()

    def keep(self, rows: torch.Tensor) -> None:
        raise RuntimeError("GraphForward keeps every row")


def _no_autocast_cache():
    """The caller's CUDA autocast with its cast cache off: a graph must not capture a cast that an
    eager call cached (torch's rule for autocast inside `torch.cuda.graph`)."""
    if not torch.is_autocast_enabled("cuda"):
        return contextlib.nullcontext()
    return torch.autocast("cuda", dtype=torch.get_autocast_dtype("cuda"), cache_enabled=False)
