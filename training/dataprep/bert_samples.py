"""BERT pretraining samples (masked LM + next-sentence prediction) from tokenized documents.

Pure computation, no files and no processes: the data tool (``training.dataprep.prepare_data``) and the
cluster workers of ``DatasetPreparation`` both call it, so the samples depend on the data, the
settings and the seed only, never on how many processes or pods share the work.

The contract (stable: both pipelines rely on it):

    unit_samples(unit_index, unit, pool, cfg, vocab) -> records

* ``unit_index``: the position of the work unit in the corpus plan (a chunk of whole documents);
  with ``cfg.seed`` it seeds every random draw for that unit.
* ``unit``: the unit's documents, a ``TokenizedChunk`` whose ``document_ids`` are their global
  numbers in the corpus.
* ``pool``: the documents a "random next" segment is drawn from: the whole corpus when it fits
  ``pool_tokens`` tokens, else a uniform random sample of its documents, each kept with the
  same probability (``pool_keep``, a function of seed, unit index and document count only).
* returns ``record_dtype(cfg, vocab.size)`` records, all dupe passes in pass order.

The sample distribution is the one of the reference tool, Google's ``create_pretraining_data.py``
(NVIDIA's DeepLearningExamples copy made the public Wikipedia shards), per document and dupe pass:
a target length of max_seq_len - 3 tokens, or with probability ``short_seq_prob`` a length drawn
uniformly from [2, max_seq_len - 3], drawn ONCE for the document; sentences are gathered until
they reach the target (or the document ends); a random number of them is segment A; B is the
rest (label 0) or, when the group is a single sentence or with probability 0.5, sentences of
another document from a random sentence on until the target is reached (label 1; the group's
sentences after A are given back and start the next group); the longer segment loses tokens at
a random end until the pair fits. Masked tokens: min(max_pred_len, max(1, round(masked_lm_prob x
length))) where length counts [CLS] and both [SEP] (round half to even, as Python 3's
``round``), drawn uniformly from the non-special positions; 80% become [MASK], 10% a random
vocabulary token, 10% stay. Positions are listed in ascending order, zero padded.

Differences from the reference, each small or optional:
* the random document comes from the pool, which equals the corpus up to ``pool_tokens``
  tokens (then the draw is the reference's: uniform over documents, another than the current
  one with up to 10 tries) and is a uniform sample of documents beyond it, so memory stays flat;
* random replacements never pick bracketed tokens ([PAD], [CLS], [unused7], ...): the reference
  draws from the whole vocabulary, which changes about 0.3% of masked positions;
* ``--whole_word_mask`` (off by default) masks whole words: words in random order until the
  next one would overflow the count;
* ``target_per_sample=True`` (off by default; this tool's earlier behaviour) draws the short
  target for every sample instead of once per document.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np

from .prep_settings import PrepConfig

# Stream tags keep the RNGs of the different stages independent for the same seed.
BUILD, ROUTE, SHUFFLE, POOL = 0, 1, 2, 3
# The reference tries this many times to draw a random document other than the current one.
_OTHER_DOCUMENT_TRIES = 10


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

    @classmethod
    def from_tokens(cls, tokens: list[str], continuation_prefix: str = "##") -> VocabInfo:
        """From the token of each id (``""`` for an unused id); the special tokens must be there."""
        index = {token: i for i, token in reversed(list(enumerate(tokens)))}
        # "[...]" names a special or unused token ([CLS], [unused0]); "" is an id without a token.
        bracketed = np.array([not t or (len(t) > 1 and t[0] == "[" and t[-1] == "]") for t in tokens])
        return cls(
            size=len(tokens),
            unk_id=index["[UNK]"],
            cls_id=index["[CLS]"],
            sep_id=index["[SEP]"],
            mask_id=index["[MASK]"],
            replacement_ids=np.flatnonzero(~bracketed).astype(np.int32),
            is_continuation=np.array([t.startswith(continuation_prefix) for t in tokens]),
        )


def record_dtype(cfg: PrepConfig, vocab_size: int) -> np.dtype:
    """Compact record of one sample; mask and segment ids are derived from the lengths."""
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


@dataclass
class TokenizedChunk:
    """Documents as one flat token array with sentence and document boundaries."""

    tokens: np.ndarray  # integer ids [T]
    sentence_starts: np.ndarray  # int64 [n_sentences + 1], offsets into tokens
    document_starts: np.ndarray  # int64 [n_documents + 1], offsets into sentences
    # Global number of each document in the corpus (default 0..n-1): a random next segment is
    # never taken from the document being processed while another one exists.
    document_ids: np.ndarray = field(default=None)  # type: ignore[arg-type]

    def __post_init__(self) -> None:
        if self.document_ids is None:
            self.document_ids = np.arange(len(self.document_starts) - 1, dtype=np.int64)

    @property
    def num_documents(self) -> int:
        return len(self.document_starts) - 1

    def select(self, keep: np.ndarray) -> TokenizedChunk:
        """The documents where ``keep`` (bool per document) is true, in order."""
        docs = np.flatnonzero(keep)
        first, last = self.document_starts[docs], self.document_starts[docs + 1]
        sentences = _ranges(first, last)
        lengths = self.sentence_starts[sentences + 1] - self.sentence_starts[sentences]
        tokens = self.tokens[_ranges(self.sentence_starts[sentences], self.sentence_starts[sentences + 1])]
        return TokenizedChunk(
            tokens=tokens,
            sentence_starts=np.concatenate(([0], np.cumsum(lengths))).astype(np.int64),
            document_starts=np.concatenate(([0], np.cumsum(last - first))).astype(np.int64),
            document_ids=self.document_ids[docs],
        )


def concatenate(parts: list[TokenizedChunk]) -> TokenizedChunk:
    """The documents of ``parts``, one after the other."""
    token_offsets = np.cumsum([0] + [len(p.tokens) for p in parts])
    sentence_offsets = np.cumsum([0] + [len(p.sentence_starts) - 1 for p in parts])
    return TokenizedChunk(
        tokens=np.concatenate([p.tokens for p in parts]) if parts else np.zeros(0, np.int32),
        sentence_starts=np.concatenate(
            [[0]] + [p.sentence_starts[1:] + o for p, o in zip(parts, token_offsets[:-1], strict=True)]
        ),
        document_starts=np.concatenate(
            [[0]] + [p.document_starts[1:] + o for p, o in zip(parts, sentence_offsets[:-1], strict=True)]
        ),
        document_ids=np.concatenate([np.zeros(0, np.int64)] + [p.document_ids for p in parts]),
    )


def _ranges(begins: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Concatenation of arange(b, e) for each pair, vectorized."""
    lengths = ends - begins
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    steps = np.ones(total, dtype=np.int64)
    starts_at = np.cumsum(lengths)[:-1]
    nonempty = lengths > 0
    firsts = np.concatenate(([0], starts_at))[nonempty]
    steps[firsts[0]] = begins[nonempty][0]
    previous_end = ends[nonempty][:-1] - 1
    steps[firsts[1:]] = begins[nonempty][1:] - previous_end
    return np.cumsum(steps)


