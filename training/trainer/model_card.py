"""The model card of an exported model: ``README.md`` in its Hugging Face folder.

``training.trainer.export`` writes it beside the weights. Its YAML front matter is the Hub's model
card metadata (the annotated spec: huggingface/hub-docs ``modelcard.md``; the Hub's guide,
https://huggingface.co/docs/hub/model-cards#model-card-metadata), made and parsed back by
``huggingface_hub``'s ``ModelCardData`` and ``ModelCard`` (a dependency of transformers):
``license``, ``language``, ``library_name: transformers``, ``pipeline_tag: fill-mask``, ``tags``,
``datasets`` (the shard sets' names, which are not Hub dataset ids) and, when the exported
checkpoint was evaluated at its step, ``metrics`` and ``model-index`` with its held-out results:
the numbers of its run's metrics file, as they are.

The text holds what the checkpoints and the runs' files record, and nothing else:

* the model (its config) and each phase of its lineage, oldest first: the exported run, the run it
  started from (``--init_from``: every checkpoint records the start's path, step and ``state.pt``
  SHA-256), and so on back, or Neuron's imported checkpoint (``imported_from``). For each: its
  steps (done of ``--max_steps``: a run stopped before the end of its schedule says so), global
  batch, learning rate, optimizer, its shard set (the manifest's name, source, samples, shapes,
  casing and vocabulary) and its held-out results at its step (the metrics file's; a run stopped
  at a checkpoint does not evaluate, so for it the last evaluation of its step log, at its step);
* the tokenizer (the vocabulary's size and SHA-256, its casing and where the casing came from);
* the hardware and node-hours the export is told (``CardOptions``), else "not recorded", and the
  lines that load the folder.

An earlier phase is read where its run is (its checkpoint's ``meta.json``, its ``state.pt``'s flags
with the tensors memory-mapped, not read, and its metrics file and step log); what cannot be read
there is said so, and the export goes on. No time stamp: the same checkpoint, files and options
give the same card, byte for byte.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from huggingface_hub import EvalResult as HubEvalResult
from huggingface_hub import ModelCard, ModelCardData
from transformers import BertConfig

from trainium_job.estimates import MLPERF_SOURCE
from trainium_job.paths import MODEL_DIR

from ..dataprep.shard_format import ShardSetError, read_manifest
from . import checkpoint as ckpt
from .evaluate import EvalResult

CARD_FILE = "README.md"
NOT_RECORDED = "not recorded"
#: How far back the lineage is followed (a chain of ``--init_from`` runs; a loop ends here too).
MAX_PHASES = 8
TAGS = ("bert", "pretraining", "masked-lm", "next-sentence-prediction", "trainium", "aws-neuron")


@dataclass(frozen=True)
class CardOptions:
    """What the export is told beside the run's files (``python -m training.trainer.export`` flags)."""

    #: The machines the exported run trained on, as the job knows them ("2 x trn1.32xlarge");
    #: None (default): "not recorded".
    hardware: str | None = None
    #: The exported run's node-hours (nodes x hours of training); None (default): "not recorded".
    node_hours: float | None = None
    #: The weights' license, a Hub license id. Default apache-2.0: Google's BERT's and this project's;
    #: give your corpus's terms where they differ.
    license: str = "apache-2.0"
    #: The corpus's language (ISO 639-1). Default en: the public Wikipedia shards'.
    language: str = "en"


@dataclass(frozen=True)
class ShardSet:
    """A shard set as its manifest describes it; ``problem``: why it could not be read here."""

    path: str
    source: str | None = None
    samples: int | None = None
    shards: int | None = None
    seq_len: int | None = None
    max_pred_len: int | None = None
    lower_case: bool | None = None
    vocab_sha256: str | None = None
    problem: str | None = None

    @property
    def name(self) -> str:
        return Path(self.path).name


