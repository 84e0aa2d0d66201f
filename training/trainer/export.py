"""A checkpoint as a Hugging Face model folder, for ``from_pretrained`` and fine-tuning.

    python -m training.trainer.export CHECKPOINT OUT --vocab VOCAB.txt [--data_dir SHARDS]
        [--do_lower_case | --no_lower_case] [--hardware "2 x trn1.32xlarge"] [--node_hours 12.5]
        [--license apache-2.0] [--language en]

CHECKPOINT is a checkpoint directory (``step_*``, or one of ``training.trainer.import_neuron``) or a
run's ``--output_dir`` (its newest checkpoint); it is verified against its digests first. OUT gets
what ``transformers`` writes itself (``save_pretrained``): ``config.json`` and ``model.safetensors``
of the ``BertForPreTraining`` (float32: a bf16 run's weights widen exactly), and the tokenizer of
the vocabulary the shards were made with: ``tokenizer.json``, ``tokenizer_config.json`` and a copy
of ``vocab.txt``. The tokenizer normalizes as the data tool did (``training.dataprep.vocab.bert_tokenizer``:
BERT's normalizer, accents stripped exactly when lower-casing); the lower-casing is the shard set's
(its manifest records ``lower_case`` and ``vocab_sha256``): ``--data_dir``'s, by default the set the
checkpoint's run read where it still is; without a manifest ``--do_lower_case``/``--no_lower_case``,
else lower-cased, the data tool's default. A flag that contradicts the manifest, or a vocabulary
other than the one the manifest or the checkpoint records, is refused naming both.

A run directory exports its newest checkpoint whether or not the run finished (its ``COMPLETE``
marker is not read): a run a spend ceiling or a stop ended before its ``--max_steps`` exports the
model of the step it reached. OUT's ``README.md`` is the model card (``training.trainer.model_card``):
the Hub's metadata with the held-out results, the model, each phase of its lineage (its steps, of
``--max_steps``: a run stopped mid-schedule says so; batch, learning rate, shard set, held-out
results), the tokenizer, the hardware and node-hours given by ``--hardware`` and ``--node_hours``
("not recorded" without them), and how to load it.

OUT is written beside itself and renamed into place, so it is the whole export or the earlier one.
Then::

    from transformers import AutoTokenizer, BertForPreTraining
    model = BertForPreTraining.from_pretrained(OUT)
    tokenizer = AutoTokenizer.from_pretrained(OUT)
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import torch
from transformers import BertConfig, BertForPreTraining, BertTokenizer

from ..dataprep.shard_format import ShardSetError, read_manifest, sha256_of
from . import checkpoint as ckpt
from . import model_card
from .init_from import InitFromError, find_start
from .model_card import CardOptions

log = logging.getLogger("training.trainer.export")

VOCAB_FILE = "vocab.txt"


class ExportError(RuntimeError):
    """An export that cannot be right; the message is one line naming the file or flag."""


def shard_settings(data_dir: str) -> dict[str, Any]:
    """The settings a shard set's manifest records (``lower_case``, ``vocab_sha256``, ...)."""
    try:
        return dict(read_manifest(data_dir).settings)
    except ShardSetError as e:
        raise ExportError(f"--data_dir {e}") from None


def vocab_size_of(vocab: Path) -> int:
    with open(vocab, encoding="utf-8") as f:
        return sum(1 for _ in f)


def check_vocab(vocab: Path, recorded: dict[str, str | None], config: BertConfig) -> None:
    """ExportError for a vocab.txt missing, larger than the model's embeddings, or not the recorded one."""
    if not vocab.is_file():
        raise ExportError(f"--vocab {vocab}: no such file; give the vocab.txt the shards were made with")
    size = vocab_size_of(vocab)
    if size > config.vocab_size:
        raise ExportError(
            f"--vocab {vocab}: {size} tokens, the model's embeddings hold {config.vocab_size}; "
            "give the vocab.txt the shards were made with"
        )
    digest = sha256_of(vocab)
    for where, want in recorded.items():
        if want and want != digest:
            raise ExportError(
                f"--vocab {vocab}: sha256 {digest[:16]}, {where} records {want[:16]}: not the vocabulary "
                "the model was trained with"
            )


def load_model(path: Path) -> tuple[BertForPreTraining, dict[str, Any], dict[str, Any]]:
    """The verified checkpoint's model, in float32, its meta and the flags of its run (none if imported)."""
    meta = ckpt.verify(path)
    state = ckpt.load_state(path)
    if "model" not in state or "model_config" not in state:
        raise ExportError(f"{path / ckpt.STATE_FILE}: holds no model or model_config")
    config = BertConfig.from_dict(state["model_config"])
    config.architectures = ["BertForPreTraining"]
    model = BertForPreTraining(config)
    try:
        model.load_state_dict({k: v.float() for k, v in state["model"].items()})
    except RuntimeError as e:
        raise ExportError(f"{path / ckpt.STATE_FILE}: {' '.join(str(e).split())[:1000]}") from None
    return model.eval(), meta, dict(state.get("args") or {})


def casing(
    data_dir: str | None, lower_case: bool | None, recorded: dict[str, str | None]
) -> tuple[bool, str]:
    """The tokenizer's lower-casing and where it comes from: the shard set's manifest, the flag, or
    the data tool's default; ``recorded`` gets the manifest's vocabulary digest."""
    if data_dir is not None:
        settings = shard_settings(data_dir)
        recorded[f"--data_dir {data_dir}"] = settings.get("vocab_sha256")
        made = settings.get("lower_case")
        if made is not None and lower_case is not None and bool(made) != lower_case:
            raise ExportError(
                f"--{'do' if lower_case else 'no'}_lower_case: the shards of --data_dir {data_dir} were made "
                f"with{'' if made else 'out'} lower-casing; leave the flag out"
            )
        if made is not None:
            return bool(made), f"the manifest of `{Path(data_dir).name}` records"
    if lower_case is not None:
        return lower_case, f"`--{'do' if lower_case else 'no'}_lower_case` told the export"
    return True, "the data tool's default (`--do_lower_case`), which no manifest contradicts"


