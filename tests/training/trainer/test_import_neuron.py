"""Neuron's tutorial checkpoint as a start: ``python -m training.trainer.import_neuron SRC OUT``.

The source files here are written as the tutorial writes them. aws-neuron-samples at commit
2015d650cd89e4c671ae5bd1b5f1d4499d94d4dd (= tag v2.27.0 for this file),
torch-neuronx/training/dp_bert_hf_pretrain/dp_bert_large_hf_pretrain_hdf5.py, ``train_bert_hdf5``:
``model = BertForPreTraining(my_config)``, ``model.tie_weights()``,
``model.cls.predictions.decoder.bias = model.cls.predictions.bias``; the optimizer over two groups
(weight decay 0.01 / 0.0 for 'bias' and 'LayerNorm'); ``get_linear_schedule_with_warmup``; at a
checkpoint ``files_info = [f] + files`` and ``torch.save({'model': model_to_save.state_dict(),
'optimizer': optimizer.state_dict(), 'scheduler': scheduler.state_dict(), 'files': files_info,
'epoch': epoch}, os.path.join(flags.output_dir, "ckpt_{}.pt".format(global_step)))``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import BertForPreTraining, get_linear_schedule_with_warmup

from tests.training.conftest import run_module, tiny_args
from training.trainer import checkpoint as ckpt
from training.trainer.import_neuron import NeuronImportError, import_checkpoint
from training.trainer.model import load_config
from training.trainer.pretrain import main, parse_args, train


def tutorial_checkpoint(path: Path, vocab_size: int, *, seed: int = 3) -> dict:
    """A ``ckpt_<step>.pt`` as the tutorial's script saves it, of a tiny model; returns its dict."""
    torch.manual_seed(seed)
    model = BertForPreTraining(load_config("tiny", vocab_size=vocab_size))
    model.tie_weights()
    model.cls.predictions.decoder.bias = model.cls.predictions.bias
    named = list(model.named_parameters())
    no_decay = ["bias", "LayerNorm"]
    groups = [
        {"params": [p for n, p in named if not any(nd in n for nd in no_decay)], "weight_decay": 0.01},
        {"params": [p for n, p in named if any(nd in n for nd in no_decay)], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(groups, 4e-4)
    scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=2, num_training_steps=10)
    # One update, so the optimizer state is not empty (the import must drop it, not choke on it).
    model(input_ids=torch.tensor([[2, 7, 3]])).prediction_logits.sum().backward()
    optimizer.step()
    scheduler.step()
    files = [f"/data/shards/wiki_training_{i}.hdf5" for i in range(3)]
    data = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "files": [1, *files],
        "epoch": 0,
    }
    torch.save(data, path)
    return data


@pytest.fixture
def vocab_size(shards) -> int:
    return shards.vocab_size


def test_given_tutorial_checkpoint_then_imported_weights_verified_and_recorded(tmp_path, vocab_size):
    # Given a checkpoint in the tutorial's format, at step 28125
    src = tmp_path / "ckpt_28125.pt"
    saved = tutorial_checkpoint(src, vocab_size)
    # When it is imported with the command line
    done = run_module("training.trainer.import_neuron", str(src), str(tmp_path / "neuron"), "--model", "tiny")
    assert done.returncode == 0, done.stderr
    # Then OUT holds one of our checkpoints, verified by its digests, with the source's weights
    path = tmp_path / "neuron" / "checkpoints" / "step_00028125"
    meta = ckpt.verify(path)
    state = ckpt.load_state(path)
    assert state["model"].keys() == saved["model"].keys()
    assert all(torch.equal(state["model"][k], v) for k, v in saved["model"].items())
    # And it says where it came from and that it holds weights only
    assert meta["weights_only"] is True and meta["step"] == 28125
    assert meta["imported_from"]["sha256"] == ckpt.file_digest(src)["sha256"]
    assert meta["imported_from"]["step"] == 28125 and meta["imported_from"]["epoch"] == 0
    assert meta["imported_from"]["dropped"] == ["epoch", "files", "optimizer", "scheduler"]
    assert meta["model_config"]["vocab_size"] == vocab_size


