"""The job description a training pod's program runs: data, not shell, versioned.

The CDK job and the TorchX component render one :class:`JobDescription` per job
(:func:`trainium_job.worker.job_description`) and put it, as JSON, in the training container's
command: ``python -m trainium_job.pod_program '<json>'``. The program
(:mod:`trainium_job.pod_program.program`) reads nothing else of the job: what it runs, what it
waits for and for how long, what it exports and what it may spend.

The JSON is :func:`dumps` of the dataclasses below with ``"version": VERSION``; a program refuses
a description of another version with one line (a pod of an older image meeting a newer job).
Standard library only.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from ..waits import Wait

#: The description's format. Raise it when a field changes meaning or a required field is added.
VERSION: Final = 1
#: The program's module (``python -m``).
MODULE: Final = "trainium_job.pod_program"


class DescriptionError(ValueError):
    """A description this program cannot run; the message is one line."""


@dataclass(frozen=True)
class Rendezvous:
    """The c10d rendezvous decision each pod makes at start: whether its torchrun hosts the store.

    torchrun's c10d backend otherwise guesses, by comparing the endpoint's address with its own
    (``trainium_job.launch.c10d_host_lines`` says why that fails on a fresh pod); the program
    decides from the pod's host name and passes ``is_host`` with ``conf`` in
    ``PET_RDZV_CONF`` (``trainium_job.launch.RDZV_CONF_ENV``)."""

    #: The endpoint's first host label: the pod whose host name it is hosts the store.
    host: str
    #: Other ``--rdzv_conf`` pairs, in order.
    conf: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Precompile:
    """The phase's ``neuron_parallel_compile`` trial run, once per cache set."""

    argv: tuple[str, ...]
    #: Written after a trial run that ended 0: later starts of this cache set skip it.
    marker: str
    #: Seconds the trial may run before the pod gives up on it (exit ``DEADLINE_EXIT_CODE``).
    deadline_s: int
    why: str = ""


@dataclass(frozen=True)
class Upload:
    """The exported folder copied to the model bucket, after its export (or, on a later start,
    again: the upload skips what is there already, so a redeploy completes one that failed).

    The bucket's name is read from the pod's environment (``bucket_env``), not written here: a
    name known only at deploy would make the job's own name change with every synth."""

    #: The upload command, to which the program appends the folder and ``s3://<bucket>/<prefix>``.
    argv: tuple[str, ...]
    #: The variable holding the bucket's name (unset or empty: no upload, the model stays on FSx).
    bucket_env: str
    #: The key prefix of the model in the bucket (``<run>/model``).
    prefix: str


@dataclass(frozen=True)
class Export:
    """The phase's model, exported by one pod once the run is complete (or stopped at the budget)."""

    #: The export command; at a budget stop the program adds the stop's own flags
    #: (:data:`trainium_job.pod_program.program.STOPPED_EXPORT_FLAGS`).
    argv: tuple[str, ...]
    #: The exported folder: done once ``config.json`` is in it.
    model_dir: str
    #: Volcano task index of the pod that exports (its env plugin's ``VC_TASK_INDEX``).
    task_index: int = 0
    #: Seconds the other pods wait for the export before they end, at a stop.
    deadline_s: int = 600
    #: Its copy in the model bucket. Default None: the model stays on FSx.
    upload: Upload | None = None


@dataclass(frozen=True)
class Phase:
    """One run of the job: its waits, its precompile, its training command, its export."""

    #: As the pod's lines name it ("phase 1").
    name: str
    #: The run directory (checkpoints, the restart ledger).
    run_dir: str
    #: The trainer's mark of a run that reached its --max_steps: a phase that has it is not run.
    complete_marker: str
    #: The training command (torchrun ...).
    train: tuple[str, ...]
    #: What must be there before the phase trains (its shard set, its start checkpoint).
    waits: tuple[Wait, ...] = ()
    #: Environment of the phase's commands, over the container's (its compile cache).
    env: tuple[tuple[str, str], ...] = ()
    #: Directories made before the phase runs.
    make_dirs: tuple[str, ...] = ()
    precompile: Precompile | None = None
    export: Export | None = None


@dataclass(frozen=True)
class FabricCheck:
    """The collective test before the first phase that trains (multi-node jobs on EFA)."""

    #: The measurement (torchrun ... measure): its failure is the verdict's to report.
    measure: tuple[str, ...]
    #: The verdict; the program appends ``--seconds <the check's seconds>``.
    verdict: tuple[str, ...]
    #: The measurement's result file (removed before it runs).
    result_file: str
    #: The line before it runs.
    title: str = ""


@dataclass(frozen=True)
class Budget:
    """The job's spend ceiling: node-hours at the list price, counted by every pod."""

    #: The ceiling, USD.
    usd: float
    #: The on-demand price of one node, USD per hour.
    usd_per_node_hour: float
    #: Where the pods keep their spend records (:mod:`trainium_job.pod_program.spend`).
    spend_dir: str
    #: Seconds counted once per node that joined the job, before its pod started: its launch,
    #: join and image pull, which the node bills and the pod does not see.
    node_start_s: int
    #: Seconds between two looks at the spend.
    check_every_s: int = 60