def check_options(options: CardOptions) -> None:
    """ExportError naming the flag of a card option that the card cannot hold."""
    if options.hardware is not None and (not options.hardware.strip() or "\n" in options.hardware):
        raise ExportError(f"--hardware {options.hardware!r}: give one line, such as '2 x trn1.32xlarge'")
    hours = options.node_hours
    if hours is not None and not (hours >= 0 and hours != float("inf")):
        raise ExportError(f"--node_hours {hours}: give the run's node-hours, a number >= 0, such as 12.5")
    for flag, value in (("--license", options.license), ("--language", options.language)):
        if not value or any(c.isspace() for c in value):
            raise ExportError(f"{flag} {value!r}: give one identifier, such as apache-2.0 or en")


def export(
    checkpoint: str,
    out: Path,
    *,
    vocab: Path,
    data_dir: str | None = None,
    lower_case: bool | None = None,
    card: CardOptions | None = None,
) -> Path:
    """Write the Hugging Face folder of ``checkpoint`` to ``out``, with its model card; returns ``out``.
    ``card``: what the card is told beside the run's files (default: ``CardOptions()``)."""
    options = card or CardOptions()
    check_options(options)
    try:
        path = find_start(checkpoint, "CHECKPOINT")
    except InitFromError as e:
        raise ExportError(str(e)) from None
    model, meta, flags = load_model(path)
    recorded: dict[str, str | None] = {f"checkpoint {path.name}": meta.get("vocab_sha256")}
    trained_on = flags.get("data_dir")
    if data_dir is None and trained_on and Path(trained_on).is_dir():
        data_dir = trained_on  # the run's own shard set, where it still is
    lower_case, casing_from = casing(data_dir, lower_case, recorded)
    check_vocab(vocab, recorded, model.config)
    tokenizer = BertTokenizer(
        vocab=str(vocab),
        do_lower_case=lower_case,
        model_max_length=model.config.max_position_embeddings,
    )
    out = Path(out)
    readme = card_text(path, meta, flags, data_dir, model, out, options, vocab, (lower_case, casing_from))
    partial = out.with_name(f".{out.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        model.save_pretrained(partial)
        tokenizer.save_pretrained(partial)
        shutil.copyfile(vocab, partial / VOCAB_FILE)
        (partial / model_card.CARD_FILE).write_text(readme, encoding="utf-8")
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        if out.exists():
            os.replace(out, old)
        os.replace(partial, out)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    log.info(
        "exported %s (step %s, %d weights, lower_case %s) to %s",
        path,
        meta["step"],
        sum(p.numel() for p in model.parameters()),
        lower_case,
        out,
    )
    return out


def card_text(
    path: Path,
    meta: dict[str, Any],
    flags: dict[str, Any],
    data_dir: str | None,
    model: BertForPreTraining,
    out: Path,
    options: CardOptions,
    vocab: Path,
    case: tuple[bool, str],
) -> str:
    """The model card of the checkpoint at ``path``, named after its run directory."""
    exported = model_card.read_phase(path, meta, flags, data_dir)
    card = model_card.Card(
        name=path.resolve().parent.parent.name,
        folder=out.name,
        phases=model_card.lineage(exported),
        config=model.config,
        parameters=sum(p.numel() for p in model.parameters()),
        tokenizer=model_card.Tokenizer(vocab_size_of(vocab), sha256_of(vocab), *case),
        options=options,
    )
    return model_card.render(card)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m training.trainer.export",
        description="Write a checkpoint as a Hugging Face folder (config.json, model.safetensors, tokenizer).",
    )
    p.add_argument("checkpoint", help="a checkpoint directory (step_*) or a run's --output_dir (its newest)")
    p.add_argument("out", type=Path, help="the folder to write")
    p.add_argument("--vocab", type=Path, required=True, help="the vocab.txt the shards were made with")
    p.add_argument("--data_dir", default=None, help="the shard set: its manifest gives the lower-casing")
    case = p.add_mutually_exclusive_group()
    case.add_argument("--do_lower_case", dest="lower_case", action="store_true", default=None)
    case.add_argument("--no_lower_case", dest="lower_case", action="store_false")
    card = p.add_argument_group("model card", "what README.md says beside what the run's files record")
    card.add_argument(
        "--hardware",
        default=None,
        help="the machines of the exported run, e.g. '2 x trn1.32xlarge' (default: not recorded)",
    )
    card.add_argument(
        "--node_hours",
        type=float,
        default=None,
        help="the exported run's node-hours, e.g. 12.5 (default: not recorded)",
    )
    card.add_argument("--license", default=CardOptions.license, help="the weights' Hub license id")
    card.add_argument("--language", default=CardOptions.language, help="the corpus's language (ISO 639-1)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    torch.set_grad_enabled(False)
    try:
        options = CardOptions(
            hardware=args.hardware, node_hours=args.node_hours, license=args.license, language=args.language
        )
        export(
            args.checkpoint,
            args.out,
            vocab=args.vocab,
            data_dir=args.data_dir,
            lower_case=args.lower_case,
            card=options,
        )
    except (ExportError, ckpt.CheckpointError) as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
