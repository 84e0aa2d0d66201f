"""The pod of one training node and its Volcano Job: devices, resources, volumes, scheduling,
retries; the command, environment, security and stop budget come from their own modules.

Both launchers render their job with these functions: the CDK construct
(``trainium_eks.training_job``) at ``cdk synth`` and the TorchX component
(``trainium_job.torchx_component``) at ``torchx run``. Standard library only (no torch, no
Kubernetes client), so it imports at synth time and inside the image alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .allocatable import DEFAULT_NODE_DAEMONS, Resources, training_resources
from .environment import container_env
from .exit_codes import aborting_codes
from .instances import InstanceFacts
from .launch import LaunchSpec
from .naming import TASK_NAME, pod_host_name
from .paths import DATA_MOUNT, MODEL_BUCKET_CONFIG_MAP, MODEL_BUCKET_ENV, MODEL_BUCKET_KEY
from .pod_program.description import JobDescription
from .pod_program.metrics import PROGRAM_METRICS_PORT, PROGRAM_METRICS_PORT_NAME
from .scheduling import (
    EFA_RESOURCE,
    INSTANCE_TYPE_LABEL,
    NEURON_RESOURCE,
    TRAINIUM_NODE_LABEL,
    WORKLOAD_TOLERATION,
)
from .security import container_security_context, pod_security_context, training_security_context
from .stop_budget import termination_grace_period_s
from .telemetry import JOB_LABEL, metrics_container_port
from .worker import container_command

#: Port of the c10d rendezvous store on the pod of node 0.
RDZV_PORT = 29400
#: Volcano job-level policies: any failed or evicted pod restarts the whole gang (the program
#: resumes from its newest checkpoint), as TorchX's APPLICATION retry policy does. A worker ended
#: by the step watchdog (``trainium_job.hang``) arrives here as ``PodFailed`` with exit code 1:
#: torchrun restarts its workers first, and exits 1 whatever their codes once it has no restart
#: left, so no policy names the watchdog's code.
RESTART_POLICIES = (
    {"event": "PodEvicted", "action": "RestartJob"},
    {"event": "PodFailed", "action": "RestartJob"},
)


def abort_policies() -> list[dict[str, object]]:
    """A pod that ends with a code of :func:`trainium_job.exit_codes.aborting_codes` aborts the job
    (the fabric check's failure: a restart would meet the same fabric; a wait past its deadline; the
    spend ceiling). Volcano takes the first job policy that matches a pod's failure, event or exit
    code in order (volcano-sh/volcano v1.15.1 pkg/controllers/job/job_controller_util.go
    L257-281), so they come before ``PodFailed``; a policy has an event or an exit code, not both,
    never 0 and no code twice (pkg/webhooks/admission/jobs/validate/util.go L68-123)."""
    return [{"exitCode": code, "action": "AbortJob"} for code in aborting_codes()]


#: Volcano's pending-pod policy: ``timeout`` after a pod of the job was created and has not run,
#: the action is taken; a pod that starts running cancels its timer (volcano-sh/volcano v1.15.0
#: pkg/controllers/job/job_controller.go L374-383, L411-452, L461-509: PodPending is honoured only
#: with a timeout). With nodes launched per job, AbortJob after the gang wait deletes the pods, so
#: the nodes that came are empty and released while the job waits, at zero cost, to be resumed.
GANG_WAIT_EVENT = "PodPending"


def gang_wait_policy(minutes: int) -> dict[str, str]:
    """The job policy that aborts a gang still pending after ``minutes``."""
    return {"event": GANG_WAIT_EVENT, "action": "AbortJob", "timeout": f"{minutes}m"}


#: Kubernetes API version of Volcano's Job.
VOLCANO_API = "batch.volcano.sh/v1alpha1"
#: Labels of every training pod and Volcano Job (``trainium-eks/job`` is added per job).
APP_LABEL = {"app.kubernetes.io/name": "bert-pretrain"}
#: Name of the training container.
CONTAINER_NAME = "trainer"


#: Where a pod whose training image lacks the library gets it: an emptyDir the init container
#: fills from the runtime image (:func:`runtime_init_container`).
RUNTIME_DIR = "/opt/trainium-job-runtime"
#: Where the library's packages are in the library's images (docker/*.Dockerfile WORKDIR).
IMAGE_LIBRARY_DIR = "/opt/trainium-bert"
#: The packages the pod program and the checks need (the training code's own ``training``
#: package, which the fabric check imports, and the job contract).
RUNTIME_PACKAGES = ("trainium_job", "training")


def runtime_init_container(image: str) -> dict[str, Any]:
    """The init container that copies the library's packages from ``image`` into the pod's
    runtime volume, read-only root, as the image's own non-root user."""
    return {
        "name": "trainium-job-runtime",
        "image": image,
        "command": ["cp", "-R", *(f"{IMAGE_LIBRARY_DIR}/{p}" for p in RUNTIME_PACKAGES), RUNTIME_DIR],
        "resources": {
            "requests": {"cpu": "100m", "memory": "64Mi"},
            "limits": {"cpu": "500m", "memory": "128Mi"},
        },
        "volumeMounts": [{"name": "runtime", "mountPath": RUNTIME_DIR}],
        "securityContext": {
            **container_security_context(read_only_root=True),
            "runAsNonRoot": True,
            "runAsUser": 65534,
            "runAsGroup": 65534,
        },
    }


