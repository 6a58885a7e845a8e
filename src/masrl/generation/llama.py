"""A plain forward of a Llama-family decoder over a preallocated KV cache: the lean engine's hot loop.

HF's forward per generated token builds a 4-D attention mask, calls ~20
modules per layer, and grows its cache with `torch.cat`, copying every
layer's keys and values each step (for 32 rows of 192 tokens of SmolLM2,
about 240 MB a step). This one keeps each prompt's keys and values once for
all the rows that share it (a GRPO group) and each row's generated ones in a
buffer of the final length written in place, runs q/k/v and gate/up as one
matmul each (their weights stored side by side, `fused_weights`), rotates q
and k together, and attends a step's one query per head over the shared
prompt with one matrix product for all of a prompt's rows (shared-prefix
attention, `LlamaDecoder._attend`), the G query heads that share a key/value
head laid out as G query positions (grouped-query attention without
repeating keys).

It computes what `LlamaForCausalLM` computes, op for op in the same order
(RMSNorm in float32, rotary embedding by the model's own `rotary_emb`, softmax
attention, SiLU-gated MLP), so tokens and log-probs agree with HF to float
rounding (tests/generation/test_llama.py, test_lean.py). Models of another shape (biases in the MLP, a
sliding window, another activation) are not `supported` and use HF's forward.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

ARCHITECTURES = ("llama", "qwen2", "mistral")


def supported(model) -> bool:
    """Whether `model` (a *ForCausalLM) is the decoder this module runs."""
    cfg = model.config
    kind = getattr(cfg, "model_type", None)
    if kind not in ARCHITECTURES or getattr(cfg, "hidden_act", None) != "silu" or getattr(cfg, "mlp_bias", False):
        return False
    if kind == "qwen2":  # a sliding window changes which keys a query sees
        return not getattr(cfg, "use_sliding_window", False)
    return getattr(cfg, "sliding_window", None) is None


class Matmul:
    """x W^T + b for a weight fixed until the next re-merge.

    On CPU the weight is packed once into oneDNN's blocked layout
    (`torch.ops.mkldnn`, what torch.compile's CPU backend uses for frozen
    weights): at a decode step's 32 rows it ran SmolLM2's 49k-row head 2.3x and
    a layer's gate/up 1.3x faster than `F.linear` (MKL) on this machine's AMD
    EPYC (AVX2), the same product to float rounding (about 4e-6 relative).
    Elsewhere, or without the op, it is `F.linear` on the live tensor."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None):
        self.weight, self.bias = weight, bias
        self.packed = _pack(weight)
        self.version = (weight._version, None if bias is None else bias._version)

    def current(self, weight: torch.Tensor, bias: torch.Tensor | None) -> bool:
        """Whether this is the product by these tensors with the values they hold now (none written since)."""
        same = weight is self.weight and bias is self.bias
        return same and self.version == (weight._version, None if bias is None else bias._version)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed is not None:
            return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")
        return F.linear(x, self.weight, self.bias)


class Bf16Matmul(Matmul):
    """x W^T + b with W and x rounded to bfloat16, the products accumulated in float32 by oneDNN's
    AVX-512 BF16 kernels (`rollout.precision: bf16`), the result rounded to bfloat16 and returned in x's
    dtype.

    bfloat16 keeps float32's range with an 8-bit significand, so each product is off by a few parts
    in a thousand. The sampled distribution is then near the trainer's but not equal to it (on
    bench/generate_vs_hf.py's batch the tokens' log-probs differ by 0.04 on average, at most 0.22), and
    the update corrects each token by the truncated importance weight pi_trainer / pi_bf16
    (`masrl.algos.losses.behavior_weights`). In a decode step of 32 rows SmolLM2's matmuls took 32 ms
    against 52 ms in float32 on this machine's 2 cores (bench/generate_profile.py; the float32 ones run
    at the ~166 GFLOP/s limit there). W8A8 int8 was as fast but 0.33 off on average (bench/README.md)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None):
        self.weight, self.bias = weight, bias
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach().to(torch.bfloat16), 32)
        self.bias16 = None if bias is None else bias.detach().to(torch.bfloat16)
        self.version = (weight._version, None if bias is None else bias._version)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.ops.mkldnn._linear_pointwise(x.to(torch.bfloat16), self.packed, self.bias16, "none", [], "")
        return out.to(x.dtype)


PRECISIONS = {"float32": Matmul, "bf16": Bf16Matmul}  # rollout.precision -> the matmuls it samples with


def bf16_supported() -> bool:
    """Whether this CPU runs oneDNN's bfloat16 matmuls natively (AVX-512 BF16 or AMX); without them
    oneDNN emulates bfloat16, slower than float32."""
    return torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()


def _pack(weight: torch.Tensor) -> torch.Tensor | None:
    if weight.device.type != "cpu" or weight.dtype != torch.float32 or not torch.backends.mkldnn.is_available():
        return None
    try:
        return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), 32)  # 32: the rows of a usual step
    except (AttributeError, RuntimeError):  # a torch without the op (or oneDNN refusing it): plain F.linear
        return None


@dataclass(frozen=True)
class LayerWeights:
    """One decoder layer; `qkv` multiplies by [q; k; v] and `gate_up` by [gate; up], row-stacked."""

    norm1: torch.Tensor  # [H]
    qkv: Matmul  # H -> (Hq + 2 Hkv) D, with Qwen2's biases
    o: Matmul  # Hq D -> H
    norm2: torch.Tensor  # [H]
    gate_up: Matmul  # H -> 2 I
    down: Matmul  # I -> H


def fused_weights(model) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer, new [q; k; v] and [gate; up] weight buffers holding the model's current values."""
    out = []
    for layer in model.model.layers:
        a, m = layer.self_attn, layer.mlp
        qkv = torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]).detach()
        gate_up = torch.cat([m.gate_proj.weight, m.up_proj.weight]).detach()
        out.append((qkv, gate_up))
    return out


