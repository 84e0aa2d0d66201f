"""The data tool's settings without its machinery: the flags of ``python -m
training.dataprep.prepare_data`` (its parser), the sample and run settings they make, and the checks of
those settings alone.

Standard library only: ``trainium_eks`` parses a deployment's ``preparation_args`` with this
parser at ``cdk synth`` (so a value the tool would refuse stops synth), without loading numpy or
the tokenizer.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from dataclasses import dataclass

from .text_input import (
    DEFAULT_INPUT_PATTERN,
    ERROR_MODES,
    OneLineArgumentParser,
    UsageError,
    check_encoding,
)

DEFAULT_CHUNK_MB = 2.0  # the work unit: several per process balance the work
DEFAULT_SAMPLES_PER_SHARD = 65536
# The random-next pool: the whole corpus up to this many tokens (about 130 MB of English text;
# 64 MiB as uint16, memory-mapped and shared by the workers), a uniform sample of documents above.
DEFAULT_POOL_TOKENS = 1 << 25


@dataclass(frozen=True)
class PrepConfig:
    """Sample-making parameters; their meaning is in ``training.dataprep.bert_samples``' docstring."""

    max_seq_len: int = 128
    max_pred_len: int = 20
    masked_lm_prob: float = 0.15
    short_seq_prob: float = 0.1
    dupe_factor: int = 5
    seed: int = 12345
    lower_case: bool = True
    whole_word_mask: bool = False
    # The earlier, non-reference draw of short targets (one per sample, not per document).
    target_per_sample: bool = False

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
class RunSettings:
    """What, besides ``PrepConfig``, defines a shard set (and so goes into its manifest)."""

    num_shards: int | None = None
    samples_per_shard: int | None = None
    output_prefix: str = "corpus"
    chunk_bytes: int = int(DEFAULT_CHUNK_MB * (1 << 20))
    pool_tokens: int = DEFAULT_POOL_TOKENS
    encoding: str = "utf-8"
    errors: str = "strict"
    input_pattern: str = DEFAULT_INPUT_PATTERN


def check_settings(cfg: PrepConfig, run: RunSettings, num_workers: int = 1) -> None:
    """The checks of the settings alone (no file is read): what ``trainium_eks`` runs at synth on
    a deployment's ``preparation_args``.

    Raises:
        UsageError: naming the flag and the fix.
    """
    cfg.validate()
    _check_run_args(num_workers, run.num_shards, run.samples_per_shard, run.output_prefix, run.chunk_bytes)
    if run.pool_tokens < 1:
        raise UsageError(
            f"--pool_tokens {run.pool_tokens}: must be at least 1; the default is {DEFAULT_POOL_TOKENS}"
        )
    check_encoding(run.encoding, run.errors)


