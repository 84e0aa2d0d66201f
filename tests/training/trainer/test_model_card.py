"""The model card an export writes (``README.md``): the Hub's metadata, parsed by ``huggingface_hub``
as the Hub reads it, and the text's figures, each the one the runs' own files record.

The metadata keys are those of the Hub's model card metadata spec (huggingface/hub-docs
``modelcard.md``: ``language``, ``license``, ``library_name``, ``tags``, ``datasets``, ``metrics``
and ``model-index``, whose ``results`` hold ``task``, ``dataset`` and ``metrics`` with ``type`` and
``value``); ``ModelCard.load`` is huggingface_hub's own parser of that format.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from huggingface_hub import ModelCard
from transformers import AutoTokenizer, BertForPreTraining

from tests.training.conftest import child_env, make_held_out, run_module, tiny_args
from tests.training.trainer.test_import_neuron import tutorial_checkpoint
from training.dataprep.shard_format import sha256_of
from training.dataprep.synthetic import SMALL_SET_FLAGS, SyntheticShards, prepare_data_command
from training.trainer import checkpoint as ckpt
from training.trainer.export import export
from training.trainer.import_neuron import import_checkpoint
from training.trainer.pretrain import parse_args, train

PHASE2_SEQ, PHASE2_PRED = 256, 40


def phase2_set(shards: SyntheticShards, root: Path) -> SyntheticShards:
    """Phase 1's corpus at 256 tokens, with phase 1's vocab.txt, in a set of its own name."""
    flags = {**SMALL_SET_FLAGS, "max_seq_len": PHASE2_SEQ, "max_pred_len": PHASE2_PRED, "num_shards": 2}
    out = root / "corpus-seq256"
    command = prepare_data_command(
        input=shards.dir.parent / "corpus.txt", vocab=shards.vocab, output_dir=out, **flags
    )
    done = subprocess.run(command, env=child_env(), capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return SyntheticShards(out, shards.vocab)


def phase2_args(data: SyntheticShards, out: Path, *extra: str) -> list[str]:
    return tiny_args(
        data,
        out,
        "--seq_len",
        str(PHASE2_SEQ),
        "--max_pred_len",
        str(PHASE2_PRED),
        "--warmup_steps",
        "1",
        *extra,
    )


@pytest.fixture(scope="module")
def two_phases(shards, held_out, tmp_path_factory) -> tuple[Path, Path]:
    """Phase 1 (seq 128, 4 steps) and phase 2 from it (seq 256, 3 steps, another learning rate),
    each evaluated on a held-out set of its shape after its last step; their run directories."""
    root = tmp_path_factory.mktemp("two_phases")
    p1, p2 = root / "bert-phase1", root / "bert-phase2"
    evaluated = ("--eval_dir", str(held_out.dir), "--eval_samples", "16")
    train(parse_args(tiny_args(shards, p1, "--max_steps", "4", *evaluated)))
    data2 = phase2_set(shards, root)
    held2 = make_held_out(root / "held2", shards.vocab, seq_len=PHASE2_SEQ, max_pred_len=PHASE2_PRED)
    evaluated2 = ("--eval_dir", str(held2.dir), "--eval_samples", "8", "--lr", "1e-3")
    train(parse_args(phase2_args(data2, p2, "--max_steps", "3", "--init_from", str(p1), *evaluated2)))
    return p1, p2


def section(card: str, title: str) -> str:
    return card.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def table(text: str) -> list[list[str]]:
    """The cells of a section's Markdown table, header and separator left out."""
    rows = [line for line in text.splitlines() if line.startswith("|")]
    return [[c.strip() for c in row.strip("|").split(" | ")] for row in rows[2:]]


