"""Turn a text corpus into BERT pretraining shards (masked LM + next-sentence prediction).

    python -m training.prepare_data --input CORPUS_FILE_OR_DIR [...] --vocab vocab.txt \\
        --output_dir DIR [--output_prefix corpus] [--max_seq_len 128] [--max_pred_len 20] \\
        [--masked_lm_prob 0.15] [--short_seq_prob 0.1] [--dupe_factor 5] [--seed 12345] \\
        [--num_workers N] [--num_shards K | --samples_per_shard S] [--whole_word_mask] \\
        [--do_lower_case | --no_lower_case] [--no_progress] [--overwrite]

Input: text, one sentence per line, a blank line between documents; UTF-8 unless --encoding
says otherwise. Binary files and archives are refused; an invalid byte is an error naming file,
line and offset unless --errors replace. Output: a shard set (``training.shard_format``): the
directory --output_dir holding ``<prefix>_training_<k>.hdf5`` in the layout of the public
Neuron/NVIDIA shards (``next_sentence_labels`` 1 = B is a random segment; S = --max_seq_len,
P = --max_pred_len) and ``manifest.json``. It is built in a hidden sibling directory and renamed
into place when complete; SIGINT/SIGTERM stop the tool at any phase with exit 130/143 and leave
--output_dir as it was.

Algorithm (BERT's): per document, sentences are gathered until they reach a target length
(max_seq_len - 3 tokens, or with probability short_seq_prob a random length in [2, max]); a random
prefix of them is segment A; B is the rest (label 0) or, half of the time and always when there is
a single sentence, a run of sentences from another document (label 1, and the unused sentences are
given back). The longer segment loses tokens at a random end until the pair fits. Masked tokens:
min(P, max(1, round(masked_lm_prob x tokens excluding [CLS]/[SEP]))), chosen uniformly (or whole
words with --whole_word_mask); 80% become [MASK], 10% a random vocabulary token, 10% stay.
``dupe_factor`` passes over the corpus give each sentence different pairs and masks.

Deliberate differences from Google's reference tool: the target length is drawn per sample (not
per document), so about short_seq_prob of samples get a short target; the "random" document is
drawn from the same chunk of the input (about --chunk_mb of text), not from the whole corpus held
in memory; random replacements never pick bracketed tokens ([CLS], [unused7], ...); whole-word
masking takes words in random order until the next one would overflow the count.

Pipeline, and why its output does not depend on --num_workers:
1. Plan: every input file is cut into chunks of about --chunk_mb ending at a blank line; a chunk
   is fixed by the data alone.
2. Build, in parallel over chunks: tokenize with the ``tokenizers`` fast tokenizer (batch
   encode), then per dupe pass make pairs and masks with RNGs seeded from (seed, file index,
   chunk index, pass). Results are appended to a spool file in chunk order, compactly (uint16
   ids where the vocab allows).
3. Shuffle, memory-bounded: a seeded random permutation of balanced shard labels (one 2-4 byte
   label per sample) sends each sample to a shard in one streaming pass over the spool; each
   shard is then permuted in memory with its own seed. A uniformly random balanced split
   followed by a uniform order inside each part is a uniform shuffle of the whole set.
4. Write, in parallel over shards: HDF5 with gzip, arrays made at their final dtypes; then the
   manifest (sample counts, SHA-256), and publish.
Step 2 per chunk is ``_build_chunk``; ``training.prepare_indexed`` runs it on Kubernetes Indexed
Job pods and steps 3-4 on one of them, for the same bytes.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing as mp
import os
import random
import re
import shutil
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass
from itertools import chain
from pathlib import Path
from typing import BinaryIO

import h5py
import numpy as np
from tokenizers import Tokenizer
from tqdm import tqdm

from training import interrupt
from training.shard_format import (
    SHARD_FIELDS,
    SHARD_NAME,
    Manifest,
    ShardEntry,
    ShardSetError,
    discard,
    open_staging,
    publish,
    sha256_of,
    shard_entry,
    write_manifest,
)
from training.text_input import ERROR_MODES, check_encoding, check_text_files, decode_chunk
from training.vocab import (
    CONTINUATION_PREFIX,
    SPECIAL_TOKENS,
    OneLineArgumentParser,
    UsageError,
    bert_tokenizer,
    corpus_has_text,
    expand_inputs,
    read_vocab,
)

DEFAULT_CHUNK_MB = 2.0  # "random next" pool of several hundred Wikipedia-sized articles; balances work
DEFAULT_SAMPLES_PER_SHARD = 65536
_ENCODE_BATCH = 4096  # sentences per encode call: bounds the Encoding objects alive at once
_ROUTE_BLOCK = 1 << 16  # spool records read per routing step
# Stream tags keep the RNGs of the different stages independent for the same seed.
_BUILD, _ROUTE, _SHUFFLE = 0, 1, 2
log = logging.getLogger("training.prepare_data")


@dataclass(frozen=True)
class PrepConfig:
    """Sample-making parameters; see the module docstring for their meaning."""

    max_seq_len: int = 128
    max_pred_len: int = 20
    masked_lm_prob: float = 0.15
    short_seq_prob: float = 0.1
    dupe_factor: int = 5
    seed: int = 12345
    lower_case: bool = True
    whole_word_mask: bool = False

    def validate(self) -> None:
        """Raise ``UsageError`` naming the first bad parameter, its value and the fix."""
        if not 5 <= self.max_seq_len <= 65535:
            raise UsageError(
                f"--max_seq_len {self.max_seq_len}: must be between 5 ([CLS] A [SEP] B [SEP] with "
                "one token each) and 65535; BERT phase 1 uses 128"
            )
        if not 1 <= self.max_pred_len <= self.max_seq_len - 3:
            raise UsageError(
                f"--max_pred_len {self.max_pred_len}: must be between 1 and --max_seq_len - 3 = "
                f"{self.max_seq_len - 3} (the most maskable tokens in a sample); lower it or raise --max_seq_len"
            )
        if not 0.0 < self.masked_lm_prob <= 1.0:
            raise UsageError(f"--masked_lm_prob {self.masked_lm_prob}: must be in (0, 1]; BERT uses 0.15")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            raise UsageError(f"--short_seq_prob {self.short_seq_prob}: must be in [0, 1]; BERT uses 0.1")
        if self.dupe_factor < 1:
            raise UsageError(f"--dupe_factor {self.dupe_factor}: must be at least 1")
        if self.seed < 0:
            raise UsageError(f"--seed {self.seed}: must be a non-negative integer")


@dataclass(frozen=True)
class VocabInfo:
    """What sample-making needs from a vocabulary, looked up by token name."""

    size: int
    unk_id: int
    cls_id: int
    sep_id: int
    mask_id: int
    replacement_ids: np.ndarray  # int32 ids a "random token" replacement draws from
    is_continuation: np.ndarray  # bool per id: a "##" piece, for whole-word masking


def load_vocab(path: str | os.PathLike[str]) -> tuple[dict[str, int], VocabInfo]:
    """Read and check a vocab.txt for sample-making.

    Raises:
        UsageError: missing file, missing special tokens, [PAD] not at id 0 (the format pads
            with 0), or no ordinary token to use as a random replacement.
    """
    if not Path(path).is_file():
        raise UsageError(
            f"--vocab {path}: file not found; build one with "
            f"`python -m training.vocab --input <corpus> --output {path}`"
        )
    try:
        vocab = read_vocab(path)
    except UnicodeDecodeError:
        raise UsageError(f"--vocab {path}: not a UTF-8 text file; a vocab.txt has one token per line") from None
    missing = [token for token in SPECIAL_TOKENS if token not in vocab]
    if missing:
        raise UsageError(
            f"--vocab {path}: lacks special token(s) {' '.join(missing)}; a BERT vocab needs "
            f"{' '.join(SPECIAL_TOKENS)}: use a BERT vocab.txt or build one with `python -m training.vocab`"
        )
    if vocab["[PAD]"] != 0:
        raise UsageError(
            f"--vocab {path}: [PAD] has id {vocab['[PAD]']}, but the shard format pads with 0; "
            "move [PAD] to the first line"
        )
    size = max(vocab.values()) + 1
    tokens = [""] * size
    for token, index in vocab.items():
        tokens[index] = token
    bracketed = np.array([bool(re.fullmatch(r"\[.*\]", t)) or not t for t in tokens])
    replacement = np.flatnonzero(~bracketed).astype(np.int32)
    if replacement.size == 0:
        raise UsageError(f"--vocab {path}: has only special tokens; build a real one with `python -m training.vocab`")
    info = VocabInfo(
        size=size,
        unk_id=vocab["[UNK]"],
        cls_id=vocab["[CLS]"],
        sep_id=vocab["[SEP]"],
        mask_id=vocab["[MASK]"],
        replacement_ids=replacement,
        is_continuation=np.array([t.startswith(CONTINUATION_PREFIX) for t in tokens]),
    )
    return vocab, info


def record_dtype(cfg: PrepConfig, vocab_size: int) -> np.dtype:
    """Compact spool record of one sample; mask and segment ids are derived from the lengths."""
    id_type = np.uint16 if vocab_size <= 1 << 16 else np.uint32
    return np.dtype(
        [
            ("ids", id_type, (cfg.max_seq_len,)),
            ("len_a", np.uint16),
            ("length", np.uint16),
            ("positions", np.uint16, (cfg.max_pred_len,)),
            ("labels", id_type, (cfg.max_pred_len,)),
            ("next_sentence", np.uint8),
        ]
    )


# ---------------------------------------------------------------------------------------------
# Corpus planning and tokenization


@dataclass(frozen=True)
class Chunk:
    """A byte range of one input file that starts and ends at a document boundary."""

    file_index: int
    chunk_index: int
    path: str
    start: int
    end: int


def plan_chunks(files: Sequence[Path], chunk_bytes: int) -> list[Chunk]:
    """Cut every file into chunks of at least ``chunk_bytes`` ending after a blank line.

    Only the bytes near each cut are read. A document longer than ``chunk_bytes`` stays whole.
    """
    chunks = []
    for file_index, path in enumerate(files):
        size = path.stat().st_size
        with open(path, "rb") as handle:
            start, chunk_index = 0, 0
            while start < size:
                end = _document_boundary_after(handle, start + chunk_bytes, size)
                chunks.append(Chunk(file_index, chunk_index, str(path), start, end))
                start, chunk_index = end, chunk_index + 1
    return chunks


def _document_boundary_after(handle: BinaryIO, offset: int, size: int) -> int:
    """Offset just past the first blank line that starts after ``offset`` (or the file end)."""
    if offset >= size:
        return size
    handle.seek(offset)
    handle.readline()  # the rest of the line the offset falls in
    while line := handle.readline():
        if not line.strip():
            return handle.tell()
    return size


@dataclass
class TokenizedChunk:
    """A chunk's documents as one flat token array with sentence and document boundaries."""

    tokens: np.ndarray  # int32 [T]
    sentence_starts: np.ndarray  # int64 [n_sentences + 1], offsets into tokens
    document_starts: np.ndarray  # int64 [n_documents + 1], offsets into sentences