def shard_set(path: str) -> ShardSet:
    """What ``path``'s manifest records (a single HDF5 file has none)."""
    if not Path(path).is_dir():
        return ShardSet(
            path, problem="a single HDF5 file, no manifest" if Path(path).is_file() else "not here"
        )
    try:
        manifest = read_manifest(path)
    except ShardSetError as e:
        return ShardSet(path, problem=f"its manifest is not readable ({str(e).split(';')[0]})")
    settings = manifest.settings
    return ShardSet(
        path,
        source=source_of(settings, manifest.seed),
        samples=manifest.samples,
        shards=len(manifest.shards),
        seq_len=manifest.seq_len,
        max_pred_len=manifest.max_pred_len,
        lower_case=settings.get("lower_case"),
        vocab_sha256=settings.get("vocab_sha256"),
    )


def source_of(settings: Mapping[str, Any], seed: int | None) -> str | None:
    """Where a manifest says its shards came from: the staged source, or the data tool's inputs."""
    if settings.get("source"):
        return f"`{settings['source']}`"
    if settings.get("tool"):
        inputs = settings.get("inputs") or []
        size = sum(int(i.get("bytes", 0)) for i in inputs)
        return f"made by `{settings['tool']}` from {len(inputs)} input file(s) ({size:,} bytes), seed {seed}"
    return None


@dataclass(frozen=True)
class Phase:
    """One run of the model's lineage, as its checkpoint and files record it."""

    checkpoint: str
    step: int
    state_sha256: str | None = None
    #: Every flag of the run (its ``state.pt``'s ``args``); empty for an import or where unreadable.
    flags: Mapping[str, Any] = field(default_factory=dict)
    world_size: int | None = None
    data: ShardSet | None = None
    held_out: ShardSet | None = None
    #: The run's metrics file, when it is the summary of this step (the run ended here).
    metrics: Mapping[str, Any] | None = None
    #: Without ``metrics``' evaluation: the last one of the step log at or before ``step``.
    logged: EvalResult | None = None
    imported_from: Mapping[str, Any] | None = None
    started_from: Mapping[str, Any] | None = None
    problem: str | None = None

    @property
    def run(self) -> str:
        """The run's ``--output_dir`` (``<run>/checkpoints/step_*``)."""
        return str(Path(self.checkpoint).parent.parent)

    @property
    def max_steps(self) -> int | None:
        return self.flags.get("max_steps")

    @property
    def stopped_early(self) -> bool:
        return self.max_steps is not None and self.step < self.max_steps

    @property
    def evaluation(self) -> EvalResult | None:
        """The held-out evaluation at this step, from the metrics file."""
        found = (self.metrics or {}).get("eval")
        if not isinstance(found, dict) or found.get("step") != self.step:
            return None
        try:
            return EvalResult(**found)
        except TypeError:  # written by another version: not these fields
            return None

    @property
    def global_batch(self) -> int | None:
        f = self.flags
        if self.world_size is None or "batch_size" not in f or "grad_accum_usteps" not in f:
            return None
        return int(f["batch_size"]) * int(f["grad_accum_usteps"]) * self.world_size


def state_digest(meta: Mapping[str, Any]) -> str | None:
    return ((meta.get("files") or {}).get(ckpt.STATE_FILE) or {}).get(ckpt.DIGEST)


def read_phase(
    path: Path, meta: Mapping[str, Any], flags: Mapping[str, Any], data_dir: str | None = None
) -> Phase:
    """The phase of a checkpoint (``meta`` and ``flags``: its meta.json and its state's ``args``);
    ``data_dir``: where its shard set is, when not where its run read it."""
    run, step = path.parent.parent, int(meta["step"])
    data = data_dir or flags.get("data_dir")
    metrics = run_metrics(run, flags, step)
    has_eval = Phase(str(path), step, metrics=metrics).evaluation is not None
    return Phase(
        checkpoint=str(path.resolve()),
        step=step,
        state_sha256=state_digest(meta),
        flags=dict(flags),
        world_size=meta.get("world_size") if flags else None,
        data=shard_set(data) if data else None,
        held_out=shard_set(flags["eval_dir"]) if flags.get("eval_dir") else None,
        metrics=metrics,
        logged=None if has_eval else logged_evaluation(run, flags, step),
        imported_from=meta.get("imported_from"),
        started_from=meta.get("init_from"),
    )


