"""Trainable HF causal-LM policies: one base model, several named LoRA adapters.

Every trainable role in masrl is a named *policy*. With LoRA (the default) all
policies are adapters on one copy of the base weights; the reference policy for
the KL term is that base with the adapters disabled, so it costs no memory.
With ``lora_rank=0`` the single policy is fully fine-tuned and the reference is
a frozen copy (only built when the KL coefficient is non-zero).

Log-probs for the update are computed only at response positions: the forward
pass keeps logits for the last R+1 positions (``logits_to_keep``) of a batch
laid out as [left-padded prompt | right-padded response], so full-vocabulary
logits never exist for prompt tokens, and callers pass micro-batches.
"""

from __future__ import annotations

import contextlib
import copy
import threading
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from masrl.algos.losses import token_logprobs
from masrl.device import CPU, Placement
from masrl.generation.sampling import Generation, SamplingParams
from masrl.hf_compat import activation_checkpointing, cache_kwargs, enable_activation_checkpointing, output_cache
from masrl.models import LoadedModel
from masrl.types import Message, Price, Reply


@dataclass(frozen=True)
class LoraSpec:
    rank: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def encode_chat(tokenizer, messages: Sequence[Message]) -> list[int]:
    """Token ids of a conversation rendered with the chat template, ready to answer.

    A trailing assistant message is a *prefill*: the reply continues it (e.g.
    "<model>" so a small model starts inside the output protocol). The reply's
    text is then only the continuation; the prefill belongs to the prompt.
    """
    prefill = ""
    if messages and messages[-1].role == "assistant":
        prefill, messages = messages[-1].content, messages[:-1]
    text = tokenizer.apply_chat_template(
        [{"role": m.role, "content": m.content} for m in messages], add_generation_prompt=True, tokenize=False
    )
    return tokenizer(text + prefill, add_special_tokens=False)["input_ids"]


