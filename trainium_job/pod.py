"""The pod of one training node and its Volcano Job, in ONE place: command, environment,
devices, volumes, scheduling, security, retries.

Both launchers render their job with these functions: the CDK construct
(``trainium_eks.training_job``) at ``cdk synth`` and the TorchX component
(``trainium_job.torchx_component``) at ``torchx run``. Standard library only (no torch, no
Kubernetes client), so it imports at synth time and inside the image alike.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .instances import InstanceFacts
from .launch import LaunchSpec, launch_env, precompile_args, render, torchrun_args
from .scheduling import (
    EFA_RESOURCE,
    INSTANCE_TYPE_LABEL,
    NEURON_RESOURCE,
    TRAINIUM_NODE_LABEL,
    WORKLOAD_TOLERATION,
)

#: Where the FSx claim is mounted in every pod.
DATA_MOUNT = "/data"
#: Port of the c10d rendezvous store on the pod of node 0.
RDZV_PORT = 29400
#: Name of the Volcano task (and of the TorchX role): pods are ``<job>-worker-<i>``.
TASK_NAME = "worker"
#: Optimizer steps of the neuron_parallel_compile trial run.
PRECOMPILE_STEPS = 3
#: Volcano job-level policies: any failed or evicted pod restarts the whole gang (the script
#: resumes from its newest checkpoint), as TorchX's APPLICATION retry policy does.
RESTART_POLICIES = (
    {"event": "PodEvicted", "action": "RestartJob"},
    {"event": "PodFailed", "action": "RestartJob"},
)
#: CPU (millicores) and memory (MiB) left to the kubelet and the node daemons (Neuron and EFA
#: device plugins, FSx CSI node plugin, VPC CNI, kube-proxy, node monitoring agent). EKS's
#: own kube-reserved on a 128-vCPU/512-GiB node is ~0.4 vCPU and ~10 GiB; the rest is slack.
RESERVED_MILLICPU = 4000
RESERVED_MEMORY_MIB = 32 * 1024


# --- Graceful stop budget (training.stop): what a pod needs between SIGTERM and SIGKILL -------
#: BERT-large (``BertForPreTraining``, bert-large-uncased config, tied embeddings once); printed
#: by ``python -m bench.bench_checkpoint``.
BERT_LARGE_PARAMETERS = 336_226_108
#: Checkpoint bytes per parameter at most: fp32 weights + AdamW's two fp32 moments (fp32, or bf16
#: with --fp32_master_weights). The XLA default, bf16 with stochastic rounding, saves 6.
STATE_BYTES_PER_PARAMETER = 12
#: The platform's default file system: FSx for Lustre PERSISTENT_2, 1200 GiB at 125 MB/s/TiB
#: (``trainium_eks.config`` defaults). Its throughput is capacity (TiB) x per-unit throughput
#: (FSx API reference, LustreFileSystemConfiguration.PerUnitStorageThroughput): 146.5 MB/s.
#: FSx bursts above that for reads only (FSx for Lustre User Guide, "Performance
#: characteristics of SSD and HDD storage classes"), so a write gets the baseline.
DEFAULT_FSX_STORAGE_GIB = 1200
DEFAULT_FSX_MB_S_PER_TIB = 125
#: One reference optimizer step (global batch 16,384) on ONE trn1.32xlarge at the published
#: 3,826.6 seq/s (Neuron 2.28): 4.3 s; more nodes finish it sooner.
STEP_S = 16384 / 3826.6
#: Headroom over (finish the step + write the state): FSx is shared with the data reads, and the
#: digests are hashed alongside the write (~1 GB/s per core, BENCHMARKS.md, far above 146.5 MB/s).
STOP_HEADROOM = 2.0
#: Time the kubelet leaves torchrun after its workers' deadline, to exit by itself.
AGENT_EXIT_MARGIN_S = 15


def stop_budget_s(
    *,
    state_bytes: float = BERT_LARGE_PARAMETERS * STATE_BYTES_PER_PARAMETER,
    storage_gib: int = DEFAULT_FSX_STORAGE_GIB,
    mb_s_per_tib: int = DEFAULT_FSX_MB_S_PER_TIB,
    step_s: float = STEP_S,
) -> int:
    """Seconds a worker needs after SIGTERM: ``ceil(headroom x (step + state / FSx throughput))``.

    Defaults: 4,034,713,296 bytes / (1200/1024 TiB x 125 MB/s/TiB = 146.5 MB/s) = 27.5 s, plus
    a 4.3 s step, x2 = 64 s. torchrun waits this long before SIGKILLing its workers
    (``TORCH_ELASTIC_SHUTDOWN_TIMEOUT``, read by torch >= 2.12; older torchrun waits 30 s,
    enough for the 2.0 GB bf16 default: 2 x (13.8 s + 4.3 s) = 37 s is the budget, 18 s the need).
    """
    fs_bytes_per_s = storage_gib / 1024 * mb_s_per_tib * 1e6
    return math.ceil(STOP_HEADROOM * (step_s + state_bytes / fs_bytes_per_s))


def termination_grace_period_s(**budget: Any) -> int:
    """The pod's ``terminationGracePeriodSeconds``: the workers' budget plus torchrun's exit."""
    return stop_budget_s(**budget) + AGENT_EXIT_MARGIN_S


