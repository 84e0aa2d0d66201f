"""The BERT pretraining job's settings: one frozen, typed spec with its defaults and checks.

The CDK app reads it from the ``training_*`` context keys (``trainium_eks.config``), the
construct ``BertPretrainingJob`` and the TorchX component ``trn_dist_ddp`` take it. Every error
names the context key a user types (``training_global_batch``) and the field a library user sets
(``BertJobSpec.global_batch``), whichever of the three built it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, Literal, Protocol, TypeVar

from . import checks
from .errors import ConfigError, register_fields
from .fabric_check_steps import DEFAULT_MIN_BUSBW_GBPS
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

#: Highest number of torchrun restarts or Volcano retries (a loop of failures costs node-hours).
MAX_RESTARTS: Final = 100
#: Held-out evaluations a phase gets when ``eval_every`` is unset (besides the one after its last
#: step). At 10,000 samples an evaluation is forward passes only: about a fifth of one optimizer
#: step of phase 1 (16,384 sequences, forward and backward) and a tenth of one of phase 2 (32,768),
#: so 20 of them cost a few steps of a schedule of thousands, and draw the learning curve.
EVALUATIONS_PER_PHASE: Final = 20


def default_eval_every(max_steps: int, checkpoint_every: int) -> int:
    """Steps between held-out evaluations when ``eval_every`` is unset: ``max_steps`` /
    :data:`EVALUATIONS_PER_PHASE` rounded down to a multiple of ``checkpoint_every``, at least
    ``checkpoint_every``: each evaluation then judges the weights of a checkpoint just written, the
    one a resume or an export would take. 1,400 for the reference phase 1 (28,125 steps), 200 for
    its phase 2 (1,563 steps), both checkpointing every 200."""
    share = max_steps // EVALUATIONS_PER_PHASE
    return max(checkpoint_every, share - share % checkpoint_every)


def context_key(name: str) -> str:
    """The context key of spec field ``name``."""
    return f"{CONTEXT_PREFIX}{name}"


#: How a spec field reaches the pods: ``flag``, a ``training.trainer.pretrain`` flag the job
#: renders (``JobKey.flag``); ``script_args``, flags of the user's own; ``torchrun`` and
#: ``volcano``, a launcher option; ``worker``, the worker script or the pod's environment (paths,
#: the fabric check, the export).
Route = Literal["flag", "script_args", "torchrun", "volcano", "worker"]


class Planned(Protocol):
    """What a rendered flag reads of the job's plan (:class:`trainium_job.plan.TrainingPlan`,
    which is built from a spec, so the spec names only what it reads)."""

    @property
    def grad_accum_usteps(self) -> int: ...


#: A rendered flag's value from the spec and the job's plan (None or False: left out).
FlagValue = Callable[["BertJobSpec", Planned], "ScriptArg | None"]
T = TypeVar("T")
#: The key of a spec field's :class:`JobKey` in its ``dataclasses.field`` metadata.
JOB_KEY: Final = "job_key"


@dataclass(frozen=True, kw_only=True)
class JobKey:
    """How one :class:`BertJobSpec` field is set and how it reaches the pods: its one declaration.

    The field's type and default are the dataclass field's, its doc the ``#:`` comment above it
    (the configuration page reads it). The script flags the job sets (:data:`JOB_SET_FLAGS`), the
    rendered ``training.trainer.pretrain`` arguments (``trainium_job.job.script_args``), the
    context keys (``trainium_eks.config.context``) and the configuration page derive from these.
    """

    #: How the field reaches the pods.
    route: Route
    #: With route ``flag``: the flag, without ``--``; None for the other routes.
    flag: str | None = None
    #: With route ``flag``: the flag's value; None: the field's own value (``--batch_size``).
    value: FlagValue | None = None
    #: The keys a user sets instead when the field has no context key of its own (the workload
    #: derives it from them); empty: the field's context key, ``training_<field>``.
    set_by: str = ""


def job_key(
    default: T, route: Route, *, flag: str | None = None, value: FlagValue | None = None, set_by: str = ""
) -> T:
    """A spec field with ``default``, declared as a :class:`JobKey` in its metadata.

    Typed as the default (as ``dataclasses.field`` is) so that the field keeps its annotation.
    """
    if (route == "flag") != (flag is not None) or (value is not None and flag is None):
        raise ValueError(f"job_key: a flag (and a value) with route 'flag' only, got {route!r} with {flag!r}")
    declared = JobKey(route=route, flag=flag, value=value, set_by=set_by)
    return field(default=default, metadata={JOB_KEY: declared})


@dataclass(frozen=True)
class BertJobSpec:
    """What a BERT pretraining run is: model, batch, schedule, launcher, where its data live.

    The defaults are the reference recipe (BERT-large phase 1, AdamW) on 2 x trn1.32xlarge.
    ``script_args`` is accepted as a mapping and stored as sorted ``(flag, value)`` pairs, so
    the spec is hashable and equal settings compare equal.
    """

    #: Model config of training/trainer/model_configs.
    model: str = job_key("large", "flag", flag="model")
    #: Micro-batch per worker (the reference's 16).
    batch_size: int = job_key(16, "flag", flag="batch_size")
    #: Sequences per optimizer step; the accumulation is global / (batch x workers): 16,384 on
    #: 2 x trn1.32xlarge (64 workers) gives 16 micro-batches.
    global_batch: int = job_key(
        16384, "flag", flag="grad_accum_usteps", value=lambda _spec, plan: plan.grad_accum_usteps
    )
    #: Optimizer steps of the schedule (the reference's phase 1: 28,125).
    max_steps: int = job_key(PHASE1_MAX_STEPS, "flag", flag="max_steps")
    #: Workers per node; 0 means the instance type's NeuronCores (32 on trn1.32xlarge).
    nproc_per_node: int = job_key(0, "torchrun")
    #: torchrun rendezvous: c10d (node 0 hosts it) or etcd / etcd-v2 (needs ``etcd_enabled``).
    rdzv_backend: str = job_key("c10d", "torchrun")
    #: The shards are read from /data/datasets/<name>.
    dataset_name: str = job_key(
        "bert-wikicorpus-seq128", "flag", flag="data_dir", value=lambda spec, _plan: spec.paths.data_dir
    )
    #: Neuron compile cache set: /data/neuron-cache/<set>. Never the same for two running jobs.
    cache_set: str = job_key("bert-large-seq128", "worker")
    #: Checkpoints and TensorBoard events in /data/runs/<run>; a job resumes from it.
    run_name: str = job_key(
        "bert-large-phase1", "flag", flag="output_dir", value=lambda spec, _plan: spec.paths.output_dir
    )
    #: Optimizer steps between checkpoints.
    checkpoint_every: int = job_key(200, "flag", flag="checkpoint_every")
    #: Optimizer steps between held-out evaluations (and one after the last step), when the phase
    #: has a held-out set (``heldout_enabled``). Unset: about 20 a phase at checkpoint steps,
    #: ``max_steps`` / 20 rounded down to a multiple of ``checkpoint_every`` and at least that
    #: (1,400 for phase 1, 200 for phase 2: ``trainium_job.spec.default_eval_every``).
    eval_every: int | None = job_key(
        None, "flag", flag="eval_every", value=lambda spec, _plan: spec.evaluation_interval
    )
    #: torchrun restarts of the worker group.
    max_restarts: int = job_key(3, "torchrun")
    #: Volcano (or TorchX) restarts of the whole job, on a failed or evicted pod.
    max_retry: int = job_key(3, "volcano")
    #: Before training, a multi-node job times an all-reduce across all workers and reads the EFA
    #: counters (trainium_job.fabric_check_steps); a pod whose fabric fails stops the job (AbortJob).
    fabric_check: bool = job_key(True, "worker")
    #: The check's all-reduce bus bandwidth floor in GB/s as nccom-test prints them (GiB/s); 0:
    #: only check that the bytes cross EFA. At most what the nodes' network can carry (about 183 on
    #: 2 x trn1.32xlarge: ``trainium_job.fabric_check_steps.busbw_ceiling_gbps``).
    fabric_check_min_busbw_gbps: int = job_key(DEFAULT_MIN_BUSBW_GBPS, "worker")
    #: More training.trainer.pretrain flags, e.g. {"lr": "4e-4", "warmup_steps": "2000"}; checked at synth
    #: against the script's own parser (names, types, rules).
    script_args: tuple[tuple[str, ScriptArg], ...] = job_key((), "script_args")
    #: The run's start weights, a path in the pod under /data (``--init_from``: a checkpoint or
    #: a run directory, weights only; phase 2 from phase 1's). None: random weights.
    init_from: str | None = job_key(
        None, "flag", flag="init_from", set_by="training_phases and phase2_init_from"
    )
    #: The shards' vocab.txt, a path in the pod under /data: after the run the job exports the
    #: model with it as a Hugging Face folder (``JobPaths.model_dir``). None: no export.
    vocab: str | None = job_key(None, "worker", set_by="vocab_source")
    #: The phase's held-out shard set, a path in the pod under /data (``--eval_dir``), which the
    #: held-out staging Job makes during training: evaluated every ``eval_every`` steps once it is
    #: there. None: no evaluation.
    eval_dir: str | None = job_key(None, "flag", flag="eval_dir", set_by="heldout_enabled")

    def __post_init__(self) -> None:
        object.__setattr__(self, "script_args", _script_arg_pairs(self.script_args))
        _validate(self)

    @property
    def extra_args(self) -> dict[str, ScriptArg]:
        """``script_args`` as a dict."""
        return dict(self.script_args)

    @property
    def evaluation_interval(self) -> int | None:
        """Steps between held-out evaluations: ``eval_every``, or its default
        (:func:`default_eval_every`); None without a held-out set."""
        if self.eval_dir is None:
            return None
        return self.eval_every or default_eval_every(self.max_steps, self.checkpoint_every)

    @property
    def paths(self) -> JobPaths:
        """Where the job's shards, compile cache and run directory live on FSx."""
        return job_paths(dataset_name=self.dataset_name, cache_set=self.cache_set, run_name=self.run_name)

    def replace(self, **changes: object) -> BertJobSpec:
        """A copy with ``changes`` applied (and checked)."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


def _declared(f: dataclasses.Field[object]) -> JobKey:
    """Field ``f``'s :class:`JobKey`; a field declared without ``job_key`` is an error at import."""
    declared = f.metadata.get(JOB_KEY)
    if not isinstance(declared, JobKey):
        raise TypeError(
            f"BertJobSpec.{f.name} has no job_key(...) declaration: declare how it reaches the pods"
        )
    return declared