def pool_keep(seed: int, unit_index: int, num_documents: int, keep_probability: float) -> np.ndarray:
    """Which documents of a unit go into the random-next pool (bool per document).

    Each document is kept with the same probability, independently, so the pool is a uniform
    sample of the corpus's documents whatever their sizes; with probability 1 all are kept.
    """
    if keep_probability >= 1.0:
        return np.ones(num_documents, dtype=bool)
    _, rng = rngs(seed, POOL, unit_index)
    return rng.random(num_documents) < keep_probability


def rngs(seed: int, *keys: int) -> tuple[random.Random, np.random.Generator]:
    """Independent Python and NumPy generators for one (seed, keys) stream."""
    py_seq, np_seq = np.random.SeedSequence([seed, *keys]).spawn(2)
    py_seed = int.from_bytes(py_seq.generate_state(4).tobytes(), "little")
    return random.Random(py_seed), np.random.default_rng(np_seq)


# ---------------------------------------------------------------------------------------------
# Pairs


def build_pairs(
    unit: TokenizedChunk, cfg: PrepConfig, rng: random.Random, pool: TokenizedChunk | None = None
) -> np.ndarray:
    """Make the sentence pairs of one pass over a unit's documents.

    Returns int64 [M, 5]: a_begin, a_end, b_begin, b_end and the next-sentence label (1 = B is
    random), in document order. A offsets index ``unit.tokens``; B offsets index
    ``unit.tokens`` for label 0 and ``pool.tokens`` for label 1 (after truncation). Without a
    pool, random segments come from the unit itself.
    """
    pool = unit if pool is None or pool.num_documents == 0 else pool
    return _pairs(_Boundaries(unit), _Boundaries(pool), cfg, rng)


class _Boundaries:
    """A chunk's boundaries as Python lists: the pair loop indexes them one by one."""

    def __init__(self, chunk: TokenizedChunk) -> None:
        self.starts = chunk.sentence_starts.tolist()
        self.docs = chunk.document_starts.tolist()
        self.ids = chunk.document_ids.tolist()