@dataclass(frozen=True)
class JobPaths:
    """Where one job keeps its inputs and outputs on FSx (all under :data:`DATA_MOUNT`).

    Attributes:
        data_dir: directory of the ``*_training_*.hdf5`` shards.
        dataset_marker: file the staging job writes when ``data_dir`` is complete.
        cache_dir: Neuron compile cache of this job's cache set (never shared by two jobs
            running at once: the compiler's cache locking is per process, not per cluster).
        output_dir: checkpoints, TensorBoard events, metrics (kept across restarts and
            re-deploys: the script resumes from it).
    """

    data_dir: str
    dataset_marker: str
    cache_dir: str
    output_dir: str

    @property
    def cache_marker(self) -> str:
        """Written after a successful precompile pass: later runs skip it."""
        return f"{self.cache_dir}/.precompiled"


def job_paths(*, dataset_name: str, cache_set: str, run_name: str) -> JobPaths:
    """The standard layout: ``/data/datasets/<name>``, ``/data/neuron-cache/<set>``, ``/data/runs/<run>``."""
    data_dir = f"{DATA_MOUNT}/datasets/{dataset_name}"
    return JobPaths(
        data_dir=data_dir,
        dataset_marker=f"{data_dir}/.staged",
        cache_dir=f"{DATA_MOUNT}/neuron-cache/{cache_set}",
        output_dir=f"{DATA_MOUNT}/runs/{run_name}",
    )


def rank0_endpoint(job_name: str, task_pod: str = f"{TASK_NAME}-0") -> str:
    """c10d endpoint on node 0, by the host name Volcano's ``svc`` plugin gives its pod.

    The plugin sets each pod's ``hostname`` to ``<job>-<task>-<index>`` and its ``subdomain`` to
    the job's headless Service ``<job>``, so ``<job>-worker-0.<job>`` resolves in the namespace.
    TorchX makes one task per replica (``worker-0``, index 0): pass ``task_pod="worker-0-0"``.
    """
    return f"{job_name}-{task_pod}.{job_name}:{RDZV_PORT}"


def neuron_env(paths: JobPaths) -> dict[str, str]:
    """Environment of every training container (EFA transport, Neuron runtime and compiler).

    - FI_PROVIDER/FI_EFA_USE_DEVICE_RDMA/FI_EFA_FORK_SAFE: libfabric over EFA with RDMA reads
      (trn1 supports them); fork-safe because the data loader may fork.
    - CCOM_SOCKET_IFNAME=eth0: the Neuron collectives bootstrap over the pod's interface.
    - NEURON_RT_RESET_CORES=1: reset the cores a crashed predecessor left busy, so a restart
      after a failure does not hang on acquire.
    - NEURON_CC_FLAGS: the compile cache on FSx, shared by the nodes of this job and reused by
      later runs of the same cache set.
    """
    return {
        "FI_PROVIDER": "efa",
        "FI_EFA_USE_DEVICE_RDMA": "1",
        "FI_EFA_FORK_SAFE": "1",
        "CCOM_SOCKET_IFNAME": "eth0",
        "NEURON_RT_RESET_CORES": "1",
        "NEURON_CC_FLAGS": f"--cache_dir={paths.cache_dir}",
        "PYTHONUNBUFFERED": "1",
    }


