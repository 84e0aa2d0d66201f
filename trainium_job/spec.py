"""The BERT pretraining job's settings: one frozen, typed spec with its defaults and checks.

The CDK app reads it from the ``training_*`` context keys (``trainium_eks.config``), the
construct ``BertPretrainingJob`` and the TorchX component ``trn_dist_ddp`` take it. Every error
names the context key a user types (``training_global_batch``) and the field a library user sets
(``BertJobSpec.global_batch``), whichever of the three built it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from . import checks
from .errors import ConfigError, register_fields
from .fabric_check import DEFAULT_MIN_BUSBW_GBPS
from .launch import RDZV_BACKENDS
from .paths import DATA_MOUNT, JobPaths, job_paths

#: Model configs of ``training/trainer/model_configs``.
MODELS: Final = ("large", "base", "tiny")
#: Optimizer steps of BERT-large phase 1 in the reference recipe (global batch 16,384): the job's
#: and the training script's default, from this one place.
PHASE1_MAX_STEPS: Final = 28125
#: Optimizer steps of phase 2 in the reference recipe (global batch 32,768).
PHASE2_MAX_STEPS: Final = 1563
#: Prefix of the spec's context keys: field ``global_batch`` is key ``training_global_batch``.
CONTEXT_PREFIX: Final = "training_"
#: Value of one extra ``training.trainer.pretrain`` flag (``True`` renders a bare switch).
ScriptArg = str | int | float | bool

#: ``training.trainer.pretrain`` flags the job renders itself, and the key that sets each.
JOB_SET_FLAGS: Final = {
    "data_dir": "training_dataset_name",
    "output_dir": "training_run_name",
    "batch_size": "training_batch_size",
    "grad_accum_usteps": "training_global_batch",
    "max_steps": "training_max_steps",
    "model": "training_model",
    "checkpoint_every": "training_checkpoint_every",
    "init_from": "training_phases and phase2_init_from",
    "metrics_port": "(always on: the PodMonitor scrapes it)",
    "precompile": "(set by the precompile pass)",
}
#: Highest number of torchrun restarts or Volcano retries (a loop of failures costs node-hours).
MAX_RESTARTS: Final = 100


def context_key(name: str) -> str:
    """The context key of spec field ``name``."""
    return f"{CONTEXT_PREFIX}{name}"


@dataclass(frozen=True)
class BertJobSpec:
    """What a BERT pretraining run is: model, batch, schedule, launcher, where its data live.

    The defaults are the reference recipe (BERT-large phase 1, AdamW) on 2 x trn1.32xlarge.
    ``script_args`` is accepted as a mapping and stored as sorted ``(flag, value)`` pairs, so
    the spec is hashable and equal settings compare equal.
    """

    #: Model config of training/trainer/model_configs.
    model: str = "large"
    #: Micro-batch per worker (the reference's 16).
    batch_size: int = 16
    #: Sequences per optimizer step; the accumulation is global / (batch x workers): 16,384 on
    #: 2 x trn1.32xlarge (64 workers) gives 16 micro-batches.
    global_batch: int = 16384
    #: Optimizer steps of the schedule (the reference's phase 1: 28,125).
    max_steps: int = PHASE1_MAX_STEPS
    #: Workers per node; 0 means the instance type's NeuronCores (32 on trn1.32xlarge).
    nproc_per_node: int = 0
    #: torchrun rendezvous: c10d (node 0 hosts it) or etcd / etcd-v2 (needs ``etcd_enabled``).
    rdzv_backend: str = "c10d"
    #: The shards are read from /data/datasets/<name>.
    dataset_name: str = "bert-wikicorpus-seq128"
    #: Neuron compile cache set: /data/neuron-cache/<set>. Never the same for two running jobs.
    cache_set: str = "bert-large-seq128"
    #: Checkpoints and TensorBoard events in /data/runs/<run>; a job resumes from it.
    run_name: str = "bert-large-phase1"
    #: Optimizer steps between checkpoints.
    checkpoint_every: int = 200
    #: torchrun restarts of the worker group.
    max_restarts: int = 3
    #: Volcano (or TorchX) restarts of the whole job, on a failed or evicted pod.
    max_retry: int = 3
    #: Before training, a multi-node job times an all-reduce across all workers and reads the EFA
    #: counters (trainium_job.fabric_check); a pod whose fabric fails stops the job (AbortJob).
    fabric_check: bool = True
    #: The check's all-reduce bus bandwidth floor in GB/s as nccom-test prints them (GiB/s); 0:
    #: only check that the bytes cross EFA. At most what the nodes' network can carry (about 183 on
    #: 2 x trn1.32xlarge: ``trainium_job.fabric_check.busbw_ceiling_gbps``).
    fabric_check_min_busbw_gbps: int = DEFAULT_MIN_BUSBW_GBPS
    #: More training.trainer.pretrain flags, e.g. {"lr": "4e-4", "warmup_steps": "2000"}; checked at synth
    #: against the script's own parser (names, types, rules).
    script_args: tuple[tuple[str, ScriptArg], ...] = ()
    #: The run's start weights, a path in the pod under /data (``--init_from``: a checkpoint or
    #: a run directory, weights only; phase 2 from phase 1's). None: random weights.
    init_from: str | None = None
    #: The shards' vocab.txt, a path in the pod under /data: after the run the job exports the
    #: model with it as a Hugging Face folder (``JobPaths.model_dir``). None: no export.
    vocab: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "script_args", _script_arg_pairs(self.script_args))
        _validate(self)

    @property
    def extra_args(self) -> dict[str, ScriptArg]:
        """``script_args`` as a dict."""
        return dict(self.script_args)

    @property
    def paths(self) -> JobPaths:
        """Where the job's shards, compile cache and run directory live on FSx."""
        return job_paths(dataset_name=self.dataset_name, cache_set=self.cache_set, run_name=self.run_name)

    def replace(self, **changes: object) -> BertJobSpec:
        """A copy with ``changes`` applied (and checked)."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


#: The spec's field names, in declaration order.
SPEC_FIELDS: Final = tuple(f.name for f in dataclasses.fields(BertJobSpec))
register_fields(CONTEXT_PREFIX, "BertJobSpec", SPEC_FIELDS)


def _check_pod_path(key: str, path: object) -> None:
    """None, or an absolute path under the FSx mount without ``..``."""
    if path is None:
        return
    if not isinstance(path, str) or not path.startswith(f"{DATA_MOUNT}/") or ".." in path.split("/"):
        raise ConfigError(
            key, path, f"give a path on FSx as the pods see it: under {DATA_MOUNT}/, without '..'"
        )
    if any(c.isspace() or c in "'\"$`\\" for c in path):
        raise ConfigError(key, path, "a path without spaces, quotes, '$', '`' or backslashes")


def phase2_spec(phase1: BertJobSpec, **changes: object) -> BertJobSpec:
    """The reference phase 2 after ``phase1``, with ``changes``: sequence length 512, 80 masked
    predictions, lr 2.8e-4, 781 warm-up steps, 1,563 steps of global batch 32,768 at micro-batch
    2, from ``phase1``'s run directory (its final checkpoint, weights only).

    The values are Neuron's BERT tutorial's phase 2 (aws-neuron-sdk
    ``frameworks/torch/torch-neuronx/tutorials/training/bert.rst``; aws-neuron-samples
    ``dp_bert_large_hf_pretrain_hdf5.py`` ``--phase2 --seq_len 512 --max_pred_len 80 --lr 2.8e-4
    --warmup_steps 781 --max_steps 1563 --batch_size 2 --grad_accum_usteps 512`` on 32 workers).
    The model, the launcher (workers, rendezvous, restarts, fabric check) and the vocabulary are
    phase 1's. The script's other flags are not inherited: a flag phase 1 needed (its lr, say)
    is rarely right for phase 2; give phase 2's own in ``script_args``, which are merged over
    the reference's. Names: ``phase1``'s with ``phase1`` -> ``phase2`` and ``seq128`` -> ``seq512``
    where they say so (the defaults ``bert-large-phase2``, ``bert-wikicorpus-seq512``,
    ``bert-large-seq512``), else ``-phase2`` appended.
    """
    reference: dict[str, ScriptArg] = {
        "seq_len": 512,
        "max_pred_len": 80,
        "lr": "2.8e-4",
        "warmup_steps": 781,
    }
    given = changes.pop("script_args", None)
    script_args = {**reference, **(dict(_script_arg_pairs(given)) if given is not None else {})}
    defaults: dict[str, object] = {
        "batch_size": 2,
        "global_batch": 32768,
        "max_steps": PHASE2_MAX_STEPS,
        "dataset_name": _phase2_name(phase1.dataset_name, "seq128", "seq512"),
        "cache_set": _phase2_name(phase1.cache_set, "seq128", "seq512"),
        "run_name": _phase2_name(phase1.run_name, "phase1", "phase2"),
        "init_from": phase1.paths.output_dir,
        "script_args": script_args,
    }
    return phase1.replace(**{**defaults, **changes})


def _phase2_name(name: str, old: str, new: str) -> str:
    """Phase 2's name for phase 1's ``name``: ``old`` replaced by ``new``, else ``-phase2`` appended."""
    if old in name:
        return name.replace(old, new)
    return f"{name[: 63 - len('-phase2')]}-phase2"


def _script_arg_pairs(value: object) -> tuple[tuple[str, ScriptArg], ...]:
    if isinstance(value, Mapping):
        items: Iterable[object] = value.items()
    elif isinstance(value, (tuple, list)):
        items = value
    else:
        raise ConfigError(context_key("script_args"), value, "give flag names with string values")
    pairs: list[tuple[str, ScriptArg]] = []
    for item in items:
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise ConfigError(context_key("script_args"), item, "give flag names with string values")
        key, arg = item
        if not isinstance(key, str) or not isinstance(arg, (str, int, float, bool)):
            raise ConfigError(context_key("script_args"), {key: arg}, "give flag names with string values")
        pairs.append((key, arg))
    return tuple(sorted(pairs))


def _validate(s: BertJobSpec) -> None:
    checks.one_of(context_key("model"), s.model, MODELS)
    for name in ("batch_size", "global_batch", "max_steps", "checkpoint_every"):
        checks.whole_number(context_key(name), getattr(s, name), minimum=1)
    checks.whole_number(context_key("nproc_per_node"), s.nproc_per_node, minimum=0)
    checks.flag(context_key("fabric_check"), s.fabric_check)
    checks.whole_number(context_key("fabric_check_min_busbw_gbps"), s.fabric_check_min_busbw_gbps, minimum=0)
    for name in ("max_restarts", "max_retry"):
        checks.whole_number(context_key(name), getattr(s, name), minimum=0, maximum=MAX_RESTARTS)
    checks.one_of(context_key("rdzv_backend"), s.rdzv_backend, RDZV_BACKENDS)
    for name in ("dataset_name", "cache_set", "run_name"):
        checks.dns_label(context_key(name), getattr(s, name))
    for name in ("init_from", "vocab"):
        _check_pod_path(context_key(name), getattr(s, name))
    for key, _ in s.script_args:
        if key in JOB_SET_FLAGS:
            raise ConfigError(
                context_key("script_args"),
                {key: dict(s.script_args)[key]},
                f"the job sets --{key} itself; use {JOB_SET_FLAGS[key]}",
            )
