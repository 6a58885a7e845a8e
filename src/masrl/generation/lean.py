"""The lean sampling engine: merged adapter weights, one prefill per distinct prompt, a plain KV-cache loop.

HF `generate` (masrl.generation.hf) is the reference engine.
This one samples the same policy with less work per token:

- **Merged weights.** Generation through peft runs every adapted projection
  as base + B(A x): two more matmuls and a Python module call each, 210 per
  token for SmolLM2. `MergedWeights` keeps one plain copy of the decoder whose
  adapted weights are W + scale * B A (the other tensors are shared with the
  base, not copied) and re-merges it whenever the policy's adapter tensors
  changed (their in-place version counters moved: an optimiser step, a
  checkpoint load), so sampling always uses the weights the trainer has now.
- **Shared prefill.** The G rows of a GRPO group share their prompt: each
  distinct prompt is run once and its KV cache gathered to its rows.
- **A short loop.** Sample, append, stop rows at EOS or a stop string, and
  drop finished rows from the batch (HF keeps them, decoding padding).
- **A plain forward.** For Llama-family models the loop runs
  `LlamaDecoder` (masrl/generation/llama.py): a KV cache allocated once
  at its final length that holds a shared prompt's keys once for all its rows
  (read once per step for all of them), fused q/k/v and gate/up weights
  packed for oneDNN, no per-token mask building or module calls. Other models use their own
  forward and HF's cache in the same loop (`HFForward`; the three forwards:
  masrl/generation/forwards.py).
- **CUDA graphs.** On a GPU a decoding step of a small model is launch-bound: a few
  hundred short kernels. There each call's step is captured once as a CUDA graph
  and replayed per token (`GraphForward`: fixed shapes, finished rows stay in the
  batch): 4.4 ms a step for a 0.5B model on an H100, against 45-53 ms for HF
  `generate` (docs/gpu.md).
- **Cheap sampling.** Each row inverts its cumulative distribution at one
  uniform draw per step (`pick_tokens`), drawn for every row of the call
  whether it is still running or not, so a row's sample does not depend on
  when the others finish.

Each sampled token's log-prob under the sampling distribution (temperature
and top-p applied) is returned alongside, so a caller can compare it with
the trainer's (`PolicyModel.response_logprobs`); the update recomputes
log-probs with the trainer's model either way (update.py), so float rounding
in the merged weights never reaches the loss.

`LeanEngine(policy_model).generate` has the signature of `HFEngine.generate`
(HF's, masrl.generation.hf): `rollout.engine` picks one of the two per base
(masrl.generation.engine.sampler), so the policy model imports neither.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch

from masrl.agents.policy import PolicyModel
from masrl.generation.forwards import GraphForward, HFForward, PlainForward
from masrl.generation.llama import LlamaDecoder, fused_weights, supported, tie_to_fused
from masrl.generation.sampling import Generation, SamplingParams, finish_row, left_pad


def top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Nucleus filtering (Holtzman et al. 2020, sec. 3.1): [B, V] logits with the tail set to -inf.

    Keeps the smallest set of most likely tokens whose probability sums to at
    least `top_p` (always at least one), as HF's TopPLogitsWarper does."""
    if top_p >= 1.0:
        return logits
    sorted_logits, order = torch.sort(logits, dim=-1, descending=False)  # ascending, like HF
    cum = sorted_logits.softmax(-1).cumsum(-1)
    remove_sorted = cum <= (1.0 - top_p)
    remove_sorted[..., -1] = False  # the most likely token stays
    remove = remove_sorted.scatter(-1, order, remove_sorted)
    return logits.masked_fill(remove, float("-inf"))


