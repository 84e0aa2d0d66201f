"""What every training container runs: the job's description, rendered once, and the command that
runs it (``python -m trainium_job.pod_program '<json>'``).

The CDK job (``trainium_eks``) and the TorchX component both call :func:`job_description` with
their phases, so both run the same program with the same waits, checks and commands. The
program itself: :mod:`trainium_job.pod_program`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .entry_points import DRIVER_CHECK, EXPORT, UPLOAD_MODEL
from .estimates import CHECKS_MINUTES, PRECOMPILE_MINUTES
from .fabric_check_steps import RESULT_FILE, FabricCheck, measure_args, title, verdict_args
from .launch import (
    DEFAULT_PRECOMPILE_STEPS,
    LaunchSpec,
    c10d_store_host,
    precompile_args,
    torchrun_args,
    without_conf,
)
from .paths import MODEL_BUCKET_ENV, JobPaths, model_key_prefix
from .pod_program import description as d
from .pod_program.metrics import PROGRAM_METRICS_PORT
from .waits import Wait

#: Seconds a pod waits for its first phase's shards when nothing says more: the CDK job submits
#: the gang only once they are staged (``trainium_eks.jobs.job_submission``), so they are there;
#: a job submitted by hand (TorchX) before its data gets this long.
DATA_ALREADY_STAGED_S = 600
#: The tutorial's ~15 minutes of ``neuron_parallel_compile`` for BERT-large
#: (:data:`~trainium_job.estimates.PRECOMPILE_MINUTES`) four times over: a trial run past it is
#: hung, not slow.
PRECOMPILE_DEADLINE_S = 4 * PRECOMPILE_MINUTES * 60
#: Seconds the other pods give the exporting pod's export at a stop: BERT-large's 1.3 GB of
#: safetensors and 4 GB of checkpoint read at the default FSx's 146 MB/s take under a minute;
#: Python, torch and transformers load in another.
EXPORT_DEADLINE_S = 600
#: Seconds the driver check and the fabric check may take together before an alert calls the pod
#: idle: five times their estimate (:data:`~trainium_job.estimates.CHECKS_MINUTES`).
CHECKS_S = 5 * CHECKS_MINUTES * 60


@dataclass(frozen=True)
class PhaseRun:
    """One phase as the pods run it: torchrun's spec, where its files live, what it waits for, and
    the vocabulary its export reads (None: no export).

    ``waits``: its shard set and start, each bounded (None: its dataset marker, for
    :data:`DATA_ALREADY_STAGED_S`)."""

    launch: LaunchSpec
    paths: JobPaths
    vocab: str | None = None
    waits: tuple[Wait, ...] | None = None


def dataset_wait(name: str, paths: JobPaths, deadline_s: int = DATA_ALREADY_STAGED_S, why: str = "") -> Wait:
    """The wait for a phase's shard set (its staging job's marker)."""
    return Wait(
        what=f"{name}'s dataset",
        ready=paths.dataset_marker,
        deadline_s=deadline_s,
        why=why or "the job is submitted once its shards are staged",
    )


def export_command(phase: PhaseRun, hardware: str | None = None) -> tuple[str, ...]:
    """The phase's Hugging Face export (``training.trainer.export``), of its run directory; its
    model card names ``hardware`` ("2 x trn1.32xlarge"); the pod program adds the node-hours."""
    paths = phase.paths
    return (
        "python",
        "-m",
        EXPORT,
        paths.output_dir,
        paths.model_dir,
        "--vocab",
        str(phase.vocab),
        "--data_dir",
        paths.data_dir,
        *(("--hardware", hardware) if hardware else ()),
    )


def model_upload(run_name: str) -> d.Upload:
    """A run's model copied to the model bucket the pods' environment names
    (:data:`~trainium_job.paths.MODEL_BUCKET_ENV`), under ``<run>/model``."""
    return d.Upload(
        argv=("python", "-m", UPLOAD_MODEL), bucket_env=MODEL_BUCKET_ENV, prefix=model_key_prefix(run_name)
    )


def phase_description(
    number: int,
    phase: PhaseRun,
    *,
    precompile_steps: int = DEFAULT_PRECOMPILE_STEPS,
    hardware: str | None = None,
    upload_models: bool = False,
) -> d.Phase:
    """Phase ``number``'s part of the description (``upload_models``: its export is copied to
    the model bucket)."""
    paths, spec = phase.paths, without_conf(phase.launch)
    name = f"phase {number}"
    return d.Phase(
        name=name,
        run_dir=paths.output_dir,
        complete_marker=paths.complete_marker,
        train=tuple(torchrun_args(spec)),
        waits=phase.waits if phase.waits is not None else (dataset_wait(name, paths),),
        env=(("NEURON_CC_FLAGS", f"--cache_dir={paths.cache_dir}"),),
        make_dirs=(paths.cache_dir, paths.output_dir),
        precompile=d.Precompile(
            argv=tuple(precompile_args(spec, precompile_steps)),
            marker=paths.cache_marker,
            deadline_s=PRECOMPILE_DEADLINE_S,
            why=f"4 x the ~{PRECOMPILE_MINUTES} min Neuron's BERT tutorial gives a precompile",
        ),
        export=(
            d.Export(
                argv=export_command(phase, hardware),
                model_dir=paths.model_dir,
                deadline_s=EXPORT_DEADLINE_S,
                upload=model_upload(paths.run_name) if upload_models else None,
            )
            if phase.vocab
            else None
        ),
    )


def fabric_description(spec: LaunchSpec, check: FabricCheck) -> d.FabricCheck:
    spec = without_conf(spec)
    return d.FabricCheck(
        measure=tuple(measure_args(spec, check)),
        verdict=tuple(verdict_args(check, nodes=spec.nnodes)),
        result_file=RESULT_FILE,
        title=title(spec, check),
    )


def job_description(
    *,
    job_name: str,
    phases: Sequence[PhaseRun],
    fabric_check: FabricCheck | None = None,
    budget: d.Budget | None = None,
    grace_s: int,
    precompile_steps: int = DEFAULT_PRECOMPILE_STEPS,
    hardware: str | None = None,
    upload_models: bool = False,
) -> d.JobDescription:
    """The description every pod of the job runs (see :mod:`trainium_job.pod_program.program`):
    the driver check, then each phase in turn; ``fabric_check`` before the first that trains;
    ``hardware`` ("2 x trn1.32xlarge"): what the exported models' cards say they trained on;
    ``upload_models``: each exported model is copied to the model bucket."""
    first = phases[0].launch
    host = c10d_store_host(first)
    described = tuple(
        phase_description(
            n, p, precompile_steps=precompile_steps, hardware=hardware, upload_models=upload_models
        )
        for n, p in enumerate(phases, start=1)
    )
    description = d.JobDescription(
        job=job_name,
        nodes=first.nnodes,
        phases=described,
        driver_check=("python", "-m", DRIVER_CHECK),
        rendezvous=d.Rendezvous(host=host, conf=first.rdzv_conf) if host is not None else None,
        fabric_check=fabric_description(first, fabric_check) if fabric_check is not None else None,
        budget=budget,
        grace_s=grace_s,
        metrics_port=PROGRAM_METRICS_PORT,
        checks_s=CHECKS_S,
    )
    d.check(description)
    return description


#: How a training image that lacks the library starts the pod program: its runtime directory (the
#: first argument) first on the program's own import path, not on PYTHONPATH (the job's commands
#: do not see it), then the module as ``python -m`` runs it, with the description as its argument.
BOOTSTRAP = (
    "import runpy, sys; sys.path.insert(0, sys.argv.pop(1)); "
    f"runpy.run_module({d.MODULE!r}, run_name='__main__', alter_sys=True)"
)


def container_command(description: d.JobDescription) -> list[str]:
    """The training container's command: the program, with the description as its one argument
    (started from the description's runtime directory when the image lacks the library)."""
    if description.runtime is not None:
        return ["python", "-c", BOOTSTRAP, description.runtime, d.dumps(description)]
    return ["python", "-m", d.MODULE, d.dumps(description)]
