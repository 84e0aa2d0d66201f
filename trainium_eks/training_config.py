"""Checks of the ``training_*`` configuration fields, and the arguments they give the job construct.

The rules are the constructs' own (``training_job.plan_training``, ``dataset_staging.check_source``),
so the app and a library user get the same one-line errors.
"""

from __future__ import annotations

import argparse
import difflib
from typing import TYPE_CHECKING, Any

from training.cli import _validate as validate_parsed_args
from training.cli import build_parser
from training.launch import script_args_from_dict

from .dataset_preparation import validate_preparation_config
from .dataset_staging import check_source
from .errors import ConfigError
from .job_naming import MAX_LABEL, is_dns1123_label
from .training_job import MODELS, RDZV_BACKENDS, TrainingPlan, plan_training

if TYPE_CHECKING:
    from .config import PlatformConfig

_INTS = (
    "training_batch_size",
    "training_global_batch",
    "training_max_steps",
    "training_nproc_per_node",
    "training_checkpoint_every",
    "training_max_restarts",
    "training_max_retry",
)
_LABELS = ("training_dataset_name", "training_cache_set", "training_run_name")


def nproc_per_node(c: PlatformConfig) -> int | None:
    return c.training_nproc_per_node or None


def training_plan(c: PlatformConfig) -> TrainingPlan:
    plan = _prefixed(
        lambda: plan_training(
            facts=c.facts,
            nodes=c.desired_nodes,
            max_nodes=c.max_nodes,
            nproc_per_node=nproc_per_node(c),
            batch_size=c.training_batch_size,
            global_batch=c.training_global_batch,
        )
    )
    return plan


#: Construct property -> the configuration key a user types, where they differ by more than
#: the ``training_`` prefix.
_CONFIG_KEYS = {
    "nodes": "desired_nodes",
    "max_nodes": "max_nodes",
    "name_prefix": "name_prefix",
    "script_args": "training_script_args",
    "rdzv_backend": "training_rdzv_backend",
}

#: pretrain flags the job sets itself, and the configuration key that sets each.
JOB_SET_FLAGS = {
    "data_dir": "training_dataset_name",
    "output_dir": "training_run_name",
    "batch_size": "training_batch_size",
    "grad_accum_usteps": "training_global_batch",
    "max_steps": "training_max_steps",
    "model": "training_model",
    "checkpoint_every": "training_checkpoint_every",
    "precompile": "(set by the precompile pass)",
}


def config_key(prop: str) -> str:
    """The configuration key that feeds construct property ``prop``."""
    return _CONFIG_KEYS.get(prop, f"training_{prop}")


def _prefixed(call: Any) -> Any:
    """Re-raise a construct's ConfigError under the configuration key's name."""
    try:
        return call()
    except ConfigError as err:
        raise ConfigError(config_key(err.field_name), err.value, err.fix) from None


class _ArgsError(Exception):
    pass


def _raise(message: str) -> None:
    raise _ArgsError(message)