def _run_file(run: Path, flags: Mapping[str, Any], flag: str, default: str) -> Iterator[Path]:
    """The run's file of ``flag``, then its default place in the run directory (a moved run)."""
    if flags.get(flag):
        yield Path(flags[flag])
    yield run / default


def run_metrics(run: Path, flags: Mapping[str, Any], step: int) -> dict[str, Any] | None:
    """The run's metrics file, when it summarizes the run that ended at ``step``."""
    for path in _run_file(run, flags, "metrics_file", "metrics.json"):
        try:
            metrics = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        return metrics if isinstance(metrics, dict) and metrics.get("end_step") == step else None
    return None


def logged_evaluation(run: Path, flags: Mapping[str, Any], step: int) -> EvalResult | None:
    """The last held-out evaluation the step log holds at or before ``step`` (later lines of the
    same step are a resumed attempt's, which the checkpoint continues)."""
    for path in _run_file(run, flags, "step_log", "train_log.jsonl"):
        try:
            lines = path.read_text().splitlines()
        except OSError:
            continue
        last = None
        for line in lines:
            try:
                r = json.loads(line)
            except ValueError:
                continue  # a line cut short by a killed process
            if isinstance(r, dict) and "eval_mlm_accuracy" in r and int(r.get("step", step + 1)) <= step:
                last = r
        if last is None:
            return None
        return EvalResult(
            step=int(last["step"]),
            samples=int(last["eval_samples"]),
            mlm_loss=float(last["eval_mlm_loss"]),
            mlm_accuracy=float(last["eval_mlm_accuracy"]),
            nsp_accuracy=float(last["eval_nsp_accuracy"]),
        )
    return None


def start_phase(record: Mapping[str, Any]) -> Phase:
    """The phase an ``init_from`` record names, read where it is: its checkpoint's meta.json must
    record the state.pt SHA-256 the record holds (not hashed again: export verified its own)."""
    path = Path(record["checkpoint"])
    recorded = record.get(f"state_{ckpt.DIGEST}")
    base = Phase(
        checkpoint=str(path),
        step=int(record["step"]),
        state_sha256=recorded,
        imported_from=record.get("imported_from"),
        started_from=record.get("init_from"),
    )
    if base.imported_from:
        return base  # the import's own record is all there is of Neuron's run
    try:
        meta = ckpt.read_meta(path)
        if recorded and state_digest(meta) != recorded:
            return replace(
                base, problem=f"the checkpoint there now records state.pt SHA-256 {state_digest(meta)}"
            )
        flags = ckpt.load_state(path, mmap=True).get("args") or {}
    except (ckpt.CheckpointError, OSError) as e:
        return replace(base, problem=f"not readable here ({' '.join(str(e).split())[:300]})")
    return read_phase(path, meta, flags)


def lineage(last: Phase) -> list[Phase]:
    """``last`` and the phases it started from, oldest first."""
    phases = [last]
    while phases[0].started_from and len(phases) < MAX_PHASES:
        phases.insert(0, start_phase(phases[0].started_from))
    return phases


@dataclass(frozen=True)
class Tokenizer:
    """The exported tokenizer: its vocabulary and casing, and where the casing came from."""

    tokens: int
    vocab_sha256: str
    lower_case: bool
    casing_from: str


@dataclass(frozen=True)
class Card:
    """Everything a card says: the lineage (oldest first, the exported phase last), the model."""

    name: str
    folder: str
    phases: list[Phase]
    config: BertConfig
    parameters: int
    tokenizer: Tokenizer
    options: CardOptions

    @property
    def exported(self) -> Phase:
        return self.phases[-1]


