"""Tests of training.dataprep.prepare_data: format, labelling rules, statistics, determinism, errors.

Statistical checks use a fixed seed, so they are reproducible; their tolerances are still set
from the sample size (5 binomial standard deviations) so that they would also hold for other
seeds, and so that a real bias of a few percent fails them.
"""

from __future__ import annotations

import itertools
import math
import random
import re
import subprocess
from pathlib import Path

import h5py
import numpy as np
import pytest
from transformers import BertTokenizerFast

from tests.training.conftest import run_module
from training.dataprep.bert_samples import PrepConfig, TokenizedChunk, build_pairs, truncate_pair
from training.dataprep.prep_pipeline import prepare_shards
from training.dataprep.prep_units import plan_chunks, tokenize_documents
from training.dataprep.shard_format import SHARD_FIELDS
from training.dataprep.synthetic import build_vocab, write_corpus
from training.dataprep.vocab import SPECIAL_TOKENS, bert_tokenizer, read_vocab

REPO = Path(__file__).resolve().parents[3]
KEYS = {
    "input_ids": np.int32,
    "input_mask": np.int8,
    "segment_ids": np.int8,
    "masked_lm_positions": np.int32,
    "masked_lm_ids": np.int32,
    "next_sentence_labels": np.int8,
}
CHUNK_BYTES = 20_000  # several chunks per test corpus, so two workers both get work
BASE = PrepConfig(dupe_factor=3, seed=7)


def load_shards(paths: list[Path]) -> dict[str, np.ndarray]:
    """All datasets of ``paths``, concatenated in the given order."""
    parts: dict[str, list[np.ndarray]] = {}
    for path in paths:
        with h5py.File(path, "r") as handle:
            for key in handle:
                parts.setdefault(key, []).append(handle[key][:])
    return {key: np.concatenate(value) for key, value in parts.items()}


def within(observed: int, total: int, p: float, sigmas: float = 5.0) -> bool:
    return abs(observed / total - p) <= sigmas * math.sqrt(p * (1 - p) / total)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("corpus")
    text = write_corpus(root / "corpus.txt", n_docs=120, seed=3)
    return text, build_vocab([text], root / "vocab.txt", vocab_size=400)


@pytest.fixture(scope="module")
def vocab(corpus) -> dict[str, int]:
    return read_vocab(corpus[1])


@pytest.fixture(scope="module")
def base_run(corpus, tmp_path_factory):
    text, vocab_path = corpus
    out = tmp_path_factory.mktemp("base")
    summary = prepare_shards([text], vocab_path, out, BASE, num_shards=4, chunk_bytes=CHUNK_BYTES)
    return summary, load_shards(summary.shards)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return run_module("training.dataprep.prepare_data", *args)


def original_ids(data: dict[str, np.ndarray]) -> np.ndarray:
    """input_ids with every masked position restored from masked_lm_ids."""
    ids = data["input_ids"].copy()
    rows, slots = np.nonzero(data["masked_lm_positions"])
    ids[rows, data["masked_lm_positions"][rows, slots]] = data["masked_lm_ids"][rows, slots]
    return ids


# --- format --------------------------------------------------------------------------------


def test_shard_files_keys_dtypes_shapes_and_compression(base_run):
    summary, _ = base_run
    assert [p.name for p in summary.shards] == [f"corpus_training_{k}.hdf5" for k in range(4)]
    sizes = []
    for path in summary.shards:
        assert re.fullmatch(r".+_training_\d+\.hdf5", path.name)
        with h5py.File(path, "r") as handle:
            assert set(handle) == set(KEYS)
            n = handle["input_ids"].shape[0]
            sizes.append(n)
            for key, dtype in KEYS.items():
                dataset = handle[key]
                assert dataset.dtype == dtype, key
                assert dataset.compression == "gzip", key
                width = {"masked_lm_positions": 20, "masked_lm_ids": 20, "next_sentence_labels": None}.get(
                    key, 128
                )
                assert dataset.shape == ((n,) if width is None else (n, width)), key
    assert sum(sizes) == summary.samples > 1000
    assert max(sizes) - min(sizes) <= 1  # --num_shards gives balanced shards


