"""Neuron's tutorial checkpoint as a start: ``python -m training.trainer.import_neuron SRC OUT``.

The source files here are written as the tutorial writes them. aws-neuron-samples at commit
2015d650cd89e4c671ae5bd1b5f1d4499d94d4dd (= tag v2.27.0 for this file; the same at its first commit,
f4c6f69 of 2022-10-06, but for the optimizer's class),
torch-neuronx/training/dp_bert_hf_pretrain/dp_bert_large_hf_pretrain_hdf5.py, ``train_bert_hdf5``:
``model = BertForPreTraining(my_config)``, ``model.tie_weights()``,
``model.cls.predictions.decoder.bias = model.cls.predictions.bias``; the optimizer over two groups
(weight decay 0.01 / 0.0 for 'bias' and 'LayerNorm'); ``get_linear_schedule_with_warmup``; at a
checkpoint ``files_info = [f] + files`` and ``torch.save({'model': model_to_save.state_dict(),
'optimizer': optimizer.state_dict(), 'scheduler': scheduler.state_dict(), 'files': files_info,
'epoch': epoch}, os.path.join(flags.output_dir, "ckpt_{}.pt".format(global_step)))``.

``model.state_dict()`` has the keys of the transformers release the samples pinned when the file
was written: 4.15.0 for the published ``ckpt_28125.pt`` (with ``bert.embeddings.position_ids``),
4.44.0 for the current script (without). The files are built from those releases' key lists in
``recorded/`` (where they come from: ``recorded/README.md``), not from the transformers installed
here, which has one layout only.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import BertConfig, BertForPreTraining, get_linear_schedule_with_warmup

from tests.training.conftest import run_module, tiny_args
from training.trainer import checkpoint as ckpt
from training.trainer.import_neuron import NeuronImportError, import_checkpoint, read_source
from training.trainer.model import load_config
from training.trainer.pretrain import main, parse_args, train

RECORDED = Path(__file__).with_name("recorded") / "bert_for_pretraining_state_dict.json"
#: The transformers releases whose layouts the tutorial's files have: the published file's, and
#: the current script's.
PUBLISHED, CURRENT = "4.15.0", "4.44.0"
#: 4.15.0's persistent buffer (modeling_bert.py lines 179-181 at v4.15.0), first in its state dict.
POSITION_IDS = "bert.embeddings.position_ids"


def recorded_layout(release: str, config: BertConfig) -> list[tuple[str, tuple[int, ...], torch.dtype]]:
    """``release``'s ``BertForPreTraining.state_dict()`` for ``config``: (key, shape, dtype), in order."""
    recorded = json.loads(RECORDED.read_text())
    assert config.num_hidden_layers == recorded["num_hidden_layers"], "keys recorded for 2 layers"
    return [
        (key, tuple(getattr(config, d) if isinstance(d, str) else d for d in shape), getattr(torch, dtype))
        for key, shape, dtype in recorded["state_dict"][release]
    ]


def state_dict_of(release: str, model: BertForPreTraining) -> dict[str, torch.Tensor]:
    """``model.state_dict()`` as transformers ``release`` returns it: its keys, in its order, holding
    ``model``'s tensors (the same parameters, ties included) and 4.15.0's ``position_ids`` buffer."""
    ours = model.state_dict()
    state = {}
    for key, shape, dtype in recorded_layout(release, model.config):
        if key == POSITION_IDS:
            value = torch.arange(model.config.max_position_embeddings).expand((1, -1))  # 4.15.0 line 181
        else:
            value = ours[key]  # a KeyError here: that release has a parameter ours lacks
        assert (tuple(value.shape), value.dtype) == (shape, dtype), key
        state[key] = value
    return state


def tutorial_checkpoint(path: Path, vocab_size: int, *, seed: int = 3, release: str = PUBLISHED) -> dict:
    """A ``ckpt_<step>.pt`` as the tutorial's script saves it under transformers ``release``, of a tiny
    model; returns its dict."""
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
        "model": state_dict_of(release, model),
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


def imported_weights(saved: dict) -> dict[str, torch.Tensor]:
    """What an import of ``saved`` must write: its weights, without 4.15.0's buffer."""
    return {k: v for k, v in saved["model"].items() if k != POSITION_IDS}


@pytest.mark.parametrize("release", [PUBLISHED, CURRENT])
def test_given_tutorial_checkpoint_then_imported_weights_verified_and_recorded(tmp_path, vocab_size, release):
    # Given a checkpoint in the tutorial's format, at step 28125, of either transformers release
    src = tmp_path / "ckpt_28125.pt"
    saved = tutorial_checkpoint(src, vocab_size, release=release)
    assert (POSITION_IDS in saved["model"]) == (release == PUBLISHED)
    # When it is imported with the command line
    done = run_module("training.trainer.import_neuron", str(src), str(tmp_path / "neuron"), "--model", "tiny")
    assert done.returncode == 0, done.stderr
    # Then OUT holds one of our checkpoints, verified by its digests, with the source's weights
    path = tmp_path / "neuron" / "checkpoints" / "step_00028125"
    meta = ckpt.verify(path)
    state = ckpt.load_state(path)
    expected = imported_weights(saved)
    assert state["model"].keys() == expected.keys()
    assert all(torch.equal(state["model"][k], v) for k, v in expected.items())
    # And today's BertForPreTraining loads them strictly (no key missing or left over)
    BertForPreTraining(load_config("tiny", vocab_size=vocab_size)).load_state_dict(
        state["model"], strict=True
    )
    # And it says where it came from and that it holds weights only
    assert meta["weights_only"] is True and meta["step"] == 28125
    assert meta["imported_from"]["sha256"] == ckpt.file_digest(src)["sha256"]
    assert meta["imported_from"]["step"] == 28125 and meta["imported_from"]["epoch"] == 0
    assert meta["imported_from"]["dropped"] == ["epoch", "files", "optimizer", "scheduler"]
    assert meta["model_config"]["vocab_size"] == vocab_size


