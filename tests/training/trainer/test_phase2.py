"""Phase 2 from phase 1's weights (``--init_from``), and the result exported for ``transformers``."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
import torch
import transformers
from transformers import AutoTokenizer, BertForPreTraining

from tests.training.conftest import child_env, run_module, tiny_args
from training.dataprep.synthetic import SMALL_SET_FLAGS, SyntheticShards, prepare_data_command
from training.dataprep.vocab import WordPieceEncoder
from training.trainer import checkpoint as ckpt
from training.trainer.data import ShardStream, list_shards
from training.trainer.export import ExportError, export
from training.trainer.init_from import InitFromError
from training.trainer.model import additive_attention_mask
from training.trainer.pretrain import main, parse_args, resume, set_up, train
from training.trainer.stop import GracefulStop

PHASE2_SEQ, PHASE2_PRED = 256, 40


@pytest.fixture(scope="module")
def phase2_shards(shards: SyntheticShards, tmp_path_factory: pytest.TempPathFactory) -> SyntheticShards:
    """The phase-1 corpus at another sequence length, made with the phase-1 vocab.txt (as a user
    makes the phase-2 set: one vocabulary for both phases)."""
    import subprocess

    out = tmp_path_factory.mktemp("phase2") / "shards"
    flags = {**SMALL_SET_FLAGS, "max_seq_len": PHASE2_SEQ, "max_pred_len": PHASE2_PRED, "num_shards": 2}
    corpus = shards.dir.parent / "corpus.txt"
    command = prepare_data_command(input=corpus, vocab=shards.vocab, output_dir=out, **flags)
    done = subprocess.run(command, env=child_env(), capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return SyntheticShards(out, shards.vocab)


@pytest.fixture(scope="module")
def phase1(shards: SyntheticShards, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished 4-step phase-1 run (seq 128); its output_dir."""
    out = tmp_path_factory.mktemp("phase1") / "run"
    train(parse_args(tiny_args(shards, out, "--max_steps", "4")))
    return out


def phase2_args(data: SyntheticShards, out: Path, *extra: str) -> list[str]:
    return tiny_args(
        data,
        out,
        "--seq_len",
        str(PHASE2_SEQ),
        "--max_pred_len",
        str(PHASE2_PRED),
        "--max_steps",
        "4",
        "--warmup_steps",
        "1",
        "--checkpoint_every",
        "2",
        *extra,
    )


def newest(out: Path) -> Path:
    found = ckpt.newest_complete(ckpt.checkpoint_root(out))
    assert found is not None
    return found


def test_given_phase1_run_then_phase2_starts_from_its_weights_with_its_own_optimizer(
    phase1, phase2_shards, tmp_path
):
    # Given the run directory of a finished phase 1
    source = newest(phase1)
    weights = ckpt.load_state(source)["model"]
    args = parse_args(phase2_args(phase2_shards, tmp_path / "p2", "--init_from", str(phase1)))
    # When phase 2 is set up (everything up to its first step)
    stop = GracefulStop()
    try:
        run = set_up(args, stop)
        resume(run)
    finally:
        stop.close()
    # Then it holds phase 1's final weights, a fresh optimizer and its own schedule from step 0
    ours = run.state.module.hf_model.state_dict()
    assert ours.keys() == weights.keys()
    assert all(torch.equal(ours[k], weights[k]) for k in weights)
    assert run.step == 0 and run.loaded is None
    assert run.state.optimizer.state_dict()["state"] == {}
    assert run.state.scheduler.last_epoch == 0
    assert run.init_from is not None and run.init_from["step"] == 4