def tie_to_fused(model, fused: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    """Make the model's q/k/v and gate/up weights views into `fused`, so writing either writes both."""
    for layer, (qkv, gate_up) in zip(model.model.layers, fused):
        a, m = layer.self_attn, layer.mlp
        sizes = [a.q_proj.weight.shape[0], a.k_proj.weight.shape[0], a.v_proj.weight.shape[0]]
        for proj, view in zip((a.q_proj, a.k_proj, a.v_proj), qkv.split(sizes)):
            proj.weight = torch.nn.Parameter(view, requires_grad=False)
        inter = m.gate_proj.weight.shape[0]
        for proj, view in zip((m.gate_proj, m.up_proj), gate_up.split(inter)):
            proj.weight = torch.nn.Parameter(view, requires_grad=False)


def _bias(attn) -> torch.Tensor | None:
    if attn.q_proj.bias is None:
        return None
    return torch.cat([attn.q_proj.bias, attn.k_proj.bias, attn.v_proj.bias]).detach()


class LlamaDecoder:
    """Prefill and one-token steps of `model` with fused weights `fused` (see `tie_to_fused`).

    The decoder holds the weights' matmuls (packed on CPU; `refresh` after the
    weights change); the cache lives in the caller's `KVCache`."""

    def __init__(self, model, fused: list[tuple[torch.Tensor, torch.Tensor]], precision: str = "float32"):
        cfg = model.config
        self.precision = precision  # the matmuls' (PRECISIONS): float32 packed for oneDNN, or bf16
        self.heads = cfg.num_attention_heads
        self.kv_heads = cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.eps = cfg.rms_norm_eps
        self.scale = self.head_dim**-0.5
        self.embed = model.model.embed_tokens.weight
        self.rotary = model.model.rotary_emb
        self.norm = model.model.norm.weight
        self._model, self._fused = model, fused
        self._qkv_bias = [_bias(layer.self_attn) for layer in model.model.layers]  # LoRA leaves biases alone
        self.refresh()

    def refresh(self, precision: str | None = None) -> None:
        """Take the weights' current values (after a re-merge): the matmuls of weights written since are rebuilt
        (packing costs a copy; the head and unadapted weights keep theirs). With `precision`, every matmul is
        rebuilt in it (PRECISIONS): one precision is held at a time, so memory stays that of one packed copy."""
        if precision is not None:
            self.precision = precision
        product = PRECISIONS[self.precision]
        # Each stale packed copy is let go before its replacement is packed, so a re-merge never holds two
        # copies of the model's projections (about 0.5 GB for SmolLM2-135M in float32) at once.
        old = getattr(self, "_matmuls", {})
        self._matmuls: dict[str, Matmul] = {}
        self.head, self.layers = None, []

        def matmul(key: str, weight: torch.Tensor, bias: torch.Tensor | None = None) -> Matmul:
            m = old.pop(key, None)
            if m is not None and type(m) is product and m.current(weight, bias):
                return m
            del m  # the last reference to the stale copy
            return product(weight, bias)

        self.head = self._matmuls["head"] = matmul("head", self._model.lm_head.weight)
        for i, (layer, (qkv, gate_up)) in enumerate(zip(self._model.model.layers, self._fused)):
            attn = layer.self_attn
            mats = {
                f"{i}.qkv": matmul(f"{i}.qkv", qkv, self._qkv_bias[i]),
                f"{i}.o": matmul(f"{i}.o", attn.o_proj.weight, attn.o_proj.bias),
                f"{i}.gate_up": matmul(f"{i}.gate_up", gate_up),
                f"{i}.down": matmul(f"{i}.down", layer.mlp.down_proj.weight),
            }
            self._matmuls.update(mats)
            self.layers.append(LayerWeights(layer.input_layernorm.weight, *list(mats.values())[:2],
                                            layer.post_attention_layernorm.weight, *list(mats.values())[2:]))  # fmt: skip

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """LlamaRMSNorm: float32 statistics, weight applied in the input's dtype."""
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return weight * h.to(x.dtype)

    def _qkv(self, w: LayerWeights, x: torch.Tensor, rope: "Rope"):
        """[B, T, H] -> rotated q [B, Hq, T, D], rotated k and v [B, Hkv, T, D].

        q and k are rotated together, as one [B, T, Hq + Hkv, D] view of the fused product: one
        rotation per layer instead of two, three elementwise ops instead of seven each."""
        b, t, _ = x.shape
        qkv = w.qkv(self.rms_norm(x, w.norm1))
        d, hq, hkv = self.head_dim, self.heads, self.kv_heads
        qk = rope.apply(qkv[..., : (hq + hkv) * d].view(b, t, hq + hkv, d))  # [B, T, Hq + Hkv, D]
        q = qk[:, :, :hq].transpose(1, 2)
        k = qk[:, :, hq:].transpose(1, 2)
        v = qkv[..., (hq + hkv) * d :].view(b, t, hkv, d).transpose(1, 2)
        return q, k, v

    def _mlp(self, w: LayerWeights, x: torch.Tensor) -> torch.Tensor:
        gate, up = w.gate_up(self.rms_norm(x, w.norm2)).chunk(2, -1)
        return x + w.down(F.silu(gate) * up)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """[..., H] last hidden states -> [..., V] logits."""
        return self.head(self.rms_norm(x, self.norm))

    def prefill(self, ids: torch.Tensor, mask: torch.Tensor, cache: "KVCache", owner: torch.Tensor) -> torch.Tensor:
        """Run U left-padded prompts ([U, P] ids and mask) once and store their keys and values, once
        per prompt, for their rows (`owner`: row -> prompt, [B]); the [B, V] logits of each row's next token.

        The last layer runs its attention output, MLP and norm for the last position only: the
        other positions' keys and values are all the cache needs from it."""
        u, p = ids.shape
        pos = (mask.cumsum(-1) - 1).clamp(min=0)  # [U, P]: as generate() numbers left-padded prompts
        x = F.embedding(ids, self.embed)  # [U, P, H]
        rope = Rope(*self.rotary(x, pos))
        # Causal and not padding; every position also sees itself, so a padding row's softmax has a
        # term (its output is never read: no real position attends to padding).
        causal = torch.ones(p, p, dtype=torch.bool, device=ids.device).tril()
        allowed = (causal & mask.bool()[:, None, :]) | torch.eye(p, dtype=torch.bool, device=ids.device)
        allowed = allowed.unsqueeze(1)  # [U, 1, P, P]
        group = self.heads // self.kv_heads
        last = len(self.layers) - 1
        cache.start(mask, owner)
        for i, w in enumerate(self.layers):
            q, k, v = self._qkv(w, x, rope)
            cache.prefix_keys[i].copy_(k)
            cache.prefix_values[i].copy_(v)
            if group > 1:
                k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
            if i == last:  # only the last position's output is read from here on
                q, allowed, x = q[:, :, -1:], allowed[:, :, -1:], x[:, -1:]
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=self.scale)  # [U, Hq, P, D]
            x = x + w.o(a.transpose(1, 2).reshape(u, x.shape[1], -1))
            x = self._mlp(w, x)
        return self.logits(x[owner, -1])

    def step(self, token: torch.Tensor, pos: torch.Tensor, cache: "KVCache") -> torch.Tensor:
        """One new token per row ([B] ids at [B] positions) appended to the cache; [B, V] next logits."""
        b = token.shape[0]
        t = cache.generated
        x = F.embedding(token.unsqueeze(1), self.embed)  # [B, 1, H]
        rope = Rope(*self.rotary(x, pos.unsqueeze(1)))
        group = self.heads // self.kv_heads
        for i, w in enumerate(self.layers):
            q, k, v = self._qkv(w, x, rope)  # q [B, Hq, 1, D]
            cache.keys[i][:, :, t : t + 1] = k
            cache.values[i][:, :, t : t + 1] = v
            # The G query heads of a key/value head as G query positions: [B, Hkv, G, D].
            a = self._attend(q.reshape(b, self.kv_heads, group, self.head_dim), cache, i)
            x = x + w.o(a.reshape(b, 1, -1))
            x = self._mlp(w, x)
        cache.generated = t + 1
        return self.logits(x[:, -1])

    def step_static(self, token: torch.Tensor, pos: torch.Tensor, t: torch.Tensor, cache: "KVCache") -> torch.Tensor:
        """`step` with every shape fixed for the whole call, as a CUDA graph needs (`decode.GraphForward`):
        the step index `t` is a [1] tensor, this step's keys are written at it with `index_copy_`, and
        attention reads the whole generated buffer with the positions after `t` masked to -inf (the
        buffer starts at zero, so a masked key adds exactly 0). No row leaves the batch: the caller
        keeps finished rows decoding and ignores what they sample. Same values as `step`, op for op,
        but for the masked sum."""
        b = token.shape[0]
        x = F.embedding(token.unsqueeze(1), self.embed)  # [B, 1, H]
        rope = Rope(*self.rotary(x, pos.unsqueeze(1)))
        group = self.heads // self.kv_heads
        filled = torch.arange(cache.keys[0].shape[2], device=t.device) <= t  # [T_new]: written so far, this step too
        bias = torch.zeros(filled.shape, dtype=x.dtype, device=x.device).masked_fill_(~filled, float("-inf"))
        for i, w in enumerate(self.layers):
            q, k, v = self._qkv(w, x, rope)
            cache.keys[i].index_copy_(2, t, k)
            cache.values[i].index_copy_(2, t, v)
            a = self._attend(q.reshape(b, self.kv_heads, group, self.head_dim), cache, i, bias)
            x = x + w.o(a.reshape(b, 1, -1))
            x = self._mlp(w, x)
        return self.logits(x[:, -1])

    def _attend(self, q: torch.Tensor, cache: "KVCache", i: int, bias: torch.Tensor | None = None) -> torch.Tensor:
        """Layer i's attention of one query per row and head ([B, Hkv, G, D]) over its prompt and
        what it generated so far: [B, Hkv, G, D]. Without `bias` it reads the generated buffer's
        filled positions; with it ([T_new], -inf where not yet written: `step_static`), all of them.

        Shared-prefix attention (as Hydragen, Juravsky et al. 2024, sec. 3): the rows of a prompt
        (a GRPO group) read its keys and values once, as one matrix product of all their queries
        (S rows x G heads of a key/value head) by the prompt's keys, instead of once per row; their
        generated keys are each row's own. One softmax runs over both parts' scores side by side,
        so the result is the softmax attention over the row's whole sequence."""
        u, s, p = cache.prompts, cache.groups, cache.prompt_len
        b, h, g, d = q.shape
        slots = cache.slots  # row -> its place in the [U, S] grid; None: the rows are the grid
        grid = q if slots is None else q.new_zeros(u * s, h, g, d).index_copy_(0, slots, q)
        grid = grid.view(u, s, h, g, d).transpose(1, 2).reshape(u * h, s * g, d)
        keys = cache.prefix_keys[i].view(u * h, p, d).transpose(1, 2)
        scores = torch.baddbmm(cache.prefix_bias, grid, keys, alpha=self.scale)  # [U Hkv, S G, P]
        scores = scores.view(u, h, s, g, p).transpose(1, 2).reshape(u * s, h, g, p)
        if slots is not None:
            scores = scores.index_select(0, slots)  # [B, Hkv, G, P]
        n = cache.generated + 1 if bias is None else cache.keys[i].shape[2]  # this step's key is written
        own = torch.matmul(q, cache.keys[i][:, :, :n].transpose(-1, -2)).mul_(self.scale)  # [B, Hkv, G, n]
        if bias is not None:
            own = own + bias
        probs = torch.cat([scores, own], -1).softmax(-1)
        prompt = probs[..., :p]
        if slots is not None:
            prompt = prompt.new_zeros(u * s, h, g, p).index_copy_(0, slots, prompt)
        prompt = prompt.reshape(u, s, h, g, p).transpose(1, 2).reshape(u * h, s * g, p)
        out = torch.bmm(prompt, cache.prefix_values[i].view(u * h, p, d))  # [U Hkv, S G, D]
        out = out.view(u, h, s, g, d).transpose(1, 2).reshape(u * s, h, g, d)
        if slots is not None:
            out = out.index_select(0, slots)
        return torch.matmul(probs[..., p:], cache.values[i][:, :, :n]).add_(out)