@dataclass(frozen=True)
class JobDescription:
    """Everything a training pod runs, in order: the driver check, then each phase (its waits,
    its precompile, the fabric check before the first that trains, training, the export), the
    restart ledger on a non-zero end, the spend against the ceiling throughout."""

    #: The Volcano Job's name.
    job: str
    #: Pods (= nodes) of the job.
    nodes: int
    phases: tuple[Phase, ...]
    #: The driver check's command (None: none).
    driver_check: tuple[str, ...] | None = None
    rendezvous: Rendezvous | None = None
    fabric_check: FabricCheck | None = None
    budget: Budget | None = None
    #: The pod's terminationGracePeriodSeconds: the program ends its children within it.
    grace_s: int = 45
    #: Write the restart ledger's line on a non-zero end.
    ledger: bool = True
    #: Port of the program's own metrics (None: none).
    metrics_port: int | None = None
    #: Where the library's own programs (the driver and fabric checks) are when the image does not
    #: hold them (a job of the user's own image: an init container copies them there); they run
    #: with it first on PYTHONPATH, the job's own commands without it. None: in the image.
    runtime: str | None = None
    #: Seconds the driver and fabric checks may take together (a phase's bound before it trains is
    #: its waits' deadlines, its precompile's and this: :meth:`bound_s`).
    checks_s: int = 0

    def bound_s(self, phase: Phase) -> int:
        """Seconds a pod may hold its node before ``phase`` trains: an alert fires past it."""
        waits = sum(w.deadline_s for w in phase.waits)
        return waits + (phase.precompile.deadline_s if phase.precompile else 0) + self.checks_s

    version: int = VERSION

    def __post_init__(self) -> None:
        if not self.phases:
            raise DescriptionError("a job description needs at least one phase")
        if self.version != VERSION:
            raise DescriptionError(
                f"job description version {self.version}: this program runs version {VERSION} "
                "(the image is older or newer than the job: rebuild and redeploy both)"
            )


def dumps(description: JobDescription) -> str:
    """The description as one line of JSON, keys sorted: equal descriptions render equal text."""
    return json.dumps(_plain(description), sort_keys=True, separators=(",", ":"))


def loads(text: str) -> JobDescription:
    """The description in ``text``; :class:`DescriptionError` naming what is wrong."""
    try:
        raw = json.loads(text)
    except ValueError as e:
        raise DescriptionError(f"the job description is not JSON: {e}") from None
    if not isinstance(raw, dict):
        raise DescriptionError("the job description is not a JSON object")
    version = raw.get("version")
    if version != VERSION:
        raise DescriptionError(
            f"job description version {version!r}: this program runs version {VERSION} "
            "(the image is older or newer than the job: rebuild and redeploy both)"
        )
    return _build(JobDescription, raw, "description")


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


T = TypeVar("T")
#: The dataclass each field of a description holds (a tuple of them, or one, or None).
_NESTED: Final[dict[str, type]] = {
    "phases": Phase,
    "waits": Wait,
    "rendezvous": Rendezvous,
    "fabric_check": FabricCheck,
    "budget": Budget,
    "precompile": Precompile,
    "export": Export,
    "upload": Upload,
}


def _build(kind: type[T], raw: Any, where: str) -> T:
    if not isinstance(raw, dict):
        raise DescriptionError(f"{where}: expected an object, got {type(raw).__name__}")
    names = {f.name for f in dataclasses.fields(kind)}  # type: ignore[arg-type]
    unknown = sorted(set(raw) - names)
    if unknown:
        raise DescriptionError(f"{where}: unknown fields {unknown}")
    values: dict[str, Any] = {}
    for name, value in raw.items():
        nested = _NESTED.get(name)
        if nested is not None and isinstance(value, list):
            values[name] = tuple(_build(nested, v, f"{where}.{name}[{i}]") for i, v in enumerate(value))
        elif nested is not None and value is not None:
            values[name] = _build(nested, value, f"{where}.{name}")
        elif isinstance(value, list):
            values[name] = tuple(tuple(v) if isinstance(v, list) else v for v in value)
        else:
            values[name] = value
    try:
        return kind(**values)
    except (TypeError, ValueError) as e:
        raise DescriptionError(f"{where}: {e}") from None


#: The fields a description's phases may not share (each phase has its own).
_OWN_PER_PHASE: Final = ("run_dir", "complete_marker")


def check(description: JobDescription) -> None:
    """What the dataclasses cannot say alone: phases with their own run directories."""
    for name in _OWN_PER_PHASE:
        values = [getattr(p, name) for p in description.phases]
        if len(set(values)) != len(values):
            raise DescriptionError(f"two phases share their {name}: {values}")


__all__ = [
    "MODULE",
    "VERSION",
    "Budget",
    "DescriptionError",
    "Export",
    "FabricCheck",
    "JobDescription",
    "Phase",
    "Precompile",
    "Rendezvous",
    "Upload",
    "Wait",
    "check",
    "dumps",
    "loads",
]