def test_sequence_length_and_prediction_count_set_the_shapes(corpus, tmp_path):
    text, vocab_path = corpus
    cfg = PrepConfig(max_seq_len=64, max_pred_len=10, dupe_factor=1)
    summary = prepare_shards(
        [text], vocab_path, tmp_path, cfg, samples_per_shard=150, chunk_bytes=CHUNK_BYTES
    )
    data = load_shards(summary.shards)
    assert data["input_ids"].shape[1] == data["segment_ids"].shape[1] == 64
    assert data["masked_lm_positions"].shape[1] == data["masked_lm_ids"].shape[1] == 10
    assert len(summary.shards) == math.ceil(summary.samples / 150)
    for path in summary.shards:
        with h5py.File(path, "r") as handle:
            assert handle["input_ids"].shape[0] <= 150
    real = data["input_mask"].sum(1)
    counts = (data["masked_lm_positions"] != 0).sum(1)
    assert real.max() == 64
    # The reference's count: [CLS] and both [SEP] included, Python 3 rounding (half to even).
    assert all(c == min(10, max(1, round(int(n) * 0.15))) for n, c in zip(real, counts, strict=True))


# --- labelling rules -----------------------------------------------------------------------


def test_every_sample_is_cls_a_sep_b_sep_with_matching_masks(base_run, vocab):
    _, data = base_run
    cls, sep = vocab["[CLS]"], vocab["[SEP]"]
    ids, mask, segments = original_ids(data), data["input_mask"], data["segment_ids"]
    positions = np.arange(ids.shape[1])
    for row, seg, m in zip(ids, segments, mask, strict=True):
        length = int(m.sum())
        assert np.array_equal(m, (positions < length).astype(np.int8))  # 1 exactly on real tokens
        assert row[0] == cls
        seps = np.flatnonzero(row[:length] == sep)
        assert len(seps) == 2 and seps[1] == length - 1 and 1 < seps[0] < length - 2  # A, B non-empty
        assert not np.isin(row[1:length], [cls, 0]).any()
        assert not row[length:].any()  # padded with 0
        expected = np.zeros_like(seg)
        expected[seps[0] + 1 : length] = 1
        assert np.array_equal(seg, expected)
    assert (mask.sum(1) < 128).any() and (mask.sum(1) == 128).any()


def test_masked_positions_are_sorted_real_non_special_and_counted_by_the_formula(base_run, vocab):
    _, data = base_run
    ids = original_ids(data)
    specials = [vocab["[CLS]"], vocab["[SEP]"]]
    for row, positions, mask in zip(ids, data["masked_lm_positions"], data["masked_lm_ids"], strict=True):
        count = int(np.count_nonzero(positions))
        listed = positions[:count]
        assert (positions[count:] == 0).all() and (mask[count:] == 0).all()  # first 0 ends the list
        assert (np.diff(listed) > 0).all()  # ascending, hence unique
        length = int(np.count_nonzero(row))
        assert listed.max() < length
        assert not np.isin(row[listed], specials).any()
        assert count == min(20, max(1, round(length * 0.15)))


class TokenizedCorpus:
    """The test corpus tokenized independently (transformers' BertTokenizerFast), one string
    of space-separated ids per document, for finding where a segment comes from."""

    def __init__(self, text: Path, vocab_path: Path) -> None:
        # from_pretrained(folder): transformers 5 ignores a vocab_file= keyword of the constructor.
        reference = BertTokenizerFast.from_pretrained(str(vocab_path.parent), do_lower_case=True)
        assert reference.vocab_size == 400
        documents = [d for d in text.read_text(encoding="utf-8").split("\n\n") if d.strip()]

        def ids(line: str) -> list[int]:
            return reference(line, add_special_tokens=False)["input_ids"]

        self.docs = [self.needle([i for line in doc.splitlines() for i in ids(line)]) for doc in documents]
        self.haystack = "|".join(self.docs)
        self.doc_starts = np.cumsum([0] + [len(doc) + 1 for doc in self.docs])

    @staticmethod
    def needle(tokens) -> str:
        return " " + " ".join(map(str, list(tokens))) + " "

    def docs_with(self, segment: str) -> set[int]:
        found, at = set(), self.haystack.find(segment)
        while at >= 0:
            found.add(int(np.searchsorted(self.doc_starts, at, side="right")) - 1)
            at = self.haystack.find(segment, at + 1)
        return found

    def b_follows_a(self, a: str, b: str) -> bool:
        """Some document holds A and, after it, B (the needles share the space between)."""
        return any(
            self.docs[d].find(b, self.docs[d].index(a) + len(a) - 1) >= 0
            for d in self.docs_with(a) & self.docs_with(b)
        )