def tokenize_documents(text: str, tokenizer: Tokenizer) -> TokenizedChunk:
    """Split ``text`` into documents (blank lines) and sentences (lines) and tokenize them.

    Lines that tokenize to nothing are dropped; so are documents left without sentences.
    """
    sentences: list[str] = []
    document_of: list[int] = []
    document, inside = 0, False
    for line in text.split("\n"):
        line = line.strip()
        if line:
            sentences.append(line)
            document_of.append(document)
            inside = True
        elif inside:
            document, inside = document + 1, False
    id_lists: list[list[int]] = []
    for begin in range(0, len(sentences), _ENCODE_BATCH):
        batch = tokenizer.encode_batch_fast(sentences[begin : begin + _ENCODE_BATCH], add_special_tokens=False)
        id_lists.extend(encoding.ids for encoding in batch)
    lengths = np.fromiter(map(len, id_lists), dtype=np.int64, count=len(id_lists))
    tokens = np.fromiter(chain.from_iterable(id_lists), dtype=np.int32, count=int(lengths.sum()))
    keep = lengths > 0
    lengths, documents = lengths[keep], np.asarray(document_of, dtype=np.int64)[keep]
    new_document = np.flatnonzero(np.diff(documents)) + 1
    return TokenizedChunk(
        tokens=tokens,
        sentence_starts=np.concatenate(([0], np.cumsum(lengths))),
        document_starts=np.concatenate(([0], new_document, [lengths.size]) if lengths.size else ([0],)),
    )


