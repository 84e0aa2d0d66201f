"""Checks of the ``training_*`` configuration fields, and the arguments they give the job construct.

The rules are the constructs' own (``training_job.plan_training``, ``dataset_staging.check_source``),
so the app and a library user get the same one-line errors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from .config import ConfigError
from .dataset_preparation import validate_preparation_config
from .dataset_staging import check_source
from .job_naming import MAX_LABEL, is_dns1123_label
from .training_job import MODELS, RDZV_BACKENDS, TrainingPlan, plan_training

if TYPE_CHECKING:
    from .config import PlatformConfig

_INTS = ("training_batch_size", "training_global_batch", "training_max_steps", "training_nproc_per_node",
         "training_checkpoint_every", "training_max_restarts", "training_max_retry")
_LABELS = ("training_dataset_name", "training_cache_set", "training_run_name")


def nproc_per_node(c: "PlatformConfig") -> Optional[int]:
    return c.training_nproc_per_node or None


def training_plan(c: "PlatformConfig") -> TrainingPlan:
    plan = _prefixed(lambda: plan_training(
        facts=c.facts, nodes=c.desired_nodes, max_nodes=c.max_nodes, nproc_per_node=nproc_per_node(c),
        batch_size=c.training_batch_size, global_batch=c.training_global_batch))
    return plan


def _prefixed(call: Any) -> Any:
    """Re-raise a construct's ConfigError under the configuration key's name."""
    try:
        return call()
    except ConfigError as err:
        key = "desired_nodes" if err.field_name == "nodes" else f"training_{err.field_name}"
        raise ConfigError(key, err.value, err.fix) from None


def validate_training_config(c: "PlatformConfig") -> None:
    if not isinstance(c.training_enabled, bool):
        raise ConfigError("training_enabled", c.training_enabled, "must be true or false")
    for name in _INTS:
        value = getattr(c, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(name, value, "must be a whole number, 0 or more")
    if c.training_model not in MODELS:
        raise ConfigError("training_model", c.training_model, f"choose one of {', '.join(MODELS)}")
    if c.training_rdzv_backend not in RDZV_BACKENDS:
        raise ConfigError("training_rdzv_backend", c.training_rdzv_backend,
                          f"choose one of {', '.join(RDZV_BACKENDS)}")
    if c.training_rdzv_backend != "c10d" and not c.etcd_enabled:
        raise ConfigError("training_rdzv_backend", c.training_rdzv_backend,
                          "etcd rendezvous needs the etcd add-on: set etcd_enabled=true, or use c10d")
    for name in _LABELS:
        value = getattr(c, name)
        if not isinstance(value, str) or not is_dns1123_label(value):
            raise ConfigError(name, value,
                              f"use at most {MAX_LABEL} lower-case letters, digits or '-' (a DNS-1123 label)")
    _prefixed(lambda: check_source(c.training_dataset_source))
    for key, value in c.training_script_args.items():
        if not isinstance(key, str) or not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise ConfigError("training_script_args", {key: value}, "give flag names with string values")
    if c.training_enabled:
        training_plan(c)
    validate_preparation_config(c)


#: Published BERT-large phase-1 throughput per node (sequences/s): Neuron 2.28, trn1.32xlarge,
#: BF16, AdamW, global batch 16,384 (Neuron performance page). Other types: not published.
PUBLISHED_SEQ_PER_S_PER_NODE = {"trn1.32xlarge": 3826.6}
#: What the reference's 2-node EKS walkthrough logged.
WALKTHROUGH_SEQ_PER_S_2_NODES = 6450.0


def training_review(c: "PlatformConfig") -> list[str]:
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
        lines.append(f"  dataset:      prepared from {c.preparation_corpus} by {c.preparation_pods} pods x "
                     f"{c.preparation_cpus_per_pod} CPUs into /data/datasets/{c.training_dataset_name}")
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