def metadata(card: Card) -> ModelCardData:
    """The YAML front matter: the Hub's keys; ``model-index`` only with results at the exported step."""
    datasets = list(dict.fromkeys(p.data.name for p in card.phases if p.data is not None))
    results = []
    done = card.exported.evaluation
    if done is not None:
        held_out = card.exported.held_out
        name = f"{held_out.name if held_out else 'held-out set'} (held out, {done.samples} samples, step {done.step})"
        kind = held_out.name if held_out else "held-out"
        results = [
            HubEvalResult(
                task_type="fill-mask",
                task_name="Masked language modeling",
                dataset_type=kind,
                dataset_name=name,
                metric_type="accuracy",
                metric_name="masked-LM accuracy",
                metric_value=done.mlm_accuracy,
            ),
            HubEvalResult(
                task_type="text-classification",
                task_name="Next sentence prediction",
                dataset_type=kind,
                dataset_name=name,
                metric_type="accuracy",
                metric_name="next-sentence accuracy",
                metric_value=done.nsp_accuracy,
            ),
        ]
    return ModelCardData(
        language=card.options.language,
        license=card.options.license,
        library_name="transformers",
        pipeline_tag="fill-mask",
        tags=list(TAGS),
        datasets=datasets or None,
        metrics=["accuracy"] if results else None,
        model_name=card.name if results else None,
        eval_results=results or None,
    )


def render(card: Card) -> str:
    """The README.md: front matter, then the text; parsed back by ``huggingface_hub`` (a ValueError
    on metadata its format refuses)."""
    body = [
        *intro(card),
        *training_section(card),
        *data_section(card),
        *evaluation_section(card),
        *tokenizer_section(card),
        *lineage_section(card),
        *loading_section(card),
    ]
    text = f"---\n{metadata(card).to_yaml()}\n---\n\n" + "\n".join(body) + "\n"
    ModelCard(text)
    return text


def _cell(value: Any) -> str:
    return NOT_RECORDED if value is None else str(value).replace("|", "\\|").replace("\n", " ")


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return [*lines, *("| " + " | ".join(_cell(v) for v in row) + " |" for row in rows), ""]


def _label(i: int, phase: Phase) -> str:
    return f"phase {i + 1}" + (" (imported)" if phase.imported_from else "")


def steps_of(phase: Phase) -> str:
    if phase.max_steps is None:
        return f"{phase.step} (schedule {NOT_RECORDED})"
    state = "stopped before the end of its schedule" if phase.stopped_early else "finished"
    return f"{phase.step} of {phase.max_steps} ({state})"


def intro(card: Card) -> list[str]:
    c, last = card.config, card.exported
    model = last.flags.get("model")
    lines = [
        f"# {card.name}",
        "",
        f"BERT{f' ({model})' if model else ''} for pretraining (`BertForPreTraining`: {c.num_hidden_layers} "
        f"layers, hidden size {c.hidden_size}, {c.num_attention_heads} attention heads, intermediate size "
        f"{c.intermediate_size}, {c.vocab_size} token embeddings, {c.max_position_embeddings} positions; "
        f"{card.parameters:,} parameters), trained with the masked-LM and next-sentence objectives by this "
        f"project's trainer (`training.trainer.pretrain`) in {len(card.phases)} phase(s), and exported by "
        f"`training.trainer.export` from the checkpoint of step {last.step}. A pretrained model: fine-tune "
        "it for a task.",
        "",
    ]
    newest = [s for s, _ in ckpt.step_dirs(ckpt.checkpoint_root(last.run))][-1:]
    if last.stopped_early and newest == [last.step]:
        lines += [
            f"**The run stopped at step {last.step} of {last.max_steps}**, before the end of its schedule "
            "(a spend ceiling, a stop or `--steps_this_run` ended it first; its run directory has no "
            "`COMPLETE` marker): this is the model of that checkpoint, not of the schedule's end.",
            "",
        ]
    elif last.stopped_early:
        lines += [
            f"**This is the checkpoint of step {last.step} of {last.max_steps}**, not the run's newest "
            f"(step {newest[0] if newest else NOT_RECORDED}): the model of that step, not of the schedule's end.",
            "",
        ]
    elif last.max_steps is not None:
        lines += [f"The run finished its schedule: step {last.step} of {last.max_steps}.", ""]
    return lines


