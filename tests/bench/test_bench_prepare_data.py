"""The data-preparation bench's statistics (the figures of BENCHMARKS.md's comparison table),
checked against figures worked out by hand on a tiny hand-made shard set."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

from bench.bench_prepare_data import shard_statistics
from training.dataprep.shard_format import SHARD_FIELDS

MASK = 4
WIDTH, PRED = 128, 3


def sample(length: int, shown: dict[int, int], labels: dict[int, int], nsp: int) -> dict[str, np.ndarray]:
    """One sample: ``length`` real tokens (id 10 + position), masked slots shown as ``shown``
    (position -> id in input_ids) whose original ids are ``labels``."""
    ids = np.zeros(WIDTH, np.int64)
    ids[:length] = 10 + np.arange(length)
    positions = np.zeros(PRED, np.int64)
    masked_ids = np.zeros(PRED, np.int64)
    for slot, position in enumerate(sorted(shown)):
        ids[position] = shown[position]
        positions[slot], masked_ids[slot] = position, labels[position]
    return {
        "input_ids": ids,
        "input_mask": (np.arange(WIDTH) < length).astype(np.int64),
        "segment_ids": np.zeros(WIDTH, np.int64),
        "masked_lm_positions": positions,
        "masked_lm_ids": masked_ids,
        "next_sentence_labels": np.array(nsp, np.int64),
    }


def write_shard(path: Path, samples: list[dict[str, np.ndarray]]) -> Path:
    with h5py.File(path, "w") as handle:
        for name, (dtype, _) in SHARD_FIELDS.items():
            handle.create_dataset(name, data=np.stack([s[name] for s in samples]).astype(dtype))
    return path


@pytest.fixture
def two_shards(tmp_path: Path) -> list[Path]:
    # Sample 0: full (128 tokens), random next; position 1 shown as [MASK], position 2 kept (id 12).
    # Sample 1: 64 tokens (short, at the limit), actual next; position 3 replaced (13 -> 99).
    # Sample 2: 65 tokens (not short), random next; positions 1 and 2 [MASK], 4 kept (id 14).
    first = [
        sample(128, {1: MASK, 2: 12}, {1: 11, 2: 12}, nsp=1),
        sample(64, {3: 99}, {3: 13}, nsp=0),
    ]
    second = [sample(65, {1: MASK, 2: MASK, 4: 14}, {1: 11, 2: 12, 4: 14}, nsp=1)]
    return [
        write_shard(tmp_path / "a_training_0.hdf5", first),
        write_shard(tmp_path / "a_training_1.hdf5", second),
    ]


def test_given_hand_made_shards_when_statistics_computed_then_each_figure_is_the_hand_computed_one(
    two_shards: list[Path],
) -> None:
    stats = shard_statistics(two_shards, input_bytes=2_000_000, mask_id=MASK)

    assert stats["instances"] == 3
    assert stats["instances_per_mb"] == pytest.approx(1.5)  # 3 samples from 2 MB
    assert stats["mean_masked"] == pytest.approx(2.0)  # 2, 1 and 3 masked
    assert stats["max_masked"] == 3  # in the second file: the maximum spans files
    assert stats["nsp_random"] == pytest.approx(2 / 3)
    assert stats["fill"] == pytest.approx((128 + 64 + 65) / (3 * 128))
    assert stats["short_share"] == pytest.approx(1 / 3)  # 64 tokens counts as short, 65 does not
    assert stats["as_mask"] == pytest.approx(3 / 6)
    assert stats["unchanged"] == pytest.approx(2 / 6)
    assert stats["replaced"] == pytest.approx(1 / 6)


def test_given_shards_in_another_order_when_statistics_computed_then_figures_are_the_same(
    two_shards: list[Path],
) -> None:
    forward = shard_statistics(two_shards, 2_000_000, MASK)
    backward = shard_statistics(two_shards[::-1], 2_000_000, MASK)

    assert backward == pytest.approx(forward)


def test_given_a_corpus_when_repeated_then_the_copy_is_cached_beside_it_and_rebuilt_if_stale(tmp_path):
    from bench.bench_prepare_data import repeated

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("One line.\n\nTwo lines.\n", encoding="utf-8")

    assert repeated(corpus, 1) == corpus
    twice = repeated(corpus, 2)
    assert twice == tmp_path / "corpus-x2.txt"
    assert twice.read_bytes() == corpus.read_bytes() * 2

    corpus.write_text("A longer first line.\n\nTwo lines.\n", encoding="utf-8")
    assert repeated(corpus, 2).read_bytes() == corpus.read_bytes() * 2
