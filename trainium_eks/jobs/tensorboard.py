"""TensorBoard for the training runs on FSx: a Deployment and a ClusterIP Service, no public endpoint.

The reference exposed TensorBoard on a public LoadBalancer; here it is reachable only through
``kubectl port-forward`` (the API server's authentication and RBAC guard it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aws_cdk import CfnOutput
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct, IConstruct

from trainium_job.paths import DATA_MOUNT
from trainium_job.scheduling import SYSTEM_NODE_LABEL
from trainium_job.security import pod_security_context, service_security_context

from ..arguments import AnyCluster, require_cluster

PORT = 6006
NAME = "tensorboard"
_LABELS = {"app.kubernetes.io/name": NAME}
#: User and group TensorBoard runs as: ``nobody`` (65534), which owns nothing.
_UID = 65534


def tensorboard_objects(*, namespace: str, image: str, claim_name: str, logdir: str) -> list[dict[str, Any]]:
    """Deployment (system nodes, read-only FSx, non-root) and its ClusterIP Service."""
    deployment: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": NAME, "namespace": namespace, "labels": dict(_LABELS)},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": dict(_LABELS)},
            "template": {
                "metadata": {"labels": dict(_LABELS)},
                "spec": {
                    "automountServiceAccountToken": False,
                    "nodeSelector": dict(SYSTEM_NODE_LABEL),
                    "securityContext": pod_security_context(run_as=_UID),
                    "containers": [
                        {
                            "name": NAME,
                            "image": image,
                            "command": [
                                "tensorboard",
                                "--logdir",
                                logdir,
                                "--host",
                                "0.0.0.0",
                                "--port",
                                str(PORT),
                                "--reload_interval",
                                "60",
                            ],
                            "ports": [{"name": "http", "containerPort": PORT}],
                            "readinessProbe": {"httpGet": {"path": "/", "port": PORT}, "periodSeconds": 20},
                            "resources": {
                                "requests": {"cpu": "250m", "memory": "1Gi"},
                                "limits": {"cpu": "1", "memory": "2Gi"},
                            },
                            "volumeMounts": [{"name": "data", "mountPath": DATA_MOUNT, "readOnly": True}],
                            "securityContext": service_security_context(),
                            "env": [{"name": "HOME", "value": "/tmp"}],
                        }
                    ],
                    "volumes": [
                        {
                            "name": "data",
                            "persistentVolumeClaim": {"claimName": claim_name, "readOnly": True},
                        },
                    ],
                },
            },
        },
    }
    # /tmp for TensorBoard's scratch files under a read-only root file system.
    pod_spec = deployment["spec"]["template"]["spec"]
    pod_spec["volumes"].append({"name": "tmp", "emptyDir": {}})
    pod_spec["containers"][0]["volumeMounts"].append({"name": "tmp", "mountPath": "/tmp"})
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": NAME, "namespace": namespace, "labels": dict(_LABELS)},
        "spec": {
            "type": "ClusterIP",
            "selector": dict(_LABELS),
            "ports": [{"name": "http", "port": PORT, "targetPort": PORT}],
        },
    }
    return [deployment, service]


def port_forward_command(namespace: str) -> str:
    return f"kubectl port-forward -n {namespace} svc/{NAME} {PORT}:{PORT}"


class TensorBoard(Construct):
    """TensorBoard over ``logdir`` on FSx (default: every run under ``/data/runs``).

    Attributes: manifest; port_forward (the command, also a stack output).
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
        logdir: str = f"{DATA_MOUNT}/runs",
        depends_on: Sequence[IConstruct] = (),
    ) -> None:
        """
        Args:
            cluster: the cluster (with a kubectl provider).
            namespace: the namespace of the Deployment and the Service (the claim's).
            image: the TensorBoard image URI.
            claim_name: the FSx claim, mounted read-only at /data.
            logdir: the event files' directory on FSx. Default "/data/runs" (every run).
            depends_on: constructs applied first (the claim, the image copy). Default ``()``.
        """
        super().__init__(scope, id)
        cluster = require_cluster(cluster)
        self.manifest = eks.KubernetesManifest(
            self,
            "Manifest",
            cluster=cluster,
            manifest=tensorboard_objects(
                namespace=namespace, image=image, claim_name=claim_name, logdir=logdir
            ),
        )
        for dependency in depends_on:
            self.manifest.node.add_dependency(dependency)
        self.port_forward = port_forward_command(namespace)
        CfnOutput(
            self,
            "PortForward",
            value=self.port_forward,
            description="TensorBoard: run this, then open http://localhost:6006",
        )