def pick_tokens(
    logits: torch.Tensor, params: SamplingParams, uniform: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The next token of each row and its log-prob under the sampling distribution: [B, V], [B] -> [B], [B].

    Sampling inverts each row's cumulative distribution at its uniform draw
    `uniform` (in [0, 1)): one random number per row, where `torch.multinomial`
    draws an exponential per vocabulary entry (49k for SmolLM2: most of a
    32-row step's sampling cost). The log-prob is x_t - logsumexp(x), as the
    trainer computes it (masrl.algos.losses.token_logprobs). Each pass over the
    [B, V] logits costs about a millisecond at 32 rows, so there are as few as
    the result allows: no division at temperature 1, and the normaliser is the
    cumulative sum's last entry (torch accumulates it in double on CPU) rather
    than a sum of its own."""
    x = logits.float()
    if params.greedy:
        token = x.argmax(-1)
    else:
        if params.temperature != 1.0:
            x = x / params.temperature
        x = top_p_filter(x, params.top_p)
    top = x.max(-1, keepdim=True).values  # [B, 1]
    e = torch.sub(x, top).exp_()  # [B, V]; 0 where top-p removed a token
    cdf = e.cumsum_(-1)  # in place: e is not needed after this
    total = cdf[:, -1:]  # [B, 1]
    if not params.greedy:
        u = uniform.to(cdf.device).unsqueeze(-1) * total  # [B, 1] in [0, total)
        token = torch.searchsorted(cdf, u, right=True).squeeze(-1).clamp_(max=x.shape[-1] - 1)  # first cdf > u
    picked = x.gather(-1, token.unsqueeze(-1)) - top - total.log()  # [B, 1]
    return token, picked.squeeze(-1)


def _stopped(tokenizer, tokens: list[int], stop: Sequence[str]) -> bool:
    return bool(stop) and any(s in tokenizer.decode(tokens, skip_special_tokens=True) for s in stop)


@torch.no_grad()
def sample_batch(
    model,
    tokenizer,
    prompts: Sequence[Sequence[int]],
    params: SamplingParams,
    decoder: LlamaDecoder | None = None,
    graphs: bool | None = None,
) -> tuple[list[Generation], list[list[float]]]:
    """Generations for `prompts` (rows with the same prompt share one prefill) and each token's log-prob.

    With a `decoder` (the merged weights of a Llama-family model) the loop runs
    its plain forward over a preallocated cache; without, the model's own.
    `graphs` (default: on CUDA) replays each decode step as a CUDA graph
    (`GraphForward`); False runs the plain forward, which drops finished rows."""
    device = next(model.parameters()).device
    distinct: dict[tuple[int, ...], int] = {}
    owner = torch.tensor([distinct.setdefault(tuple(p), len(distinct)) for p in prompts], device=device)  # [B]
    ids, mask = left_pad(list(distinct), tokenizer.pad_token_id, device)
    forward = choose_forward(model, decoder, device, graphs)
    logits = forward.prefill(ids, mask, owner, params.max_new_tokens)  # [B, V]
    rows = Rows(tokenizer, params, len(prompts), next_pos=mask.sum(-1)[owner])
    generator = None  # torch's global generator, or the batch's own when seeded
    if params.seed is not None and not params.greedy:
        generator = torch.Generator().manual_seed(params.seed)
    for step in range(params.max_new_tokens):
        # Every row of the call draws one uniform per step, finished or not, so what a row samples does
        # not depend on when the others finish.
        uniform = None if params.greedy else torch.rand(len(prompts), generator=generator)[rows.live]
        token, logp = pick_tokens(logits, params, uniform)
        keep = rows.append(token, logp)
        if not keep or step == params.max_new_tokens - 1:
            break
        if len(keep) < len(rows.live) and forward.drops_rows:  # finished rows leave the batch
            idx = torch.tensor(keep, device=device)
            forward.keep(idx)
            token = rows.keep(keep, idx, token)
        logits = forward.step(token, rows.next_pos)
        rows.next_pos = rows.next_pos + 1
    gens = [finish_row(tokenizer, r, params) for r in rows.tokens]
    return gens, [lp[: len(g.response_ids)] for lp, g in zip(rows.logps, gens)]


def choose_forward(model, decoder: LlamaDecoder | None, device: torch.device, graphs: bool | None):
    """The model's own forward without a `decoder`; with one, CUDA graphs (`graphs`, default: on CUDA)
    or the plain forward that drops finished rows."""
    if graphs is None:
        graphs = device.type == "cuda"
    if decoder is None:
        return HFForward(model)
    if graphs:
        return GraphForward(decoder, graphs=device.type == "cuda")  # eager on CPU: the tests' path
    return PlainForward(decoder)


class Rows:
    """What the loop has sampled so far: each caller's row's tokens and log-probs, and which rows the
    batch still runs (a `GraphForward` batch keeps finished rows, decoding padding)."""

    def __init__(self, tokenizer, params: SamplingParams, n: int, next_pos: torch.Tensor):
        self.tokenizer, self.params = tokenizer, params
        # Read once: an HF tokenizer's special-token attributes go through its __getattr__ (about 1.3 us),
        # and `append` checks every row at every step.
        self.eos = tokenizer.eos_token_id
        self.tokens: list[list[int]] = [[] for _ in range(n)]
        self.logps: list[list[float]] = [[] for _ in range(n)]
        self.live = list(range(n))  # the batch's rows -> the caller's rows
        self.done = [False] * n  # rows that ended
        self.next_pos = next_pos  # [live]: the position each running row's next token takes

    def append(self, token: torch.Tensor, logp: torch.Tensor) -> list[int]:
        """Add a step's tokens [live] and log-probs [live] to the rows still running; the batch rows
        that go on (not at EOS or a stop string)."""
        keep = []
        for j, (t, lp) in enumerate(zip(token.tolist(), logp.tolist())):
            row = self.live[j]
            if self.done[row]:
                continue
            self.tokens[row].append(t)
            self.logps[row].append(lp)
            if t != self.eos and not _stopped(self.tokenizer, self.tokens[row], self.params.stop):
                keep.append(j)
            else:
                self.done[row] = True
        return keep

    def keep(self, keep: list[int], idx: torch.Tensor, token: torch.Tensor) -> torch.Tensor:
        """Drop the finished rows from the batch (`idx`: `keep` on the device); the kept rows' tokens."""
        self.next_pos = self.next_pos[idx]
        self.live = [self.live[j] for j in keep]
        return token[idx]


class LeanEngine:
    """The lean engine for one `PolicyModel`: its generations, sampled from merged weights.

    With LoRA it samples from a merged copy of the weights (`MergedWeights`, built at the first
    call), re-merged whenever the policy's adapter changed since the last call; full fine-tuning
    samples from the trained weights themselves. It holds the model's lock while it samples, as
    `HFEngine.generate` does.

    `precision="bf16"` samples training rollouts through bfloat16 matmuls (`llama.Bf16Matmul`:
    a LoRA model of the Llama family on a CPU with AVX-512 BF16); greedy calls stay float32. Its
    samples come from a policy near the trainer's but not equal to it, so each of its generations
    carries its tokens' sampling log-probs, whether asked for or not: the update weighs each token
    by pi_trainer / pi_bf16, truncated (masrl.update, `decoupled`). Where it cannot run (full
    fine-tuning, another architecture, a CPU without AVX-512 BF16) `rollout.engine`'s sampler refuses it
    (masrl.generation.engine.precision_problem) before one is built."""

    def __init__(self, model: PolicyModel, graphs: bool | None = None, precision: str = "float32"):
        self.policy_model = model
        self.merged: MergedWeights | None = None
        self.graphs = graphs  # CUDA graphs per call (GraphForward); None: on CUDA
        self.precision = precision

    def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams, policy: str | None
    ) -> list[Generation]:
        """What `HFEngine.generate` returns, sampled by this engine (log-probs with `params.logprobs`)."""
        gens, logps = self.sample(prompts, params, policy)
        if not params.logprobs and self.precision_of(params) == "float32":
            return gens
        return [replace(g, logprobs=tuple(lp)) for g, lp in zip(gens, logps)]

    def precision_of(self, params: SamplingParams) -> str:
        """The matmuls' precision a call samples with: `precision` for sampled calls (training rollouts);
        greedy calls (evaluation, serving) in float32, so what is measured is the policy the trainer trains."""
        return "float32" if params.greedy else self.precision

    def sample(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams, policy: str | None
    ) -> tuple[list[Generation], list[list[float]]]:
        """Generations and each token's sampling log-prob."""
        pm = self.policy_model
        with pm.lock, pm.placement.autocast():
            if pm.lora is None:
                with pm.use(policy) as model:
                    return sample_batch(model, pm.tokenizer, prompts, params)
            if self.merged is None:
                self.merged = MergedWeights(pm.model)
            self.merged.sync(policy, self.precision_of(params))
            return sample_batch(self.merged.model, pm.tokenizer, prompts, params, self.merged.decoder, self.graphs)


class MergedWeights:
    """A plain copy of a peft-wrapped decoder with one adapter's LoRA merged into its weights.

    Only the adapted projections get their own tensors (W + scale * B A); the
    embeddings, norms and head are the base's own. For Llama-family models
    q/k/v and gate/up are views into one buffer each, which `decoder` runs.
    `sync(policy)` re-merges when the policy changed or any of its adapter
    tensors was modified in place since the last merge (torch's per-tensor
    version counter), and says whether it did."""

    def __init__(self, peft_model):
        from peft.tuners.lora import LoraLayer  # lazy: peft's import takes about 1 s; full fine-tuning never merges

        self._peft = peft_model
        base = peft_model.get_base_model()
        self._lora: dict[str, LoraLayer] = {n: m for n, m in base.named_modules() if isinstance(m, LoraLayer)}
        with torch.device("meta"):
            self.model = type(base)(base.config)
        state = {}
        for name, tensor in base.state_dict(keep_vars=True).items():
            plain = name.replace(".base_layer.", ".")
            if ".lora_" in name:
                continue
            module = plain.rsplit(".", 1)[0]
            own = module in self._lora and plain.endswith(".weight")
            state[plain] = tensor.detach().clone() if own else tensor.detach()
        self.model.load_state_dict(state, assign=True, strict=False)
        for name, buf in base.named_buffers():  # non-persistent buffers (rotary frequencies) are not in state_dict
            module, _, attr = name.replace(".base_layer.", ".").rpartition(".")
            setattr(self.model.get_submodule(module), attr, buf)
        self.model.tie_weights()
        missing = [n for n, t in [*self.model.named_parameters(), *self.model.named_buffers()] if t.is_meta]
        if missing:
            raise RuntimeError(f"merged copy is missing weights: {missing[:3]}")
        self.model.eval().requires_grad_(False)
        # Llama-family decoders sample through LlamaDecoder: q/k/v and gate/up live side by side in
        # one buffer each (the merged model's weights are views into them, so a re-merge writes both).
        self.decoder: LlamaDecoder | None = None
        if supported(self.model):
            fused = fused_weights(self.model)
            tie_to_fused(self.model, fused)
            self.decoder = LlamaDecoder(self.model, fused)
        self._key: tuple | None = None

    def _version(self, policy: str | None) -> tuple:
        if policy is None:
            return (None,)
        return (policy, *(p._version for n, p in self._peft.named_parameters() if f".{policy}." in n and "lora_" in n))

    @torch.no_grad()
    def sync(self, policy: str | None, precision: str = "float32") -> bool:
        """Bring the merged weights to `policy`'s adapter (None: the base) and the decoder's matmuls to
        `precision`; True when it re-merged."""
        key = self._version(policy)
        if key == self._key:
            if self.decoder is not None and self.decoder.precision != precision:
                self.decoder.refresh(precision)
            return False
        merged = dict(self.model.named_modules())
        for name, layer in self._lora.items():
            w = layer.get_base_layer().weight
            target = merged[name].weight
            if policy is None or policy not in layer.lora_A:
                target.copy_(w)
            elif _plain_lora(layer, policy):  # W + scale * B A in one pass, written in place
                a, b = layer.lora_A[policy].weight, layer.lora_B[policy].weight
                torch.addmm(w, b.to(w.dtype), a.to(w.dtype), alpha=layer.scaling[policy], out=target)
            else:  # DoRA, transposed (Conv1D) weights, ...: peft's own delta
                target.copy_(w + layer.get_delta_weight(policy).to(w.dtype))
        if self.decoder is not None:
            self.decoder.refresh(precision)
        self._key = key
        return True


def _plain_lora(layer, policy: str) -> bool:
    """A LoRA linear layer whose delta is scale * B A as is (no DoRA magnitude, no transposed weight)."""
    return (
        isinstance(layer.lora_A[policy], torch.nn.Linear)
        and not layer.use_dora.get(policy, False)
        and not getattr(layer, "fan_in_fan_out", False)
    )