class PolicyModel:
    """A base model carrying one LoRA adapter per policy name.

    `placement` says where it runs and in which precision (masrl.device); with
    `gradient_checkpointing` the decoder recomputes activations in the
    backward pass instead of keeping them (training mode only)."""

    def __init__(
        self,
        loaded: LoadedModel,
        policies: Sequence[str],
        lora: LoraSpec | None,
        keep_reference: bool = True,
        placement: Placement = CPU,
        gradient_checkpointing: bool = False,
    ):
        if not policies:
            raise ValueError("PolicyModel needs at least one policy name")
        for name in policies:
            if not name.isidentifier() or name in "lora_":
                # peft finds adapter weights by substring: a name inside "lora_"
                # (e.g. "a") would match every adapter's keys on load.
                raise ValueError(f"policy name {name!r} must be an identifier and not part of 'lora_'")
        if lora is None and len(policies) > 1:
            raise ValueError("full fine-tuning trains one policy per base model; use LoRA for several policies")
        self.tokenizer = loaded.tokenizer
        self.policies = tuple(policies)
        self.lora = lora
        self.placement = placement
        self.lock = threading.Lock()  # one forward/generate at a time on the shared weights (either engine)
        self._reference: torch.nn.Module | None = None
        loaded.model.to(placement.device)
        if gradient_checkpointing:  # non-reentrant: works with frozen inputs and LoRA's trainable inner weights
            enable_activation_checkpointing(loaded.model, use_reentrant=False)
        if lora is None:
            self.model = loaded.model
            if keep_reference:
                self._reference = copy.deepcopy(loaded.model).eval().requires_grad_(False)
        else:
            # lazy: peft (with transformers) takes about 2 s to import; a full fine-tune and the
            # modules that only name the policy's types do without it
            from peft import LoraConfig, get_peft_model

            from masrl.agents.lora_linear import FusedLoraLinear  # lazy: it imports peft

            cfg = LoraConfig(
                r=lora.rank,
                lora_alpha=lora.alpha,
                lora_dropout=lora.dropout,
                target_modules=list(lora.target_modules),
                task_type="CAUSAL_LM",
            )
            cfg._register_custom_module({torch.nn.Linear: FusedLoraLinear})  # peft's layer, fused forward
            with warnings.catch_warnings():
                # peft reads transformers' deprecated `is_gradient_checkpointing` property: peft's call,
                # not ours, so only that one FutureWarning is silenced, and only here
                warnings.filterwarnings("ignore", r".*`is_gradient_checkpointing` is deprecated", FutureWarning)
                self.model = get_peft_model(loaded.model, cfg, adapter_name=self.policies[0])
            for name in self.policies[1:]:
                self.model.add_adapter(name, cfg)
        self.model.eval()

    # ---- parameters -------------------------------------------------------
    def parameters(self, policy: str) -> list[torch.nn.Parameter]:
        """The trainable tensors of one policy (its adapter, or all weights)."""
        self._check(policy)
        if self.lora is None:
            return [p for p in self.model.parameters()]
        marker = f".{policy}."
        params = [p for n, p in self.model.named_parameters() if "lora_" in n and marker in n]
        for p in params:
            p.requires_grad_(True)
        return params

    def state_dict(self, policy: str) -> dict[str, torch.Tensor]:
        self._check(policy)
        if self.lora is None:
            return {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        from peft import get_peft_model_state_dict  # lazy: peft, as in __init__

        return {k: v.detach().clone() for k, v in get_peft_model_state_dict(self.model, adapter_name=policy).items()}

    def load_state_dict(self, policy: str, state: dict[str, torch.Tensor]) -> None:
        self._check(policy)
        if self.lora is None:
            self.model.load_state_dict(state)
            return
        from peft import set_peft_model_state_dict  # lazy: peft, as in __init__

        result = set_peft_model_state_dict(self.model, state, adapter_name=policy)
        unexpected = getattr(result, "unexpected_keys", [])
        if unexpected:
            raise ValueError(f"adapter state for {policy!r} has unexpected keys: {unexpected[:3]}")

    def save(self, policy: str, path: Path) -> None:
        save_file({k: v.contiguous() for k, v in self.state_dict(policy).items()}, str(path))

    def load(self, policy: str, path: Path) -> None:
        self.load_state_dict(policy, load_file(str(path)))

    # ---- which weights are active -------------------------------------------
    @contextlib.contextmanager
    def use(self, policy: str | None) -> Iterator[torch.nn.Module]:
        """Run the named policy, or the reference (base, adapters off) for None."""
        if policy is None:
            if self.lora is None:
                if self._reference is None:
                    raise RuntimeError("no reference model was kept (kl_coef is 0)")
                yield self._reference
            else:
                with self.model.disable_adapter():
                    yield self.model
            return
        self._check(policy)
        if self.lora is not None:
            self.model.set_adapter(policy)
        yield self.model

    def _check(self, policy: str) -> None:
        if policy not in self.policies:
            raise KeyError(f"unknown policy {policy!r}; known: {', '.join(self.policies)}")

    # ---- prompts (generation: masrl.generation.hf and .lean, which take this model) ----------
    def encode_chat(self, messages: Sequence[Message]) -> list[int]:
        return encode_chat(self.tokenizer, messages)

    # ---- log-probs for the update ---------------------------------------------
    def response_logprobs(
        self,
        prompts: Sequence[Sequence[int]],
        responses: Sequence[Sequence[int]],
        policy: str | None,
        temperature: float = 1.0,
        share_prompts: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probs of each response token: ([B, R] float, [B, R] mask).

        Grad flows when called under grad mode. Pass a micro-batch: the logits
        kept are [B, R+1, V] for the response positions only. With
        `share_prompts` rows with the same prompt run it once (see
        `_shared_prompt_logprobs`).
        """
        if share_prompts and self._can_share(prompts):
            return self._shared_prompt_logprobs(prompts, responses, policy, temperature)
        ids, attn, pos, p_len, r_len = self._layout(prompts, responses)
        keep = torch.arange(p_len - 1, p_len - 1 + r_len, device=ids.device)  # position P-1+j predicts response token j
        with self.use(policy) as model, self.placement.autocast():
            out = model(input_ids=ids, attention_mask=attn, position_ids=pos, logits_to_keep=keep, use_cache=False)
        logp = token_logprobs(out.logits, ids[:, p_len:], temperature)  # logits [B, R, V] -> [B, R]
        return logp, attn[:, p_len:].to(logp.dtype)

    def _can_share(self, prompts: Sequence[Sequence[int]]) -> bool:
        """Sharing pays when some prompt repeats; checkpointing recomputes layers and turns the KV cache off."""
        gc = activation_checkpointing(self.model) and self.model.training
        return not gc and len({tuple(p) for p in prompts}) < len(prompts)

    def _shared_prompt_logprobs(
        self,
        prompts: Sequence[Sequence[int]],
        responses: Sequence[Sequence[int]],
        policy: str | None,
        temperature: float,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The same log-probs, each distinct prompt run once (GRPO's G responses share their prompt).

        Pass 1 runs the U distinct prompts (left-padded) and keeps their keys and
        values; the cache is gathered to the B rows (`owner`: row -> its prompt),
        and pass 2 runs the right-padded responses against it. Gradients flow
        through the gather into the prompt pass, summing over a prompt's rows, so
        log-probs and gradients equal the one-pass layout's (float rounding aside;
        tests/agents/test_shared_prompt.py). The prompt's last logits predict response
        token 0; response position j predicts token j+1.
        """
        distinct: dict[tuple[int, ...], int] = {}
        owner_list = [distinct.setdefault(tuple(p), len(distinct)) for p in prompts]
        uniq = list(distinct)
        tok, device = self.tokenizer, self.placement.device
        p_len, r_len = max(len(p) for p in uniq), max(max(len(r) for r in responses), 1)
        p_ids = torch.full((len(uniq), p_len), tok.pad_token_id, dtype=torch.long)
        p_attn = torch.zeros_like(p_ids)
        for i, p in enumerate(uniq):
            p_ids[i, p_len - len(p) :] = torch.tensor(p, dtype=torch.long)
            p_attn[i, p_len - len(p) :] = 1
        r_ids = torch.full((len(responses), r_len), tok.pad_token_id, dtype=torch.long)
        r_attn = torch.zeros_like(r_ids)
        for i, r in enumerate(responses):
            r_ids[i, : len(r)] = torch.tensor(list(r), dtype=torch.long)
            r_attn[i, : len(r)] = 1
        owner = torch.tensor(owner_list, dtype=torch.long, device=device)  # [B]
        p_ids, p_attn, r_ids, r_attn = p_ids.to(device), p_attn.to(device), r_ids.to(device), r_attn.to(device)
        p_pos = (p_attn.cumsum(-1) - 1).clamp(min=0)  # [U, P], as generate() numbers left-padded prompts
        attn = torch.cat([p_attn[owner], r_attn], 1)  # [B, P+R]
        r_pos = p_attn.sum(-1)[owner].unsqueeze(1) + torch.arange(r_len, device=device)  # [B, R]
        with self.use(policy) as model, self.placement.autocast():
            first = model(input_ids=p_ids, attention_mask=p_attn, position_ids=p_pos, use_cache=True, logits_to_keep=1)
            cache = output_cache(first)
            cache.reorder_cache(owner)  # [U, H, P, D] -> [B, H, P, D]: index_select, differentiable
            # The last response position predicts nothing: its logits are never computed (a slice of
            # the full logits would also cost a vocabulary-sized zero tensor in the backward).
            keep = torch.arange(r_len - 1, device=device)
            out = model(
                input_ids=r_ids, attention_mask=attn, position_ids=r_pos, **cache_kwargs(cache), use_cache=True,
                logits_to_keep=keep,
            )  # fmt: skip
        head = token_logprobs(first.logits[owner], r_ids[:, :1], temperature)  # [B, 1]
        rest = token_logprobs(out.logits, r_ids[:, 1:], temperature)  # [B, R-1]
        logp = torch.cat([head, rest], 1)  # [B, R]
        return logp, r_attn.to(logp.dtype)

    def response_hidden(
        self, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], policy: str
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Last-layer hidden state of the state before each response token: ([B, R, H], [B, R] mask).

        Position P-1+j has read the prompt and response tokens < j: the state in
        which token j is chosen (what a value head scores). Runs the decoder
        without the LM head, so no vocabulary-sized tensor is made. Needs LoRA
        (the decoder is reached through the adapter-wrapped model).
        """
        if self.lora is None:
            raise RuntimeError("response_hidden needs LoRA adapters (model.lora_rank > 0)")
        ids, attn, pos, p_len, r_len = self._layout(prompts, responses)
        with self.use(policy) as model, self.placement.autocast():
            decoder = model.get_base_model().base_model  # e.g. LlamaModel: the LoRA layers live inside it
            hidden = decoder(input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=False).last_hidden_state
        return hidden[:, p_len - 1 : p_len - 1 + r_len], attn[:, p_len:].to(hidden.dtype)

    def _layout(self, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]]):
        """[left-padded prompt | right-padded response] ids, attention mask and positions; P and R."""
        tok = self.tokenizer
        p_len = max(len(p) for p in prompts)
        r_len = max(max(len(r) for r in responses), 1)
        batch = len(prompts)
        ids = torch.full((batch, p_len + r_len), tok.pad_token_id, dtype=torch.long)
        attn = torch.zeros_like(ids)
        for i, (p, r) in enumerate(zip(prompts, responses)):
            ids[i, p_len - len(p) : p_len] = torch.tensor(p, dtype=torch.long)
            ids[i, p_len : p_len + len(r)] = torch.tensor(list(r), dtype=torch.long)
            attn[i, p_len - len(p) : p_len + len(r)] = 1
        # Positions as generate() saw them under left padding.
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        device = self.placement.device
        return ids.to(device), attn.to(device), pos.to(device), p_len, r_len

    @property
    def hidden_size(self) -> int:
        return int(self.model.config.hidden_size)


class PolicyAgent:
    """A trainable policy seen through the agent protocol."""

    def __init__(self, name: str, policy: str, service, model: PolicyModel, params: SamplingParams, price: Price = Price()):
        self.name = name
        self.policy = policy
        self.service = service
        self.model = model
        self.params = params
        self.price = price

    def with_params(self, params: SamplingParams) -> "PolicyAgent":
        """The same policy sampling with other settings (a served request's temperature, max_tokens, ...)."""
        return PolicyAgent(self.name, self.policy, self.service, self.model, params, self.price)

    async def __call__(self, messages: Sequence[Message]) -> Reply:
        prompt = self.model.encode_chat(messages)
        gen = await self.service.generate(prompt, self.params, self.policy)
        return to_reply(prompt, gen, self.price, self.policy)


def to_reply(prompt: Sequence[int], gen: Generation, price: Price, policy: str | None = None) -> Reply:
    """A model's generation as a Reply; token ids are kept only for a trainable policy."""
    n_in, n_out = len(prompt), len(gen.response_ids)
    trainable = policy is not None
    return Reply(
        text=gen.text,
        tokens_in=n_in,
        tokens_out=n_out,
        cost=price.cost(n_in, n_out),
        finish_reason=gen.finish_reason,
        prompt_ids=tuple(prompt) if trainable else None,
        response_ids=gen.response_ids if trainable else None,
        policy=policy,
        logprobs=gen.logprobs if trainable else None,
        version=gen.version if trainable else None,
    )
