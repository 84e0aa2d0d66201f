"""Turn a text corpus into BERT pretraining shards (masked LM + next-sentence prediction).

    python -m training.prepare_data --input CORPUS_FILE_OR_DIR [...] --vocab vocab.txt \\
        --output_dir DIR [--output_prefix corpus] [--max_seq_len 128] [--max_pred_len 20] \\
        [--masked_lm_prob 0.15] [--short_seq_prob 0.1] [--dupe_factor 5] [--seed 12345] \\
        [--num_workers N] [--num_shards K | --samples_per_shard S] [--whole_word_mask] \\
        [--target_per_sample] [--pool_tokens N] [--do_lower_case | --no_lower_case] \\
        [--no_progress] [--overwrite]

Input: text, one sentence per line, a blank line between documents; UTF-8 unless --encoding
says otherwise. Binary files and archives are refused; an invalid byte is an error naming file,
line and offset unless --errors replace. Output: a shard set (``training.shard_format``): the
directory --output_dir holding ``<prefix>_training_<k>.hdf5`` in the layout of the public
Neuron/NVIDIA shards (``next_sentence_labels`` 1 = B is a random segment; S = --max_seq_len,
P = --max_pred_len) and ``manifest.json``. It is built in a hidden sibling directory and renamed
into place when complete; SIGINT/SIGTERM stop the tool at any phase with exit 130/143 and leave
--output_dir as it was.

Samples: the reference tool's distribution (Google's create_pretraining_data.py, whose NVIDIA
copy made the public shards); the rules, and the few documented differences, are in
``training.bert_samples``, which makes them. ``--target_per_sample`` restores this tool's earlier
draw of the short target per sample instead of per document.

The pipeline (and why the output does not depend on --num_workers) is described in
``training.prep_pipeline``.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
from collections.abc import Sequence
from concurrent.futures.process import BrokenProcessPool

from training import interrupt
from training.bert_samples import PrepConfig
from training.prep_pipeline import (
    DEFAULT_CHUNK_MB,
    DEFAULT_POOL_TOKENS,
    DEFAULT_SAMPLES_PER_SHARD,
    RunSettings,
    log,
    prepare_shards,
)
from training.text_input import ERROR_MODES, OneLineArgumentParser, UsageError

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


class PhaseLog(logging.StreamHandler):
    """Phase lines on stdout. logging reports and swallows errors raised while a record is
    written; a stop signal arriving then must still stop the tool."""

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 (logging's name)
        if isinstance(sys.exc_info()[1], interrupt.Interrupted):
            raise
        super().handleError(record)


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
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    cfg = prep_config(args)
    log.addHandler(PhaseLog(sys.stdout))
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
                pool_tokens=args.pool_tokens,
                encoding=args.encoding,
                errors=args.errors,
            )
    except UsageError as err:
        parser.error(str(err))
    except (interrupt.Interrupted, BrokenProcessPool):
        # A worker killed by the same signal can break the pool before the parent's handler runs.
        signal_number = interrupt.received()
        if signal_number is None:
            raise
        stopped = interrupt.Interrupted(signal_number)
        print(
            f"{parser.prog}: {stopped}: stopped; nothing published, {args.output_dir} unchanged",
            file=sys.stderr,
        )
        return stopped.exit_code
    late_signal = interrupt.received()
    if late_signal is not None:  # arrived while publishing: the complete set is in place
        stopped = interrupt.Interrupted(late_signal)
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
    exit_code = main()
    # Everything is written, closed and published, and the workers are joined. The interpreter's
    # teardown would now free flash-tokenizer's tables piece by piece (about 0.05 s, serial, in
    # every run): flush the output and end the process without it.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(exit_code)
