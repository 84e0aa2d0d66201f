"""An etcd server with the v2 API, for torchrun's ``etcd``/``etcd-v2`` rendezvous.

Installed when the configuration asks for it (``etcd_enabled``, default on: the platform offers
the reference walkthrough's rendezvous without a redeploy; jobs default to c10d and do not need
it). The training-job construct refuses an etcd rendezvous when it is off.

Choices:

* etcd 3.5.x with ``--enable-v2``: the python-etcd client of the rendezvous speaks v2, which 3.6
  removed.
* One replica in a StatefulSet. Rendezvous state lives only as long as a job's start-up and its
  keep-alives; a restarted member recovers from its volume within seconds, while three members
  would triple the footprint and add quorum failure modes for no gain at this scale.
* A gp3 encrypted volume (1 GiB quota on a 2 GiB volume, so the quota alarm comes before a full
  disk) from the EBS CSI driver (:mod:`.ebs_csi`): a restarted pod keeps its data, unlike the
  reference's bare Pod.
* Its own namespace ``etcd`` (the training namespace belongs to the storage construct, and
  nothing here should wait for it), on the system nodegroup, behind a ClusterIP Service
  ``etcd.etcd.svc.cluster.local:2379``.
* Non-root (UID 65532), read-only root filesystem, no capabilities, RuntimeDefault seccomp: the
  namespace enforces the ``restricted`` Pod Security Standard. No service-account token.
* Readiness on ``/health`` (no leader or an alarm: take it out of the Service), liveness on
  ``/livez`` (etcd 3.5.11+; a process that answers but is NOSPACE must not be restart-looped).
* A NetworkPolicy admitting clients only from ``client_namespaces`` on 2379. EKS enforces it
  once the VPC CNI's network policy agent is enabled; until then it documents intent.
* No TLS or auth: the rendezvous client of torchrun does not configure either, and the store
  holds only rendezvous bookkeeping.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from trainium_job.errors import ConfigError
from trainium_job.scheduling import SYSTEM_NODE_LABEL, TRAINING_NAMESPACE
from trainium_job.security import (
    namespace_manifest,
    pod_security_context,
    pod_security_labels,
    service_security_context,
)

from ..versions import AddonPin
from .addon import SYSTEM_NODES, AddOn, AddonContext

CLIENT_PORT = 2379
PEER_PORT = 2380
NAME = "etcd"
_LABELS = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/part-of": "trainium-eks"}
_SELECTOR = {"app.kubernetes.io/name": NAME}
#: User and group etcd runs as, and owns its volume as: not root.
_UID = 65532


# etcd v3.5.32 (etcd-io/etcd #22016: released with v3.6.13, 2026-07-01), the newest 3.5
# patch seen; 3.6 removed the v2 API the etcd rendezvous needs. The project's primary
# registry; tag-pinned (no digest could be verified offline).
#: The etcd image.
IMAGE = AddonPin("gcr.io/etcd-development/etcd", "v3.5.32")


def etcd_manifests(
    *,
    namespace: str,
    image: str,
    storage_class_name: str,
    volume_gib: int,
    quota_bytes: int,
    client_namespaces: Sequence[str],
    node_selector: Mapping[str, str] = SYSTEM_NODE_LABEL,
) -> list[dict]:
    """Namespace, Service, StatefulSet (on the nodes ``node_selector`` picks) and NetworkPolicy of
    a single-member etcd."""
    return [
        namespace_manifest(namespace, {**_LABELS, **pod_security_labels("restricted")}),
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": NAME, "namespace": namespace, "labels": dict(_LABELS)},
            "spec": {
                "type": "ClusterIP",
                "selector": dict(_SELECTOR),
                "ports": [{"name": "client", "port": CLIENT_PORT, "targetPort": "client", "protocol": "TCP"}],
            },
        },
        _stateful_set(
            namespace=namespace,
            container=_container(namespace=namespace, image=image, quota_bytes=quota_bytes),
            storage_class_name=storage_class_name,
            volume_gib=volume_gib,
            node_selector=node_selector,
        ),
        _network_policy(namespace, client_namespaces),
    ]


def _container(*, namespace: str, image: str, quota_bytes: int) -> dict:
    """The etcd member: v2 API on, peers on loopback only, probes on the client port."""
    member = f"{NAME}-0"
    peer_url = f"http://127.0.0.1:{PEER_PORT}"
    http_probe = {"port": "client", "scheme": "HTTP"}
    return {
        "name": NAME,
        "image": image,
        "command": ["/usr/local/bin/etcd"],
        "args": [
            f"--name={member}",
            "--data-dir=/var/lib/etcd/data",
            f"--listen-client-urls=http://0.0.0.0:{CLIENT_PORT}",
            f"--advertise-client-urls=http://{NAME}.{namespace}.svc.cluster.local:{CLIENT_PORT}",
            # One member: peers only on loopback.
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster={member}={peer_url}",
            "--initial-cluster-state=new",
            "--enable-v2=true",
            "--auto-compaction-mode=periodic",
            "--auto-compaction-retention=1h",
            f"--quota-backend-bytes={quota_bytes}",
        ],
        "ports": [{"name": "client", "containerPort": CLIENT_PORT, "protocol": "TCP"}],
        "readinessProbe": {
            "httpGet": {"path": "/health", **http_probe},
            "periodSeconds": 10,
            "timeoutSeconds": 5,
            "failureThreshold": 3,
        },
        "livenessProbe": {
            "httpGet": {"path": "/livez", **http_probe},
            "initialDelaySeconds": 15,
            "periodSeconds": 10,
            "timeoutSeconds": 5,
            "failureThreshold": 6,
        },
        "resources": {
            "requests": {"cpu": "100m", "memory": "256Mi"},
            "limits": {"cpu": "1", "memory": "1Gi"},
        },
        "securityContext": service_security_context(run_as_non_root=True),
        "volumeMounts": [{"name": "data", "mountPath": "/var/lib/etcd"}],
    }


def _stateful_set(
    *,
    namespace: str,
    container: dict,
    storage_class_name: str,
    volume_gib: int,
    node_selector: Mapping[str, str],
) -> dict:
    """One replica on the system nodes, its data on a volume of ``storage_class_name``."""
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": NAME, "namespace": namespace, "labels": dict(_LABELS)},
        "spec": {
            "serviceName": NAME,
            "replicas": 1,
            "selector": {"matchLabels": dict(_SELECTOR)},
            "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete", "whenScaled": "Retain"},
            "template": {
                "metadata": {"labels": {**_LABELS, **_SELECTOR}},
                "spec": {
                    "automountServiceAccountToken": False,
                    "nodeSelector": dict(node_selector),
                    "securityContext": pod_security_context(run_as=_UID, fs_group=True),
                    "terminationGracePeriodSeconds": 30,
                    "containers": [container],
                },
            },
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "data"},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "storageClassName": storage_class_name,
                        "resources": {"requests": {"storage": f"{volume_gib}Gi"}},
                    },
                }
            ],
        },
    }


def _network_policy(namespace: str, client_namespaces: Sequence[str]) -> dict:
    """Clients only from ``client_namespaces``, only on the client port."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": f"{NAME}-clients", "namespace": namespace, "labels": dict(_LABELS)},
        "spec": {
            "podSelector": {"matchLabels": dict(_SELECTOR)},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [
                        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": client}}}
                        for client in client_namespaces
                    ],
                    "ports": [{"protocol": "TCP", "port": CLIENT_PORT}],
                }
            ],
        },
    }