def _hardware(card: Card, i: int) -> tuple[str, str]:
    """The hardware and node-hours of phase ``i``: the options' for the exported run; an earlier
    run's own card, where its folder holds one, for the others."""
    if i == len(card.phases) - 1:
        o = card.options
        return o.hardware or NOT_RECORDED, NOT_RECORDED if o.node_hours is None else f"{o.node_hours:g}"
    own = Path(card.phases[i].run) / MODEL_DIR / "README.md"
    where = f"{NOT_RECORDED} here (its own card: `{own}`)" if own.is_file() else NOT_RECORDED
    return where, where


def training_section(card: Card) -> list[str]:
    """One column per phase, oldest first."""
    columns: list[list[Any]] = []
    for i, p in enumerate(card.phases):
        f, batch = p.flags, p.global_batch
        run = "Neuron's `dp_bert_large_hf_pretrain` tutorial" if p.imported_from else f"`{p.run}`"
        accumulated = f"{f.get('batch_size')} x {f.get('grad_accum_usteps')} x {p.world_size} workers"
        columns.append(
            [
                run,
                steps_of(p),
                f"{batch:,} ({accumulated})" if batch else None,
                f"{f['lr']:g}" if "lr" in f else None,
                f.get("warmup_steps"),
                f.get("optimizer"),
                (p.metrics or {}).get("precision") or f.get("precision"),
                f"{f['seq_len']} / {f['max_pred_len']}" if "seq_len" in f else None,
                *_hardware(card, i),
            ]
        )
    names = [
        "run", "steps", "global batch (micro-batch x accumulation x workers)", "peak learning rate",
        "warm-up steps", "optimizer", "precision", "sequence length / masked positions", "hardware",
        "node-hours",
    ]  # fmt: skip
    rows = [[name, *(column[k] for column in columns)] for k, name in enumerate(names)]
    return ["## Training", "", *_table(["", *(_label(i, p) for i, p in enumerate(card.phases))], rows)]


def data_section(card: Card) -> list[str]:
    rows: list[list[Any]] = []
    for i, p in enumerate(card.phases):
        for role, s in (("training", p.data), ("held-out", p.held_out)):
            if s is None:
                continue
            casing = None if s.lower_case is None else ("lower-cased" if s.lower_case else "cased")
            samples = f"{s.samples:,} in {s.shards} shards" if s.samples is not None else s.problem
            shape = f"{s.seq_len} / {s.max_pred_len}" if s.seq_len is not None else None
            rows.append(
                [
                    _label(i, p),
                    role,
                    f"`{s.name}`",
                    f"`{s.path}`",
                    s.source,
                    samples,
                    shape,
                    casing,
                    s.vocab_sha256,
                ]
            )
    if not rows:
        return ["## Data", "", f"The shard sets are {NOT_RECORDED} (an imported checkpoint).", ""]
    header = [
        "phase",
        "set",
        "name",
        "path",
        "source",
        "samples",
        "sequence length / masked positions",
        "casing",
        "vocab.txt SHA-256",
    ]
    per_eval = [
        f"- Each evaluation of {_label(i, p)} reads the first {p.flags['eval_samples']:,} samples of its "
        "held-out set (whole global batches), the same ones each time."
        for i, p in enumerate(card.phases)
        if p.held_out is not None and "eval_samples" in p.flags
    ]
    return ["## Data", "", *_table(header, rows), *per_eval, *([""] if per_eval else [])]


def _not_evaluated(p: Phase) -> str:
    if p.imported_from:
        return f"{NOT_RECORDED} (imported)"
    if p.problem:
        return f"{NOT_RECORDED} ({p.problem})"
    if p.flags and not p.flags.get("eval_dir"):
        return "not evaluated (the run had no `--eval_dir`)"
    if p.stopped_early:
        return f"not evaluated at step {p.step} (a run stopped at a checkpoint does not evaluate)"
    return f"no evaluation at step {p.step} in its metrics file"