#: The spec's field names, in declaration order.
SPEC_FIELDS: Final = tuple(f.name for f in dataclasses.fields(BertJobSpec))
register_fields(CONTEXT_PREFIX, "BertJobSpec", SPEC_FIELDS)
#: Each spec field's declaration, in declaration order (a field without one fails here, at import).
JOB_KEYS: Final[Mapping[str, JobKey]] = {f.name: _declared(f) for f in dataclasses.fields(BertJobSpec)}
#: The fields a context key of their own (``training_<field>``) sets.
CONTEXT_FIELDS: Final = tuple(name for name, key in JOB_KEYS.items() if not key.set_by)
#: The ``training.trainer.pretrain`` flags the job renders from a spec field -> that field.
FLAG_FIELDS: Final = {key.flag: name for name, key in JOB_KEYS.items() if key.flag is not None}
#: The flags the job renders that no spec field sets, and why.
FIXED_FLAGS: Final = {
    "metrics_port": "(always on: the PodMonitor scrapes it)",
    "precompile": "(set by the precompile pass)",
}
#: ``training.trainer.pretrain`` flags the job renders itself, and the key that sets each.
JOB_SET_FLAGS: Final = {
    **{flag: JOB_KEYS[name].set_by or context_key(name) for flag, name in FLAG_FIELDS.items()},
    **FIXED_FLAGS,
}