#: etcd's data volume (GiB, gp3): the v2 rendezvous keeps a few keys per job.
DEFAULT_VOLUME_GIB = 2


class EtcdServer(Construct):
    """A single-member etcd 3.5 (v2 API on) with a persistent, encrypted volume.

    Attributes:
        endpoint: ``host:port`` for ``--rdzv_endpoint``.
        namespace: the namespace it runs in.
        manifest: the ``KubernetesManifest`` holding its objects.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: eks.ICluster,
        storage_class_name: str,
        namespace: str = "etcd",
        client_namespaces: Sequence[str] = (TRAINING_NAMESPACE,),
        volume_gib: int = DEFAULT_VOLUME_GIB,
        quota_bytes: int = 1024**3,
        pin: AddonPin = IMAGE,
        node_selector: Mapping[str, str] = SYSTEM_NODE_LABEL,
    ) -> None:
        """
        Args:
            cluster: the cluster (with a kubectl provider).
            storage_class_name: StorageClass of the data volume (an EBS CSI class).
            namespace: namespace created for etcd. Default "etcd".
            client_namespaces: namespaces whose pods may connect. Default ``(TRAINING_NAMESPACE,)``.
            volume_gib: size of the data volume. Default 2.
            quota_bytes: etcd backend quota; keep it below the volume size. Default 1 GiB.
            pin: image and tag (3.5.x). Default: :data:`IMAGE`.
            node_selector: the labels of the nodes it runs on. Default ``SYSTEM_NODE_LABEL``
                (``trainium-eks/pool: system``, the system nodegroup :class:`TrainiumCluster` makes).
        """
        super().__init__(scope, id)
        if not pin.version.startswith("v3.5."):
            raise ConfigError("pin", pin.version, "the v2 API needs etcd 3.5.x (3.6 removed it)")
        if not client_namespaces:
            raise ConfigError("client_namespaces", (), "name the namespaces of the jobs")
        if quota_bytes >= volume_gib * 1024**3:
            raise ConfigError(
                "quota_bytes",
                quota_bytes,
                f"keep it below the {volume_gib} GiB volume so the quota alarm precedes a full disk",
            )
        self.namespace = namespace
        self.endpoint = f"{NAME}.{namespace}.svc.cluster.local:{CLIENT_PORT}"
        self.manifest = eks.KubernetesManifest(
            self,
            "Manifest",
            cluster=cluster,
            manifest=etcd_manifests(
                namespace=namespace,
                image=pin.image,
                storage_class_name=storage_class_name,
                volume_gib=volume_gib,
                quota_bytes=quota_bytes,
                client_namespaces=client_namespaces,
                node_selector=node_selector,
            ),
        )


def _build(context: AddonContext) -> EtcdServer:
    return EtcdServer(
        context.scope,
        "Etcd",
        cluster=context.cluster,
        storage_class_name=context.built["ebs_csi"].storage_class_name,
        node_selector=context.system_node_selector,
    )


#: The etcd rendezvous' server: on the system nodes, its volume from the EBS CSI driver.
ADDON = AddOn(
    name="etcd",
    key="etcd_enabled",
    pins={"etcd": IMAGE},
    after=(SYSTEM_NODES, "ebs_csi"),
    build=_build,
)