def _pairs(unit: _Boundaries, pool: _Boundaries, cfg: PrepConfig, rng: random.Random) -> np.ndarray:
    starts, docs, ids = unit.starts, unit.docs, unit.ids
    pool_starts, pool_docs, pool_ids = pool.starts, pool.docs, pool.ids
    n_pool = len(pool_docs) - 1
    max_tokens = cfg.max_seq_len - 3
    short_prob = cfg.short_seq_prob
    per_sample = cfg.target_per_sample
    pairs: list[tuple[int, int, int, int, int]] = []
    rand = rng.random
    # int(rand() * n) is uniform on 0..n-1 (to within 2^-53): random.randint costs 3x more.
    short_span = max_tokens - 1

    for doc in range(len(docs) - 1):
        first, stop = docs[doc], docs[doc + 1]
        target = 2 + int(rand() * short_span) if rand() < short_prob else max_tokens
        group_start = i = first
        while i < stop:
            if i == stop - 1 or starts[i + 1] - starts[group_start] >= target:
                n_sentences = i - group_start + 1
                a_sentences = 1 if n_sentences == 1 else 1 + int(rand() * (n_sentences - 1))
                a_begin, a_end = starts[group_start], starts[group_start + a_sentences]
                if n_sentences == 1 or rand() < 0.5:
                    for _ in range(_OTHER_DOCUMENT_TRIES):
                        other = int(rand() * n_pool)
                        if pool_ids[other] != ids[doc]:
                            break
                    begin = pool_docs[other]
                    end_limit = pool_docs[other + 1]
                    begin += int(rand() * (end_limit - begin))
                    end = begin + 1
                    b_target = target - (a_end - a_begin)
                    while end < end_limit and pool_starts[end] - pool_starts[begin] < b_target:
                        end += 1
                    b_begin, b_end, is_random = pool_starts[begin], pool_starts[end], 1
                    # The group's sentences after A were not used: start the next group there.
                    i = group_start + a_sentences - 1
                else:
                    b_begin, b_end, is_random = a_end, starts[i + 1], 0
                if (a_end - a_begin) + (b_end - b_begin) > max_tokens:
                    a_begin, a_end, b_begin, b_end = truncate_pair(
                        a_begin, a_end, b_begin, b_end, max_tokens, rng
                    )
                pairs.append((a_begin, a_end, b_begin, b_end, is_random))
                group_start = i + 1
                if per_sample:
                    target = 2 + int(rand() * short_span) if rand() < short_prob else max_tokens
            i += 1
    return np.array(pairs, dtype=np.int64).reshape(-1, 5)


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


# ---------------------------------------------------------------------------------------------
# Layout and masking