def test_given_nvidia_style_names_then_renamed_as_the_tutorial_loader_does(tmp_path, vocab_size):
    # Given the names the tutorial's fix_ckpt_params repairs: a DDP 'module.' prefix and 'dense_act'
    src = tmp_path / "ckpt_10.pt"
    saved = tutorial_checkpoint(src, vocab_size)
    data = torch.load(src, weights_only=True)
    data["model"] = {
        "module." + k.replace("transform.dense.", "transform.dense_act."): v for k, v in data["model"].items()
    }
    assert "module.cls.predictions.transform.dense_act.weight" in data["model"]
    torch.save(data, src)
    # When it is imported
    path = import_checkpoint(src, tmp_path / "out", model="tiny")
    # Then the weights are under our names
    state = ckpt.load_state(path)["model"]
    assert all(torch.equal(state[k], v) for k, v in saved["model"].items())


def test_given_missing_or_unknown_key_then_refused_naming_it(tmp_path, vocab_size):
    # Given a tutorial checkpoint without the NSP head's bias, and one with an extra tensor
    missing, unknown = tmp_path / "missing" / "ckpt_5.pt", tmp_path / "unknown" / "ckpt_5.pt"
    for p in (missing, unknown):
        p.parent.mkdir()
        tutorial_checkpoint(p, vocab_size)
    data = torch.load(missing, weights_only=True)
    del data["model"]["cls.seq_relationship.bias"]
    torch.save(data, missing)
    data = torch.load(unknown, weights_only=True)
    data["model"]["bert.embeddings.position_ids"] = torch.arange(512)[None]
    torch.save(data, unknown)
    # When each is imported
    # Then the error names the key, and nothing is written
    with pytest.raises(NeuronImportError, match=r"missing key\(s\) cls\.seq_relationship\.bias;"):
        import_checkpoint(missing, tmp_path / "out", model="tiny")
    with pytest.raises(NeuronImportError, match=r"unknown key\(s\) bert\.embeddings\.position_ids;"):
        import_checkpoint(unknown, tmp_path / "out", model="tiny")
    assert not (tmp_path / "out").exists()
    # And the command line says it in one line, exit 2
    done = run_module(
        "training.trainer.import_neuron", str(missing), str(tmp_path / "out"), "--model", "tiny"
    )
    assert done.returncode == 2 and "missing key(s) cls.seq_relationship.bias" in done.stderr


def test_given_checkpoint_of_another_model_then_refused_naming_the_shapes(tmp_path, vocab_size):
    # Given a tiny tutorial checkpoint, imported as BERT-base
    src = tmp_path / "ckpt_5.pt"
    tutorial_checkpoint(src, vocab_size)
    # Then the keys it lacks and the shapes that differ are named
    with pytest.raises(NeuronImportError) as e:
        import_checkpoint(src, tmp_path / "out", model="base")
    assert "missing key(s) bert.encoder.layer.10.attention.output.LayerNorm.bias" in str(e.value)
    assert "bert.embeddings.position_embeddings.weight (512, 64) (--model base: (512, 768))" in str(e.value)


def test_given_imported_checkpoint_then_phase2_starts_from_it_and_resume_from_it_is_refused(
    shards, tmp_path, capsys
):
    # Given Neuron's phase-1 checkpoint imported
    src = tmp_path / "ckpt_28125.pt"
    tutorial_checkpoint(src, shards.vocab_size)
    imported = import_checkpoint(src, tmp_path / "neuron", model="tiny")
    # When phase 2 starts from it
    out = tmp_path / "p2"
    result = train(
        parse_args(
            tiny_args(
                shards,
                out,
                "--init_from",
                str(tmp_path / "neuron"),
                "--max_steps",
                "1",
                "--warmup_steps",
                "0",
            )
        )
    )
    # Then its records name the import and the tutorial's file behind it
    source = result["init_from"]
    assert source["checkpoint"] == str(imported.resolve()) and source["step"] == 28125
    assert source["imported_from"]["sha256"] == ckpt.file_digest(src)["sha256"]
    assert (
        json.loads((out / "checkpoints" / "step_00000001" / "meta.json").read_text())["init_from"] == source
    )
    # And resuming a run from the weights-only checkpoint is refused before the first step
    assert main(tiny_args(shards, tmp_path / "x", "--resume_ckpt", str(imported))) == 2
    assert "holds weights only" in capsys.readouterr().err