def node_name_env() -> dict[str, Any]:
    """``NODE_NAME`` from the downward API: the fabric check names the node it judged."""
    return {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}


def model_bucket_env() -> dict[str, Any]:
    """The model bucket's name from its ConfigMap (:data:`~trainium_job.paths.MODEL_BUCKET_CONFIG_MAP`),
    optional: without it the variable is unset and the models stay on FSx (Kubernetes API,
    ConfigMapKeySelector ``optional``: "Specify whether the ConfigMap or its key must be defined")."""
    return {
        "name": MODEL_BUCKET_ENV,
        "valueFrom": {
            "configMapKeyRef": {"name": MODEL_BUCKET_CONFIG_MAP, "key": MODEL_BUCKET_KEY, "optional": True}
        },
    }


def _uploads(description: JobDescription) -> bool:
    return any(p.export is not None and p.export.upload is not None for p in description.phases)


def rank0_endpoint(job_name: str, task_pod: str | None = None) -> str:
    """c10d endpoint on node 0, by the host name Volcano's ``svc`` plugin gives its pod.

    The plugin sets each pod's ``hostname`` to ``<job>-<task>-<index>`` and its ``subdomain`` to
    the job's headless Service ``<job>``, so ``<job>-worker-0.<job>`` resolves in the namespace.
    TorchX makes one task per replica (``worker-0``, index 0): pass ``task_pod="worker-0-0"``.
    """
    host = pod_host_name(job_name, 0) if task_pod is None else f"{job_name}-{task_pod}"
    return f"{host}.{job_name}:{RDZV_PORT}"


def device_limits(*, neuron_devices: int, efa_interfaces: int) -> dict[str, str]:
    """Extended resources of one pod: every Trainium device and every EFA interface of its node."""
    limits = {NEURON_RESOURCE: str(neuron_devices)}
    if efa_interfaces:
        limits[EFA_RESOURCE] = str(efa_interfaces)
    return limits


def compute_resources(
    facts: InstanceFacts, *, node_reserved: Resources = DEFAULT_NODE_DAEMONS
) -> tuple[dict[str, str], dict[str, str]]:
    """(requests, limits) for CPU and memory: what the kubelet leaves allocatable on the node
    less ``node_reserved`` (its DaemonSets and any dataset pod beside the gang) and a margin
    (:func:`trainium_job.allocatable.training_resources`).

    Requests equal limits so the pod is Guaranteed for CPU and memory (extended resources are
    always request == limit): the kubelet evicts it last under memory pressure.
    """
    values = training_resources(facts, node_reserved).requests()
    return dict(values), dict(values)


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


def node_selector(facts: InstanceFacts) -> dict[str, str]:
    """A Trainium node of the job's instance type."""
    return {INSTANCE_TYPE_LABEL: facts.name, **TRAINIUM_NODE_LABEL}


def program_container_port() -> dict[str, Any]:
    """The training container's port entry for the pod program's own metrics."""
    return {"name": PROGRAM_METRICS_PORT_NAME, "containerPort": PROGRAM_METRICS_PORT, "protocol": "TCP"}


