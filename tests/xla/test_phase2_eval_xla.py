"""Phase 2's shapes (seq 512, 80 predictions) and the held-out evaluation on XLA: graphs, transfers.

The same probe as ``test_graphs_xla`` (``python -m bench.xla_graph_probe``: torch-xla's counters
around every optimizer step and every evaluation), on a tiny model so the 512-token graphs
compile quickly. On Trainium a graph first seen after warm-up is a neuronx-cc compile in the
middle of the run, and a host transfer stalls the device: the figures are in BENCHMARKS.md.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.xla.conftest import child_env, run_probe, step_log, tiny_args
from training.dataprep.synthetic import SMALL_SET_FLAGS, SyntheticShards, prepare_data_command, write_corpus

SEQ, PRED = 512, 80  # the reference phase 2's --seq_len and --max_pred_len
STEPS, WARMUP_STEPS, LOG_EVERY, EVAL_EVERY, EVAL_SAMPLES = 8, 2, 2, 3, 8
LOGGED = [2, 4, 6, 8]
EVALUATED = [3, 6, 8]  # every 3 steps and after the last


def phase2_set(corpus: Path, vocab: Path, out: Path) -> SyntheticShards:
    flags = {**SMALL_SET_FLAGS, "max_seq_len": SEQ, "max_pred_len": PRED, "num_shards": 2}
    command = prepare_data_command(input=corpus, vocab=vocab, output_dir=out, **flags)
    done = subprocess.run(command, env=child_env(), capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return SyntheticShards(out, vocab)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("phase2_eval") / "run"


@pytest.fixture(scope="module")
def probe(shards, run_dir) -> dict:
    """8 phase-2-shaped steps (bf16, the XLA default), logging every 2, evaluating every 3."""
    root = run_dir.parent
    # The phase-1 test corpus at 512 tokens, and a held-out set of other documents: one vocab.
    training = phase2_set(shards.dir.parent / "corpus.txt", shards.vocab, root / "train512")
    held_out = phase2_set(
        write_corpus(root / "held_out.txt", n_docs=20, seed=99), shards.vocab, root / "eval512"
    )
    args = tiny_args(
        training,
        run_dir,
        "--seq_len",
        str(SEQ),
        "--max_pred_len",
        str(PRED),
        "--grad_accum_usteps",
        "1",
        "--max_steps",
        str(STEPS),
        "--log_every",
        str(LOG_EVERY),
        "--checkpoint_every",
        str(STEPS),
        "--eval_dir",
        str(held_out.dir),
        "--eval_every",
        str(EVAL_EVERY),
        "--eval_samples",
        str(EVAL_SAMPLES),
    )
    return run_probe(root / "probe.json", args, timeout=900)


def delta(window: dict, counter: str) -> float:
    return window["after"][counter] - window["before"][counter]


def test_given_phase2_shapes_and_evaluation_then_no_graph_after_step_2_or_the_first_evaluation(probe):
    steps, evaluations = probe["steps"], probe["evaluations"]
    assert len(steps) == STEPS and [e["step"] for e in evaluations] == EVALUATED
    # Then steps after warm-up compile nothing, across logging steps and evaluations between them
    assert [delta(s, "compiles") for s in steps[WARMUP_STEPS:]] == [0] * (STEPS - WARMUP_STEPS)
    # And the first evaluation builds its own graphs, the later ones reuse them
    first, *later = evaluations
    assert delta(first, "compiles") > 0
    assert [delta(e, "compiles") for e in later] == [0] * len(later)
    # And nothing is compiled after the first evaluation, up to the end (final checkpoint included)
    assert probe["end"]["compiles"] == first["after"]["compiles"]


def test_given_phase2_shapes_then_one_transfer_per_logging_step_and_per_evaluation(probe, run_dir):
    # A logging step reads loss and grad norm in one transfer, other steps none; an evaluation
    # reads its four sums once (training.trainer.evaluate), after its graph ran.
    transfers = [delta(s, "transfers") for s in probe["steps"]]
    assert transfers == [1 if n in LOGGED else 0 for n in range(1, STEPS + 1)], transfers
    assert [delta(e, "transfers") for e in probe["evaluations"]] == [1] * len(EVALUATED)
    # And what was read is what the step log holds
    records = step_log(run_dir)
    assert [r["step"] for r in records if "loss" in r] == LOGGED
    assert [r["step"] for r in records if "eval_mlm_accuracy" in r] == EVALUATED
    summary = probe["summary"]
    assert (summary["device"], summary["precision"], summary["eval"]["samples"]) == (
        "xla",
        "bf16",
        EVAL_SAMPLES,
    )