def container_env(spec: LaunchSpec, paths: JobPaths) -> dict[str, str]:
    """The training container's whole environment: what torchrun needs (restarts with a fresh
    rendezvous store, see :func:`trainium_job.launch.launch_env`; the workers' stop budget, see
    :func:`stop_budget_s`) plus :func:`neuron_env`."""
    return {**launch_env(spec), "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": str(stop_budget_s()), **neuron_env(paths)}


def device_limits(*, neuron_devices: int, efa_interfaces: int) -> dict[str, str]:
    """Extended resources of one pod: every Trainium device and every EFA interface of its node."""
    limits = {NEURON_RESOURCE: str(neuron_devices)}
    if efa_interfaces:
        limits[EFA_RESOURCE] = str(efa_interfaces)
    return limits


def compute_resources(*, vcpus: int, memory_gib: int) -> tuple[dict[str, str], dict[str, str]]:
    """(requests, limits) for CPU and memory: the node minus what its daemons need.

    Requests equal limits so the pod is Guaranteed for CPU and memory (extended resources are
    always request == limit): the kubelet evicts it last under memory pressure.
    """
    millicpu = max(vcpus * 1000 - RESERVED_MILLICPU, vcpus * 500)
    memory_mib = max(memory_gib * 1024 - RESERVED_MEMORY_MIB, memory_gib * 512)
    values = {"cpu": f"{millicpu}m", "memory": f"{memory_mib}Mi"}
    return dict(values), dict(values)


#: Linux capabilities the training container adds back after dropping ALL. IPC_LOCK: libfabric's
#: EFA provider registers (pins) its communication buffers with the device, and pinning beyond
#: RLIMIT_MEMLOCK needs CAP_IPC_LOCK (capabilities(7), mlock(2)); the Neuron and EFA device files
#: come from the device plugins' allocations, which need no capability.
TRAINING_CAPABILITIES = ("IPC_LOCK",)