# ---------------------------------------------------------------------------------------------
# Sample making


def build_pairs(chunk: TokenizedChunk, cfg: PrepConfig, rng: random.Random) -> np.ndarray:
    """Make the sentence pairs of one pass over a chunk.

    Returns int64 [M, 5]: a_begin, a_end, b_begin, b_end (token offsets into ``chunk.tokens``,
    after truncation) and the next-sentence label (1 = B is random), in document order.
    """
    starts = chunk.sentence_starts.tolist()
    docs = chunk.document_starts.tolist()
    n_docs = len(docs) - 1
    max_tokens = cfg.max_seq_len - 3
    pairs: list[tuple[int, int, int, int, int]] = []

    def draw_target() -> int:
        short = rng.random() < cfg.short_seq_prob
        return rng.randint(2, max_tokens) if short else max_tokens

    for doc in range(n_docs):
        first, stop = docs[doc], docs[doc + 1]
        target = draw_target()
        group_start = i = first
        while i < stop:
            if i == stop - 1 or starts[i + 1] - starts[group_start] >= target:
                n_sentences = i - group_start + 1
                a_sentences = 1 if n_sentences == 1 else rng.randint(1, n_sentences - 1)
                a_begin, a_end = starts[group_start], starts[group_start + a_sentences]
                if n_sentences == 1 or rng.random() < 0.5:
                    b_begin, b_end = _random_segment(starts, docs, doc, target - (a_end - a_begin), rng)
                    is_random = 1
                    # The group's sentences after A were not used: start the next group there.
                    i = group_start + a_sentences - 1
                else:
                    b_begin, b_end, is_random = a_end, starts[i + 1], 0
                a_begin, a_end, b_begin, b_end = truncate_pair(a_begin, a_end, b_begin, b_end, max_tokens, rng)
                pairs.append((a_begin, a_end, b_begin, b_end, is_random))
                group_start = i + 1
                target = draw_target()
            i += 1
    return np.array(pairs, dtype=np.int64).reshape(-1, 5)


def _random_segment(
    starts: list[int], docs: list[int], this_doc: int, target: int, rng: random.Random
) -> tuple[int, int]:
    """Token range of sentences from a random other document, from a random sentence on,
    until ``target`` tokens are reached (at least one sentence). A chunk of a single document
    has no other one; its own text is used then, as Google's tool does in that case."""
    n_docs = len(docs) - 1
    other = this_doc
    if n_docs > 1:
        other = rng.randrange(n_docs - 1)
        other += other >= this_doc
    first, stop = docs[other], docs[other + 1]
    begin = rng.randrange(first, stop)
    end = begin + 1
    while end < stop and starts[end] - starts[begin] < target:
        end += 1
    return starts[begin], starts[end]


def truncate_pair(
    a_begin: int, a_end: int, b_begin: int, b_end: int, max_tokens: int, rng: random.Random
) -> tuple[int, int, int, int]:
    """Fit a pair into ``max_tokens`` (>= 2) the way BERT's tool does, without its per-token loop.

    That loop drops one token at a time from the longer segment (B on a tie), at the front or
    the back with equal odds, so neither segment empties. Its final lengths follow from the
    start lengths: all the excess comes off the longer segment while that is enough, otherwise
    they end at ceil(max/2) for A and floor(max/2) for B. The front/back draws are i.i.d. fair
    coins, so the number taken from each front is the popcount of that many random bits.
    """
    len_a, len_b = a_end - a_begin, b_end - b_begin
    excess = len_a + len_b - max_tokens
    if excess <= 0:
        return a_begin, a_end, b_begin, b_end
    if len_a - len_b >= excess:
        cut_a, cut_b = excess, 0
    elif len_b - len_a >= excess:
        cut_a, cut_b = 0, excess
    else:
        cut_a, cut_b = len_a - (max_tokens + 1) // 2, len_b - max_tokens // 2
    front_a = rng.getrandbits(cut_a).bit_count() if cut_a else 0
    front_b = rng.getrandbits(cut_b).bit_count() if cut_b else 0
    return a_begin + front_a, a_end - (cut_a - front_a), b_begin + front_b, b_end - (cut_b - front_b)