def script_args_problem(args: dict[str, Any], *, job_args: dict[str, Any]) -> tuple[str, str] | None:
    """(flag, why) if ``args`` would fail ``training.pretrain``'s own parser, else None; ``flag`` is
    a configuration key instead when only the job's own flags clash.

    The argv is the one the job renders (``job_args`` plus ``args``), parsed and checked by
    ``training/cli.py`` (torch-free) with abbreviations off: a misspelled flag is an error, never
    a silent prefix match.
    """
    parser = build_parser()
    parser.allow_abbrev = False
    parser.error = _raise  # type: ignore[method-assign]
    flags = {
        opt[2:]: action for action in parser._actions for opt in action.option_strings if opt.startswith("--")
    }
    for key, value in args.items():
        if key in JOB_SET_FLAGS:
            return key, f"the job sets --{key} itself; use {JOB_SET_FLAGS[key]}"
        if key not in flags:
            close = difflib.get_close_matches(key, list(flags), n=1)
            hint = f"did you mean '{close[0]}'?" if close else "see `python -m training.pretrain --help`"
            return key, f"training.pretrain has no --{key}; {hint}"
        takes_value = flags[key].nargs != 0
        if not takes_value and not (isinstance(value, bool) or str(value).lower() in ("true", "false")):
            return key, f"--{key} is a switch: give true or false"
    rendered = {k: (str(v).lower() == "true" if flags[k].nargs == 0 else v) for k, v in args.items()}
    try:
        argv = script_args_from_dict({**rendered, **job_args})
        parsed = parser.parse_args(argv)
        validate_parsed_args(parser, parsed)
    except _ArgsError as err:
        message = str(err)
        key = next((k for k in args if f"--{k}" in message), None)
        if key is None:  # a rule between the job's own flags, e.g. --warmup_steps default vs --max_steps
            key = next((JOB_SET_FLAGS[k] for k in job_args if f"--{k}" in message), "training_script_args")
            return key, message
        return key, message
    except argparse.ArgumentError as err:  # pragma: no cover - exit_on_error is on
        return next(iter(args), "?"), str(err)
    return None


