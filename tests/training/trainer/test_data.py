"""HDF5 shard reading, label building, rank sharding, resumable stream, memory."""

from __future__ import annotations

import itertools
import tracemalloc
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from training.dataprep.shard_format import ManifestError, manifest_for_existing, write_manifest
from training.trainer.data import (
    IGNORE_INDEX,
    DataPosition,
    ShardFormatError,
    ShardStream,
    epoch_pieces,
    list_shards,
    make_batch,
    make_loader,
    piece_order,
    position_from_tensor,
    read_shard,
)

S, P = 128, 20


def shard_arrays(n: int, seed: int = 0, first_id: int = 0) -> dict[str, np.ndarray]:
    """Valid arrays; input_ids[:, 1] holds a unique sample id so tests can track samples."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, 300, size=(n, S)).astype(np.int32)
    ids[:, 1] = np.arange(first_id, first_id + n)
    positions = np.zeros((n, P), np.int32)
    for i in range(n):
        k = rng.integers(1, P + 1)
        positions[i, :k] = np.sort(rng.choice(np.arange(2, S), k, replace=False))
    return {
        "input_ids": ids,
        "input_mask": np.ones((n, S), np.int8),
        "segment_ids": (np.arange(S) >= S // 2).astype(np.int8)[None].repeat(n, 0),
        "masked_lm_positions": positions,
        "masked_lm_ids": rng.integers(5, 300, size=(n, P)).astype(np.int32),
        "next_sentence_labels": rng.integers(0, 2, size=n).astype(np.int8),
    }


def write_shard(path: Path, arrays: dict[str, np.ndarray]) -> Path:
    with h5py.File(path, "w") as f:
        for k, v in arrays.items():
            f.create_dataset(k, data=v, compression="gzip")
    return path


def make_shards(directory: Path, count: int, n: int) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    return [
        write_shard(directory / f"x_training_{i}.hdf5", shard_arrays(n, seed=i, first_id=i * 10_000))
        for i in range(count)
    ]


def sample_ids(batch: dict[str, torch.Tensor]) -> list[int]:
    return batch["input_ids"][:, 1].tolist()


# --- reading and labels ------------------------------------------------------------------


def test_given_positions_with_terminator_then_labels_only_before_first_zero(tmp_path):
    arrays = shard_arrays(3)
    arrays["masked_lm_positions"][0] = 0
    arrays["masked_lm_positions"][0, :4] = [3, 7, 0, 9]  # 9 after the terminator is padding
    arrays["masked_lm_ids"][0, :4] = [101, 102, 103, 104]
    arrays["masked_lm_positions"][1] = np.arange(2, 2 + P)  # full list, no terminator
    arrays["masked_lm_ids"][1] = np.arange(200, 200 + P)
    shard = read_shard(str(write_shard(tmp_path / "a_training_0.hdf5", arrays)), S, P)
    batch = make_batch(shard, np.array([0, 1]))

    labels = batch["labels"]
    assert labels.dtype == torch.int64 and labels.shape == (2, S)
    assert {i: labels[0, i].item() for i in torch.nonzero(labels[0] != IGNORE_INDEX).flatten().tolist()} == {
        3: 101,
        7: 102,
    }
    assert (labels[1, 2 : 2 + P] == torch.arange(200, 200 + P)).all()
    assert (labels[1] != IGNORE_INDEX).sum() == P
    # Sparse form: same targets, padding points at [CLS] with an ignored target.
    assert batch["mlm_positions"][0, :3].tolist() == [3, 7, 0]
    assert batch["mlm_targets"][0, :3].tolist() == [101, 102, IGNORE_INDEX]
    assert (batch["mlm_targets"][0, 2:] == IGNORE_INDEX).all()
    for key in ("input_ids", "attention_mask", "token_type_ids", "next_sentence_label"):
        assert batch[key].dtype == torch.int64
    assert batch["input_ids"].tolist() == arrays["input_ids"][[0, 1]].tolist()


def test_given_prepared_shards_then_reader_accepts_data_tool_output(shards):
    for path in shards.files:
        shard = read_shard(str(path), S, P, vocab_size=shards.vocab_size)
        assert len(shard) > 0
        batch = make_batch(shard, np.arange(min(4, len(shard))))
        masked = batch["labels"] != IGNORE_INDEX
        assert masked.any(dim=1).all()  # every sample has at least one masked token
        assert (masked.sum(dim=1) == (batch["mlm_targets"] != IGNORE_INDEX).sum(dim=1)).all()


@pytest.mark.parametrize(
    ("key", "mutate", "message"),
    [
        ("masked_lm_ids", lambda a: a.pop("masked_lm_ids"), "missing dataset 'masked_lm_ids'"),
        (
            "input_mask",
            lambda a: a.update(input_mask=a["input_mask"].astype(np.int64)),
            "dataset 'input_mask' has dtype int64, expected int8",
        ),
        (
            "input_ids",
            lambda a: a.update(input_ids=a["input_ids"][:, :64]),
            "dataset 'input_ids' has shape [4, 64], expected [N, 128]",
        ),
        (
            "masked_lm_positions",
            lambda a: a.update(masked_lm_positions=a["masked_lm_positions"][:, :10]),
            "dataset 'masked_lm_positions' has shape [4, 10], expected [N, 20]",
        ),
        (
            "next_sentence_labels",
            lambda a: a.update(next_sentence_labels=a["next_sentence_labels"][:3]),
            "dataset 'next_sentence_labels' has shape [3], expected [N] with N=4",
        ),
        (
            "next_sentence_labels",
            lambda a: a.update(next_sentence_labels=a["next_sentence_labels"][:, None]),
            "dataset 'next_sentence_labels' has shape [4, 1], expected [N]",
        ),
        (
            "input_ids",
            lambda a: a["input_ids"].__setitem__((0, 0), 999),
            "'input_ids' has ids outside [0, 500)",
        ),
        (
            "masked_lm_positions",
            lambda a: a["masked_lm_positions"].__setitem__((0, 0), 128),
            "'masked_lm_positions' has values outside [0, 128)",
        ),
    ],
)
def test_given_bad_shard_then_error_names_file_and_key(tmp_path, key, mutate, message):
    arrays = shard_arrays(4)
    mutate(arrays)
    path = write_shard(tmp_path / "bad_training_0.hdf5", arrays)
    with pytest.raises(ShardFormatError) as err:
        read_shard(str(path), S, P, vocab_size=500)
    assert str(path) in str(err.value) and message in str(err.value) and key in str(err.value)


def test_given_empty_dir_then_error_asks_for_a_manifest(tmp_path):
    (tmp_path / "notes_validation_0.hdf5").write_bytes(b"")
    with pytest.raises(ManifestError, match=r"no manifest\.json; a shard set is used only with its manifest"):
        list_shards(str(tmp_path))


def test_given_shards_without_manifest_then_refused_and_told_how_to_make_one(tmp_path):
    make_shards(tmp_path, 2, 4)
    with pytest.raises(ManifestError) as err:
        list_shards(str(tmp_path))
    assert "2 *_training_*.hdf5 file(s) but no manifest.json" in str(err.value)
    assert f"python -m training.dataprep.shard_format write {tmp_path}" in str(err.value)


def test_given_a_manifest_then_its_shards_are_listed_and_a_missing_one_is_named(tmp_path):
    paths = make_shards(tmp_path, 3, 4)
    write_manifest(tmp_path, manifest_for_existing(tmp_path))
    (tmp_path / "stray_training_9.hdf5").write_bytes(b"not listed")  # only the manifest counts
    assert list_shards(str(tmp_path)) == sorted(map(str, paths))
    paths[1].unlink()
    with pytest.raises(ManifestError, match=r"shard x_training_1\.hdf5 is missing; the set is incomplete"):
        list_shards(str(tmp_path))


def test_given_the_reference_tools_single_output_file_then_it_is_the_shard_list(tmp_path):
    # NVIDIA's create_pretraining_data.py writes one --output_file of any name, no manifest.
    single = write_shard(tmp_path / "books_wiki_en_corpus_seq128.hdf5", shard_arrays(5))
    assert list_shards(str(single)) == [str(single)]
    assert len(read_shard(list_shards(str(single))[0], S, P)) == 5


def test_given_nothing_at_data_dir_then_error_names_it(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"--data_dir \S+nowhere: no such directory or file"):
        list_shards(str(tmp_path / "nowhere"))


# --- spreading over ranks -----------------------------------------------------------------


@pytest.mark.parametrize(("files", "world"), [(8, 4), (10, 4), (6, 6), (3, 8), (1, 3)])
def test_given_ranks_then_pieces_are_disjoint_deterministic_and_reshuffled(files, world):
    per_epoch = []
    for epoch in range(3):
        pieces = [epoch_pieces(files, world, r, seed=5, epoch=epoch) for r in range(world)]
        assert pieces == [epoch_pieces(files, world, r, seed=5, epoch=epoch) for r in range(world)]
        flat = [p for rank in pieces for p in rank]
        if files >= world:
            assert all(len(rank) == files // world for rank in pieces)  # equal work per rank
            assert len({p.file_index for p in flat}) == len(flat) == (files // world) * world
        else:
            # Ranks sharing a file take disjoint strided parts that cover it.
            for f in {p.file_index for p in flat}:
                parts = [p for p in flat if p.file_index == f]
                samples = [piece_order(50, p, 5, epoch) for p in parts]
                joined = np.concatenate(samples)
                assert len(joined) == 50 and len(set(joined.tolist())) == 50
        per_epoch.append([[p.file_index for p in rank] for rank in pieces])
    if files > 1:
        assert per_epoch[0] != per_epoch[1] or per_epoch[1] != per_epoch[2]


def test_given_epochs_then_sample_order_reshuffled_and_seeded():
    piece = epoch_pieces(4, 1, 0, seed=1, epoch=0)[0]
    a0, a1 = piece_order(100, piece, 1, 0), piece_order(100, piece, 1, 1)
    assert sorted(a0.tolist()) == list(range(100)) and a0.tolist() != a1.tolist()
    assert piece_order(100, piece, 1, 0).tolist() == a0.tolist()
    assert piece_order(100, piece, 2, 0).tolist() != a0.tolist()


# --- the stream ---------------------------------------------------------------------------


def stream(files, **kw) -> ShardStream:
    return ShardStream(
        [str(f) for f in files], **{"batch_size": 8, "seq_len": S, "max_pred_len": P, "seed": 3, **kw}
    )


def test_given_stream_then_every_sample_once_per_epoch_per_rank_set(tmp_path):
    files = make_shards(tmp_path, count=4, n=40)  # 40 = 5 batches of 8, no tail
    world = 2
    seen = []
    for rank in range(world):
        batches = list(itertools.islice(iter(stream(files, rank=rank, world_size=world)), 10))  # 2 shards x 5
        seen += [i for b in batches for i in sample_ids(b)]
        assert {int(b["data_position"][0]) for b in batches} == {0}  # still epoch 0
    assert sorted(seen) == sorted(i * 10_000 + j for i in range(4) for j in range(40))


def test_given_position_then_resumed_stream_continues_with_exact_next_samples(tmp_path):
    files = make_shards(tmp_path, count=5, n=27)  # tails of 3 dropped; 5 files over 2 ranks
    for rank in range(2):
        full = list(itertools.islice(iter(stream(files, rank=rank, world_size=2)), 20))  # > 1 epoch
        for cut in (1, 3, 6, 13):
            start = position_from_tensor(full[cut - 1]["data_position"])
            resumed = list(itertools.islice(iter(stream(files, rank=rank, world_size=2, start=start)), 5))
            assert [sample_ids(b) for b in resumed] == [sample_ids(b) for b in full[cut : cut + 5]]
    assert position_from_tensor(torch.tensor([1, 2, 3])) == DataPosition(1, 2, 3)


def test_given_loader_process_then_same_batches_as_in_process(tmp_path):
    files = make_shards(tmp_path, count=2, n=24)
    inproc = list(itertools.islice(iter(make_loader(stream(files), num_workers=0)), 7))
    worker = list(itertools.islice(iter(make_loader(stream(files), num_workers=1)), 7))
    assert [sample_ids(b) for b in inproc] == [sample_ids(b) for b in worker]
    with pytest.raises(ValueError, match="num_workers"):
        make_loader(stream(files), num_workers=2)


def test_given_shards_smaller_than_a_batch_then_error_not_hang(tmp_path):
    files = make_shards(tmp_path, count=2, n=5)
    with pytest.raises(ValueError, match="full batch"):
        next(iter(stream(files)))


def test_given_many_shards_then_memory_bounded_by_current_and_prefetched_shard(tmp_path):
    files = make_shards(tmp_path, count=6, n=1500)
    one_shard = read_shard(str(files[0]), S, P)
    assert {k: str(v.dtype) for k, v in one_shard.arrays.items()} == {
        "input_ids": "int32",
        "input_mask": "int8",
        "segment_ids": "int8",
        "masked_lm_positions": "int32",
        "masked_lm_ids": "int32",
        "next_sentence_labels": "int8",
    }  # stored dtypes kept, no widening
    shard_bytes = one_shard.nbytes
    del one_shard
    it = iter(stream(files, batch_size=16))
    tracemalloc.start()
    try:
        count = 0
        for _batch in itertools.islice(it, 6 * (1500 // 16)):  # every shard once
            count += 1
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 6 * 93
    # Current + prefetched shard at int32/int8, with slack for batch copies; an int64 copy of a
    # shard alone would be ~2x shard_bytes, and holding all six 6x.
    assert peak < 2.6 * shard_bytes, (peak, shard_bytes)