def assemble(
    unit_tokens: np.ndarray, pool_tokens: np.ndarray, pairs: np.ndarray, cfg: PrepConfig, vocab: VocabInfo
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Lay pairs out as ``[CLS] A [SEP] B [SEP]`` rows padded with 0.

    Returns (input_ids int32 [M, S], len_a [M], length [M]) where length counts real tokens.
    Tokens are copied as flat runs (one gather per segment kind), not position by position.
    """
    a_begin, a_end, b_begin, b_end, is_random = pairs.T
    len_a, len_b = a_end - a_begin, b_end - b_begin
    length = len_a + len_b + 3
    width = cfg.max_seq_len
    ids = np.zeros((len(pairs), width), dtype=np.int32)
    flat = ids.reshape(-1)
    row_start = np.arange(len(pairs), dtype=np.int64) * width
    flat[_ranges(row_start + 1, row_start + 1 + len_a)] = unit_tokens[_ranges(a_begin, a_end)]
    b_start = row_start + len_a + 2
    for source, rows in ((unit_tokens, is_random == 0), (pool_tokens, is_random == 1)):
        flat[_ranges(b_start[rows], b_start[rows] + len_b[rows])] = source[
            _ranges(b_begin[rows], b_end[rows])
        ]
    flat[row_start] = vocab.cls_id
    flat[row_start + len_a + 1] = vocab.sep_id
    flat[row_start + length - 1] = vocab.sep_id
    return ids, len_a, length


def mask_count(length: np.ndarray, cfg: PrepConfig) -> np.ndarray:
    """Tokens to mask per sample: the reference's formula on the length with [CLS] and [SEP]s.

    np.rint rounds half to even, like Python 3's round(); the product is the same double.
    """
    wanted = np.rint(length * cfg.masked_lm_prob)
    return np.minimum(cfg.max_pred_len, np.maximum(1, wanted)).astype(np.int64)


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
    count = mask_count(length, cfg)
    keys = rng.random((n, width))
    if not cfg.whole_word_mask:
        return _mask_pieces(ids, candidate, count, keys, cfg, vocab, rng)
    previous_candidate = np.pad(candidate[:, :-1], ((0, 0), (1, 0)))
    word_start = ~candidate | ~vocab.is_continuation[ids] | ~previous_candidate
    first_piece = np.maximum.accumulate(np.where(word_start, pos, 0), axis=1)
    keys = np.take_along_axis(keys, first_piece, axis=1)  # a word's pieces share one key
    keys[~candidate] = 2.0  # after every candidate
    order = np.argsort(keys, axis=1, kind="stable")  # stable: a word's pieces stay adjacent
    rank = np.arange(1, width + 1)[None, :]
    word_of = np.take_along_axis(first_piece, order, axis=1)
    word_end = np.ones_like(candidate)
    word_end[:, :-1] = word_of[:, :-1] != word_of[:, 1:]
    # Tokens masked once this slot's whole word is in: the rank of its last piece.
    through_word = np.minimum.accumulate(np.where(word_end, rank, width + 1)[:, ::-1], axis=1)[:, ::-1]
    take_sorted = through_word <= count[:, None]
    chosen = np.zeros_like(candidate)
    np.put_along_axis(chosen, order, take_sorted & np.take_along_axis(candidate, order, axis=1), axis=1)

    rows, cols = np.nonzero(chosen)
    action = rng.random(rows.size)
    random_tokens = vocab.replacement_ids[rng.integers(vocab.replacement_ids.size, size=rows.size)]
    masked = ids.copy()
    masked[rows, cols] = np.where(
        action < 0.8, vocab.mask_id, np.where(action < 0.9, random_tokens, ids[rows, cols])
    )
    first_chosen = np.argsort(~chosen, axis=1, kind="stable")[:, : cfg.max_pred_len]
    valid = np.take_along_axis(chosen, first_chosen, axis=1)
    positions = np.where(valid, first_chosen, 0)
    labels = np.where(valid, np.take_along_axis(ids, positions, axis=1), 0)
    return masked, positions, labels


def _mask_pieces(
    ids: np.ndarray,
    candidate: np.ndarray,
    count: np.ndarray,
    keys: np.ndarray,
    cfg: PrepConfig,
    vocab: VocabInfo,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """mask_samples for single pieces: the ``count`` candidates with the smallest random keys
    (a uniform random subset). At most max_pred_len are taken, so a partial sort of that many
    keys per row replaces a full sort of the row."""
    n, width = ids.shape
    k = min(cfg.max_pred_len, width)
    keys[~candidate] = 2.0  # after every candidate
    smallest = np.argpartition(keys, k - 1, axis=1)[:, :k] if k < width else np.tile(np.arange(width), (n, 1))
    by_key = np.take_along_axis(
        smallest, np.argsort(np.take_along_axis(keys, smallest, axis=1), axis=1), axis=1
    )
    take = (np.arange(k)[None, :] < count[:, None]) & (np.take_along_axis(keys, by_key, axis=1) < 2.0)
    positions = np.where(take, by_key, width)
    positions.sort(axis=1)
    valid = positions < width
    positions[~valid] = 0
    rows, slots = np.nonzero(valid)
    cols = positions[rows, slots]
    labels = np.where(valid, np.take_along_axis(ids, positions, axis=1), 0)
    action = rng.random(rows.size)
    random_tokens = vocab.replacement_ids[rng.integers(vocab.replacement_ids.size, size=rows.size)]
    masked = ids.copy()
    masked[rows, cols] = np.where(
        action < 0.8, vocab.mask_id, np.where(action < 0.9, random_tokens, ids[rows, cols])
    )
    return masked, positions, labels


# ---------------------------------------------------------------------------------------------
# The unit of work


def unit_samples(
    unit_index: int, unit: TokenizedChunk, pool: TokenizedChunk, cfg: PrepConfig, vocab: VocabInfo
) -> np.ndarray:
    """All dupe passes of one work unit as records, in pass order (see the module docstring).

    ``cfg.seed``, ``unit_index`` and the pass number seed the generators, so the records depend
    on the data, the pool and the configuration only.
    """
    dtype = record_dtype(cfg, vocab.size)
    if pool.num_documents == 0:
        pool = unit
    unit_bounds, pool_bounds = _Boundaries(unit), _Boundaries(pool)
    parts = []
    for dupe in range(cfg.dupe_factor):
        py_rng, np_rng = rngs(cfg.seed, BUILD, unit_index, dupe)
        pairs = _pairs(unit_bounds, pool_bounds, cfg, py_rng)
        ids, len_a, length = assemble(unit.tokens, pool.tokens, pairs, cfg, vocab)
        masked, positions, labels = mask_samples(ids, len_a, length, cfg, vocab, np_rng)
        records = np.empty(len(pairs), dtype=dtype)
        records["ids"] = masked
        records["len_a"] = len_a
        records["length"] = length
        records["positions"] = positions
        records["labels"] = labels
        records["next_sentence"] = pairs[:, 4]
        parts.append(records)
    return np.concatenate(parts) if parts else np.empty(0, dtype=dtype)