def test_given_phase1_then_phase2_at_another_seq_len_then_export_gives_identical_logits(
    phase1, phase2_shards, tmp_path
):
    # Given phase 1 (seq 128) and phase 2 from its run directory (seq 256, 40 predictions)
    p2 = tmp_path / "p2"
    result = train(parse_args(phase2_args(phase2_shards, p2, "--init_from", str(phase1))))
    # Then phase 2 ran its own 4 steps and its checkpoints and metrics name phase 1's checkpoint
    assert result["start_step"] == 0 and result["end_step"] == 4
    source = newest(phase1)
    source_meta = ckpt.read_meta(source)
    final = newest(p2)
    recorded = ckpt.read_meta(final)["init_from"]
    assert recorded == {
        "checkpoint": str(source.resolve()),
        "run": str(phase1.resolve()),
        "step": 4,
        "state_sha256": source_meta["files"][ckpt.STATE_FILE]["sha256"],
    }
    assert ckpt.load_state(final)["init_from"] == recorded
    assert json.loads((p2 / "metrics.json").read_text())["init_from"] == recorded
    assert ckpt.read_meta(final)["vocab_sha256"] == source_meta["vocab_sha256"] is not None

    # When phase 2's final checkpoint is exported and loaded with transformers
    hf = export(str(p2), tmp_path / "hf", vocab=phase2_shards.vocab)
    model, info = BertForPreTraining.from_pretrained(hf, output_loading_info=True)
    # Then every weight is the checkpoint's (nothing missing, unexpected or re-initialised)
    assert info == {
        "missing_keys": set(),
        "unexpected_keys": set(),
        "mismatched_keys": set(),
        "error_msgs": [],
    }
    assert sorted(p.name for p in hf.iterdir()) == [
        "README.md",  # the model card: test_model_card.py
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "vocab.txt",
    ]
    # And on a phase-2 batch it gives our model's logits exactly (same weights, same fp32 kernels)
    ours = parse_args(phase2_args(phase2_shards, p2))
    stop = GracefulStop()
    try:
        run = set_up(ours, stop)
        resume(run)  # resumes p2's final checkpoint
    finally:
        stop.close()
    assert run.step == 4
    batch = next(
        iter(
            ShardStream(
                list_shards(str(phase2_shards.dir)),
                batch_size=3,
                seq_len=PHASE2_SEQ,
                max_pred_len=PHASE2_PRED,
                vocab_size=phase2_shards.vocab_size,
            )
        )
    )
    mine = run.state.module.hf_model.eval()
    model.eval()
    with torch.no_grad():
        expected = mine(
            input_ids=batch["input_ids"],
            attention_mask=additive_attention_mask(batch["attention_mask"], torch.float32),
            token_type_ids=batch["token_type_ids"],
        )
        got = model(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],  # the 2-D mask a user gives
            token_type_ids=batch["token_type_ids"],
        )
    assert batch["attention_mask"].min() == 0  # padding present: the masks matter
    # Tolerance 0: the same fp32 weights through the same CPU kernels; our additive mask and
    # transformers' own from the 2-D one mask the same positions with the same value.
    torch.testing.assert_close(got.prediction_logits, expected.prediction_logits, rtol=0, atol=0)
    torch.testing.assert_close(got.seq_relationship_logits, expected.seq_relationship_logits, rtol=0, atol=0)


def test_given_phase2_restarted_then_it_resumes_its_own_checkpoints_not_init_from(
    phase1, phase2_shards, tmp_path
):
    # Given phase 2 stopped after 2 steps, and phase 1's directory gone since
    start = tmp_path / "phase1"
    shutil.copytree(phase1, start)
    p2 = tmp_path / "p2"
    train(parse_args(phase2_args(phase2_shards, p2, "--init_from", str(start), "--steps_this_run", "2")))
    recorded = ckpt.read_meta(newest(p2))["init_from"]
    shutil.rmtree(start)
    # When it is started again with the same flags
    result = train(parse_args(phase2_args(phase2_shards, p2, "--init_from", str(start))))
    # Then it continues at its own step 2 and still names the weights it began from
    assert result["start_step"] == 2 and result["end_step"] == 4
    assert ckpt.read_meta(newest(p2))["init_from"] == recorded
    assert result["init_from"] == recorded


def _refusal(capsys, args: list[str], out: Path) -> str:
    """main()'s one-line error; nothing of the run was written (refused before the first step)."""
    assert main(args) == 2
    err = capsys.readouterr().err
    assert not (out / "train_log.jsonl").exists()
    assert ckpt.complete_checkpoints(ckpt.checkpoint_root(out)) == []
    return err


def test_given_start_checkpoint_of_another_model_then_refused_by_field_before_the_first_step(
    phase1, phase2_shards, tmp_path, capsys
):
    # Given phase 1 of the tiny model with a 400-piece vocabulary
    out = tmp_path / "p2"
    # When phase 2 asks for another model, or another vocabulary size
    base = _refusal(
        capsys, phase2_args(phase2_shards, out, "--init_from", str(phase1), "--model", "base"), out
    )
    vocab = _refusal(
        capsys, phase2_args(phase2_shards, out, "--init_from", str(phase1), "--vocab_size", "512"), out
    )
    # Then each is refused naming every field that differs, with both values
    assert "another model" in base
    assert "num_hidden_layers 2 there, 12 here" in base and "hidden_size 64 there, 768 here" in base
    assert "num_attention_heads 2 there, 12 here" in base and "intermediate_size 256 there, 3072 here" in base
    assert f"vocab_size {phase2_shards.vocab_size} there, 512 here" in vocab
    assert "hidden_size" not in vocab


