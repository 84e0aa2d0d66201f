"""Kubernetes security settings of every manifest the platform applies, in ONE place: namespaces
with Pod Security Admission labels, pod and container securityContexts.

Two container profiles: the job pods (training, dataset staging and preparation) run the
training image as its own user with every capability dropped but what they add back; the
services (TensorBoard, etcd) run as a fixed non-root user set on their pod.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Label prefix of Pod Security Admission (Kubernetes "Pod Security Admission": the
#: ``pod-security.kubernetes.io/<mode>`` namespace labels).
PSA_LABEL = "pod-security.kubernetes.io"
#: Linux capabilities the training container adds back after dropping ALL. IPC_LOCK: libfabric's
#: EFA provider registers (pins) its communication buffers with the device, and pinning beyond
#: RLIMIT_MEMLOCK needs CAP_IPC_LOCK (capabilities(7), mlock(2)); the Neuron and EFA device files
#: come from the device plugins' allocations, which need no capability.
TRAINING_CAPABILITIES = ("IPC_LOCK",)


def pod_security_labels(enforce: str, *, warn: str | None = None, audit: str | None = None) -> dict[str, str]:
    """The namespace labels that enforce one Pod Security Standard and warn/audit at others."""
    levels = {"enforce": enforce, "warn": warn, "audit": audit}
    return {f"{PSA_LABEL}/{mode}": level for mode, level in levels.items() if level is not None}


def namespace_manifest(name: str, labels: Mapping[str, str]) -> dict[str, Any]:
    """A Namespace with ``labels`` (its Pod Security Admission labels among them)."""
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": dict(labels)}}


def pod_security_context(*, run_as: int | None = None, fs_group: bool = False) -> dict[str, Any]:
    """Pod securityContext: the runtime's default seccomp profile for every container; with
    ``run_as``, every container as that non-root user and group (and ``fs_group``: volumes
    owned by that group)."""
    user: dict[str, Any] = {}
    if run_as is not None:
        user = {"runAsNonRoot": True, "runAsUser": run_as, "runAsGroup": run_as}
        if fs_group:
            user["fsGroup"] = run_as
    return {**user, "seccompProfile": {"type": "RuntimeDefault"}}


def container_security_context(*, add: tuple[str, ...] = (), read_only_root: bool = False) -> dict[str, Any]:
    """A job container's securityContext: every capability dropped but ``add``, no privilege
    escalation."""
    return {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "capabilities": {"drop": ["ALL"], **({"add": list(add)} if add else {})},
        "readOnlyRootFilesystem": read_only_root,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def training_security_context() -> dict[str, Any]:
    """The training container's securityContext. The root file system stays writable: the Neuron
    compiler and runtime write work files under /tmp and the image's own directories."""
    return container_security_context(add=TRAINING_CAPABILITIES)


def service_security_context(*, run_as_non_root: bool = False) -> dict[str, Any]:
    """A service container's securityContext (its pod sets the user and the seccomp profile):
    read-only root, no capabilities, no privilege escalation; ``run_as_non_root`` repeats the
    pod's non-root rule on the container."""
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        **({"runAsNonRoot": True} if run_as_non_root else {}),
        "capabilities": {"drop": ["ALL"]},
    }
