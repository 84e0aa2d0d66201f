"""Render the torchrun command line that starts pretraining, in ONE place.

Used by the Kubernetes job construct (at ``cdk synth``), a TorchX component and the tests.
This module must stay importable without torch: it imports only the standard library.

Example::

    spec = LaunchSpec(nnodes=2, nproc_per_node=32, rdzv_endpoint="bert-worker-0:29400",
                      script_args=script_args_from_dict({"data_dir": "/data/shards",
                                                         "output_dir": "/data/run1"}))
    torchrun_args(spec)
    # ['torchrun', '--nnodes', '2', '--nproc_per_node', '32', '--rdzv_backend', 'c10d',
    #  '--rdzv_endpoint', 'bert-worker-0:29400', '--rdzv_id', 'bert-pretrain',
    #  '--max_restarts', '3', '-m', 'training.trainer.pretrain',
    #  '--data_dir', '/data/shards', '--output_dir', '/data/run1']
    launch_env(spec)  # {'TORCH_DISABLE_SHARE_RDZV_TCP_STORE': '1'}: put it in the container env
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from .entry_points import PRETRAIN

RDZV_BACKENDS = ("c10d", "etcd", "etcd-v2")

# The flag pretrain.py knows to skip checkpoints/metrics during a neuron_parallel_compile trial run.
PRECOMPILE_FLAG = "--precompile"
#: Optimizer steps of the neuron_parallel_compile trial run (see :func:`precompile_args`).
DEFAULT_PRECOMPILE_STEPS = 3

_MODULE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_KEY_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")


@dataclass(frozen=True)
class LaunchSpec:
    """What torchrun needs to start one node's share of a pretraining job.

    Attributes:
        nnodes: number of nodes (pods) in the job.
        nproc_per_node: worker processes per node (32 = NeuronCores of a trn1.32xlarge).
        rdzv_endpoint: ``host:port`` of the rendezvous (c10d store host or etcd server).
        rdzv_backend: ``c10d`` (no extra server; recommended), ``etcd`` or ``etcd-v2``
            (need python-etcd and an etcd serving the v2 API).
        rdzv_id: job id shared by all nodes of one run.
        max_restarts: how often torchrun restarts the worker group after a failure; training
            then resumes from the newest complete checkpoint.
        node_rank: only for fixed node ranks; elastic rendezvous assigns ranks itself.
        module: Python module run by each worker (``-m``).
        script_args: arguments passed to the module (or the script), in order.
        monitor_interval: seconds between torchrun's worker health checks (None: default).
        rdzv_conf: extra ``--rdzv_conf`` key/values (e.g. ``{"join_timeout": "900"}``);
            a mapping is accepted and stored sorted.
        torchrun: the launcher executable.
        script: a Python script of the image each worker runs instead of ``module`` (a path;
            torchrun's ``training_script``). None: ``module``.
    """

    nnodes: int
    nproc_per_node: int
    rdzv_endpoint: str
    rdzv_backend: str = "c10d"
    rdzv_id: str = "bert-pretrain"
    max_restarts: int = 3
    node_rank: int | None = None
    module: str = PRETRAIN
    script_args: tuple[str, ...] = ()
    monitor_interval: float | None = None
    rdzv_conf: tuple[tuple[str, str], ...] = field(default=())
    torchrun: str = "torchrun"
    script: str | None = None

    def __post_init__(self) -> None:
        # Accept lists/dicts for convenience but store hashable tuples (frozen dataclass).
        object.__setattr__(self, "script_args", _as_str_tuple("script_args", self.script_args))
        object.__setattr__(self, "rdzv_conf", _as_conf("rdzv_conf", self.rdzv_conf))
        _check_int("nnodes", self.nnodes, minimum=1)
        _check_int("nproc_per_node", self.nproc_per_node, minimum=1)
        _check_int("max_restarts", self.max_restarts, minimum=0)
        if self.rdzv_backend not in RDZV_BACKENDS:
            raise ValueError(f"rdzv_backend: {self.rdzv_backend!r} is not one of {', '.join(RDZV_BACKENDS)}")
        _check_endpoint(self.rdzv_endpoint)
        if not isinstance(self.rdzv_id, str) or not _ID_RE.match(self.rdzv_id):
            raise ValueError(
                f"rdzv_id: {self.rdzv_id!r} must be a non-empty string of letters, digits, '_', '.', '-'"
            )
        if self.node_rank is not None:
            _check_int("node_rank", self.node_rank, minimum=0)
            if self.node_rank >= self.nnodes:
                raise ValueError(f"node_rank: {self.node_rank} must be < nnodes ({self.nnodes})")
        if not isinstance(self.module, str) or not _MODULE_RE.match(self.module):
            raise ValueError(f"module: {self.module!r} is not a dotted Python module name")
        if self.script is not None and (
            not isinstance(self.script, str)
            or not self.script.strip()
            or any(c.isspace() for c in self.script)
        ):
            raise ValueError(f"script: {self.script!r} must be a path without whitespace")
        if self.monitor_interval is not None:
            if (
                isinstance(self.monitor_interval, bool)
                or not isinstance(self.monitor_interval, int | float)
                or not self.monitor_interval > 0
            ):
                raise ValueError(
                    f"monitor_interval: {self.monitor_interval!r} must be a positive number of seconds"
                )
        if not isinstance(self.torchrun, str) or not self.torchrun.strip():
            raise ValueError("torchrun: must be a non-empty executable name or path")

    @property
    def world_size(self) -> int:
        """Total number of worker processes of the job."""
        return self.nnodes * self.nproc_per_node


def torchrun_args(spec: LaunchSpec) -> list[str]:
    """The argv list that starts one node of the job: ``torchrun ... -m MODULE ARGS``."""
    argv = [
        spec.torchrun,
        "--nnodes",
        str(spec.nnodes),
        "--nproc_per_node",
        str(spec.nproc_per_node),
        "--rdzv_backend",
        spec.rdzv_backend,
        "--rdzv_endpoint",
        spec.rdzv_endpoint,
        "--rdzv_id",
        spec.rdzv_id,
        "--max_restarts",
        str(spec.max_restarts),
    ]
    if spec.node_rank is not None:
        argv += ["--node_rank", str(spec.node_rank)]
    if spec.monitor_interval is not None:
        argv += ["--monitor_interval", _num(spec.monitor_interval)]
    if spec.rdzv_conf:
        argv += ["--rdzv_conf", ",".join(f"{k}={v}" for k, v in spec.rdzv_conf)]
    program = [spec.script] if spec.script is not None else ["-m", spec.module]
    return argv + [*program, *spec.script_args]


#: torchrun reads ``--rdzv_conf`` from this variable when the flag is absent; a flag on the command
#: line replaces it whole (torch/distributed/argparse_util.py ``env`` action, L45-46 at v2.9.0 and
#: v2.13.0; run.py declares ``--rdzv_conf`` with it).
RDZV_CONF_ENV = "PET_RDZV_CONF"


def c10d_store_host(spec: LaunchSpec) -> str | None:
    """The host label of the pod whose torchrun hosts the c10d store (None: not c10d).

    Without ``is_host`` the c10d backend guesses, once per torchrun, by resolving the endpoint's
    host name and comparing the answer with its own host names and addresses
    (torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py ``_create_tcp_store`` and
    utils.py ``_matches_machine_hostname``, L116-165 at v2.9.0). The name differs from the pod's
    own (``<pod>.<job>`` against ``<pod>`` and its fully qualified name), so only the address
    comparison can match: if the pod's DNS record is not yet served when rank 0's torchrun starts,
    the lookup fails, no pod hosts the store, and every pod fails after ``read_timeout``. Set, the
    flag decides: the pod whose host name is the endpoint's first label hosts, the others connect
    (retrying the name until ``read_timeout``). All pods run one description, so the value is
    decided by each pod's program from its host name (``trainium_job.pod_program``) and reaches
    torchrun through :data:`RDZV_CONF_ENV` together with ``spec.rdzv_conf``; the torchrun commands
    then carry no ``--rdzv_conf`` (:func:`without_conf`).
    """
    if spec.rdzv_backend != "c10d":
        return None
    return spec.rdzv_endpoint.rpartition(":")[0].split(".", 1)[0]


def without_conf(spec: LaunchSpec) -> LaunchSpec:
    """``spec`` whose rendezvous settings come from :data:`RDZV_CONF_ENV` (see :func:`c10d_store_host`)."""
    return replace(spec, rdzv_conf=()) if spec.rdzv_backend == "c10d" else spec


def launch_env(spec: LaunchSpec) -> dict[str, str]:
    """Environment variables the torchrun process itself needs (set them on the container).

    ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``: by default (torch >= 2.4) the c10d and etcd-v2
    rendezvous reuse one TCP store, hosted by node 0's agent, for the workers of every
    restart round, with no per-round key prefix. After a worker failure the new round's
    workers then read the dead round's process-group keys (gloo: "connectFullMesh failed ...
    Connection refused") and every restart fails. With the variable set, each round's rank 0
    hosts a fresh store. Seen with torch 2.13 (tests/training/test_distributed.py).
    """
    del spec  # the same for every backend today; the parameter keeps call sites stable
    return {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


def precompile_args(spec: LaunchSpec, steps: int = DEFAULT_PRECOMPILE_STEPS) -> list[str]:
    """``neuron_parallel_compile`` + the same torchrun command, as a short trial run.

    The trial runs ``steps`` optimizer steps so every graph of the real run is traced: the
    first micro-step of an accumulation cycle (no gradients yet), the later micro-steps, the
    first optimizer step (state initialisation) and the steady-state optimizer step, hence at
    least 2 and by default 3. ``--precompile`` makes the script write no checkpoint, metrics
    file or TensorBoard events: in the trial the Neuron tool runs stub graphs whose outputs
    are zeros, and a checkpoint of those would be auto-resumed by the real run.

    Everything that shapes the graphs (model, batch size, accumulation, optimizer, world
    size) must equal the real run; ``--steps_this_run`` does not change the graphs. The
    rendezvous id gets a ``-precompile`` suffix because an etcd rendezvous keeps its state
    under the id after a run ends, and the real run follows right after. No restarts: a
    compile failure is not transient.
    """
    _check_int("steps", steps, minimum=2)
    args = _drop_flag(list(spec.script_args), "--steps_this_run")
    args = _drop_flag(args, PRECOMPILE_FLAG, takes_value=False)
    args += ["--steps_this_run", str(steps), PRECOMPILE_FLAG]
    trial = replace(spec, script_args=tuple(args), rdzv_id=f"{spec.rdzv_id}-precompile", max_restarts=0)
    return ["neuron_parallel_compile", *torchrun_args(trial)]


def script_args_from_dict(mapping: Mapping[str, object]) -> list[str]:
    """Turn ``{"batch_size": 16, "precompile": True}`` into ``["--batch_size", "16", "--precompile"]``.

    Keys are sorted so equal mappings always render the same argv (stable synth output).
    ``True`` renders a bare flag; ``False`` and ``None`` are left out; numbers and strings
    render with ``str``. Other value types raise TypeError naming the key.
    """
    argv: list[str] = []
    for key in sorted(mapping):
        if not isinstance(key, str) or not _KEY_RE.match(key):
            raise ValueError(f"script_args_from_dict: key {key!r} is not a valid flag name")
        value = mapping[key]
        if value is None or value is False:
            continue
        if value is True:
            argv.append(f"--{key}")
        elif isinstance(value, int | float | str):
            argv += [f"--{key}", _num(value) if not isinstance(value, str) else value]
        else:
            raise TypeError(
                f"script_args_from_dict: value of {key!r} has type {type(value).__name__}; "
                "use str, int, float, bool or None"
            )
    return argv


def render(argv: list[str]) -> str:
    """A shell-quoted one-line form of ``argv`` (for logs, docs and ``sh -c``)."""
    return shlex.join(argv)


def _num(value: int | float) -> str:
    # repr keeps full float precision (4e-4 -> '0.0004', 1e-10 -> '1e-10'); ints stay ints.
    return repr(value) if isinstance(value, float) else str(value)


def _check_int(name: str, value: object, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name}: {value!r} must be an integer")
    if value < minimum:
        raise ValueError(f"{name}: {value} must be >= {minimum}")


def _check_endpoint(endpoint: object) -> None:
    if not isinstance(endpoint, str):
        raise ValueError(f"rdzv_endpoint: {endpoint!r} must be a 'host:port' string")
    host, sep, port = endpoint.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"rdzv_endpoint: {endpoint!r} must be 'host:port' with a port 1-65535")
    if any(c.isspace() for c in host):
        raise ValueError(f"rdzv_endpoint: {endpoint!r} host contains whitespace")


def _as_str_tuple(name: str, values: object) -> tuple[str, ...]:
    if isinstance(values, str) or not isinstance(values, list | tuple):
        raise ValueError(f"{name}: must be a list or tuple of strings, got {type(values).__name__}")
    for v in values:
        if not isinstance(v, str):
            raise ValueError(f"{name}: item {v!r} is not a string (use script_args_from_dict)")
    return tuple(values)


def _as_conf(name: str, conf: object) -> tuple[tuple[str, str], ...]:
    if isinstance(conf, Mapping):
        items: Iterable[object] = conf.items()
    elif isinstance(conf, list | tuple):
        items = conf
    else:
        raise ValueError(f"{name}: must be a mapping or a sequence of (key, value) pairs")
    out = []
    for item in items:
        if not isinstance(item, tuple | list) or len(item) != 2:
            raise ValueError(f"{name}: item {item!r} is not a (key, value) pair")
        key, value = str(item[0]), str(item[1])
        if not _KEY_RE.match(key) or any(c in value for c in ",= ") or not value:
            raise ValueError(f"{name}: {key}={value!r} is not a valid key=value pair")
        out.append((key, value))
    return tuple(sorted(out))


def _drop_flag(args: list[str], flag: str, *, takes_value: bool = True) -> list[str]:
    """Remove every ``flag VALUE`` / ``flag=VALUE`` (or bare ``flag``) from ``args``."""
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg == flag:
            skip = takes_value
            continue
        if takes_value and arg.startswith(flag + "="):
            continue
        out.append(arg)
    return out
