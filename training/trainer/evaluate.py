"""Held-out evaluation: masked-LM loss and accuracy, next-sentence accuracy (``--eval_dir``).

The held-out set is a shard set of its own (``--eval_dir``, made by the data tool from documents
kept out of the training corpus), which training never reads: a slice of ``--data_dir`` would not
do for shards of this project's data tool, whose publishing step shuffles samples across shards,
so the ``--dupe_factor`` copies of a document (other masks, same text) would be on both sides.
The training data is untouched by it.

Every evaluation reads the same samples: the first ``--eval_samples`` of the set in its epoch-0
order, split over the ranks as training data is (``training.trainer.data.ShardStream``), in
``--batch_size`` batches (whole batches only: ``eval_batches``). It runs with dropout off and no
gradients, every ``--eval_every`` optimizer steps and after the last step of the run. A set not
there at start (the platform stages one during training: ``training.dataprep.heldout``) is no
error: pre-flight says so once, and the run evaluates from the first of those steps at which every
rank finds it (``training.trainer.pretrain.arrived_held_out``); nothing waits for it. Each rank
adds up its batches' ``PretrainingModule.eval_sums`` on the device; one all-reduce averages them,
and rank 0 reads the four numbers back once (``Backend.defer``: on XLA after the evaluation's
graph ran). Masked-LM accuracy counts the masked positions whose highest logit is the original
token, as MLPerf Training's BERT benchmark does (its target: 0.720 for BERT-large after phase 2).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

from .data import ShardStream, make_loader
from .device import Backend
from .model import PretrainingModule


@dataclass(frozen=True)
class EvalResult:
    """One evaluation, as the step log, TensorBoard, Prometheus and the metrics file get it."""

    step: int
    samples: int
    mlm_loss: float
    mlm_accuracy: float
    nsp_accuracy: float

    def values(self) -> dict[str, float | int]:
        return {k: v for k, v in asdict(self).items() if k != "step"}


def eval_batches(eval_samples: int, batch_size: int, world_size: int) -> int:
    """Batches per rank and evaluation: whole global batches of ``--eval_samples`` at most."""
    return eval_samples // (batch_size * world_size)


def result_of(step: int, sums: list[float], *, batches: int, batch_size: int, world_size: int) -> EvalResult:
    """``sums``: the ranks' mean of [mlm loss sum, mlm correct, masked positions, nsp correct]."""
    loss_sum, mlm_correct, masked, nsp_correct = sums
    per_rank = batches * batch_size  # the means are per rank: so is the sample count they divide by
    return EvalResult(
        step=step,
        samples=per_rank * world_size,
        mlm_loss=loss_sum / masked,
        mlm_accuracy=mlm_correct / masked,
        nsp_accuracy=nsp_correct / per_rank,
    )


@dataclass
class Evaluator:
    """The held-out set of a run and how it is read; ``__call__`` evaluates the model once."""

    files: list[str]
    batch_size: int
    seq_len: int
    max_pred_len: int
    seed: int
    vocab_size: int
    batches: int

    def __call__(
        self,
        module: PretrainingModule,
        backend: Backend,
        precision: str,
        step: int,
        report: Callable[[EvalResult], None] | None,
    ) -> None:
        """Evaluate ``module`` (every rank); ``report`` (rank 0) gets the result once it is on the host."""
        stream = ShardStream(
            self.files,
            batch_size=self.batch_size,
            seq_len=self.seq_len,
            max_pred_len=self.max_pred_len,
            rank=backend.rank,
            world_size=backend.world_size,
            seed=self.seed,
            vocab_size=self.vocab_size,
        )
        batches = backend.batches(make_loader(stream))
        training = module.training
        module.eval()
        total: torch.Tensor | None = None
        try:
            with torch.no_grad():
                for _ in range(self.batches):
                    batch = next(batches)
                    batch.pop("data_position", None)
                    with backend.autocast(precision):
                        sums = module.eval_sums(batch)
                    total = sums if total is None else total + sums
        finally:
            module.train(training)
            del batches
        assert total is not None  # batches >= 1, checked by pre-flight
        mean = backend.all_reduce_mean(total)
        if report is not None:
            size = dict(batches=self.batches, batch_size=self.batch_size, world_size=backend.world_size)
            backend.defer(lambda t: report(result_of(step, t.tolist(), **size)), mean)
        backend.mark_step()