@pytest.fixture(scope="module")
def tokenized_corpus(corpus) -> TokenizedCorpus:
    return TokenizedCorpus(*corpus)


def segments(row: np.ndarray, sep: int) -> tuple[np.ndarray, np.ndarray]:
    first, second = np.flatnonzero(row == sep)[:2]
    return row[1:first], row[first + 1 : second]


def test_masked_lm_ids_restore_text_that_really_is_in_the_corpus(base_run, tokenized_corpus, vocab):
    """Restoring masked_lm_ids must give the corpus back: A and B are each a contiguous run of
    the independently tokenized corpus, and B comes later in A's document exactly when the
    label says it is the actual next segment (truncation may drop tokens between them). A wrong
    masked_lm_id or a wrong NSP label breaks this."""
    _, data = base_run
    ids = original_ids(data)
    corpus = tokenized_corpus
    checked_random = 0
    for row, label in zip(ids, data["next_sentence_labels"], strict=True):
        a, b = (corpus.needle(s) for s in segments(row, vocab["[SEP]"]))
        assert a in corpus.haystack and b in corpus.haystack
        if label == 0:
            assert corpus.b_follows_a(a, b)
        elif b.count(" ") > 7:  # a B of a few common words may recur by chance: skip those
            assert not corpus.b_follows_a(a, b)
            checked_random += 1
    assert checked_random > 0.4 * len(ids)
    # The restoration mattered: the stored input differs from the corpus at masked positions.
    assert (data["input_ids"] != ids).mean() > 0.01


def test_samples_are_shuffled_across_and_within_shards(base_run, tokenized_corpus, vocab):
    """Unshuffled, samples would follow the corpus order (chunk by chunk, document by
    document). Each shard must instead draw from the whole corpus, in no particular order."""
    summary, _ = base_run
    n_docs = len(tokenized_corpus.docs)
    for path in summary.shards:
        ids = original_ids(load_shards([path]))
        a_segments = (tokenized_corpus.needle(segments(row, vocab["[SEP]"])[0]) for row in ids)
        doc_of_a = [min(tokenized_corpus.docs_with(a)) for a in a_segments]
        assert max(doc_of_a) - min(doc_of_a) > 0.8 * n_docs
        # Order vs. position: |r| stays below 5/sqrt(n) for a random order, near 1 for corpus order.
        r = np.corrcoef(np.arange(len(doc_of_a)), doc_of_a)[0, 1]
        assert abs(r) < 5 / math.sqrt(len(doc_of_a))


def test_mask_replacement_is_80_10_10(base_run, vocab):
    _, data = base_run
    rows, slots = np.nonzero(data["masked_lm_positions"])
    shown = data["input_ids"][rows, data["masked_lm_positions"][rows, slots]]
    original = data["masked_lm_ids"][rows, slots]
    n = shown.size
    assert n > 20_000
    as_mask = shown == vocab["[MASK]"]
    unchanged = shown == original
    replaced = ~as_mask & ~unchanged
    assert within(int(as_mask.sum()), n, 0.8)
    # A random replacement equal to the original counts as unchanged: 0.1/395 extra, negligible.
    assert within(int(unchanged.sum()), n, 0.1)
    assert within(int(replaced.sum()), n, 0.1)
    special_ids = [vocab[t] for t in SPECIAL_TOKENS]
    assert not np.isin(shown[replaced], special_ids).any()
    assert len(np.unique(shown[replaced])) > 100  # drawn from the whole vocabulary


def test_next_sentence_labels_are_about_half_random(base_run):
    _, data = base_run
    labels = data["next_sentence_labels"]
    assert set(np.unique(labels)) == {0, 1}
    # A group of a single sentence (end of a document, or a short target) always takes a
    # random B, as in BERT's tool; on this corpus that adds a few percent to label 1. The exact
    # 50% on two-sentence groups is checked in test_pairs_short_targets_and_random_next_rates.
    share = labels.mean()
    assert 0.5 - 5 * math.sqrt(0.25 / labels.size) <= share <= 0.58


def _one_token_sentences(n_docs: int, sentences: int) -> TokenizedChunk:
    return TokenizedChunk(
        tokens=np.arange(n_docs * sentences, dtype=np.int32),
        sentence_starts=np.arange(n_docs * sentences + 1),
        document_starts=np.arange(0, n_docs * sentences + 1, sentences),
    )