def assemble(
    tokens: np.ndarray, pairs: np.ndarray, cfg: PrepConfig, vocab: VocabInfo
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Lay pairs out as ``[CLS] A [SEP] B [SEP]`` rows padded with 0.

    Returns (input_ids int32 [M, S], len_a [M], length [M]) where length counts real tokens.
    """
    a_begin, a_end, b_begin, b_end = (pairs[:, k : k + 1] for k in range(4))
    len_a, len_b = a_end - a_begin, b_end - b_begin
    length = len_a + len_b + 3
    pos = np.arange(cfg.max_seq_len)[None, :]
    in_a = (pos >= 1) & (pos <= len_a)
    in_b = (pos >= len_a + 2) & (pos < length - 1)
    source = np.where(in_a, a_begin + pos - 1, np.where(in_b, b_begin + pos - len_a - 2, 0))
    ids = np.where(in_a | in_b, tokens[source], 0).astype(np.int32)
    ids[:, 0] = vocab.cls_id
    rows = np.arange(len(pairs))
    ids[rows, len_a[:, 0] + 1] = vocab.sep_id
    ids[rows, length[:, 0] - 1] = vocab.sep_id
    return ids, len_a[:, 0], length[:, 0]


def mask_samples(
    ids: np.ndarray,
    len_a: np.ndarray,
    length: np.ndarray,
    cfg: PrepConfig,
    vocab: VocabInfo,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Choose and corrupt the masked-LM positions of a batch of samples, vectorized.

    Returns (masked input_ids, positions [M, P], original ids at those positions [M, P]); the
    positions are ascending and zero padded (position 0 is [CLS], never a candidate).
    """
    n, width = ids.shape
    pos = np.arange(width)[None, :]
    real, first_sep, last_sep = pos < length[:, None], pos == len_a[:, None] + 1, pos == length[:, None] - 1
    candidate = real & (pos != 0) & ~first_sep & ~last_sep
    # np.rint rounds half to even, like Python's round().
    wanted = np.rint((length - 3) * cfg.masked_lm_prob)
    count = np.minimum(cfg.max_pred_len, np.maximum(1, wanted)).astype(np.int64)
    keys = rng.random((n, width))
    if cfg.whole_word_mask:
        previous_candidate = np.pad(candidate[:, :-1], ((0, 0), (1, 0)))
        word_start = ~candidate | ~vocab.is_continuation[ids] | ~previous_candidate
        first_piece = np.maximum.accumulate(np.where(word_start, pos, 0), axis=1)
        keys = np.take_along_axis(keys, first_piece, axis=1)  # a word's pieces share one key
    keys[~candidate] = 2.0  # after every candidate
    order = np.argsort(keys, axis=1, kind="stable")  # stable: a word's pieces stay adjacent
    rank = np.arange(1, width + 1)[None, :]
    if cfg.whole_word_mask:
        word_of = np.take_along_axis(first_piece, order, axis=1)
        word_end = np.ones_like(candidate)
        word_end[:, :-1] = word_of[:, :-1] != word_of[:, 1:]
        # Tokens masked once this slot's whole word is in: the rank of its last piece.
        through_word = np.minimum.accumulate(np.where(word_end, rank, width + 1)[:, ::-1], axis=1)[:, ::-1]
        take_sorted = through_word <= count[:, None]
    else:
        take_sorted = rank <= count[:, None]
    chosen = np.zeros_like(candidate)
    np.put_along_axis(chosen, order, take_sorted & np.take_along_axis(candidate, order, axis=1), axis=1)

    rows, cols = np.nonzero(chosen)
    action = rng.random(rows.size)
    random_tokens = vocab.replacement_ids[rng.integers(vocab.replacement_ids.size, size=rows.size)]
    masked = ids.copy()
    masked[rows, cols] = np.where(action < 0.8, vocab.mask_id, np.where(action < 0.9, random_tokens, ids[rows, cols]))
    first_chosen = np.argsort(~chosen, axis=1, kind="stable")[:, : cfg.max_pred_len]
    valid = np.take_along_axis(chosen, first_chosen, axis=1)
    positions = np.where(valid, first_chosen, 0)
    labels = np.where(valid, np.take_along_axis(ids, positions, axis=1), 0)
    return masked, positions, labels


def _rngs(seed: int, *keys: int) -> tuple[random.Random, np.random.Generator]:
    """Independent Python and NumPy generators for one (seed, keys) stream."""
    py_seq, np_seq = np.random.SeedSequence([seed, *keys]).spawn(2)
    py_seed = int.from_bytes(py_seq.generate_state(4).tobytes(), "little")
    return random.Random(py_seed), np.random.default_rng(np_seq)


def make_samples(
    chunk_tokens: TokenizedChunk, cfg: PrepConfig, vocab: VocabInfo, dtype: np.dtype, rng_key: tuple[int, ...]
) -> np.ndarray:
    """All dupe passes of one tokenized chunk as spool records, in pass order.

    ``rng_key`` (file index, chunk index) and the pass number seed the generators, so the
    records depend on the data and the configuration only.
    """
    parts = []
    for dupe in range(cfg.dupe_factor):
        py_rng, np_rng = _rngs(cfg.seed, _BUILD, *rng_key, dupe)
        pairs = build_pairs(chunk_tokens, cfg, py_rng)
        ids, len_a, length = assemble(chunk_tokens.tokens, pairs, cfg, vocab)
        masked, positions, labels = mask_samples(ids, len_a, length, cfg, vocab, np_rng)
        records = np.empty(len(pairs), dtype=dtype)
        records["ids"] = masked
        records["len_a"] = len_a
        records["length"] = length
        records["positions"] = positions
        records["labels"] = labels
        records["next_sentence"] = pairs[:, 4]
        parts.append(records)
    return np.concatenate(parts)


# ---------------------------------------------------------------------------------------------
# Worker processes


@dataclass
class _WorkerState:
    cfg: PrepConfig
    vocab: VocabInfo
    tokenizer: Tokenizer
    dtype: np.dtype
    encoding: str = "utf-8"
    errors: str = "strict"


_STATE: _WorkerState | None = None


def _init_worker(
    vocab_path: str, cfg: PrepConfig, single_threaded_tokenizer: bool, encoding: str = "utf-8", errors: str = "strict"
) -> None:
    global _STATE
    if single_threaded_tokenizer:
        # One tokenizer thread per worker process: the processes already fill the cores.
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
        interrupt.ignore_interactive_interrupt()
    vocab, info = load_vocab(vocab_path)
    _STATE = _WorkerState(
        cfg, info, bert_tokenizer(vocab, cfg.lower_case), record_dtype(cfg, info.size), encoding, errors
    )


@dataclass
class _ChunkResult:
    records: np.ndarray
    tokens: int
    unknown: int
    bytes: int


def _build_chunk(chunk: Chunk) -> _ChunkResult:
    assert _STATE is not None
    with open(chunk.path, "rb") as handle:
        handle.seek(chunk.start)
        raw = handle.read(chunk.end - chunk.start)
    text = decode_chunk(raw, chunk.path, chunk.start, _STATE.encoding, _STATE.errors)
    tokenized = tokenize_documents(text, _STATE.tokenizer)
    key = (chunk.file_index, chunk.chunk_index)
    records = make_samples(tokenized, _STATE.cfg, _STATE.vocab, _STATE.dtype, key)
    unknown = int(np.count_nonzero(tokenized.tokens == _STATE.vocab.unk_id))
    return _ChunkResult(records, int(tokenized.tokens.size), unknown, chunk.end - chunk.start)


def _write_shard(job: tuple[str, str, int]) -> ShardEntry:
    """Shuffle one shard's spooled records and write them as HDF5; returns its manifest entry."""
    assert _STATE is not None
    spool, out, shard = job
    records = np.fromfile(spool, dtype=_STATE.dtype)
    _, np_rng = _rngs(_STATE.cfg.seed, _SHUFFLE, shard)
    records = records[np_rng.permutation(len(records))]
    write_hdf5(Path(out), records, _STATE.cfg)
    os.remove(spool)
    return shard_entry(out, len(records))


def write_hdf5(path: Path, records: np.ndarray, cfg: PrepConfig) -> None:
    """Write spool records as one shard in the interchange format (atomically renamed)."""
    pos = np.arange(cfg.max_seq_len, dtype=np.int32)[None, :]
    length = records["length"][:, None].astype(np.int32)
    len_a = records["len_a"][:, None].astype(np.int32)
    values = {
        "input_ids": records["ids"],
        "input_mask": pos < length,
        "segment_ids": (pos >= len_a + 2) & (pos < length),
        "masked_lm_positions": records["positions"],
        "masked_lm_ids": records["labels"],
        "next_sentence_labels": records["next_sentence"],
    }
    arrays = {name: values[name].astype(dtype) for name, (dtype, _) in SHARD_FIELDS.items()}
    partial = path.with_name(path.name + ".partial")
    with h5py.File(partial, "w") as handle:
        for name, array in arrays.items():
            # Whole-row chunks: readers take runs of samples, never columns (and it packs tighter).
            chunks = (min(len(array), 1024), *array.shape[1:])
            handle.create_dataset(name, data=array, compression="gzip", chunks=chunks)
    partial.replace(path)


# ---------------------------------------------------------------------------------------------
# Driver


@dataclass
class PrepSummary:
    """What ``prepare_shards`` produced."""

    shards: list[Path]
    samples: int
    tokens: int
    unknown_tokens: int
    input_bytes: int
    seconds: float


def prepare_shards(
    inputs: Sequence[str | os.PathLike[str]],
    vocab_path: str | os.PathLike[str],
    output_dir: str | os.PathLike[str],
    cfg: PrepConfig = PrepConfig(),
    *,
    num_workers: int = 1,
    num_shards: int | None = None,
    samples_per_shard: int | None = None,
    output_prefix: str = "corpus",
    chunk_bytes: int = int(DEFAULT_CHUNK_MB * (1 << 20)),
    overwrite: bool = False,
    progress: bool | None = False,
    encoding: str = "utf-8",
    errors: str = "strict",
) -> PrepSummary:
    """Make pretraining shards from a corpus; see the module docstring.

    Args:
        inputs: corpus files or directories (see ``training.vocab.expand_inputs`` for the order).
        vocab_path: vocab.txt with the BERT special tokens, [PAD] on the first line.
        output_dir: the shard set's directory: ``<output_prefix>_training_<k>.hdf5`` and
            ``manifest.json``, published together once complete (see ``training.shard_format``).
        cfg: sample-making parameters.
        num_workers: processes; 1 runs in this process. The output does not depend on it.
            Workers are spawned, so a script calling this with more than one needs the
            ``if __name__ == "__main__":`` guard.
        num_shards: exact number of shards (balanced sizes); exclusive with samples_per_shard.
        samples_per_shard: most samples per shard (default 65536 when neither is given).
        output_prefix: shard name prefix.
        chunk_bytes: target input chunk size (the parallel unit, and the pool that "random
            next" segments are drawn from). Part of the data definition: changing it changes
            the output.
        overwrite: replace the shard set already in output_dir.
        progress: show tqdm bars; None shows them only on a terminal.
        encoding: of the corpus files (ASCII-compatible); invalid bytes are an error naming
            file, line and offset unless ``errors="replace"``.

    Raises:
        UsageError: a bad argument or input, with a message naming it and the fix.
        training.interrupt.Interrupted: a stop signal (inside ``interrupt.stop_on_signals``);
            nothing is published then.
    """
    started = time.monotonic()
    run = RunSettings(num_shards, samples_per_shard, output_prefix, chunk_bytes, encoding, errors)
    plan = plan_run(inputs, vocab_path, output_dir, cfg, run, num_workers)
    staging = _open_staging(output_dir, overwrite)
    try:
        work_dir = staging / ".work"
        work_dir.mkdir()
        log.info("tokenize+mask: %d chunk(s) of %d file(s), %d worker(s)", len(plan.chunks), len(plan.files),
                 min(num_workers, len(plan.chunks)))  # fmt: skip
        with _WorkerMap(min(num_workers, len(plan.chunks)), str(vocab_path), cfg, encoding, errors) as parallel_map:
            spool = work_dir / "samples.bin"
            totals = _build_all(parallel_map, plan.chunks, spool, plan.input_bytes, progress)
            manifest = finish_set(parallel_map, [spool], totals.records, plan, staging, work_dir, progress)
        _publish(staging, output_dir)
    finally:
        discard(staging)  # gone already when published
    return PrepSummary(
        shards=[Path(output_dir) / entry.name for entry in manifest.shards],
        samples=manifest.samples,
        tokens=totals.tokens,
        unknown_tokens=totals.unknown,
        input_bytes=totals.bytes,
        seconds=time.monotonic() - started,
    )


@dataclass(frozen=True)
class RunSettings:
    """What, besides ``PrepConfig``, defines a shard set (and so goes into its manifest)."""

    num_shards: int | None = None
    samples_per_shard: int | None = None
    output_prefix: str = "corpus"
    chunk_bytes: int = int(DEFAULT_CHUNK_MB * (1 << 20))
    encoding: str = "utf-8"
    errors: str = "strict"


@dataclass(frozen=True)
class RunPlan:
    """A checked run: its inputs cut into chunks (the units of work) and the manifest settings."""

    cfg: PrepConfig
    run: RunSettings
    files: list[Path]
    chunks: list[Chunk]
    dtype: np.dtype
    settings: dict

    @property
    def input_bytes(self) -> int:
        return sum(c.end - c.start for c in self.chunks)


def plan_run(
    inputs: Sequence[str | os.PathLike[str]],
    vocab_path: str | os.PathLike[str],
    output_dir: str | os.PathLike[str],
    cfg: PrepConfig,
    run: RunSettings,
    num_workers: int = 1,
) -> RunPlan:
    """Check everything that can be checked before work starts, and cut the input into chunks.

    A pure function of the inputs and settings: every Indexed-Job pod computes the same plan.
    """
    cfg.validate()
    _check_run_args(num_workers, run.num_shards, run.samples_per_shard, run.output_prefix, run.chunk_bytes)
    check_encoding(run.encoding, run.errors)
    files = expand_inputs(inputs)
    out_dir = Path(output_dir)
    inside = [f for f in files if out_dir.resolve() in f.resolve().parents]
    if inside:
        raise UsageError(
            f"--output_dir {output_dir}: holds input file {inside[0]}; a second run would read the "
            "shards as text: put the shards outside the corpus folder"
        )
    check_text_files(files)
    if not corpus_has_text(files):
        raise UsageError(
            f"--input {' '.join(map(str, inputs))}: corpus is empty (only blank lines); expected one "
            "sentence per line and a blank line between documents"
        )
    _, info = load_vocab(vocab_path)
    root = os.path.commonpath([str(f.resolve().parent) for f in files])
    settings = {
        "tool": "training.prepare_data",
        **{k: v for k, v in asdict(cfg).items() if k != "seed"},
        **{k: v for k, v in asdict(run).items()},
        "vocab_sha256": sha256_of(vocab_path),
        # Relative names: the same corpus gives the same manifest wherever it is mounted.
        "inputs": [{"file": os.path.relpath(f.resolve(), root), "bytes": f.stat().st_size} for f in files],
    }
    chunks = plan_chunks(files, run.chunk_bytes)
    return RunPlan(cfg, run, files, chunks, record_dtype(cfg, info.size), settings)


def finish_set(
    parallel_map: Callable[[Callable, Iterable], Iterator],
    spools: Sequence[Path],
    samples: int,
    plan: RunPlan,
    staging: Path,
    work_dir: Path,
    progress: bool | None,
) -> Manifest:
    """Shuffle the spooled samples (in spool order: chunk order) into shards, write them and
    the manifest into ``staging``. The spools are deleted as they are consumed."""
    if samples == 0:
        raise UsageError("--input: no line produced a token; nothing to write")
    num_shards = plan.run.num_shards
    if num_shards is None:
        num_shards = -(-samples // (plan.run.samples_per_shard or DEFAULT_SAMPLES_PER_SHARD))
    elif num_shards > samples:
        raise UsageError(
            f"--num_shards {num_shards}: only {samples} samples were made; use at most "
            f"{samples} shards, or --samples_per_shard"
        )
    interrupt.check()
    log.info("shuffle: %d samples into %d shard(s)", samples, num_shards)
    shard_spools = _route(spools, samples, num_shards, plan.dtype, work_dir, plan.cfg.seed)
    jobs = [
        (str(shard_spools[k]), str(staging / SHARD_NAME.format(prefix=plan.run.output_prefix, index=k)), k)
        for k in range(num_shards)
    ]
    log.info("write: %d shard(s)", num_shards)
    entries = []
    bar = tqdm(total=num_shards, desc="write shards", unit="shard", disable=_disabled(progress))
    with bar:
        for entry in parallel_map(_write_shard, jobs):
            interrupt.check()
            entries.append(entry)
            bar.update()
    shutil.rmtree(work_dir, ignore_errors=True)
    manifest = Manifest(
        shards=tuple(sorted(entries, key=lambda e: e.name)),
        seq_len=plan.cfg.max_seq_len,
        max_pred_len=plan.cfg.max_pred_len,
        seed=plan.cfg.seed,
        settings=plan.settings,
    )
    write_manifest(staging, manifest)
    return manifest


def _open_staging(output_dir: str | os.PathLike[str], overwrite: bool) -> Path:
    try:
        return open_staging(output_dir, overwrite)
    except ShardSetError as err:
        raise UsageError(str(err)) from None


def _publish(staging: Path, output_dir: str | os.PathLike[str]) -> None:
    log.info("publish: %s", output_dir)
    try:
        publish(staging, output_dir)
    except OSError as err:
        raise UsageError(f"--output_dir {output_dir}: cannot publish the set ({err.strerror})") from None


def _check_run_args(
    num_workers: int, num_shards: int | None, samples_per_shard: int | None, output_prefix: str, chunk_bytes: int
) -> None:
    if num_workers < 1:
        raise UsageError(f"--num_workers {num_workers}: must be at least 1")
    if num_shards is not None and samples_per_shard is not None:
        raise UsageError("--num_shards and --samples_per_shard: give one of them, not both")
    if num_shards is not None and num_shards < 1:
        raise UsageError(f"--num_shards {num_shards}: must be at least 1")
    if samples_per_shard is not None and samples_per_shard < 1:
        raise UsageError(f"--samples_per_shard {samples_per_shard}: must be at least 1")
    if not output_prefix or "/" in output_prefix or os.sep in output_prefix:
        raise UsageError(f"--output_prefix {output_prefix!r}: must be a non-empty file-name prefix without '/'")
    if chunk_bytes < 1:
        raise UsageError(
            f"--chunk_mb: the chunk size ({chunk_bytes} bytes) must be at least 1 byte; "
            f"the default is {DEFAULT_CHUNK_MB:g} MiB"
        )


class _WorkerMap:
    """Context manager yielding an ordered ``map(fn, items)``: a pool of ``workers`` spawned
    processes, or this process itself when ``workers == 1``.

    concurrent.futures rather than multiprocessing.Pool: a worker that dies (killed for
    memory, say) fails the run with BrokenProcessPool instead of hanging it. At most
    ``2 x workers`` items are in flight, so finished results waiting behind a slow one stay few.
    """

    def __init__(
        self, workers: int, vocab_path: str, cfg: PrepConfig, encoding: str = "utf-8", errors: str = "strict"
    ) -> None:
        self.workers, self.init_args = workers, (vocab_path, cfg, workers > 1, encoding, errors)
        self.pool: ProcessPoolExecutor | None = None

    def _ordered(self, fn: Callable, items: Iterable) -> Iterator:
        assert self.pool is not None
        pending: deque[Future] = deque()
        for item in items:
            pending.append(self.pool.submit(fn, item))
            if len(pending) >= 2 * self.workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()

    def __enter__(self) -> Callable[[Callable, Iterable], Iterator]:
        if self.workers == 1:
            _init_worker(*self.init_args)
            return map
        # spawn: safe next to the tokenizer's threads and the same on every platform.
        self.pool = ProcessPoolExecutor(
            self.workers, mp_context=mp.get_context("spawn"), initializer=_init_worker, initargs=self.init_args
        )
        return self._ordered

    def __exit__(self, exc_type, *_) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=exc_type is not None)


@dataclass
class _Totals:
    records: int = 0
    tokens: int = 0
    unknown: int = 0
    bytes: int = 0


def _build_all(
    parallel_map: Callable[[Callable, Iterable], Iterator],
    chunks: list[Chunk],
    spool: Path,
    total_bytes: int,
    progress: bool | None,
) -> _Totals:
    totals = _Totals()
    bar = tqdm(total=total_bytes, desc="tokenize+mask", unit="B", unit_scale=True, disable=_disabled(progress))
    with open(spool, "wb") as out, bar:
        for result in parallel_map(_build_chunk, chunks):
            interrupt.check()
            result.records.tofile(out)
            totals.records += len(result.records)
            totals.tokens += result.tokens
            totals.unknown += result.unknown
            totals.bytes += result.bytes
            bar.update(result.bytes)
            bar.set_postfix(samples=totals.records, refresh=False)
    return totals


def _route(
    spools: Sequence[Path], samples: int, num_shards: int, dtype: np.dtype, work_dir: Path, seed: int
) -> list[Path]:
    """Split the spools (read in order as one) into ``num_shards`` balanced, randomly drawn
    parts in one streaming pass."""
    sizes = np.full(num_shards, samples // num_shards, dtype=np.int64)
    sizes[: samples % num_shards] += 1
    label_type = np.uint16 if num_shards <= 1 << 16 else np.uint32
    labels = np.repeat(np.arange(num_shards, dtype=label_type), sizes)
    _, np_rng = _rngs(seed, _ROUTE)
    np_rng.shuffle(labels)
    paths = [work_dir / f"shard-{k}.bin" for k in range(num_shards)]
    begin = 0
    for spool in spools:
        with open(spool, "rb") as source:
            while len(block := np.fromfile(source, dtype=dtype, count=_ROUTE_BLOCK)):
                block_labels = labels[begin : begin + len(block)]
                begin += len(block)
                order = np.argsort(block_labels, kind="stable")
                bounds = np.searchsorted(block_labels[order], np.arange(num_shards + 1))
                for shard in np.flatnonzero(np.diff(bounds)):
                    with open(paths[shard], "ab") as sink:
                        block[order[bounds[shard] : bounds[shard + 1]]].tofile(sink)
                interrupt.check()
        spool.unlink()
    if begin != samples:
        raise RuntimeError(f"spools hold {begin} samples, expected {samples}")
    return paths


def _disabled(progress: bool | None) -> bool | None:
    # tqdm: disable=None means "only on a terminal".
    return None if progress is None else not progress


# ---------------------------------------------------------------------------------------------
# Command line


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineArgumentParser(
        prog="python -m training.prepare_data",
        description="Make BERT pretraining HDF5 shards (MLM + NSP) from a text corpus "
        "(one sentence per line, blank line between documents) and a WordPiece vocab.txt.",
    )
    parser.add_argument("--input", nargs="+", required=True, help="corpus file(s) or directories")
    parser.add_argument("--vocab", required=True, help="WordPiece vocab.txt (see python -m training.vocab)")
    parser.add_argument("--output_dir", required=True, help="directory for <prefix>_training_<k>.hdf5")
    parser.add_argument("--output_prefix", default="corpus", help="shard name prefix (default: corpus)")
    parser.add_argument("--max_seq_len", type=int, default=128, help="tokens per sample (default: 128)")
    parser.add_argument("--max_pred_len", type=int, default=20, help="most masked tokens per sample (default: 20)")
    parser.add_argument("--masked_lm_prob", type=float, default=0.15, help="share of tokens masked (default: 0.15)")
    parser.add_argument("--short_seq_prob", type=float, default=0.1, help="share of short targets (default: 0.1)")
    parser.add_argument("--dupe_factor", type=int, default=5, help="passes with different masks (default: 5)")
    parser.add_argument("--seed", type=int, default=12345, help="random seed (default: 12345)")
    parser.add_argument("--whole_word_mask", action="store_true", help="mask whole words, not single pieces")
    parser.add_argument(
        "--do_lower_case",
        dest="lower_case",
        action="store_true",
        default=True,
        help="lower-case and strip accents (default; for uncased vocabs)",
    )
    parser.add_argument("--no_lower_case", dest="lower_case", action="store_false", help="keep case (cased vocabs)")
    parser.add_argument(
        "--num_workers",
        type=int,
        default=len(os.sched_getaffinity(0)),
        help="worker processes (default: all CPUs); the output does not depend on it",
    )
    shards = parser.add_mutually_exclusive_group()
    shards.add_argument("--num_shards", type=int, help="number of output shards")
    shards.add_argument(
        "--samples_per_shard", type=int, help=f"most samples per shard (default: {DEFAULT_SAMPLES_PER_SHARD})"
    )
    parser.add_argument(
        "--chunk_mb",
        type=float,
        default=DEFAULT_CHUNK_MB,
        help=f"input chunk size in MiB, the unit of parallel work and of the random-next "
        f"pool; changes the output (default: {DEFAULT_CHUNK_MB:g})",
    )
    parser.add_argument(
        "--encoding", default="utf-8", help="of the corpus files, ASCII-compatible (default: utf-8; e.g. latin-1)"
    )
    parser.add_argument(
        "--errors",
        choices=ERROR_MODES,
        default="strict",
        help="invalid bytes: strict = an error naming file, line and offset (default); replace = U+FFFD",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace the shard set in --output_dir")
    parser.add_argument("--no_progress", action="store_true", help="no progress bars")
    return parser


class _PhaseLog(logging.StreamHandler):
    """Phase lines on stdout. logging reports and swallows errors raised while a record is
    written; a stop signal arriving then must still stop the tool."""

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 (logging's name)
        if isinstance(sys.exc_info()[1], interrupt.Interrupted):
            raise
        super().handleError(record)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    cfg = PrepConfig(
        max_seq_len=args.max_seq_len,
        max_pred_len=args.max_pred_len,
        masked_lm_prob=args.masked_lm_prob,
        short_seq_prob=args.short_seq_prob,
        dupe_factor=args.dupe_factor,
        seed=args.seed,
        lower_case=args.lower_case,
        whole_word_mask=args.whole_word_mask,
    )
    log.addHandler(_PhaseLog(sys.stdout))
    log.setLevel(logging.INFO)
    try:
        with interrupt.stop_on_signals():
            summary = prepare_shards(
                args.input,
                args.vocab,
                args.output_dir,
                cfg,
                num_workers=args.num_workers,
                num_shards=args.num_shards,
                samples_per_shard=args.samples_per_shard,
                output_prefix=args.output_prefix,
                chunk_bytes=int(args.chunk_mb * (1 << 20)),
                overwrite=args.overwrite,
                progress=False if args.no_progress else None,
                encoding=args.encoding,
                errors=args.errors,
            )
    except UsageError as err:
        parser.error(str(err))
    except (interrupt.Interrupted, BrokenProcessPool) as err:
        # A worker killed by the same signal breaks the pool before the parent's handler runs.
        signum = interrupt.received()
        if signum is None:
            raise
        stopped = interrupt.Interrupted(signum)
        print(f"{parser.prog}: {stopped}: stopped; nothing published, {args.output_dir} unchanged", file=sys.stderr)
        return stopped.exit_code
    signum = interrupt.received()
    if signum is not None:  # arrived while publishing: the complete set is in place
        stopped = interrupt.Interrupted(signum)
        print(f"{parser.prog}: {stopped} after the set was published", file=sys.stderr)
        return stopped.exit_code
    unknown_share = summary.unknown_tokens / max(1, summary.tokens)
    print(
        f"wrote {summary.samples} samples to {len(summary.shards)} shard(s) in {args.output_dir} "
        f"from {summary.input_bytes / 1e6:.1f} MB ({summary.tokens} tokens, {unknown_share:.2%} [UNK]) "
        f"in {summary.seconds:.1f} s"
    )
    if unknown_share > 0.01:
        print(
            f"warning: {unknown_share:.1%} of tokens are [UNK]; check that --do_lower_case/--no_lower_case "
            "matches how the vocab was built",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