def test_given_nvidia_style_names_then_renamed_as_the_tutorial_loader_does(tmp_path, vocab_size):
    # Given the names the tutorial's fix_ckpt_params repairs: a DDP 'module.' prefix (on 4.15.0's
    # position_ids too) and 'dense_act'
    src = tmp_path / "ckpt_10.pt"
    saved = tutorial_checkpoint(src, vocab_size)
    data = torch.load(src, weights_only=True)
    data["model"] = {
        "module." + k.replace("transform.dense.", "transform.dense_act."): v for k, v in data["model"].items()
    }
    assert "module.cls.predictions.transform.dense_act.weight" in data["model"]
    assert "module." + POSITION_IDS in data["model"]
    torch.save(data, src)
    # When it is imported
    path = import_checkpoint(src, tmp_path / "out", model="tiny")
    # Then the weights are under our names
    state = ckpt.load_state(path)["model"]
    expected = imported_weights(saved)
    assert state.keys() == expected.keys()
    assert all(torch.equal(state[k], v) for k, v in expected.items())


@pytest.mark.parametrize(
    ("position_ids", "problem"),
    [
        (torch.arange(512).flip(0)[None], r"is not 0\.\.511 \(position 0 holds 511\)"),
        (torch.arange(512), r"has shape \(512,\), not \(1, 512\)"),
        (torch.arange(128)[None], r"has shape \(1, 128\), not \(1, 512\)"),
        (torch.arange(512.0)[None], r"is torch\.float32, not an integer tensor"),
    ],
    ids=["reversed", "no-batch-dim", "shorter", "float"],
)
def test_given_position_ids_other_than_arange_then_refused_naming_the_key(
    tmp_path, vocab_size, position_ids, problem
):
    # Given a 4.15.0 checkpoint whose position_ids buffer is not arange(max_position_embeddings), (1, 512)
    src = tmp_path / "ckpt_5.pt"
    tutorial_checkpoint(src, vocab_size)
    data = torch.load(src, weights_only=True)
    data["model"][POSITION_IDS] = position_ids
    torch.save(data, src)
    # When it is imported
    # Then the error names the key and what is wrong with it, and nothing is written
    with pytest.raises(NeuronImportError, match=rf"ckpt_5\.pt: bert\.embeddings\.position_ids {problem}: "):
        import_checkpoint(src, tmp_path / "out", model="tiny")
    assert not (tmp_path / "out").exists()


def test_given_position_ids_of_another_integer_dtype_then_accepted(tmp_path, vocab_size):
    # Given a 4.15.0 checkpoint whose position_ids are arange in int32 (the tutorial's strict
    # load_state_dict copies them into its int64 buffer)
    src = tmp_path / "ckpt_5.pt"
    saved = tutorial_checkpoint(src, vocab_size)
    data = torch.load(src, weights_only=True)
    data["model"][POSITION_IDS] = torch.arange(512, dtype=torch.int32)[None]
    torch.save(data, src)
    # When it is imported, then the weights are written without it
    state = ckpt.load_state(import_checkpoint(src, tmp_path / "out", model="tiny"))["model"]
    assert state.keys() == imported_weights(saved).keys()


def test_given_the_tutorials_zip_format_then_the_file_is_mapped_and_a_pre_1_6_file_is_read(
    tmp_path, vocab_size
):
    # Given the tutorial's file (torch.save's default zip format since torch 1.6) and the same
    # dict in the format before it
    src, legacy = tmp_path / "ckpt_5.pt", tmp_path / "legacy" / "ckpt_5.pt"
    saved = tutorial_checkpoint(src, vocab_size)
    legacy.parent.mkdir()
    torch.save(torch.load(src, weights_only=True), legacy, _use_new_zipfile_serialization=False)
    # When each is read
    mapped, read = read_source(src), read_source(legacy)
    # Then the zip file is mapped into memory (its tensors are its pages), the other read whole
    maps = Path("/proc/self/maps").read_text()
    assert str(src.resolve()) in maps and str(legacy.resolve()) not in maps
    # And both hold the tutorial's weights
    for data in (mapped, read):
        assert all(torch.equal(data["model"][k], v) for k, v in saved["model"].items())


def test_given_missing_or_unknown_key_then_refused_naming_it(tmp_path, vocab_size):
    # Given a tutorial checkpoint without the NSP head's bias, and one with a tensor that neither
    # release saves (4.15.0 registers token_type_ids persistent=False, modeling_bert.py line 186)
    missing, unknown = tmp_path / "missing" / "ckpt_5.pt", tmp_path / "unknown" / "ckpt_5.pt"
    for p in (missing, unknown):
        p.parent.mkdir()
        tutorial_checkpoint(p, vocab_size)
    data = torch.load(missing, weights_only=True)
    del data["model"]["cls.seq_relationship.bias"]
    torch.save(data, missing)
    data = torch.load(unknown, weights_only=True)
    data["model"]["bert.embeddings.token_type_ids"] = torch.zeros(1, 512, dtype=torch.long)
    torch.save(data, unknown)
    # When each is imported
    # Then the error names the key, and nothing is written
    with pytest.raises(NeuronImportError, match=r"missing key\(s\) cls\.seq_relationship\.bias;"):
        import_checkpoint(missing, tmp_path / "out", model="tiny")
    with pytest.raises(NeuronImportError, match=r"unknown key\(s\) bert\.embeddings\.token_type_ids;"):
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
