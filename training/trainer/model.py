"""The BERT pretraining model, built from configs kept in this repository (no hub download).

``PretrainingModule`` wraps Hugging Face ``BertForPreTraining`` and returns the pretraining
loss (masked-LM + next-sentence). Two ways to compute the masked-LM part, same loss value:

* ``sparse`` (default): gather the hidden states at the <= max_pred_len masked positions and
  run the LM head (transform + 30522-way decoder) only there. The decoder is ~10% of
  BERT-large's FLOPs (2*H*V per token vs ~24*L*H^2) when run on all 128 positions, and far
  more for small models; the gather has a static shape, so it suits XLA too.
* ``dense``: Hugging Face's own forward with dense ``labels`` (-100 off the masked positions).
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from transformers import BertConfig, BertForPreTraining

from trainium_job.spec import MODELS

from .cli import MLM_HEADS

CONFIG_DIR = Path(__file__).with_name("model_configs")
IGNORE_INDEX = -100


def load_config(name: str, *, vocab_size: int | None = None, attn: str | None = None) -> BertConfig:
    """The BertConfig stored as ``model_configs/<name>.json`` (optionally another vocab size)."""
    if name not in MODELS:
        raise ValueError(f"model: {name!r} is not one of {', '.join(MODELS)}")
    config = BertConfig.from_json_file(str(CONFIG_DIR / f"{name}.json"))
    if vocab_size is not None:
        config.vocab_size = vocab_size
    if attn is not None:
        config._attn_implementation = attn
    return config


def additive_attention_mask(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """[B, S] 1/0 padding mask -> [B, 1, 1, S] additive bias (0 keep, dtype's min drop).

    Hugging Face takes a 4-D mask as it is. Given the 2-D one, transformers 5.x tests
    ``padding_mask.all()`` on the host every forward to drop the mask when nothing is padded:
    on XLA a device-to-host transfer per micro-batch, and a second graph for batches without
    padding that a short precompile run may never meet.
    """
    return (1.0 - mask[:, None, None, :].to(dtype)) * torch.finfo(dtype).min


def count_parameters(model: nn.Module) -> int:
    """Number of distinct parameters (tied embeddings counted once)."""
    return sum(p.numel() for p in model.parameters())


class PretrainingModule(nn.Module):
    """``BertForPreTraining`` + the pretraining loss, so DDP can wrap one forward call."""

    def __init__(self, config: BertConfig, mlm_head: str = "sparse") -> None:
        super().__init__()
        if mlm_head not in MLM_HEADS:
            raise ValueError(f"mlm_head: {mlm_head!r} is not one of {', '.join(MLM_HEADS)}")
        self.mlm_head = mlm_head
        self.bert_pretraining = BertForPreTraining(config)

    @property
    def hf_model(self) -> BertForPreTraining:
        """The Hugging Face model (its state_dict is what checkpoints store)."""
        return self.bert_pretraining

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Total loss = mean masked-LM cross-entropy + next-sentence cross-entropy."""
        model = self.bert_pretraining
        # In the weights' dtype, as the attention scores are (autocast casts it with them).
        dtype = model.bert.embeddings.word_embeddings.weight.dtype
        attention_mask = additive_attention_mask(batch["attention_mask"], dtype)
        if self.mlm_head == "dense":
            out = model(
                input_ids=batch["input_ids"],
                attention_mask=attention_mask,
                token_type_ids=batch["token_type_ids"],
                labels=batch["labels"],
                next_sentence_label=batch["next_sentence_label"],
            )
            return out.loss
        mlm_logits, nsp_logits = self.sparse_logits(batch, attention_mask)
        # Loss in fp32 whatever the model dtype: bf16 log-softmax over 30522 classes is lossy.
        mlm_loss = F.cross_entropy(
            mlm_logits.reshape(-1, mlm_logits.size(-1)).float(),
            batch["mlm_targets"].reshape(-1),
            ignore_index=IGNORE_INDEX,
        )
        nsp_loss = F.cross_entropy(nsp_logits.float(), batch["next_sentence_label"])
        return mlm_loss + nsp_loss

    def sparse_logits(
        self, batch: dict[str, torch.Tensor], attention_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Masked-LM logits at the ``mlm_positions`` [B, P, V] and next-sentence logits [B, 2]."""
        model = self.bert_pretraining
        hidden = model.bert(
            input_ids=batch["input_ids"],
            attention_mask=attention_mask,
            token_type_ids=batch["token_type_ids"],
        )
        positions = batch["mlm_positions"]  # [B, P]; padding entries point at [CLS] (0)
        index = positions.unsqueeze(-1).expand(-1, -1, hidden.last_hidden_state.size(-1))
        selected = torch.gather(hidden.last_hidden_state, 1, index)  # [B, P, H]
        mlm_logits = model.cls.predictions(selected)  # [B, P, V]
        nsp_logits = model.cls.seq_relationship(hidden.pooler_output)  # [B, 2]
        return mlm_logits, nsp_logits

    def eval_sums(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """[masked-LM loss sum, masked-LM correct, masked positions, next-sentence correct] of a
        batch, on the device (one fixed-shape graph on XLA; ``training.trainer.evaluate`` adds them up)."""
        dtype = self.bert_pretraining.bert.embeddings.word_embeddings.weight.dtype
        mlm_logits, nsp_logits = self.sparse_logits(
            batch, additive_attention_mask(batch["attention_mask"], dtype)
        )
        targets = batch["mlm_targets"]
        valid = targets != IGNORE_INDEX
        mlm_logits = mlm_logits.float()
        loss_sum = F.cross_entropy(
            mlm_logits.reshape(-1, mlm_logits.size(-1)),
            targets.reshape(-1),
            ignore_index=IGNORE_INDEX,
            reduction="sum",
        )
        mlm_correct = ((mlm_logits.argmax(-1) == targets) & valid).sum()
        nsp_correct = (nsp_logits.argmax(-1) == batch["next_sentence_label"]).sum()
        return torch.stack([loss_sum, mlm_correct.float(), valid.sum().float(), nsp_correct.float()])


def build_model(
    name: str, *, vocab_size: int | None = None, mlm_head: str = "sparse", attn: str | None = None
) -> PretrainingModule:
    """Fresh (randomly initialised) pretraining model of the named size."""
    return PretrainingModule(load_config(name, vocab_size=vocab_size, attn=attn), mlm_head=mlm_head)