def container_security_context(*, add: tuple[str, ...] = (), read_only_root: bool = False) -> dict[str, Any]:
    """Container securityContext: every capability dropped but ``add``, no privilege escalation."""
    return {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "capabilities": {"drop": ["ALL"], **({"add": list(add)} if add else {})},
        "readOnlyRootFilesystem": read_only_root,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def pod_security_context() -> dict[str, Any]:
    """Pod securityContext: the runtime's default seccomp profile for every container."""
    return {"seccompProfile": {"type": "RuntimeDefault"}}


def training_security_context() -> dict[str, Any]:
    """The training container's securityContext. The root file system stays writable: the Neuron
    compiler and runtime write work files under /tmp and the image's own directories."""
    return container_security_context(add=TRAINING_CAPABILITIES)


def volumes(claim_name: str) -> list[dict[str, Any]]:
    """Pod volumes: the FSx claim and a memory-backed /dev/shm (PyTorch's 64 MiB default is too small)."""
    return [
        {"name": "data", "persistentVolumeClaim": {"claimName": claim_name}},
        {"name": "dshm", "emptyDir": {"medium": "Memory"}},
    ]


def volume_mounts() -> list[dict[str, Any]]:
    return [
        {"name": "data", "mountPath": DATA_MOUNT},
        {"name": "dshm", "mountPath": "/dev/shm"},
    ]


def worker_script(spec: LaunchSpec, paths: JobPaths, *, precompile_steps: int = PRECOMPILE_STEPS) -> str:
    """The shell script each training container runs.

    1. Wait for the dataset marker (the staging job may still be downloading).
    2. If this cache set has no precompile marker: ``neuron_parallel_compile`` the same torchrun
       command for a few steps (all nodes together), then write the marker. A re-deploy or a
       restart finds the marker and goes straight to training; a failed precompile leaves no
       marker, so the next attempt compiles again (reusing what the cache already holds).
    3. ``exec torchrun``: training resumes from the newest checkpoint in ``output_dir``.
    """
    marker = shlex.quote(paths.dataset_marker)
    cache_marker = shlex.quote(paths.cache_marker)
    lines = [
        "set -euo pipefail",
        f"until [ -f {marker} ]; do echo 'waiting for the dataset ({paths.dataset_marker})'; sleep 30; done",
        f"mkdir -p {shlex.quote(paths.cache_dir)} {shlex.quote(paths.output_dir)}",
        f"if [ ! -f {cache_marker} ]; then",
        "  echo 'precompiling into an empty cache set'",
        f"  {render(precompile_args(spec, precompile_steps))}",
        f"  touch {cache_marker}",
        "fi",
        f"exec {render(torchrun_args(spec))}",
    ]
    return "\n".join(lines) + "\n"


def container_command(
    spec: LaunchSpec, paths: JobPaths, *, precompile_steps: int = PRECOMPILE_STEPS
) -> list[str]:
    """``bash -c <worker_script>``: the container command of every training pod."""
    return ["bash", "-c", worker_script(spec, paths, precompile_steps=precompile_steps)]


#: Kubernetes API version of Volcano's Job.
VOLCANO_API = "batch.volcano.sh/v1alpha1"
#: Labels of every training pod and Volcano Job (``trainium-eks/job`` is added per job).
APP_LABEL = {"app.kubernetes.io/name": "bert-pretrain"}
#: Name of the training container.
CONTAINER_NAME = "trainer"


def node_selector(facts: InstanceFacts) -> dict[str, str]:
    """A Trainium node of the job's instance type."""
    return {INSTANCE_TYPE_LABEL: facts.name, **TRAINIUM_NODE_LABEL}


def pod_template(
    *,
    job_name: str,
    image: str,
    facts: InstanceFacts,
    spec: LaunchSpec,
    paths: JobPaths,
    claim_name: str,
    service_account: str,
) -> dict[str, Any]:
    """The pod of one node: all its Neuron devices and EFA interfaces, FSx at /data, /dev/shm."""
    requests, limits = compute_resources(vcpus=facts.vcpus, memory_gib=facts.memory_gib)
    devices = device_limits(neuron_devices=facts.neuron_devices, efa_interfaces=facts.efa_interfaces)
    return {
        "metadata": {"labels": {**APP_LABEL, "trainium-eks/job": job_name}},
        "spec": {
            "serviceAccountName": service_account,
            "automountServiceAccountToken": False,
            "restartPolicy": "Never",
            "nodeSelector": node_selector(facts),
            "tolerations": [dict(WORKLOAD_TOLERATION)],
            # SIGTERM -> finish the step, write a checkpoint (training.stop): time derived from
            # a BERT-large state and the default FSx's throughput.
            "terminationGracePeriodSeconds": termination_grace_period_s(),
            "containers": [
                {
                    "name": CONTAINER_NAME,
                    "image": image,
                    "command": container_command(spec, paths),
                    "env": [{"name": k, "value": v} for k, v in sorted(container_env(spec, paths).items())],
                    "resources": {"requests": {**requests, **devices}, "limits": {**limits, **devices}},
                    "volumeMounts": volume_mounts(),
                    "securityContext": training_security_context(),
                }
            ],
            "securityContext": pod_security_context(),
            "volumes": volumes(claim_name),
        },
    }


def volcano_job(
    *,
    job_name: str,
    namespace: str,
    queue: str,
    nodes: int,
    max_retry: int,
    template: Mapping[str, Any],
) -> dict[str, Any]:
    """The Volcano Job: ``nodes`` pods started together (gang), restarted together on failure."""
    return {
        "apiVersion": VOLCANO_API,
        "kind": "Job",
        "metadata": {"name": job_name, "namespace": namespace, "labels": dict(APP_LABEL)},
        "spec": {
            "schedulerName": "volcano",
            "queue": queue,
            "minAvailable": nodes,
            "maxRetry": max_retry,
            "policies": [dict(p) for p in RESTART_POLICIES],
            # svc: stable host names + headless Service (the c10d endpoint); env: VC_TASK_INDEX.
            "plugins": {"svc": ["--publish-not-ready-addresses"], "env": []},
            "tasks": [
                {"name": TASK_NAME, "replicas": nodes, "minAvailable": nodes, "template": dict(template)}
            ],
        },
    }
