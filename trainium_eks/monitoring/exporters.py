"""The EFA and FSx exporters of a training workload: the tools image, scraped by the platform.

They run the image the workload builds anyway (``docker/tensorboard.Dockerfile``, the tools image:
TensorBoard and the exporters, non-root and small), so they belong to the workload's stack, next
to TensorBoard, in the training namespace:

* EFA exporter (:mod:`training.node.efa_exporter`): a DaemonSet on the Trainium nodes of an instance
  type with EFA. node_exporter's infiniband collector exports no EFA byte counters (EFA has
  ``hw_counters`` but no ``counters/`` directory, and procfs v0.21.1 maps only mlx5-style
  ``hw_counters`` names; node_exporter PR #3670, which would map EFA's, is unmerged), and no
  published image of an EFA exporter can be pinned (awsome-distributed-training's must be built
  and pushed by its user). It reads the host's sysfs through a read-only mount of ``/sys``.
* FSx exporter (:mod:`training.node.fsx_exporter`): one pod on the system nodes with the FSx claim
  mounted read-only; the CSI driver gives the kubelet no volume statistics.

Both run as ``nobody`` with a read-only root file system and no capabilities, and declare
requests (the Trainium node budget counts the DaemonSet's).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from aws_cdk import aws_eks_v2 as eks
from constructs import Construct, IConstruct

from trainium_job.entry_points import EFA_EXPORTER, FSX_EXPORTER
from trainium_job.instances import InstanceFacts
from trainium_job.paths import DATA_MOUNT
from trainium_job.scheduling import DEVICE_PLUGIN_TOLERATION, SYSTEM_NODE_LABEL, TRAINIUM_NODE_LABEL
from trainium_job.security import pod_security_context, service_security_context
from trainium_job.telemetry import EFA_EXPORTER_PORT, FSX_EXPORTER_PORT

from ..arguments import AnyCluster, require_cluster
from .scrape import pod_monitor

EFA_NAME = "efa-exporter"
FSX_NAME = "fsx-exporter"
#: ``nobody``, the tools image's user.
_UID = 65534
#: Requests and limits of each exporter (a Python process reading a few hundred small files).
RESOURCES = {"requests": {"cpu": "20m", "memory": "48Mi"}, "limits": {"cpu": "200m", "memory": "128Mi"}}
#: Where the exporter sees the host's sysfs.
HOST_SYS = "/host/sys"


def _labels(name: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "trainium-eks"}


def _container(name: str, image: str, module: str, port: int, args: list[str]) -> dict[str, Any]:
    return {
        "name": name,
        "image": image,
        "command": ["python", "-m", module, "--port", str(port), *args],
        "ports": [{"name": "metrics", "containerPort": port, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": "/metrics", "port": "metrics"}, "periodSeconds": 30},
        "resources": {kind: dict(values) for kind, values in RESOURCES.items()},
        "securityContext": service_security_context(run_as_non_root=True),
    }


def _pod_spec(
    container: dict[str, Any], node_selector: dict[str, str], volumes: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "automountServiceAccountToken": False,
        "nodeSelector": node_selector,
        "securityContext": pod_security_context(run_as=_UID),
        "containers": [container],
        "volumes": volumes,
    }


def efa_exporter_daemonset(*, namespace: str, image: str, facts: InstanceFacts) -> dict[str, Any]:
    """The EFA exporter on every Trainium node of ``facts``' type, the host's /sys read-only."""
    container = _container(
        EFA_NAME, image, EFA_EXPORTER, EFA_EXPORTER_PORT, ["--sysfs", f"{HOST_SYS}/class/infiniband"]
    )
    container["volumeMounts"] = [{"name": "sys", "mountPath": HOST_SYS, "readOnly": True}]
    spec = _pod_spec(
        container,
        {**TRAINIUM_NODE_LABEL, "node.kubernetes.io/instance-type": facts.name},
        [{"name": "sys", "hostPath": {"path": "/sys", "type": "Directory"}}],
    )
    spec["tolerations"] = [dict(DEVICE_PLUGIN_TOLERATION)]
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": EFA_NAME, "namespace": namespace, "labels": _labels(EFA_NAME)},
        "spec": {
            "selector": {"matchLabels": _labels(EFA_NAME)},
            "template": {"metadata": {"labels": _labels(EFA_NAME)}, "spec": spec},
        },
    }


def fsx_exporter_deployment(
    *, namespace: str, image: str, claim_name: str, node_selector: Mapping[str, str] = SYSTEM_NODE_LABEL
) -> dict[str, Any]:
    """The FSx exporter on a system node (``node_selector``), the claim read-only at /data."""
    container = _container(FSX_NAME, image, FSX_EXPORTER, FSX_EXPORTER_PORT, ["--path", DATA_MOUNT])
    container["volumeMounts"] = [{"name": "data", "mountPath": DATA_MOUNT, "readOnly": True}]
    spec = _pod_spec(
        container,
        dict(node_selector),
        [{"name": "data", "persistentVolumeClaim": {"claimName": claim_name, "readOnly": True}}],
    )
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": FSX_NAME, "namespace": namespace, "labels": _labels(FSX_NAME)},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": _labels(FSX_NAME)},
            "template": {"metadata": {"labels": _labels(FSX_NAME)}, "spec": spec},
        },
    }


def exporter_objects(
    *,
    namespace: str,
    image: str,
    claim_name: str,
    facts: InstanceFacts,
    system_node_selector: Mapping[str, str] = SYSTEM_NODE_LABEL,
) -> list[dict[str, Any]]:
    """The exporters and their PodMonitors (no EFA exporter where the type has no EFA)."""
    objects = [
        fsx_exporter_deployment(
            namespace=namespace, image=image, claim_name=claim_name, node_selector=system_node_selector
        )
    ]
    monitors = [FSX_NAME]
    if facts.multi_node:
        objects.append(efa_exporter_daemonset(namespace=namespace, image=image, facts=facts))
        monitors.append(EFA_NAME)
    for name in monitors:
        objects.append(
            pod_monitor(
                name,
                namespace=namespace,
                selector=_labels(name),
                endpoint={"port": "metrics", "path": "/metrics"},
            )
        )
    return objects


class TrainingExporters(Construct):
    """The EFA and FSx exporters of a workload, with their PodMonitors.

    Attributes: manifest.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: AnyCluster,
        namespace: str,
        image: str,
        claim_name: str,
        facts: InstanceFacts,
        depends_on: Sequence[IConstruct] = (),
        system_node_selector: Mapping[str, str] = SYSTEM_NODE_LABEL,
    ) -> None:
        """
        Args:
            cluster: the cluster (with a kubectl provider; the PodMonitor CRD installed).
            namespace: the workload's namespace (the claim's).
            image: the tools image URI.
            claim_name: the FSx claim.
            facts: the Trainium instance type (no EFA exporter without EFA).
            depends_on: constructs applied first (the monitoring stack, the claim, the image).
                Default ``()``.
            system_node_selector: the labels of the system nodes the FSx exporter runs on.
                Default ``SYSTEM_NODE_LABEL`` (the system nodegroup :class:`TrainiumCluster` makes).
        """
        super().__init__(scope, id)
        cluster = require_cluster(cluster)
        self.manifest = eks.KubernetesManifest(
            self,
            "Manifest",
            cluster=cluster,
            manifest=exporter_objects(
                namespace=namespace,
                image=image,
                claim_name=claim_name,
                facts=facts,
                system_node_selector=system_node_selector,
            ),
        )
        for dependency in depends_on:
            self.manifest.node.add_dependency(dependency)