def flag_values(spec: BertJobSpec, plan: Planned) -> dict[str, ScriptArg | None]:
    """The flags the job renders from ``spec``'s fields -> their values (None: left out)."""
    values: dict[str, ScriptArg | None] = {}
    for flag, name in FLAG_FIELDS.items():
        render = JOB_KEYS[name].value
        values[flag] = render(spec, plan) if render is not None else getattr(spec, name)
    return values


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
        # Of phase 1's shape and schedule: phase 2 has a held-out set and an interval of its own.
        "eval_dir": None,
        "eval_every": None,
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
    for name in ("init_from", "vocab", "eval_dir"):
        _check_pod_path(context_key(name), getattr(s, name))
    if s.eval_every is not None and not (checks.is_whole_number(s.eval_every) and s.eval_every >= 1):
        raise ConfigError(
            context_key("eval_every"),
            s.eval_every,
            "give a whole number of steps of at least 1 (to evaluate after the last step only, give "
            "max_steps or more), or leave it unset for about 20 evaluations a phase",
        )
    for key, _ in s.script_args:
        if key in JOB_SET_FLAGS:
            raise ConfigError(
                context_key("script_args"),
                {key: dict(s.script_args)[key]},
                f"the job sets --{key} itself; use {JOB_SET_FLAGS[key]}",
            )
