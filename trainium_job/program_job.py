"""A job of the user's own training program: what it runs, where its checkpoints go, what it waits
for, rendered as the library's gang of Trainium pods running the pod program.

What the program gets, whatever it trains: gang scheduling and its abort, Karpenter's
do-not-disrupt, the health gate, the driver and fabric checks, the compile cache, the restart
policies and ledger, bounded waits, the spend ceiling, the metrics ports, the security contexts and
the grace budget (:mod:`trainium_job.gang`, :mod:`trainium_job.pod_program`). What it reads of the
job: :data:`JOB_ENV` (its run directory for checkpoints, the job's name, the port its own metrics
may be served on); torchrun's own variables (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``TORCHELASTIC_RESTART_COUNT``). What it is asked: to resume from its run directory when it finds a
checkpoint there, to checkpoint and end on SIGTERM within the grace budget (a stop, a ceiling), and
to write ``<run directory>/COMPLETE`` once its schedule is done (a redeploy then does not run it
again). Standard library only: the CDK construct (``trainium_eks.TrainiumTrainingJob``), the
TorchX component (``trainium_job.torchx_component.trn_program``) and tests import it alike.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Final

from . import checks
from .entry_points import DRIVER_CHECK
from .errors import ConfigError
from .estimates import PRECOMPILE_MINUTES
from .fabric_check_steps import DEFAULT_MIN_BUSBW_GBPS, FabricCheck
from .gang import Gang, RenderedJob, render_gang
from .instances import InstanceFacts
from .launch import RDZV_BACKENDS, LaunchSpec, c10d_store_host, torchrun_args, without_conf
from .paths import COMPLETE_MARKER, DATA_MOUNT, spend_dir
from .pod import RUNTIME_DIR, rank0_endpoint
from .pod_program import description as d
from .pod_program.metrics import PROGRAM_METRICS_PORT
from .spec import MAX_RESTARTS
from .stop_budget import termination_grace_period_s
from .telemetry import METRICS_PORT
from .waits import Wait
from .worker import CHECKS_S, PRECOMPILE_DEADLINE_S, fabric_description

#: The ServiceAccount of a job's pods (no AWS role, no Kubernetes API token).
JOB_SERVICE_ACCOUNT: Final = "trainium-job"
#: The variables a training program reads of its job (set on its commands by the pod program).
RUN_DIR_ENV: Final = "TRAINIUM_JOB_RUN_DIR"
JOB_NAME_ENV: Final = "TRAINIUM_JOB_NAME"
METRICS_PORT_ENV: Final = "TRAINIUM_JOB_METRICS_PORT"
JOB_ENV: Final = (RUN_DIR_ENV, JOB_NAME_ENV, METRICS_PORT_ENV)
#: Where a job's run directories and compile caches are on FSx.
RUNS_DIR: Final = f"{DATA_MOUNT}/runs"
CACHE_DIR: Final = f"{DATA_MOUNT}/neuron-cache"
_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class TrainingCommand:
    """What torchrun starts on every worker: a Python module, or a script of the image, and its
    arguments.

    Attributes:
        module: a module the image's Python finds (``-m``), e.g. "my_project.train".
        script: a path in the image, e.g. "/app/train.py". Exactly one of the two.
        args: the program's own arguments, in order.
    """

    module: str | None = None
    script: str | None = None
    args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "args", tuple(self.args))
        if (self.module is None) == (self.script is None):
            raise ConfigError(
                "command", (self.module, self.script), "give a module or a script, one of the two"
            )
        if self.module is not None and (not isinstance(self.module, str) or not _MODULE.match(self.module)):
            raise ConfigError(
                "command.module", self.module, "give a dotted Python module name, e.g. my_project.train"
            )
        if self.script is not None and (
            not isinstance(self.script, str)
            or not self.script.startswith("/")
            or any(c.isspace() for c in self.script)
        ):
            raise ConfigError("command.script", self.script, "give the script's absolute path in the image")
        if not all(isinstance(a, str) for a in self.args):
            raise ConfigError("command.args", self.args, "give the arguments as strings")

    def launch(self, base: LaunchSpec) -> LaunchSpec:
        """``base`` (nodes, workers, rendezvous) running this command."""
        if self.script is not None:
            return replace(base, script=self.script, script_args=self.args)
        assert self.module is not None
        return replace(base, module=self.module, script=None, script_args=self.args)


@dataclass(frozen=True)
class ProgramJobSpec:
    """What a job of the user's own program is. Defaults are documented per field.

    Attributes:
        command: what each worker runs (:class:`TrainingCommand`).
        run_name: its run directory, ``/data/runs/<run_name>``: checkpoints, logs, the restart
            ledger. A redeploy with the same name resumes there.
        nproc_per_node: workers per node. Default 0: the instance type's NeuronCores.
        precompile: the trial run of ``neuron_parallel_compile`` (usually the same command for a
            few steps), once per ``cache_set``. Default None: no precompile.
        cache_set: the Neuron compile cache, ``/data/neuron-cache/<cache_set>``; never shared by two
            jobs running at once. Default None: no cache set (then no precompile).
        waits: what must be there before the program trains (a shard set's marker), each bounded.
            Default none.
        fabric_check: time an all-reduce across the nodes and check it crossed EFA before training
            (multi-node jobs on EFA). Default True.
        fabric_check_min_busbw_gbps: its bus bandwidth floor, GB/s. Default 10.
        rdzv_backend: torchrun's rendezvous. Default "c10d" (node 0 hosts it).
        max_restarts: torchrun's restarts of the worker group. Default 3.
        max_retry: Volcano's restarts of the whole job. Default 3.
        env: the program's own variables. Default none.
    """

    command: TrainingCommand
    run_name: str
    nproc_per_node: int = 0
    precompile: TrainingCommand | None = None
    cache_set: str | None = None
    waits: tuple[Wait, ...] = ()
    fabric_check: bool = True
    fabric_check_min_busbw_gbps: int = DEFAULT_MIN_BUSBW_GBPS
    rdzv_backend: str = "c10d"
    max_restarts: int = 3
    max_retry: int = 3
    env: tuple[tuple[str, str], ...] = field(default=())

    def __post_init__(self) -> None:
        object.__setattr__(self, "waits", tuple(self.waits))
        env = self.env.items() if isinstance(self.env, Mapping) else self.env
        object.__setattr__(self, "env", tuple(sorted((str(k), str(v)) for k, v in env)))
        if not isinstance(self.command, TrainingCommand):
            raise ConfigError("command", self.command, "give a TrainingCommand(module=... or script=...)")
        checks.dns_label("run_name", self.run_name)
        checks.whole_number("nproc_per_node", self.nproc_per_node, minimum=0)
        checks.flag("fabric_check", self.fabric_check)
        checks.whole_number("fabric_check_min_busbw_gbps", self.fabric_check_min_busbw_gbps, minimum=0)
        checks.one_of("rdzv_backend", self.rdzv_backend, RDZV_BACKENDS)
        for name in ("max_restarts", "max_retry"):
            checks.whole_number(name, getattr(self, name), minimum=0, maximum=MAX_RESTARTS)
        if self.cache_set is not None:
            checks.dns_label("cache_set", self.cache_set)
        if self.precompile is not None and self.cache_set is None:
            raise ConfigError("cache_set", None, "a precompile fills a cache set: give its name")
        for name, _ in self.env:
            if not _ENV_NAME.match(name) or name in JOB_ENV:
                raise ConfigError("env", name, f"give variable names of your own, not {', '.join(JOB_ENV)}")

    @property
    def run_dir(self) -> str:
        return f"{RUNS_DIR}/{self.run_name}"


def _phase(spec: ProgramJobSpec, launch: LaunchSpec, job_name: str) -> d.Phase:
    run_dir = spec.run_dir
    env = {
        **dict(spec.env),
        RUN_DIR_ENV: run_dir,
        JOB_NAME_ENV: job_name,
        METRICS_PORT_ENV: str(METRICS_PORT),
    }
    precompile = None
    if spec.cache_set is not None:
        cache_dir = f"{CACHE_DIR}/{spec.cache_set}"
        env["NEURON_CC_FLAGS"] = f"--cache_dir={cache_dir}"
        if spec.precompile is not None:
            trial = replace(
                spec.precompile.launch(launch), rdzv_id=f"{launch.rdzv_id}-precompile", max_restarts=0
            )
            precompile = d.Precompile(
                argv=("neuron_parallel_compile", *torchrun_args(without_conf(trial))),
                marker=f"{cache_dir}/.precompiled",
                deadline_s=PRECOMPILE_DEADLINE_S,
                why=f"4 x the ~{PRECOMPILE_MINUTES} min Neuron's BERT tutorial gives a precompile",
            )
    return d.Phase(
        name="training",
        run_dir=run_dir,
        complete_marker=f"{run_dir}/{COMPLETE_MARKER}",
        train=tuple(torchrun_args(without_conf(spec.command.launch(launch)))),
        waits=spec.waits,
        env=tuple(sorted(env.items())),
        make_dirs=(run_dir, *([f"{CACHE_DIR}/{spec.cache_set}"] if spec.cache_set else [])),
        precompile=precompile,
    )


def program_budget(
    spec: ProgramJobSpec, facts: InstanceFacts, usd: int | None, *, node_start_s: int
) -> d.Budget | None:
    """The pods' spend ceiling of ``usd`` (None: none): node-hours at ``facts``' list price, each
    node's start (``node_start_s``: its launch, join and image pull) counted once."""
    if usd is None:
        return None
    checks.whole_number("budget_usd", usd, minimum=1)
    if facts.on_demand_usd_per_hour is None:
        raise ConfigError("budget_usd", usd, f"{facts.name} has no list price: a ceiling cannot be counted")
    checks.whole_number("node_start_s", node_start_s, minimum=0)
    return d.Budget(
        usd=float(usd),
        usd_per_node_hour=facts.on_demand_usd_per_hour,
        spend_dir=spend_dir(spec.run_name),
        node_start_s=node_start_s,
    )


def check_nodes(facts: InstanceFacts, nodes: int, *, field_name: str = "nodes") -> None:
    """ConfigError unless ``nodes`` (pods = nodes of ``facts``) can form a job."""
    checks.whole_number(field_name, nodes, minimum=1)
    if nodes > 1 and not facts.multi_node:
        raise ConfigError(
            field_name, nodes, f"{facts.name} has no EFA for a multi-node job: use 1 node or trn1.32xlarge"
        )


def program_launch(spec: ProgramJobSpec, gang: Gang, *, rdzv_id: str, rdzv_endpoint: str) -> LaunchSpec:
    """torchrun's spec of ``spec``'s command on ``gang``'s nodes, with its rendezvous ``rdzv_id``
    (the job's name) at ``rdzv_endpoint``."""
    facts = gang.facts
    nproc = spec.nproc_per_node or facts.neuron_cores
    if nproc > facts.neuron_cores:
        raise ConfigError(
            "nproc_per_node", nproc, f"at most {facts.neuron_cores}, the NeuronCores of {facts.name}"
        )
    base = LaunchSpec(
        nnodes=gang.nodes,
        nproc_per_node=nproc,
        rdzv_endpoint=rdzv_endpoint,
        rdzv_backend=spec.rdzv_backend,
        rdzv_id=rdzv_id,
        max_restarts=spec.max_restarts,
    )
    return spec.command.launch(base)


def program_description(
    spec: ProgramJobSpec,
    gang: Gang,
    launch: LaunchSpec,
    *,
    job_name: str,
    budget: d.Budget | None = None,
) -> d.JobDescription:
    """What every pod of the job ``job_name`` runs: ``spec`` launched as ``launch``
    (:func:`program_launch`) on ``gang``, with its spend ceiling ``budget``
    (:func:`program_budget`). With ``gang.runtime_image`` (the image lacks the library), the
    library's own programs run from where that image's files are copied
    (``trainium_job.pod.RUNTIME_DIR``)."""
    facts = gang.facts
    check = None
    if spec.fabric_check and gang.nodes > 1 and facts.multi_node:
        check = fabric_description(launch, FabricCheck(min_busbw_gbps=spec.fabric_check_min_busbw_gbps))
    host = c10d_store_host(launch)
    description = d.JobDescription(
        job=job_name,
        nodes=gang.nodes,
        phases=(_phase(spec, launch, job_name),),
        driver_check=("python", "-m", DRIVER_CHECK),
        rendezvous=d.Rendezvous(host=host, conf=launch.rdzv_conf) if host is not None else None,
        fabric_check=check,
        budget=budget,
        grace_s=termination_grace_period_s(),
        metrics_port=PROGRAM_METRICS_PORT,
        checks_s=CHECKS_S,
        runtime=RUNTIME_DIR if gang.runtime_image is not None else None,
    )
    d.check(description)
    return description


def render_program_job(
    spec: ProgramJobSpec,
    gang: Gang,
    *,
    budget: d.Budget | None = None,
    etcd_endpoint: str | None = None,
) -> RenderedJob:
    """The Volcano Job of ``spec`` on ``gang`` (its nodes, image, names); ``budget``: its spend
    ceiling (:func:`program_budget`). Its launch and description are :func:`program_launch`'s and
    :func:`program_description`'s for its name (the TorchX component's too)."""
    if spec.rdzv_backend != "c10d" and not etcd_endpoint:
        raise ConfigError(
            "rdzv_backend", spec.rdzv_backend, "etcd rendezvous needs an etcd endpoint; use c10d"
        )

    def launch(job_name: str) -> LaunchSpec:
        endpoint = rank0_endpoint(job_name) if spec.rdzv_backend == "c10d" else str(etcd_endpoint)
        return program_launch(spec, gang, rdzv_id=job_name, rdzv_endpoint=endpoint)

    def describe(job_name: str) -> d.JobDescription:
        return program_description(spec, gang, launch(job_name), job_name=job_name, budget=budget)

    return render_gang(gang, launch=launch, describe=describe)
