"""Deployment checks of the ``training_*`` keys: what the job spec cannot check by itself.

:class:`~trainium_job.spec.BertJobSpec` checks its own fields; here are the rules that need the
platform (the etcd add-on, the nodegroup's shape) or ``training.trainer.pretrain``'s own parser (the
names, types and rules of ``training_script_args``).
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn, TypeVar

from trainium_job import checks
from trainium_job.errors import ConfigError
from trainium_job.estimates import precompile_usd
from trainium_job.instances import instance_facts
from trainium_job.job import check_rendezvous, script_args
from trainium_job.plan import TrainingPlan
from trainium_job.spec import CONTEXT_PREFIX, JOB_SET_FLAGS, BertJobSpec, context_key

from .._training.trainer.cli import build_parser
from .._training.trainer.cli import check_args as validate_parsed_args
from ..jobs.dataset_preparation import prepared_shape, validate_preparation_config
from ..jobs.dataset_staging import (
    NEURON_PHASE1_CHECKPOINT,
    PUBLIC_BERT_SHAPE,
    PUBLIC_BERT_SHAPES,
    PUBLIC_BERT_SHARDS,
    check_source,
    check_start_source,
    check_vocab_source,
)
from ..jobs.heldout_staging import eval_samples
from ..jobs.node_fit import check_node_fit
from .schema import PHASE2_FIELDS, PHASE2_PREFIX, PHASE_CHOICES, PlatformSettings

#: The trainer's model configs (``--model``), beside the trainer in the library.
MODEL_CONFIGS = Path(__file__).resolve().parents[1] / "_training" / "trainer" / "model_configs"

T = TypeVar("T")


def _prefixed(call: Callable[[], T], prefix: str = CONTEXT_PREFIX) -> T:
    """Re-raise a construct's ConfigError under the context key's name (``dataset_source`` ->
    ``training_dataset_source``; with ``prefix`` ``phase2_``, ``training_max_steps`` of phase
    2's spec -> ``phase2_max_steps``)."""
    try:
        return call()
    except ConfigError as err:
        name = err.field_name.removeprefix(CONTEXT_PREFIX)
        if prefix == PHASE2_PREFIX and name not in PHASE2_FIELDS and name != "dataset_source":
            raise
        raise ConfigError(f"{prefix}{name}", err.value, err.fix) from None


def validate_training(c: PlatformSettings) -> None:
    """The ``training_*`` and ``preparation_*`` keys against the platform and the script's parser."""
    checks.flag("training_enabled", c.training_enabled)
    spec = c.training
    check_rendezvous(spec, etcd_available=c.etcd_enabled)
    _prefixed(lambda: check_source(c.training_dataset_source))
    if c.training_enabled:
        problem = script_args_problem(spec, c.training_plan)
        if problem:
            flag, why = problem
            if flag not in spec.extra_args:  # a key of the job's own, e.g. training_max_steps
                own = flag.removeprefix(CONTEXT_PREFIX)
                raise ConfigError(flag, getattr(spec, own, spec.extra_args), why)
            raise ConfigError(context_key("script_args"), {flag: spec.extra_args[flag]}, why)
    check_spend_keys(c)
    validate_preparation_config(c)
    check_node_fit(c)
    if c.training_enabled:
        check_sequence_shape(c)
    validate_phases(c)
    check_heldout_batches(c)


def check_heldout_batches(c: PlatformSettings) -> None:
    """``heldout_enabled``; and each phase with a held-out set reads at least one whole global
    batch of micro-batches per evaluation (pre-flight would stop every pod otherwise)."""
    checks.flag("heldout_enabled", c.heldout_enabled)
    if not c.training_enabled:
        return
    numbers = {"both": ("1", "2"), "1": ("1",), "2": ("2",)}[c.training_phases]
    for number, spec in zip(numbers, c.phase_jobs, strict=True):
        if spec.eval_dir is None:
            continue
        plan = c.phase_plan(spec)
        per_batch, wanted = plan.batch_size * plan.workers, eval_samples(spec)
        if wanted < per_batch:
            key = "training_script_args" if number == "1" else "phase2_script_args"
            raise ConfigError(
                key,
                {"eval_samples": spec.extra_args.get("eval_samples", wanted)},
                f"an evaluation of phase {number} reads whole batches of {per_batch:,} samples (micro-batch "
                f"{plan.batch_size} x {plan.workers} workers): give eval_samples {per_batch} or more, or set "
                "heldout_enabled=false",
            )


def check_spend_keys(c: PlatformSettings) -> None:
    """``training_budget_usd``: a whole number of dollars that buys at least one precompile on the
    job's nodes, for a type with a list price; ``training_data_deadline_minutes``: at least 1."""
    if c.training_data_deadline_minutes is not None:
        checks.whole_number("training_data_deadline_minutes", c.training_data_deadline_minutes, minimum=1)
    budget = c.training_budget_usd
    if budget is None:
        return
    checks.whole_number("training_budget_usd", budget, minimum=1)
    facts = instance_facts(c.instance_type)
    price = facts.on_demand_usd_per_hour
    if price is None:
        raise ConfigError(
            "training_budget_usd",
            budget,
            f"{facts.name} has no list price in the facts table (trainium_job/instances.py): a ceiling "
            "cannot be counted; leave it unset",
        )
    least = precompile_usd(nodes=c.desired_nodes, usd_per_node_hour=price)
    if budget < least:
        raise ConfigError(
            "training_budget_usd",
            budget,
            f"at least {math.ceil(least)}: one precompile into an empty cache set on {c.desired_nodes} x "
            f"{facts.name} costs ${least:,.2f}",
        )


def validate_phases(c: PlatformSettings) -> None:
    """``training_phases``, the ``phase2_*`` keys and ``vocab_source``: where each phase starts,
    its shards, and (with training on) its flags and shapes against the script and the model."""
    checks.one_of("training_phases", c.training_phases, PHASE_CHOICES)
    check_vocab_source("vocab_source", c.vocab_source)
    _prefixed(lambda: check_source(c.phase2_dataset_source), prefix=PHASE2_PREFIX)
    if c.training_phases == "2":
        if not c.phase2_init_from:
            raise ConfigError(
                "phase2_init_from",
                "",
                "phase 2 alone needs its start weights: give Neuron's published phase 1 "
                f"({NEURON_PHASE1_CHECKPOINT}) or fsx:/runs/<run> of a finished phase 1",
            )
        check_start_source("phase2_init_from", c.phase2_init_from)
    elif c.phase2_init_from:
        raise ConfigError(
            "phase2_init_from",
            c.phase2_init_from,
            f"with training_phases={c.training_phases} phase 2 starts from phase 1 (or does not run); "
            "set training_phases=2 to run phase 2 alone from these weights, or leave it empty",
        )
    if c.training_phases == "1":
        return
    if c.preparation_enabled and c.training_phases == "2":
        raise ConfigError(
            "preparation_enabled",
            True,
            "the preparation makes phase 1's shards, which training_phases=2 does not read: give phase 2's "
            "in phase2_dataset_source and turn the preparation off, or set training_phases=both",
        )
    if c.preparation_enabled and c.phase2_dataset_source in PUBLIC_BERT_SHAPES:
        raise ConfigError(
            "phase2_dataset_source",
            c.phase2_dataset_source,
            "the public shards were made with Google's vocabulary, not preparation_vocab: give phase 2's "
            "shards made with the data tool from your corpus (--max_seq_len 512 --max_pred_len 80), or "
            "set training_phases=1",
        )
    _prefixed(lambda: c.phases, prefix=PHASE2_PREFIX)
    if not c.training_enabled:
        return
    spec = c.phase2_job
    plan = _prefixed(lambda: c.phase_plan(spec), prefix=PHASE2_PREFIX)
    problem = script_args_problem(spec, plan)
    if problem:
        flag, why = problem
        why = why.replace("training_script_args", "phase2_script_args")
        if flag not in spec.extra_args:
            own = flag.removeprefix(CONTEXT_PREFIX)
            raise ConfigError(PHASE2_PREFIX + own, getattr(spec, own, spec.extra_args), why)
        raise ConfigError("phase2_script_args", {flag: spec.extra_args[flag]}, why)
    check_phase2_shape(c)


def model_positions(model: str) -> int:
    """The position embeddings of model config ``model`` (its JSON, read without torch)."""
    config = json.loads((MODEL_CONFIGS / f"{model}.json").read_text())
    return int(config["max_position_embeddings"])


def check_phase2_shape(c: PlatformSettings) -> None:
    """Phase 2's ``seq_len`` within the model's position embeddings, and its shape that of the
    public seq-512 shards when it reads them (pre-flight would stop every pod otherwise)."""
    spec = c.phase2_job
    parser = build_parser()
    extra = spec.extra_args
    seq_len = int(extra.get("seq_len", parser.get_default("seq_len")))
    max_pred = int(extra.get("max_pred_len", parser.get_default("max_pred_len")))
    positions = model_positions(spec.model)
    if seq_len > positions:
        raise ConfigError(
            "phase2_script_args",
            {"seq_len": extra.get("seq_len", seq_len)},
            f"BERT-{spec.model} has {positions} position embeddings: give seq_len {positions} or less",
        )
    shape = PUBLIC_BERT_SHAPES.get(c.phase2_dataset_source)
    if shape is not None and (seq_len, max_pred) != shape:
        tokens, predictions = shape
        raise ConfigError(
            "phase2_script_args",
            {k: extra[k] for k in ("seq_len", "max_pred_len") if k in extra} or {"seq_len": seq_len},
            f"the public shards {c.phase2_dataset_source} hold {tokens} tokens and {predictions} predictions "
            f"per sample, but phase 2 would read --seq_len {seq_len} --max_pred_len {max_pred} and stop at "
            f"pre-flight: give seq_len {tokens} and max_pred_len {predictions}",
        )


def dataset_shape(c: PlatformSettings) -> tuple[tuple[int, int], str] | None:
    """(tokens, predictions) per sample of the job's dataset and what it is, when synth knows it:
    the public BERT shards, or the set the preparation Job makes (``preparation_args``)."""
    if c.preparation_enabled:
        return prepared_shape(c.preparation_args), "the set preparation_args prepare"
    if c.training_dataset_source == PUBLIC_BERT_SHARDS:
        return PUBLIC_BERT_SHAPE, f"the public BERT shards ({PUBLIC_BERT_SHARDS})"
    return None


def check_sequence_shape(c: PlatformSettings) -> None:
    """``training.trainer.pretrain`` reads only shards of its --seq_len / --max_pred_len (pre-flight stops
    every pod otherwise, after the image build and the deploy): refuse a shape that contradicts a
    dataset whose shape synth knows, naming the key that set it."""
    known = dataset_shape(c)
    if known is None:
        return
    (tokens, predictions), what = known
    parser = build_parser()
    extra = c.training.extra_args
    read = {
        "seq_len": int(extra.get("seq_len", parser.get_default("seq_len"))),
        "max_pred_len": int(extra.get("max_pred_len", parser.get_default("max_pred_len"))),
    }
    if read == {"seq_len": tokens, "max_pred_len": predictions}:
        return
    why = (
        f"{what}: {tokens} tokens and {predictions} predictions per sample, but training.trainer.pretrain would read "
        f"--seq_len {read['seq_len']} --max_pred_len {read['max_pred_len']} and stop at pre-flight"
    )
    given = {k: extra[k] for k in ("seq_len", "max_pred_len") if k in extra}
    if given:
        raise ConfigError(
            context_key("script_args"), given, f"{why}: give seq_len {tokens} and max_pred_len {predictions}"
        )
    shape = {k: c.preparation_args[k] for k in ("max_seq_len", "max_pred_len") if k in c.preparation_args}
    raise ConfigError(
        "preparation_args",
        shape,
        f"{why}: prepare {read['seq_len']} tokens with {read['max_pred_len']} predictions, or give "
        f"training_script_args seq_len {tokens} and max_pred_len {predictions}",
    )


def _defaults_named(message: str, parser: argparse.ArgumentParser) -> str:
    """What a parser error between the job's flags leaves unsaid: the script defaults it compared
    against (flags neither given nor set by the job) and how to change them."""
    named = [
        flag for flag in dict.fromkeys(re.findall(r"--([a-z_0-9]+)", message)) if flag not in JOB_SET_FLAGS
    ]
    if not named:
        return ""
    defaults = ", ".join(f"--{flag} {parser.get_default(flag)}" for flag in named)
    example = ", ".join(f"'{flag}': '...'" for flag in named)
    return (
        f" (the script's default {defaults}: set it with training_script_args "
        f"(BertJobSpec.script_args), e.g. {{{example}}})"
    )


class _ArgsError(Exception):
    pass


def _raise(message: str) -> NoReturn:
    raise _ArgsError(message)


def _script_flags() -> dict[str, argparse.Action]:
    """``training.trainer.pretrain``'s flags (without ``--``) -> their argparse actions."""
    return {
        opt[2:]: action
        for action in build_parser()._actions
        for opt in action.option_strings
        if opt.startswith("--")
    }


def resolve_switches(spec: BertJobSpec) -> BertJobSpec:
    """``spec`` with switches given as "true"/"false" (as context values are) made booleans:
    the job renders a bare flag, or leaves it out."""
    flags = _script_flags()
    resolved = {
        k: (
            str(v).lower() == "true"
            if k in flags and flags[k].nargs == 0 and str(v).lower() in ("true", "false")
            else v
        )
        for k, v in spec.script_args
    }
    return spec if resolved == spec.extra_args else spec.replace(script_args=resolved)


def script_args_problem(spec: BertJobSpec, plan: TrainingPlan) -> tuple[str, str] | None:
    """(flag, why) if the spec's ``script_args`` would fail ``training.trainer.pretrain``'s own parser,
    else None; ``flag`` is a context key instead when only the job's own flags clash.

    The argv is the one the job renders (:func:`trainium_job.job.script_args`), parsed and checked
    by ``training/trainer/cli.py`` (torch-free) with abbreviations off: a misspelled flag is an error,
    never a silent prefix match.
    """
    args = spec.extra_args
    parser = build_parser()
    parser.allow_abbrev = False
    parser.error = _raise  # type: ignore[method-assign]
    flags = _script_flags()
    for key, value in args.items():
        if key not in flags:
            close = difflib.get_close_matches(key, list(flags), n=1)
            hint = (
                f"did you mean '{close[0]}'?" if close else "see `python -m training.trainer.pretrain --help`"
            )
            return key, f"training.trainer.pretrain has no --{key}; {hint}"
        if flags[key].nargs == 0 and not isinstance(value, bool):
            return key, f"--{key} is a switch: give true or false"
    try:
        parsed = parser.parse_args(script_args(spec, plan))
        validate_parsed_args(parser, parsed)
    except _ArgsError as err:
        message = str(err)
        # The flag the message names first (a rule between two flags names the one it is about first).
        named = sorted((message.find(f"--{k}"), k) for k in args if f"--{k}" in message)
        given = named[0][1] if named else None
        if given is None:  # a rule between the job's own flags, e.g. --warmup_steps default vs --max_steps
            return next(
                (key for flag, key in JOB_SET_FLAGS.items() if f"--{flag}" in message), "training_script_args"
            ), message + _defaults_named(message, parser)
        return given, message
    return None