def validate_training_config(c: PlatformConfig) -> None:
    if not isinstance(c.training_enabled, bool):
        raise ConfigError("training_enabled", c.training_enabled, "must be true or false")
    for name in _INTS:
        value = getattr(c, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(name, value, "must be a whole number, 0 or more")
    if c.training_model not in MODELS:
        raise ConfigError("training_model", c.training_model, f"choose one of {', '.join(MODELS)}")
    if c.training_rdzv_backend not in RDZV_BACKENDS:
        raise ConfigError(
            "training_rdzv_backend", c.training_rdzv_backend, f"choose one of {', '.join(RDZV_BACKENDS)}"
        )
    if c.training_rdzv_backend != "c10d" and not c.etcd_enabled:
        raise ConfigError(
            "training_rdzv_backend",
            c.training_rdzv_backend,
            "etcd rendezvous needs the etcd add-on: set etcd_enabled=true, or use c10d",
        )
    for name in _LABELS:
        value = getattr(c, name)
        if not isinstance(value, str) or not is_dns1123_label(value):
            raise ConfigError(
                name, value, f"use at most {MAX_LABEL} lower-case letters, digits or '-' (a DNS-1123 label)"
            )
    _prefixed(lambda: check_source(c.training_dataset_source))
    for key, value in c.training_script_args.items():
        if not isinstance(key, str) or not isinstance(value, (str, int, float, bool)):
            raise ConfigError("training_script_args", {key: value}, "give flag names with string values")
    for name in ("training_max_steps", "training_checkpoint_every"):
        if getattr(c, name) < 1:
            raise ConfigError(name, getattr(c, name), "must be a whole number of at least 1")
    for name in ("training_max_restarts", "training_max_retry"):
        if getattr(c, name) > 100:
            raise ConfigError(name, getattr(c, name), "use 0 to 100")
    if c.training_enabled:
        plan = training_plan(c)
        job_args = {
            "data_dir": "/data/datasets/x",
            "output_dir": "/data/runs/x",
            "model": c.training_model,
            "batch_size": c.training_batch_size,
            "grad_accum_usteps": plan.grad_accum_usteps,
            "max_steps": c.training_max_steps,
            "checkpoint_every": c.training_checkpoint_every,
        }
        problem = script_args_problem(dict(c.training_script_args), job_args=job_args)
        if problem:
            flag, why = problem
            if (
                flag not in c.training_script_args
            ):  # the flag is a key of the job's own, e.g. training_max_steps
                raise ConfigError(flag, getattr(c, flag, dict(c.training_script_args)), why)
            raise ConfigError("training_script_args", {flag: c.training_script_args[flag]}, why)
    validate_preparation_config(c)


def job_script_args(c: PlatformConfig) -> dict[str, Any]:
    """``training_script_args`` as the job renders them: switches given as "true"/"false" become
    booleans (a bare flag, or left out)."""
    switches = {
        opt[2:]
        for action in build_parser()._actions
        if action.nargs == 0
        for opt in action.option_strings
        if opt.startswith("--")
    }
    return {k: (str(v).lower() == "true" if k in switches else v) for k, v in c.training_script_args.items()}


def training_warnings(c: PlatformConfig) -> list[str]:
    """Values that are legal but most likely not what the user meant (printed, not refused)."""
    if not c.training_enabled:
        return []
    warnings = []
    if c.training_checkpoint_every >= c.training_max_steps:
        warnings.append(
            f"training_checkpoint_every={c.training_checkpoint_every} >= training_max_steps="
            f"{c.training_max_steps}: no checkpoint before the end, a failure restarts from step 0"
        )
    steps_this_run = c.training_script_args.get("steps_this_run")
    if steps_this_run is not None and int(steps_this_run) < c.training_checkpoint_every:
        warnings.append(
            f"training_script_args steps_this_run={steps_this_run} < training_checkpoint_every="
            f"{c.training_checkpoint_every}: the run ends before its first checkpoint"
        )
    if c.max_nodes > 2 * c.desired_nodes:
        warnings.append(
            f"max_nodes={c.max_nodes} is more than twice the job's {c.desired_nodes} nodes: "
            "the Volcano queue and nodegroup allow nodes the job never uses"
        )
    return warnings


#: Published BERT-large phase-1 throughput per node (sequences/s): Neuron 2.28, trn1.32xlarge,
#: BF16, AdamW, global batch 16,384 (Neuron performance page). Other types: not published.
PUBLISHED_SEQ_PER_S_PER_NODE = {"trn1.32xlarge": 3826.6}
#: What the reference's 2-node EKS walkthrough logged.
WALKTHROUGH_SEQ_PER_S_2_NODES = 6450.0


def training_review(c: PlatformConfig) -> list[str]:
    """Review lines for ``cdk synth``: workers, global batch, cost and estimated phase-1 time."""
    if not c.training_enabled:
        return ["  training:     off (training_enabled=false)"]
    plan = training_plan(c)
    facts = c.facts
    sequences = c.training_max_steps * c.training_global_batch
    lines = [
        f"  training:     BERT-{c.training_model}, {plan.workers} workers ({c.desired_nodes} x "
        f"{plan.nproc_per_node}), micro-batch {plan.batch_size} x accumulation {plan.grad_accum_usteps} "
        f"= global batch {plan.global_batch:,}",
        f"  schedule:     {c.training_max_steps:,} steps = {sequences:,} sequences, "
        f"rendezvous {c.training_rdzv_backend}, checkpoint every {c.training_checkpoint_every} steps",
    ]
    if c.preparation_enabled:
        lines.append(
            f"  dataset:      prepared from {c.preparation_corpus} by {c.preparation_pods} pods x "
            f"{c.preparation_cpus_per_pod} CPUs into /data/datasets/{c.training_dataset_name}"
        )
    per_node = PUBLISHED_SEQ_PER_S_PER_NODE.get(facts.name)
    price = facts.on_demand_usd_per_hour
    estimates = []
    if per_node is not None:
        estimates.append((f"published {per_node:,.1f} seq/s/node", per_node * c.desired_nodes))
        if facts.name == "trn1.32xlarge" and c.desired_nodes == 2:
            estimates.append(("walkthrough's 2-node EKS run", WALKTHROUGH_SEQ_PER_S_2_NODES))
    if not estimates:
        lines.append(f"  estimate:     no published throughput for {facts.name}")
    for label, rate in estimates:
        hours = sequences / rate / 3600
        cost = f", ${hours * price * c.desired_nodes:,.0f} on demand" if price is not None else ""
        lines.append(f"  estimate:     {rate:,.0f} seq/s ({label}): {hours:,.1f} h{cost}")
    return lines
