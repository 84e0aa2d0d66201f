"""Tests of training.dataprep.bert_samples: the pure sample algorithm and its work-unit contract."""

from __future__ import annotations

import math
import random

import numpy as np

from training.dataprep.bert_samples import (
    PrepConfig,
    TokenizedChunk,
    VocabInfo,
    build_pairs,
    concatenate,
    mask_count,
    mask_samples,
    pool_keep,
    record_dtype,
    unit_samples,
)

VOCAB = VocabInfo.from_tokens(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(995)])


def documents(n_docs: int, sentences: int, tokens_per_sentence: int = 1, first_id: int = 0) -> TokenizedChunk:
    """Documents whose token values encode their global document number (value // 10_000)."""
    doc_of_token = np.repeat(np.arange(n_docs), sentences * tokens_per_sentence)
    tokens = (first_id + doc_of_token) * 10_000 + np.tile(np.arange(sentences * tokens_per_sentence), n_docs)
    return TokenizedChunk(
        tokens=tokens.astype(np.int64),
        sentence_starts=np.arange(0, n_docs * sentences * tokens_per_sentence + 1, tokens_per_sentence),
        document_starts=np.arange(0, n_docs * sentences + 1, sentences),
        document_ids=np.arange(first_id, first_id + n_docs),
    )


def within(observed: int, total: int, p: float, sigmas: float = 5.0) -> bool:
    return abs(observed / total - p) <= sigmas * math.sqrt(p * (1 - p) / total)


def test_given_a_pool_of_the_whole_corpus_when_pairing_then_random_b_comes_from_any_other_document():
    unit = documents(50, 40, first_id=0)
    other = documents(150, 40, first_id=50)
    pool = concatenate([unit, other])
    pairs = np.concatenate([build_pairs(unit, PrepConfig(), random.Random(seed), pool) for seed in range(20)])
    is_random = pairs[:, 4] == 1
    doc_of_a = unit.tokens[pairs[:, 0]] // 10_000
    doc_of_b = pool.tokens[pairs[is_random, 2]] // 10_000
    assert (doc_of_b != doc_of_a[is_random]).all()
    # Uniform over the pool's documents: 150 of the 200 (less the current one) are in the other unit.
    assert within(int((doc_of_b >= 50).sum()), int(is_random.sum()), 150 / 199)
    assert len(np.unique(doc_of_b)) > 190


def test_given_one_document_in_the_pool_when_pairing_then_its_own_text_is_used():
    unit = documents(1, 400)
    pairs = build_pairs(unit, PrepConfig(), random.Random(0), unit)
    assert pairs[:, 4].any() and (pairs[:, 2:4] <= 400).all()


def test_given_a_keep_probability_when_choosing_pool_documents_then_each_is_kept_alike_and_reproducibly():
    keep = pool_keep(seed=1, unit_index=7, num_documents=100_000, keep_probability=0.3)
    assert within(int(keep.sum()), keep.size, 0.3)
    assert np.array_equal(keep, pool_keep(1, 7, 100_000, 0.3))
    assert not np.array_equal(keep, pool_keep(1, 8, 100_000, 0.3))
    assert pool_keep(1, 7, 10, 1.0).all()


def test_given_documents_when_selected_and_concatenated_then_tokens_and_boundaries_follow():
    part = TokenizedChunk(
        tokens=np.arange(10),
        sentence_starts=np.array([0, 2, 3, 7, 10]),
        document_starts=np.array([0, 1, 3, 4]),
        document_ids=np.array([5, 6, 7]),
    )
    picked = part.select(np.array([True, False, True]))
    assert picked.tokens.tolist() == [0, 1, 7, 8, 9]
    assert picked.sentence_starts.tolist() == [0, 2, 5]
    assert picked.document_starts.tolist() == [0, 1, 2]
    assert picked.document_ids.tolist() == [5, 7]
    both = concatenate([picked, part])
    assert both.tokens.tolist() == [0, 1, 7, 8, 9, *range(10)]
    assert both.sentence_starts.tolist() == [0, 2, 5, 7, 8, 12, 15]
    assert both.document_starts.tolist() == [0, 1, 2, 3, 5, 6]
    assert both.document_ids.tolist() == [5, 7, 5, 6, 7]


def test_given_lengths_when_counting_masks_then_the_reference_formula_with_python_rounding_holds():
    cfg = PrepConfig(max_pred_len=20)
    lengths = np.arange(5, 129)
    expected = [min(20, max(1, round(int(n) * 0.15))) for n in lengths]
    assert mask_count(lengths, cfg).tolist() == expected
    assert mask_count(np.array([10, 30, 50]), cfg).tolist() == [2, 4, 8]  # 1.5 -> 2, 4.5 -> 4, 7.5 -> 8


def test_given_the_same_unit_when_made_twice_then_records_are_identical_and_the_unit_index_matters():
    unit = documents(30, 60, tokens_per_sentence=7)
    unit.tokens = 5 + unit.tokens % 995
    pool = concatenate([unit, documents(30, 60, tokens_per_sentence=7, first_id=30)])
    pool.tokens = 5 + pool.tokens % 995
    cfg = PrepConfig(dupe_factor=2)
    first = unit_samples(4, unit, pool, cfg, VOCAB)
    assert first.dtype == record_dtype(cfg, VOCAB.size) and len(first) > 100
    assert first.tobytes() == unit_samples(4, unit, pool, cfg, VOCAB).tobytes()
    assert first.tobytes() != unit_samples(5, unit, pool, cfg, VOCAB).tobytes()


def test_given_many_equal_rows_when_masking_then_every_candidate_position_is_chosen_alike():
    cfg = PrepConfig()
    n, length = 20_000, 100
    ids = np.zeros((n, 128), dtype=np.int32)
    ids[:, :length] = 5 + np.arange(length) % 900
    len_a = np.full(n, 40)
    lengths = np.full(n, length)
    masked, positions, labels = mask_samples(ids, len_a, lengths, cfg, VOCAB, np.random.default_rng(0))
    counts = (positions != 0).sum(1)
    assert (counts == 15).all()  # round(0.15 x 100)
    hits = np.bincount(positions[positions != 0], minlength=128)
    candidates = [p for p in range(1, length - 1) if p != 41]  # not [CLS], the middle or the last [SEP]
    assert hits[[0, 41, length - 1]].sum() == 0 and hits[length:].sum() == 0
    expected = n * 15 / len(candidates)
    assert np.abs(hits[candidates] - expected).max() < 5 * np.sqrt(expected)
    assert (np.diff(positions, axis=1)[:, :14] > 0).all()  # ascending
    assert np.array_equal(labels, np.take_along_axis(ids, positions, axis=1) * (positions != 0))