def _doctored(source: Path, dest: Path, **meta_changes) -> Path:
    """A copy of a checkpoint with keys of its meta.json changed (meta.json is not digested)."""
    shutil.copytree(source, dest)
    meta = json.loads((dest / ckpt.META_FILE).read_text())
    for key, value in meta_changes.items():
        meta[key] = {**meta[key], **value} if isinstance(value, dict) else value
    (dest / ckpt.META_FILE).write_text(json.dumps(meta))
    return dest


def test_given_start_with_fewer_positions_or_another_vocabulary_then_refused_by_name(
    phase1, phase2_shards, tmp_path, capsys
):
    source = newest(phase1)
    out = tmp_path / "p2"
    # Given a start whose position embeddings stop at 128, and one made from another vocab.txt
    short = _doctored(
        source, tmp_path / "short" / "step_00000004", model_config={"max_position_embeddings": 128}
    )
    other = _doctored(source, tmp_path / "other" / "step_00000004", vocab_sha256="0" * 64)
    # When phase 2 at seq 256 starts from each
    positions = _refusal(capsys, phase2_args(phase2_shards, out, "--init_from", str(short)), out)
    vocabulary = _refusal(capsys, phase2_args(phase2_shards, out, "--init_from", str(other)), out)
    # Then each is refused, naming what does not fit
    assert "position embeddings cover 128 tokens, --seq_len is 256" in positions
    assert "another vocabulary (vocab_sha256 0000000000000000" in vocabulary


def test_given_damaged_or_missing_start_checkpoint_then_refused_naming_it(
    phase1, phase2_shards, tmp_path, capsys
):
    # Given a copy of phase 1's checkpoint with one byte of its state changed
    damaged = tmp_path / "damaged" / "step_00000004"
    shutil.copytree(newest(phase1), damaged)
    state = damaged / ckpt.STATE_FILE
    data = bytearray(state.read_bytes())
    data[len(data) // 2] ^= 0xFF
    state.write_bytes(bytes(data))
    out = tmp_path / "p2"
    # When phase 2 starts from it, or from a path that does not exist
    bad = _refusal(capsys, phase2_args(phase2_shards, out, "--init_from", str(damaged)), out)
    gone = _refusal(capsys, phase2_args(phase2_shards, out, "--init_from", str(tmp_path / "nowhere")), out)
    # Then the digest check names the file, and the missing path is named
    assert f"{state}: sha256" in bad and "does not match" in bad
    assert f"--init_from {tmp_path / 'nowhere'}: no such directory" in gone
    with pytest.raises(InitFromError, match="neither a checkpoint"):
        train(parse_args(phase2_args(phase2_shards, out, "--init_from", str(tmp_path / "damaged"))))


def test_given_export_then_tokenizer_encodes_as_the_data_tool_did(phase1, shards, tmp_path):
    # Given phase 1's run, exported on the command line with the vocab.txt its shards were made with
    hf = tmp_path / "hf"
    done = run_module("training.trainer.export", str(phase1), str(hf), "--vocab", str(shards.vocab))
    assert done.returncode == 0, done.stderr
    tokenizer = AutoTokenizer.from_pretrained(hf)
    # Then it lower-cases as the manifest says and gives the data tool's ids on the corpus
    assert tokenizer.do_lower_case is True
    lines = [x for x in (shards.dir.parent / "corpus.txt").read_text().splitlines() if x.strip()][:200]
    assert any(x != x.lower() for x in lines)  # capitals present: lower-casing matters
    encoder = WordPieceEncoder(shards.vocab, lower_case=True)
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    assert [tokenizer(x)["input_ids"] for x in lines] == [[cls, *ids, sep] for ids in encoder.encode(lines)]


def test_given_export_then_transformers_loads_it_without_warnings(phase1, shards, tmp_path, caplog):
    hf = export(str(phase1), tmp_path / "hf", vocab=shards.vocab)
    transformers.logging.enable_propagation()
    try:
        with caplog.at_level(logging.WARNING, logger="transformers"):
            BertForPreTraining.from_pretrained(hf)
            AutoTokenizer.from_pretrained(hf)
    finally:
        transformers.logging.disable_propagation()
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_given_export_with_wrong_vocab_or_casing_then_refused_naming_it(phase1, shards, tmp_path):
    # Given a vocab.txt other than the shards' (one token changed)
    other = tmp_path / "vocab.txt"
    tokens = shards.vocab.read_text().splitlines()
    other.write_text("\n".join([*tokens[:-1], "zzzz"]) + "\n")
    # When exporting with it, or with casing the manifest contradicts
    with pytest.raises(ExportError, match=r"--vocab .*vocab.txt: sha256 .* records .*not the vocabulary"):
        export(str(phase1), tmp_path / "a", vocab=other)
    with pytest.raises(ExportError, match="were made with lower-casing; leave the flag out"):
        export(str(phase1), tmp_path / "b", vocab=shards.vocab, lower_case=False)
    # Then nothing was written
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