def test_given_two_phases_then_phase2s_card_holds_both_with_the_runs_own_figures(
    two_phases, shards, tmp_path, monkeypatch
):
    p1, p2 = two_phases
    m1 = json.loads((p1 / "metrics.json").read_text())["eval"]
    m2 = json.loads((p2 / "metrics.json").read_text())["eval"]
    start = ckpt.read_meta(ckpt.newest_complete(ckpt.checkpoint_root(p1)))
    final = ckpt.read_meta(ckpt.newest_complete(ckpt.checkpoint_root(p2)))
    # Given both phases evaluated at their ends; when phase 2 is exported as the pod program will
    hf = tmp_path / "model"
    flags = ("--vocab", str(shards.vocab), "--hardware", "2 x trn1.32xlarge", "--node_hours", "12.5")
    done = run_module("training.trainer.export", str(p2), str(hf), *flags)
    assert done.returncode == 0, done.stderr
    # Then transformers loads the folder, and huggingface_hub parses its card's metadata
    _, info = BertForPreTraining.from_pretrained(hf, output_loading_info=True)
    assert {k: v for k, v in info.items() if v} == {}
    AutoTokenizer.from_pretrained(hf)
    card = ModelCard.load(hf / "README.md")
    data = card.data
    assert (data.license, data.language, data.library_name) == ("apache-2.0", "en", "transformers")
    assert {"bert", "trainium"} <= set(data.tags) and data.pipeline_tag == "fill-mask"
    assert data.datasets == ["shards", "corpus-seq256"] and data.metrics == ["accuracy"]
    # And its results are phase 2's metrics.json figures, as they are
    results = {r.metric_name: r for r in data.eval_results}
    assert data.model_name == "bert-phase2"
    assert results["masked-LM accuracy"].metric_value == m2["mlm_accuracy"]
    assert results["next-sentence accuracy"].metric_value == m2["nsp_accuracy"]
    assert results["masked-LM accuracy"].task_type == "fill-mask"
    assert results["masked-LM accuracy"].dataset_type == "held-out-seq256"
    # And the text gives each phase's evaluation at its last step, from its own metrics.json
    rows = {r[0]: r for r in table(section(card.text, "Evaluation"))}
    for phase, m in (("phase 1", m1), ("phase 2", m2)):
        assert rows[phase][1:7] == [
            str(m["step"]),
            f"`held-out-seq{128 if phase == 'phase 1' else 256}`",
            str(m["samples"]),
            f"{m['mlm_loss']:.4f}",
            f"{m['mlm_accuracy']:.4f}",
            f"{m['nsp_accuracy']:.4f}",
        ]
    assert "0.720" in card.text and "MLPerf's own set" in card.text
    # And each phase's steps, global batch, learning rate, shapes; the hardware given for phase 2
    training = {r[0]: r[1:] for r in table(section(card.text, "Training"))}
    assert training["steps"] == ["4 of 4 (finished)", "3 of 3 (finished)"]
    assert training["global batch (micro-batch x accumulation x workers)"] == ["8 (4 x 2 x 1 workers)"] * 2
    assert training["peak learning rate"] == ["0.002", "0.001"]
    assert training["sequence length / masked positions"] == ["128 / 20", "256 / 40"]
    assert training["hardware"] == ["not recorded", "2 x trn1.32xlarge"]
    assert training["node-hours"] == ["not recorded", "12.5"]
    # And the data: each set's name, manifest source, shape, casing and vocabulary
    sets = {(r[0], r[1]): r[2:] for r in table(section(card.text, "Data"))}
    vocab = sha256_of(shards.vocab)
    assert (
        sets[("phase 1", "training")][0] == "`shards`"
        and sets[("phase 2", "training")][0] == "`corpus-seq256`"
    )
    assert sets[("phase 1", "training")][2].startswith("made by `training.prepare_data` from 1 input file(s)")
    assert sets[("phase 2", "training")][4:] == ["256 / 40", "lower-cased", vocab]
    assert (
        f"SHA-256 `{vocab}`); lower-cased, accents stripped, as the manifest of `corpus-seq256`" in card.text
    )
    # And the lineage: phase 2's start is phase 1's final checkpoint, by its recorded digest
    lineage = section(card.text, "Lineage")
    recorded = final["init_from"]["state_sha256"]
    assert recorded == start["files"]["state.pt"]["sha256"]
    assert f"(step 4 of run `{p1.resolve()}`), `state.pt` SHA-256 `{recorded}`" in lineage
    assert final["files"]["state.pt"]["sha256"] in lineage
    # And the lines it gives load the folder, from beside it
    code = section(card.text, "How to load").split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(hf.parent)
    exec(code, {})  # noqa: S102 - the card's own lines, run as a reader would


def test_given_the_same_checkpoint_exported_again_then_the_folder_is_the_same_bytes(
    two_phases, shards, tmp_path
):
    _, p2 = two_phases
    first = export(str(p2), tmp_path / "model", vocab=shards.vocab)
    before = {p.name: p.read_bytes() for p in first.iterdir()}
    again = export(str(p2), tmp_path / "model", vocab=shards.vocab)
    assert {p.name: p.read_bytes() for p in again.iterdir()} == before
    assert "README.md" in before and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_given_phase1_gone_then_phase2_still_exports_and_its_card_says_so(shards, tmp_path):
    # Given phase 2 from a phase 1 whose run directory is removed after
    p1, p2 = tmp_path / "p1", tmp_path / "p2"
    train(parse_args(tiny_args(shards, p1, "--max_steps", "2")))
    train(parse_args(tiny_args(shards, p2, "--max_steps", "2", "--init_from", str(p1))))
    shutil.rmtree(p1)
    # When phase 2 is exported
    card = ModelCard.load(export(str(p2), tmp_path / "model", vocab=shards.vocab) / "README.md")
    # Then phase 1 shows what phase 2 recorded of it, and that it could not be read
    training = {r[0]: r[1:] for r in table(section(card.text, "Training"))}
    assert training["steps"] == ["2 (schedule not recorded)", "2 of 2 (finished)"]
    assert "not readable here" in section(card.text, "Evaluation")
    assert card.data.eval_results is None  # phase 2 had no --eval_dir: no results to claim


def test_given_phase2_from_neurons_checkpoint_then_the_card_names_the_import(shards, tmp_path):
    # Given Neuron's tutorial checkpoint, imported, and phase 2 from it
    src = tmp_path / "ckpt_28125.pt"
    tutorial_checkpoint(src, shards.vocab_size)
    imported = import_checkpoint(src, tmp_path / "neuron", model="tiny")
    p2 = tmp_path / "p2"
    train(parse_args(tiny_args(shards, p2, "--max_steps", "2", "--init_from", str(tmp_path / "neuron"))))
    # When it is exported
    card = ModelCard.load(export(str(p2), tmp_path / "model", vocab=shards.vocab) / "README.md")
    # Then phase 1 is the import: the tutorial file, its digest and step, and the checkpoint it became
    lineage = section(card.text, "Lineage")
    digest = ckpt.file_digest(src)["sha256"]
    assert (
        f"Neuron's checkpoint `{src.resolve()}`" in lineage
        and f"SHA-256 `{digest}`, its step 28125" in lineage
    )
    assert f"as `{imported.resolve()}`" in lineage
    training = {r[0]: r[1:] for r in table(section(card.text, "Training"))}
    assert training["run"][0] == "Neuron's `dp_bert_large_hf_pretrain` tutorial"
    assert training["steps"] == ["28125 (schedule not recorded)", "2 of 2 (finished)"]
    assert [r[0] for r in table(section(card.text, "Training"))][:1] == ["run"]
    assert "phase 1 (imported)" in section(card.text, "Training")
