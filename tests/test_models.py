"""Loading models by name (masrl/models.py): what a name loads, the cheap check config validation
runs, and the tiny random model every CPU test trains."""

from __future__ import annotations

import torch

from masrl.models import build_tiny_model, build_tiny_tokenizer, check_model_name, model_source


def test_a_copy_tag_is_dropped_from_what_a_name_loads():
    assert model_source("smollm2#2") == "smollm2" and model_source("tiny") == "tiny"


def test_the_cheap_check_of_a_model_name(tmp_path):
    assert check_model_name("tiny") is None and check_model_name("smollm2#critic") is None
    assert check_model_name("#copy") == "model name '#copy' is empty before its '#' copy tag"
    assert check_model_name(str(tmp_path)) == f"model directory {tmp_path} has no config.json"
    (tmp_path / "config.json").write_text("{}")
    assert check_model_name(str(tmp_path)) is None
    assert check_model_name("./no/such/dir") == "model directory no/such/dir does not exist"
    assert check_model_name("org/some-model") is None  # a hub id: only the network can tell


def test_the_tiny_model_is_seeded_and_fits_its_tokenizer():
    (a, tok), (b, _) = build_tiny_model(seed=0), build_tiny_model(seed=0)
    assert len(tok) == len(build_tiny_tokenizer()) == a.config.vocab_size
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert not torch.equal(next(a.parameters()), next(build_tiny_model(seed=1)[0].parameters()))
    ids = tok("What is 1 + 1?", return_tensors="pt").input_ids
    assert a(ids).logits.shape == (1, ids.shape[1], a.config.vocab_size) and a.config.num_hidden_layers == 2
