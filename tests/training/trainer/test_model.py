"""Model configs kept in the repo, and the sparse MLM head against Hugging Face's dense loss."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from training.trainer.data import make_batch, read_shard
from training.trainer.model import (
    CONFIG_DIR,
    additive_attention_mask,
    build_model,
    count_parameters,
    load_config,
)
from trainium_job.spec import MODELS


@pytest.mark.parametrize(
    ("name", "layers", "hidden", "heads", "ffn"),
    [("large", 24, 1024, 16, 4096), ("base", 12, 768, 12, 3072), ("tiny", 2, 64, 2, 256)],
)
def test_given_config_name_then_bert_shapes(name, layers, hidden, heads, ffn):
    c = load_config(name)
    assert (c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.intermediate_size) == (
        layers,
        hidden,
        heads,
        ffn,
    )
    assert (c.vocab_size, c.max_position_embeddings, c.type_vocab_size) == (30522, 512, 2)
    assert load_config(name, vocab_size=400).vocab_size == 400


def test_given_the_jobs_model_list_then_it_names_exactly_the_configs_kept_here():
    assert sorted(p.stem for p in CONFIG_DIR.glob("*.json")) == sorted(MODELS)


def test_given_large_config_then_bert_large_parameter_count():
    # On the meta device: no memory for 335M parameters. bert-large-uncased: ~335M (+ NSP head).
    with torch.device("meta"):
        model = build_model("large")
    assert 334e6 < count_parameters(model) < 337e6


def test_given_unknown_model_then_error():
    with pytest.raises(ValueError, match="model"):
        load_config("huge")
    with pytest.raises(ValueError, match="mlm_head"):
        build_model("tiny", mlm_head="other")


def test_given_same_weights_then_sparse_head_loss_and_grads_equal_hugging_face_dense(shards):
    shard = read_shard(str(shards.files[0]), 128, 20, vocab_size=shards.vocab_size)
    batch = make_batch(shard, np.arange(6))
    torch.manual_seed(0)
    sparse = build_model("tiny", vocab_size=shards.vocab_size, mlm_head="sparse").eval()
    dense = build_model("tiny", vocab_size=shards.vocab_size, mlm_head="dense").eval()
    dense.load_state_dict(sparse.state_dict())
    loss_s, loss_d = sparse(batch), dense(batch)
    torch.testing.assert_close(loss_s, loss_d, rtol=1e-5, atol=1e-6)
    loss_s.backward()
    loss_d.backward()
    for (name, a), (_, b) in zip(sparse.named_parameters(), dense.named_parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-6, msg=name)
    assert 5.0 < loss_s.item() < 8.0  # ~ln(400) + ln(2) for a fresh model


def test_given_attention_choice_then_model_uses_it():
    # The XLA backend asks for eager attention; CPU/CUDA for SDPA.
    for attn in ("eager", "sdpa"):
        model = build_model("tiny", vocab_size=100, attn=attn)
        assert model.hf_model.config._attn_implementation == attn


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_given_padded_batch_then_4d_additive_mask_gives_hugging_faces_2d_mask_result(shards, attn):
    shard = read_shard(str(shards.files[0]), 128, 20, vocab_size=shards.vocab_size)
    batch = make_batch(shard, np.arange(6))
    mask = batch["attention_mask"]
    assert (mask == 0).any() and (mask == 1).all(dim=1).logical_not().any()  # there is padding
    model = build_model("tiny", vocab_size=shards.vocab_size, attn=attn).eval().hf_model.bert
    inputs = dict(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"])
    hf = model(**inputs, attention_mask=mask).last_hidden_state
    ours = model(**inputs, attention_mask=additive_attention_mask(mask, torch.float32)).last_hidden_state
    keep = mask.bool()
    torch.testing.assert_close(ours[keep], hf[keep], rtol=1e-5, atol=1e-5)
    # Padded keys are really dropped: changing the tokens there changes no kept position.
    changed = dict(inputs, input_ids=torch.where(keep, batch["input_ids"], 7))
    again = model(**changed, attention_mask=additive_attention_mask(mask, torch.float32)).last_hidden_state
    torch.testing.assert_close(again[keep], ours[keep], rtol=1e-5, atol=1e-5)


def test_given_mask_then_additive_bias_is_zero_kept_and_dtype_min_dropped():
    bias = additive_attention_mask(torch.tensor([[1, 1, 0]]), torch.bfloat16)
    assert bias.shape == (1, 1, 1, 3) and bias.dtype == torch.bfloat16
    assert bias.flatten().tolist() == [0.0, 0.0, torch.finfo(torch.bfloat16).min]
