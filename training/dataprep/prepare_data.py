"""Turn a text corpus into BERT pretraining shards (masked LM + next-sentence prediction).

    python -m training.dataprep.prepare_data --input CORPUS_FILE_OR_DIR [...] [--input_pattern '*.txt'] \\
        --vocab vocab.txt \\
        --output_dir DIR [--output_prefix corpus] [--max_seq_len 128] [--max_pred_len 20] \\
        [--masked_lm_prob 0.15] [--short_seq_prob 0.1] [--dupe_factor 5] [--seed 12345] \\
        [--num_workers N] [--num_shards K | --samples_per_shard S] [--whole_word_mask] \\
        [--target_per_sample] [--pool_tokens N] [--do_lower_case | --no_lower_case] \\
        [--no_progress] [--overwrite]

Input: text, one sentence per line, a blank line between documents; UTF-8 unless --encoding
says otherwise. A directory contributes its files matching --input_pattern (``*.txt``); one with
none is refused. Binary files and archives are refused; an invalid byte is an error naming file,
line and offset unless --errors replace. Output: a shard set (``training.dataprep.shard_format``): the
directory --output_dir holding ``<prefix>_training_<k>.hdf5`` in the layout of the public
Neuron/NVIDIA shards (``next_sentence_labels`` 1 = B is a random segment; S = --max_seq_len,
P = --max_pred_len) and ``manifest.json``. It is built in a hidden sibling directory and renamed
into place when complete, with the modes the umask gives (readable by other users under the
usual 022); SIGINT/SIGTERM stop the tool at any phase with exit 130/143 and leave
--output_dir as it was.

Samples: the reference tool's distribution (Google's create_pretraining_data.py, whose NVIDIA
copy made the public shards); the rules, and the few documented differences, are in
``training.dataprep.bert_samples``, which makes them. ``--target_per_sample`` restores this tool's earlier
draw of the short target per sample instead of per document.

The pipeline (and why the output does not depend on --num_workers) is described in
``training.dataprep.prep_pipeline``.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence
from concurrent.futures.process import BrokenProcessPool

from . import interrupt
from .prep_pipeline import log, prepare_shards

# The command line is the settings module's (torch- and numpy-free, read at synth by trainium_eks).
from .prep_settings import build_parser, prep_config, run_settings
from .text_input import UsageError

__all__ = ["PhaseLog", "build_parser", "main", "prep_config", "run_settings"]


class PhaseLog(logging.StreamHandler):
    """Phase lines on stdout. logging reports and swallows errors raised while a record is
    written; a stop signal arriving then must still stop the tool."""

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 (logging's name)
        if isinstance(sys.exc_info()[1], interrupt.Interrupted):
            raise
        super().handleError(record)


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
                input_pattern=args.input_pattern,
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