def _targets_per_document(pairs: np.ndarray, sentences: int) -> list[set[int]]:
    """With one-token sentences, an actual-next pair not cut by its document's end is exactly
    as long as its target: the set of those lengths per document."""
    doc_of_a = pairs[:, 0] // sentences
    inner = np.append(doc_of_a[1:] == doc_of_a[:-1], False) & (pairs[:, 4] == 0)
    lengths = (pairs[:, 1] - pairs[:, 0]) + (pairs[:, 3] - pairs[:, 2])
    targets: dict[int, set[int]] = {}
    for doc, length in zip(doc_of_a[inner].tolist(), lengths[inner].tolist(), strict=True):
        targets.setdefault(doc, set()).add(length)
    return list(targets.values())


def test_pairs_draw_one_target_per_document_and_half_random_next():
    """The reference draws the (possibly short) target once per document and pass."""
    # 1000 sentences: even a full-length target gives a document 8 groups, so nearly every
    # document shows its target in an actual-next pair (else long targets would be undercounted).
    chunk = _one_token_sentences(n_docs=1500, sentences=1000)
    pairs = build_pairs(chunk, PrepConfig(short_seq_prob=0.3), random.Random(1))
    targets = _targets_per_document(pairs, 1000)
    assert len(targets) > 1450
    assert all(len(t) == 1 for t in targets)  # one target for the whole document
    short = sum(min(t) < 125 for t in targets)
    # randint(2, 125) is below 125 for 123 of its 124 values.
    assert within(short, len(targets), 0.3 * 123 / 124)
    # A group of two or more sentences takes a random B half of the time.
    doc_of_a = pairs[:, 0] // 1000
    two_or_more = (pairs[:, 1] - pairs[:, 0] > 0) & np.append(doc_of_a[1:] == doc_of_a[:-1], False)
    assert within(int(pairs[two_or_more, 4].sum()), int(two_or_more.sum()), 0.5, sigmas=8)
    is_random = pairs[:, 4] == 1
    assert (pairs[is_random, 2] // 1000 != doc_of_a[is_random]).all()  # B from another document
    assert (pairs[~is_random, 2] == pairs[~is_random, 1]).all()  # B right after A

    no_short = build_pairs(chunk, PrepConfig(short_seq_prob=0.0), random.Random(1))
    assert all(t == {125} for t in _targets_per_document(no_short, 1000))


def test_target_per_sample_draws_a_target_for_every_pair():
    chunk = _one_token_sentences(n_docs=200, sentences=3000)
    pairs = build_pairs(chunk, PrepConfig(short_seq_prob=0.3, target_per_sample=True), random.Random(1))
    targets = _targets_per_document(pairs, 3000)
    # About 20 actual-next pairs per document: short and full targets inside nearly every one.
    assert sum(len(t) > 1 for t in targets) > 0.95 * len(targets)


def test_whole_word_masking_masks_whole_words(corpus, tmp_path, vocab):
    text, vocab_path = corpus
    continuation = np.array([t.startswith("##") for t in sorted(vocab, key=vocab.get)])
    specials = [vocab["[CLS]"], vocab["[SEP]"]]

    def split_words(cfg: PrepConfig) -> int:
        """Masked pieces whose word is only partly masked."""
        summary = prepare_shards([text], vocab_path, tmp_path / str(cfg.whole_word_mask), cfg, num_shards=1)
        data = load_shards(summary.shards)
        ids, broken = original_ids(data), 0
        for row, positions in zip(ids, data["masked_lm_positions"], strict=True):
            masked = np.zeros(row.size, dtype=bool)
            masked[positions[positions > 0]] = True
            # A "##" piece and the token before it are one word, unless truncation cut the
            # word and left the piece right after [CLS]/[SEP].
            joined = continuation[row] & ~np.isin(np.roll(row, 1), specials)
            broken += int(np.count_nonzero(joined & (masked != np.roll(masked, 1))))
        return broken

    assert split_words(PrepConfig(dupe_factor=1, whole_word_mask=True)) == 0
    assert split_words(PrepConfig(dupe_factor=1)) > 50  # the check can see split words


# --- determinism ---------------------------------------------------------------------------


def test_same_seed_same_samples_across_runs_and_worker_counts(base_run, corpus, tmp_path):
    text, vocab_path = corpus
    first, _ = base_run
    again = prepare_shards(
        [text], vocab_path, tmp_path / "again", BASE, num_shards=4, chunk_bytes=CHUNK_BYTES
    )
    two = prepare_shards(
        [text], vocab_path, tmp_path / "two", BASE, num_shards=4, chunk_bytes=CHUNK_BYTES, num_workers=2
    )
    assert len(plan_chunks([text], CHUNK_BYTES)) >= 4
    for a, b, c in zip(first.shards, again.shards, two.shards, strict=True):
        one_shard, repeat, parallel = load_shards([a]), load_shards([b]), load_shards([c])
        for key in KEYS:
            assert np.array_equal(one_shard[key], repeat[key]), key
            assert np.array_equal(one_shard[key], parallel[key]), key


def test_a_sampled_pool_gives_the_same_samples_for_any_worker_count(corpus, tmp_path):
    """Above --pool_tokens the random-next pool is a seeded sample of documents: it must not
    depend on the workers either, and it must change the output (the pool is smaller)."""
    text, vocab_path = corpus
    cfg = PrepConfig(dupe_factor=1, seed=3)
    runs = [
        prepare_shards(
            [text],
            vocab_path,
            tmp_path / f"w{workers}-{pool}",
            cfg,
            num_shards=2,
            chunk_bytes=CHUNK_BYTES,
            num_workers=workers,
            pool_tokens=pool,
        )
        for workers, pool in ((1, 3000), (2, 3000), (1, 10**9))
    ]
    one, two, whole = (load_shards(run.shards) for run in runs)
    for key in KEYS:
        assert np.array_equal(one[key], two[key]), key
    assert not np.array_equal(one["input_ids"], whole["input_ids"])


def test_another_seed_gives_other_samples(base_run, corpus, tmp_path):
    text, vocab_path = corpus
    _, data = base_run
    other = prepare_shards(
        [text], vocab_path, tmp_path, PrepConfig(dupe_factor=3, seed=8), num_shards=4, chunk_bytes=CHUNK_BYTES
    )
    other_data = load_shards(other.shards)
    n = min(len(other_data["input_ids"]), len(data["input_ids"]))
    assert (other_data["input_ids"][:n] != data["input_ids"][:n]).any(1).mean() > 0.9


# --- input handling ------------------------------------------------------------------------


def test_chunks_cover_the_file_and_end_at_blank_lines(corpus):
    text, _ = corpus
    raw = text.read_bytes()
    chunks = plan_chunks([text], 5_000)
    assert chunks[0].start == 0 and chunks[-1].end == len(raw)
    assert all(a.end == b.start for a, b in itertools.pairwise(chunks))
    assert [c.chunk_index for c in chunks] == list(range(len(chunks)))
    assert all(raw[: c.end].endswith(b"\n\n") for c in chunks[:-1])
    assert all(c.end - c.start >= 5_000 for c in chunks[:-1])


def test_tokenize_documents_splits_on_blank_lines_and_drops_empty_text(vocab):
    tokenizer = bert_tokenizer(vocab)
    text = "The river .\nA letter\n\n \t \n\nmountain music\n\x00\n\n\n"
    chunk = tokenize_documents(text, tokenizer)
    lines = ("The river .", "A letter", "mountain music")
    expected = [tokenizer.encode(line, add_special_tokens=False).ids for line in lines]
    assert chunk.document_starts.tolist() == [0, 2, 3]  # a whitespace-only line is a blank line
    assert np.diff(chunk.sentence_starts).tolist() == [len(ids) for ids in expected]  # "\x00" line gone
    assert chunk.tokens.tolist() == [i for ids in expected for i in ids]
    assert chunk.tokens.dtype == np.int32


def test_cli_writes_shards_quietly(corpus, tmp_path):
    text, vocab_path = corpus
    result = run_cli(
        "--input",
        str(text),
        "--vocab",
        str(vocab_path),
        "--output_dir",
        str(tmp_path / "set"),
        "--output_prefix",
        "wiki",
        "--dupe_factor",
        "1",
        "--num_shards",
        "2",
        "--num_workers",
        "1",
        "--no_progress",
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert "wrote" in result.stdout and "2 shard(s)" in result.stdout
    assert [p.name for p in tmp_path.iterdir()] == ["set"]  # the staging directory is gone
    names = sorted(p.name for p in (tmp_path / "set").iterdir())
    assert names == ["manifest.json", "wiki_training_0.hdf5", "wiki_training_1.hdf5"]


@pytest.fixture(scope="module")
def bad_inputs(corpus, tmp_path_factory) -> dict[str, Path]:
    text, vocab_path = corpus
    root = tmp_path_factory.mktemp("bad")
    no_mask = root / "no_mask.txt"
    no_mask.write_text("".join(f"{t}\n" for t in read_vocab(vocab_path) if t != "[MASK]"), encoding="utf-8")
    pad_not_first = root / "pad_not_first.txt"
    lines = vocab_path.read_text(encoding="utf-8").splitlines()
    pad_not_first.write_text("\n".join(lines[1:] + lines[:1]) + "\n", encoding="utf-8")
    blank = root / "blank.txt"
    blank.write_text("\n \n\n\t\n", encoding="utf-8")
    occupied = root / "occupied"
    occupied.mkdir()
    (occupied / "corpus_training_0.hdf5").write_bytes(b"\x89HDF\r\n\x1a\n\xff\xfe")
    return {
        "text": text,
        "vocab": vocab_path,
        "no_mask": no_mask,
        "pad_not_first": pad_not_first,
        "blank": blank,
        "occupied": occupied,
        "root": root,
    }


@pytest.mark.parametrize(
    "case, overrides, expected",
    [
        (
            "missing vocab",
            {"--vocab": "{root}/nope.txt"},
            r"--vocab \S+nope\.txt: file not found; build one with",
        ),
        (
            "vocab lacks a special",
            {"--vocab": "{no_mask}"},
            r"--vocab \S+: lacks special token\(s\) \[MASK\]",
        ),
        (
            "vocab is binary",
            {"--vocab": "{occupied}/corpus_training_0.hdf5"},
            r"--vocab \S+: not a UTF-8 text file",
        ),
        ("pad not first", {"--vocab": "{pad_not_first}"}, r"--vocab \S+: \[PAD\] has id \d+, .*first line"),
        ("empty corpus", {"--input": "{blank}"}, r"--input \S+blank\.txt: corpus is empty"),
        ("missing input", {"--input": "{root}/none"}, r"--input \S+none: no such file or directory"),
        (
            "prediction > length",
            {"--max_pred_len": "200"},
            r"--max_pred_len 200: must be between 1 and .* = 125",
        ),
        ("probability", {"--masked_lm_prob": "1.5"}, r"--masked_lm_prob 1.5: must be in \(0, 1\]"),
        ("too many shards", {"--num_shards": "100000"}, r"--num_shards 100000: only \d+ samples were made"),
        (
            "existing shards",
            {"--output_dir": "{occupied}"},
            r"--output_dir \S+occupied: already holds 1 .*--overwrite",
        ),
        ("not an integer", {"--dupe_factor": "two"}, r"argument --dupe_factor: invalid int value: 'two'"),
        (
            "output among inputs",
            {"--input": "{root}", "--output_dir": "{root}"},
            r"--output_dir \S+: holds input file",
        ),
    ],
)
def test_bad_input_fails_with_one_line(bad_inputs, tmp_path, case, overrides, expected):
    args = {
        "--input": str(bad_inputs["text"]),
        "--vocab": str(bad_inputs["vocab"]),
        "--output_dir": str(tmp_path),
        "--dupe_factor": "1",
        "--num_workers": "1",
    }
    args.update({k: v.format(**{n: str(p) for n, p in bad_inputs.items()}) for k, v in overrides.items()})
    result = run_cli(*[item for pair in args.items() for item in pair], "--no_progress")
    assert result.returncode == 2, (case, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("python -m training.dataprep.prepare_data: error: ")
    assert re.search(expected, lines[0]), lines[0]
    assert not list(tmp_path.glob("*.hdf5"))


def test_truncation_trims_the_longer_segment_at_random_ends():
    """Lengths must match the reference rule (drop one token at a time from the longer
    segment, B on a tie); each dropped token comes off the front half of the time."""
    rng = random.Random(0)
    fronts = drops = 0
    for len_a in range(1, 70, 3):
        for len_b in range(1, 70, 4):
            for max_tokens in (2, 5, 64, 125):
                a, b = len_a, len_b
                while a + b > max_tokens:
                    a, b = (a - 1, b) if a > b else (a, b - 1)
                a0, a1, b0, b1 = truncate_pair(1000, 1000 + len_a, 5000, 5000 + len_b, max_tokens, rng)
                assert (a1 - a0, b1 - b0) == (a, b)
                assert 1000 <= a0 <= a1 <= 1000 + len_a and 5000 <= b0 <= b1 <= 5000 + len_b
                fronts += (a0 - 1000) + (b0 - 5000)
                drops += (len_a - a) + (len_b - b)
    assert drops > 10_000 and within(fronts, drops, 0.5)


def _random_records(cfg: PrepConfig, samples: int, rng: np.random.Generator) -> np.ndarray:
    """Spool records with random values in their fields' ranges (30,522-token vocab)."""
    from training.dataprep.bert_samples import record_dtype

    seq, pred = cfg.max_seq_len, cfg.max_pred_len
    records = np.zeros(samples, dtype=record_dtype(cfg, 30522))
    records["ids"] = rng.integers(0, 30522, size=(samples, seq))
    records["length"] = rng.integers(5, seq + 1, size=samples)
    records["len_a"] = rng.integers(1, 3, size=samples)
    records["positions"] = rng.integers(0, seq, size=(samples, pred))
    records["labels"] = rng.integers(0, 30522, size=(samples, pred))
    records["next_sentence"] = rng.integers(0, 2, size=samples)
    return records


@pytest.mark.parametrize("samples", [1, 1023, 1024, 2500])
def test_shards_written_chunk_by_chunk_read_back_exactly(tmp_path, samples):
    """write_hdf5 compresses each chunk itself (shuffle + deflate): h5py must read back every
    value, through a partial last chunk too."""
    from training.dataprep.shard_writer import write_hdf5

    cfg = PrepConfig(max_seq_len=32, max_pred_len=5)
    records = _random_records(cfg, samples, np.random.default_rng(samples))
    write_hdf5(tmp_path / "shard.hdf5", records, cfg)
    data = load_shards([tmp_path / "shard.hdf5"])
    assert np.array_equal(data["input_ids"], records["ids"].astype(np.int32))
    assert np.array_equal(data["masked_lm_positions"], records["positions"].astype(np.int32))
    assert np.array_equal(data["masked_lm_ids"], records["labels"].astype(np.int32))
    assert np.array_equal(data["next_sentence_labels"], records["next_sentence"].astype(np.int8))
    assert np.array_equal(data["input_mask"].sum(1), records["length"])
    with h5py.File(tmp_path / "shard.hdf5", "r") as handle:
        assert handle["input_ids"].compression == "gzip" and handle["input_ids"].shuffle


@pytest.mark.parametrize("samples", [1, 1500, 2048])
def test_given_an_order_when_shard_written_then_its_rows_are_the_records_in_that_order(tmp_path, samples):
    """write_shard passes the shard's permutation instead of a permuted copy: row i of every
    dataset is record order[i], across chunk edges and a partial last chunk."""
    from training.dataprep.shard_writer import write_hdf5

    cfg = PrepConfig(max_seq_len=16, max_pred_len=3)
    rng = np.random.default_rng(samples)
    records = _random_records(cfg, samples, rng)
    order = rng.permutation(samples)

    write_hdf5(tmp_path / "ordered.hdf5", records, cfg, order=order)
    write_hdf5(tmp_path / "copied.hdf5", records[order], cfg)

    ordered, copied = load_shards([tmp_path / "ordered.hdf5"]), load_shards([tmp_path / "copied.hdf5"])
    assert np.array_equal(ordered["input_ids"], records["ids"][order].astype(np.int32))
    assert np.array_equal(ordered["next_sentence_labels"], records["next_sentence"][order].astype(np.int8))
    assert all(np.array_equal(ordered[name], copied[name]) for name in SHARD_FIELDS)
    assert (tmp_path / "ordered.hdf5").read_bytes() == (tmp_path / "copied.hdf5").read_bytes()


def test_given_no_glibc_when_worker_set_up_then_malloc_tuning_is_skipped(monkeypatch):
    """The heap setting is glibc's: elsewhere (musl, macOS) it must do nothing, not fail."""
    import ctypes

    from training.dataprep import prep_units

    def no_glibc(name):
        raise ValueError(f"unrecognized configuration name {name}")

    def no_cdll(*_):
        raise AssertionError("libc loaded without glibc")

    monkeypatch.setattr(prep_units.os, "confstr", no_glibc)
    monkeypatch.setattr(ctypes, "CDLL", no_cdll)
    prep_units._reuse_freed_memory()