def _check_run_args(
    num_workers: int,
    num_shards: int | None,
    samples_per_shard: int | None,
    output_prefix: str,
    chunk_bytes: int,
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
        raise UsageError(
            f"--output_prefix {output_prefix!r}: must be a non-empty file-name prefix without '/'"
        )
    if chunk_bytes < 1:
        raise UsageError(
            f"--chunk_mb: the chunk size ({chunk_bytes} bytes) must be at least 1 byte; "
            f"the default is {DEFAULT_CHUNK_MB:g} MiB"
        )


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineArgumentParser(
        prog="python -m training.dataprep.prepare_data",
        description="Make BERT pretraining HDF5 shards (MLM + NSP) from a text corpus "
        "(one sentence per line, blank line between documents) and a WordPiece vocab.txt.",
    )
    parser.add_argument("--input", nargs="+", required=True, help="corpus file(s) or directories")
    parser.add_argument(
        "--input_pattern",
        default=DEFAULT_INPUT_PATTERN,
        help="which files of a directory in --input are read, recursively (shell pattern; default: "
        f"{DEFAULT_INPUT_PATTERN}; files named in --input are always read)",
    )
    parser.add_argument(
        "--vocab", required=True, help="WordPiece vocab.txt (see python -m training.dataprep.vocab)"
    )
    parser.add_argument("--output_dir", required=True, help="directory for <prefix>_training_<k>.hdf5")
    parser.add_argument("--output_prefix", default="corpus", help="shard name prefix (default: corpus)")
    _add_sample_flags(parser)
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
        help=f"input chunk size in MiB, the unit of parallel work and of random seeding; "
        f"changes the output (default: {DEFAULT_CHUNK_MB:g})",
    )
    parser.add_argument(
        "--encoding",
        default="utf-8",
        help="of the corpus files, ASCII-compatible (default: utf-8; e.g. latin-1)",
    )
    parser.add_argument(
        "--errors",
        choices=ERROR_MODES,
        default="strict",
        help="invalid bytes: strict = an error naming file, line and offset (default); replace = U+FFFD",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace the shard set in --output_dir")
    parser.add_argument("--no_progress", action="store_true", help="no progress bars")
    parser.set_defaults(**dataclasses.asdict(PrepConfig()))
    return parser


def _add_sample_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of the sample settings (``PrepConfig``) and of the random-next pool."""
    # Defaults of the sample settings: PrepConfig's (set_defaults below).
    parser.add_argument("--max_seq_len", type=int, help="tokens per sample (default: %(default)s)")
    parser.add_argument(
        "--max_pred_len", type=int, help="most masked tokens per sample (default: %(default)s)"
    )
    parser.add_argument("--masked_lm_prob", type=float, help="share of tokens masked (default: %(default)s)")
    parser.add_argument("--short_seq_prob", type=float, help="share of short targets (default: %(default)s)")
    parser.add_argument("--dupe_factor", type=int, help="passes with different masks (default: %(default)s)")
    parser.add_argument("--seed", type=int, help="random seed (default: %(default)s)")
    parser.add_argument("--whole_word_mask", action="store_true", help="mask whole words, not single pieces")
    parser.add_argument(
        "--target_per_sample",
        action="store_true",
        help="draw the short target length per sample (this tool's earlier behaviour), not once per "
        "document as the reference does",
    )
    parser.add_argument(
        "--pool_tokens",
        type=int,
        default=DEFAULT_POOL_TOKENS,
        help="most tokens of the pool random next segments come from: the whole corpus up to it, a "
        f"uniform sample of documents above; changes the output (default: {DEFAULT_POOL_TOKENS})",
    )
    parser.add_argument(
        "--do_lower_case",
        dest="lower_case",
        action="store_true",
        default=True,
        help="lower-case and strip accents (default; for uncased vocabs)",
    )
    parser.add_argument(
        "--no_lower_case", dest="lower_case", action="store_false", help="keep case (cased vocabs)"
    )


def prep_config(args: argparse.Namespace) -> PrepConfig:
    """The sample settings of a parsed command line (this tool's or ``prepare_indexed``'s)."""
    return PrepConfig(
        max_seq_len=args.max_seq_len,
        max_pred_len=args.max_pred_len,
        masked_lm_prob=args.masked_lm_prob,
        short_seq_prob=args.short_seq_prob,
        dupe_factor=args.dupe_factor,
        seed=args.seed,
        lower_case=args.lower_case,
        whole_word_mask=args.whole_word_mask,
        target_per_sample=args.target_per_sample,
    )


def run_settings(args: argparse.Namespace) -> RunSettings:
    """The run settings (shards, work units, input decoding) of a parsed command line."""
    return RunSettings(
        num_shards=args.num_shards,
        samples_per_shard=args.samples_per_shard,
        output_prefix=args.output_prefix,
        chunk_bytes=int(args.chunk_mb * (1 << 20)),
        pool_tokens=args.pool_tokens,
        encoding=args.encoding,
        errors=args.errors,
        input_pattern=args.input_pattern,
    )