def evaluation_section(card: Card) -> list[str]:
    rows: list[list[Any]] = []
    for i, p in enumerate(card.phases):
        done, where = p.evaluation, "metrics file, at the phase's last step"
        if done is None and p.logged is not None:
            done, where = p.logged, f"step log: the last evaluation at or before step {p.step}"
        if done is None:
            rows.append([_label(i, p), p.step, _not_evaluated(p), None, None, None, None, None])
            continue
        held = f"`{p.held_out.name}`" if p.held_out else None
        rows.append(
            [
                _label(i, p),
                done.step,
                held,
                f"{done.samples:,}",
                f"{done.mlm_loss:.4f}",
                f"{done.mlm_accuracy:.4f}",
                f"{done.nsp_accuracy:.4f}",
                where,
            ]
        )
    header = [
        "phase",
        "step",
        "held-out set",
        "samples",
        "masked-LM loss",
        "masked-LM accuracy",
        "next-sentence accuracy",
        "from",
    ]
    return [
        "## Evaluation",
        "",
        "Held-out evaluation (`--eval_dir`): masked-LM accuracy is the share of masked positions whose "
        "highest logit is the original token; next-sentence accuracy the share of pairs classified right. "
        "The metadata above holds the exported step's figures as the run's metrics file has them.",
        "",
        *_table(header, rows),
        f"For reference only, MLPerf Training's BERT benchmark: {MLPERF_SOURCE}. Measured on MLPerf's own "
        "set, not on the held-out sets above, so not comparable figure for figure.",
        "",
    ]


def tokenizer_section(card: Card) -> list[str]:
    t = card.tokenizer
    casing = "lower-cased, accents stripped" if t.lower_case else "cased (no lower-casing, accents kept)"
    return [
        "## Tokenizer",
        "",
        f"WordPiece, `vocab.txt` of {t.tokens:,} tokens (SHA-256 `{t.vocab_sha256}`); {casing}, as {t.casing_from}; "
        "BERT's normalizer, as the data tool tokenized the shards (`training.dataprep.vocab`).",
        "",
    ]


def _start_line(p: Phase, i: int, phases: list[Phase]) -> str:
    """Where phase ``i`` (``p``) came from."""
    if p.imported_from:
        src = p.imported_from
        return (
            f"- {_label(i, p)}: Neuron's checkpoint `{src.get('path')}` ({src.get('bytes')} bytes, SHA-256 "
            f"`{src.get(ckpt.DIGEST)}`, its step {src.get('step')}, epoch {src.get('epoch')}), imported by "
            f"`training.trainer.import_neuron` as `{p.checkpoint}` (weights only; dropped: "
            f"{', '.join(src.get('dropped') or []) or 'nothing'})."
        )
    start = p.started_from
    if not start:
        seed = p.flags.get("seed")
        return f"- {_label(i, p)}: random initial weights{f' (seed {seed})' if seed is not None else ''}."
    before = phases[i - 1] if i > 0 else None
    state = f" ({before.problem})" if before is not None and before.problem else ""
    return (
        f"- {_label(i, p)}: started from `{start.get('checkpoint')}` (step {start.get('step')} of run "
        f"`{start.get('run')}`), `state.pt` SHA-256 `{start.get(f'state_{ckpt.DIGEST}')}`, as its "
        f"checkpoints record{state}."
    )


def lineage_section(card: Card) -> list[str]:
    last = card.exported
    return [
        "## Lineage",
        "",
        f"- This model: `{last.checkpoint}`, step {last.step}, `state.pt` SHA-256 `{last.state_sha256}` "
        "(verified against its digests at export).",
        *(_start_line(p, i, card.phases) for i, p in enumerate(card.phases)),
        "",
    ]


def loading_section(card: Card) -> list[str]:
    return [
        "## How to load",
        "",
        "```python",
        "from transformers import AutoTokenizer, BertForPreTraining",
        "",
        f'model = BertForPreTraining.from_pretrained("{card.folder}")',
        f'tokenizer = AutoTokenizer.from_pretrained("{card.folder}")',
        "```",
        "",
        f'`pipeline("fill-mask", model="{card.folder}")` loads its masked-LM head alone (it lists the '
        "pooler and the next-sentence head as unused).",
    ]