class Rope:
    """The rotary embedding (Su et al. 2021, eq. 34) of one forward's positions, as HF applies it:
    x cos + rotate_half(x) sin, with rotate_half(x) = [-x2, x1] for the halves x1, x2 of each head.

    rotate_half(x) sin = [x2, x1] * [-sin1, sin2]: the halves swapped (one flip) times a sine with
    its first half negated, built once per forward instead of a negation and a concatenation per
    tensor and layer."""

    def __init__(self, cos: torch.Tensor, sin: torch.Tensor):  # [B, T, D] each, from the model's rotary_emb
        half = sin.shape[-1] // 2
        self.cos = cos.unsqueeze(2)  # [B, T, 1, D]: broadcast over heads
        self.sin = torch.cat((-sin[..., :half], sin[..., half:]), -1).unsqueeze(2)

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        """[B, T, H, D] -> the same rotated."""
        b, t, h, d = x.shape
        swapped = x.view(b, t, h, 2, d // 2).flip(-2).view(b, t, h, d)
        return torch.addcmul(x * self.cos, swapped, self.sin)


class KVCache:
    """Each layer's keys and values: a prompt's once for all its rows, [U, Hkv, P, D], and each row's
    generated ones, [B, Hkv, T_new, D], allocated at the final length and written in place.

    `generated` positions of the second are filled. `prefix_bias` is what attention adds to the
    prompt's scores: -inf at its left padding, 0 elsewhere. Rows sit in a [U, S] grid (prompt,
    the row's rank among its prompt's rows; S the largest group): `slots` [B] places each row in
    it, None when the rows fill it in order (a GRPO batch as it is laid out, until a row ends)."""

    def __init__(self, decoder: LlamaDecoder, rows: int, max_len: int, like: torch.Tensor, static: bool = False):
        self._decoder, self._rows, self._max_len, self._like = decoder, rows, max_len, like
        self.static = static  # for `step_static`: the generated buffers start at zero and no row leaves
        self.generated = 0

    def start(self, mask: torch.Tensor, owner: torch.Tensor) -> None:
        """Allocate for U prompts ([U, P] `mask`) and their rows (`owner`: row -> prompt, [B])."""
        dec, like = self._decoder, self._like
        (u, p), h, d = mask.shape, dec.kv_heads, dec.head_dim
        self.prompts, self.prompt_len = u, p
        self.prefix_keys = [like.new_empty((u, h, p, d)) for _ in dec.layers]
        self.prefix_values = [like.new_empty((u, h, p, d)) for _ in dec.layers]
        bias = like.new_zeros((u, p)).masked_fill_(~mask.bool(), float("-inf"))
        self.prefix_bias = bias[:, None, None, :].expand(u, h, 1, p).reshape(u * h, 1, p)  # as baddbmm adds it
        shape = (self._rows, h, max(self._max_len - p, 0), d)
        make = like.new_zeros if self.static else like.new_empty  # zeros: masked positions add 0 x 0, never NaN
        self.keys = [make(shape) for _ in dec.layers]
        self.values = [make(shape) for _ in dec.layers]
        self._place(owner)

    def _place(self, owner: torch.Tensor) -> None:
        self.owner = owner
        counts = torch.bincount(owner, minlength=self.prompts).tolist()
        self.groups = max(counts)
        seen = [0] * self.prompts
        slots = []
        for o in owner.tolist():
            slots.append(o * self.groups + seen[o])
            seen[o] += 1
        in_order = slots == list(range(self.prompts * self.groups))
        self.slots = None if in_order else torch.tensor(slots, device=owner.device)

    def keep(self, rows: torch.Tensor) -> None:
        """Keep only `rows` ([B'] indices): finished rows leave the batch (their prompt's keys stay)."""
        if self.static:
            raise RuntimeError("a static KV cache keeps every row (its buffers are a CUDA graph's inputs)")
        t = self.generated
        self.keys = [_keep(k, rows, t) for k in self.keys]
        self.values = [_keep(v, rows, t) for v in self.values]
        self._place(self.owner[rows])


def _keep(buf: torch.Tensor, rows: torch.Tensor, filled: int) -> torch.Tensor:
    out = buf.new_empty((len(rows), *buf.shape[1:]))
    out[:, :, :filled] = buf[rows, :, :filled]
    return out