def pod_template(
    *,
    job_name: str,
    image: str,
    facts: InstanceFacts,
    spec: LaunchSpec,
    description: JobDescription,
    claim_name: str,
    service_account: str,
    node_reserved: Resources = DEFAULT_NODE_DAEMONS,
    annotations: Mapping[str, str] | None = None,
    node_labels: Mapping[str, str] | None = None,
    env: tuple[tuple[str, str], ...] = (),
    app_name: str = APP_LABEL["app.kubernetes.io/name"],
    runtime_image: str | None = None,
) -> dict[str, Any]:
    """The pod of one node: all its Neuron devices and EFA interfaces, FSx at /data, /dev/shm,
    the metrics ports; CPU and memory are the node's less ``node_reserved`` (see
    :func:`compute_resources`); the container runs the pod program with ``description``
    (:func:`~trainium_job.worker.job_description`; ``spec`` is its first phase's torchrun, for
    the container's environment);
    ``annotations``: the pod's, if any; ``node_labels``: labels its node must also carry (the node
    health check's ``passed``); ``env``: the job's own variables, over the platform's;
    ``app_name``: its ``app.kubernetes.io/name`` label; ``runtime_image``: the library's programs
    are copied from it by an init container (a training image of the user's own)."""
    requests, limits = compute_resources(facts, node_reserved=node_reserved)
    devices = device_limits(neuron_devices=facts.neuron_devices, efa_interfaces=facts.efa_interfaces)
    variables = {**container_env(spec), **dict(env)}
    metadata: dict[str, Any] = {"labels": {"app.kubernetes.io/name": app_name, JOB_LABEL: job_name}}
    if annotations:
        metadata["annotations"] = dict(annotations)
    return {
        "metadata": metadata,
        "spec": {
            "serviceAccountName": service_account,
            # The API token only for a fabric check that marks the node it names (``--heal``);
            # otherwise training reads and writes FSx and needs none.
            "automountServiceAccountToken": _heals(description),
            "restartPolicy": "Never",
            "nodeSelector": {**node_selector(facts), **(node_labels or {})},
            "tolerations": [dict(WORKLOAD_TOLERATION)],
            # SIGTERM -> finish the step, write a checkpoint (training.trainer.stop): time derived from
            # a BERT-large state and the default FSx's throughput.
            "terminationGracePeriodSeconds": termination_grace_period_s(),
            **({"initContainers": [runtime_init_container(runtime_image)]} if runtime_image else {}),
            "containers": [
                {
                    "name": CONTAINER_NAME,
                    "image": image,
                    "command": container_command(description),
                    "env": [
                        *({"name": k, "value": v} for k, v in sorted(variables.items())),
                        node_name_env(),
                        *([model_bucket_env()] if _uploads(description) else []),
                    ],
                    "ports": [metrics_container_port(), program_container_port()],
                    "resources": {"requests": {**requests, **devices}, "limits": {**limits, **devices}},
                    "volumeMounts": [
                        *volume_mounts(),
                        *(
                            [{"name": "runtime", "mountPath": RUNTIME_DIR, "readOnly": True}]
                            if runtime_image
                            else []
                        ),
                    ],
                    "securityContext": training_security_context(),
                }
            ],
            "securityContext": pod_security_context(),
            "volumes": [
                *volumes(claim_name),
                *([{"name": "runtime", "emptyDir": {}}] if runtime_image else []),
            ],
        },
    }


def _heals(description: JobDescription) -> bool:
    """Whether the fabric check marks a node it names (its verdict has ``--heal``)."""
    check = description.fabric_check
    return check is not None and "--heal" in check.verdict


def volcano_job(
    *,
    job_name: str,
    namespace: str,
    queue: str,
    nodes: int,
    max_retry: int,
    template: Mapping[str, Any],
    gang_wait_minutes: int | None = None,
    app_name: str = APP_LABEL["app.kubernetes.io/name"],
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The Volcano Job: ``nodes`` pods started together (gang), restarted together on failure;
    with ``gang_wait_minutes``, aborted when its pods have not all run by then
    (:func:`gang_wait_policy`); ``annotations``: the Job's own, if any."""
    gang_wait = [gang_wait_policy(gang_wait_minutes)] if gang_wait_minutes is not None else []
    metadata: dict[str, Any] = {
        "name": job_name,
        "namespace": namespace,
        "labels": {"app.kubernetes.io/name": app_name},
    }
    if annotations:
        metadata["annotations"] = dict(annotations)
    return {
        "apiVersion": VOLCANO_API,
        "kind": "Job",
        "metadata": metadata,
        "spec": {
            "schedulerName": "volcano",
            "queue": queue,
            "minAvailable": nodes,
            "maxRetry": max_retry,
            "policies": [*abort_policies(), *gang_wait, *(dict(p) for p in RESTART_POLICIES)],
            # svc: stable host names + headless Service (the c10d endpoint); env: VC_TASK_INDEX.
            "plugins": {"svc": ["--publish-not-ready-addresses"], "env": []},
            "tasks": [
                {"name": TASK_NAME, "replicas": nodes, "minAvailable": nodes, "template": dict(template)}
            ],
        },
    }
