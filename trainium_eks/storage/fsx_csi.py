"""The FSx for Lustre CSI driver and a static volume: the training namespace's shared claim.

The file system is created and owned by CloudFormation (:class:`~trainium_eks.storage.fsx.TrainingFileSystem`);
Kubernetes only mounts it. So the volume is STATIC: a PersistentVolume naming the file system,
pre-bound to one ReadWriteMany claim, with no StorageClass and a Retain reclaim policy. Deleting
the claim, the volume or the whole cluster never touches the file system.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aws_cdk import Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from trainium_job.scheduling import SYSTEM_NODE_LABEL, TRAINING_NAMESPACE
from trainium_job.security import namespace_manifest, pod_security_labels

from ..arguments import AnyCluster, require_cluster
from ..cluster.managed_addons import pod_identity_association, pod_identity_role
from ..cluster.system_nodes import check_node_selector, require_system_capacity
from ..nag import FSX_CSI_ACKNOWLEDGEMENTS, acknowledge_own_findings
from ..versions import AddonPin, ChartEvidence, Declared
from .fsx import TrainingFileSystem

#: Pod Security Admission labels of the training namespace. Enforced level: privileged, because
#: the training pods add CAP_IPC_LOCK (EFA's pinned buffers; ``trainium_job.security``), which
#: the baseline level forbids; every other pod there (staging, TensorBoard) meets restricted's
#: capability and seccomp rules. warn/audit at baseline flag anything else beyond it.
TRAINING_NAMESPACE_PSA = pod_security_labels("privileged", warn="baseline", audit="baseline")
#: The claim training pods mount (at /data).
CLAIM_NAME = "fsx-claim"
#: CSI driver name and the controller's service account (chart defaults).
CSI_DRIVER_NAME = "fsx.csi.aws.com"
CONTROLLER_SERVICE_ACCOUNT = "fsx-csi-controller-sa"
DRIVER_NAMESPACE = "kube-system"
#: A static claim cannot be resized, and kubectl apply of a larger request fails: the claim asks
#: for the smallest FSx size, which every valid volume satisfies; the volume carries the real one.
CLAIM_REQUEST = "1200Gi"
#: Lustre mount options: flock gives the cluster-coherent POSIX locks HDF5 and checkpoints rely on.
MOUNT_OPTIONS = ("flock",)


_DECLARED = Declared(
    True,
    "kubernetes-sigs/aws-fsx-csi-driver index.yaml entry of chart 1.17.0: kubeVersion '>=1.20.0-0'; "
    "docs/README.md compatibility matrix: driver v1.9.0 on 'v1.20+'",
)

# FSx for Lustre CSI driver, Helm chart of kubernetes-sigs/aws-fsx-csi-driver. Chart 1.17.0
# ships driver v1.9.0 (chart 1.16.0 ships v1.8.0). 1.17.0 over 1.16.0: the two charts differ
# only in the image tag, and the driver's v1.8.0..v1.9.0 changes are a newer Go toolchain and
# dependencies (CHANGELOG "v1.9.0"): pkg/driver/node.go and controller.go are unchanged, so
# the volume attributes and mount handling we rely on are the same. Both charts declare
# kubeVersion >=1.20.0-0. The chart, not the EKS add-on: no `aws-fsx-csi-driver` add-on
# version for Kubernetes 1.35/1.36 could be verified offline.
#: The FSx for Lustre CSI driver's Helm chart.
CHART = AddonPin(
    "aws-fsx-csi-driver",
    "1.17.0",
    "https://kubernetes-sigs.github.io/aws-fsx-csi-driver",
    ChartEvidence(
        version="1.17.0",
        created="2026-04-21T14:58:08.993300967Z",
        digest="dedcc71b5efc7f93fed6c0feaf73eacab4de869a6d07228c6df4c48373b0d315",
        app_version="1.9.0",
        index="kubernetes-sigs/aws-fsx-csi-driver@ea637587:index.yaml (branch gh-pages)",
    ),
    compatibility=dict.fromkeys(("1.34", "1.35", "1.36"), _DECLARED),
)


class FsxCsiVolume(Construct):
    """The FSx CSI driver (Helm chart) plus the namespace, volume and claim of one file system.

    IAM, least privilege: with a static volume the controller provisions nothing, so it gets no
    create/delete/update rights at all (not AmazonFSxFullAccess). Its only AWS call on this path
    is ``fsx:DescribeFileSystems`` (``ValidateVolumeCapabilities``, and looking up an existing file
    system); that action supports no resource-level permissions, so it is granted on ``*``. It
    reaches the controller through EKS Pod Identity (needs the ``eks-pod-identity-agent`` add-on
    on the nodes). The node plugin mounts Lustre with the kernel client and reads instance facts
    from IMDS or the Kubernetes API: it needs no AWS permissions and gets none.

    Order: the Pod Identity association exists before the chart (the controller pods pick their
    credentials up at creation), the namespace before the volume, the driver before the volume.

    Attributes:
        driver: the Helm release of the driver.
        controller_role: the controller's IAM role (Pod Identity).
        namespace: the training namespace's name; ``claim_name``: the claim's name.
        volume_name: the PersistentVolume's name.
        namespace_manifest / volume_manifest: the applied objects, for ordering other manifests.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: AnyCluster,
        file_system: TrainingFileSystem,
        namespace: str = TRAINING_NAMESPACE,
        claim_name: str = CLAIM_NAME,
        volume_name: str = "fsx-training",
        system_node_selector: Mapping[str, str] = SYSTEM_NODE_LABEL,
    ) -> None:
        """
        Args:
            cluster: the cluster (with a kubectl provider).
            file_system: the :class:`~trainium_eks.storage.fsx.TrainingFileSystem` to mount.
            namespace: the namespace created for the claim (and the workload). Default
                ``TRAINING_NAMESPACE`` ("training").
            claim_name: the ReadWriteMany claim. Default ``CLAIM_NAME`` ("fsx-claim").
            volume_name: the PersistentVolume. Default "fsx-training".
            system_node_selector: the labels of the nodes the driver's controller runs on: some
                untainted nodegroup of ``cluster`` must carry them (checked at synth). Default
                ``SYSTEM_NODE_LABEL`` (the system nodegroup :class:`TrainiumCluster` makes).
        """
        super().__init__(scope, id)
        cluster = require_cluster(cluster)
        selector = check_node_selector(system_node_selector)
        require_system_capacity(self, cluster, selector, owner="FsxCsiVolume")
        self.namespace = namespace
        self.claim_name = claim_name
        self.volume_name = volume_name

        self.controller_role = _controller_role(self)
        association = pod_identity_association(
            self,
            "ControllerPodIdentity",
            cluster=cluster,
            namespace=DRIVER_NAMESPACE,
            service_account=CONTROLLER_SERVICE_ACCOUNT,
            role=self.controller_role,
        )

        self.driver = eks.HelmChart(
            self,
            "Driver",
            cluster=cluster,
            **CHART.chart_props(),
            release="aws-fsx-csi-driver",
            namespace=DRIVER_NAMESPACE,
            values=driver_values(Stack.of(self).region, selector),
        )
        self.driver.node.add_dependency(association)
        # The policy must be attached before the controller can use the role.
        self.driver.node.add_dependency(self.controller_role)

        self.namespace_manifest = eks.KubernetesManifest(
            self,
            "Namespace",
            cluster=cluster,
            manifest=[namespace_manifest(namespace, TRAINING_NAMESPACE_PSA)],
        )
        self.volume_manifest = eks.KubernetesManifest(
            self,
            "Volume",
            cluster=cluster,
            manifest=[
                persistent_volume(volume_name, file_system, namespace, claim_name),
                persistent_volume_claim(claim_name, namespace, volume_name),
            ],
        )
        self.volume_manifest.node.add_dependency(self.driver)
        self.volume_manifest.node.add_dependency(self.namespace_manifest)
        acknowledge_own_findings(self, FSX_CSI_ACKNOWLEDGEMENTS)


def _controller_role(scope: Construct) -> iam.Role:
    """The controller's Pod Identity role: ``fsx:DescribeFileSystems``, nothing else."""
    role = pod_identity_role(
        scope,
        "ControllerRole",
        description="FSx CSI controller (static volumes only: describe, nothing else)",
    )
    role.add_to_principal_policy(iam.PolicyStatement(actions=["fsx:DescribeFileSystems"], resources=["*"]))
    return role


def driver_values(region: str, node_selector: Mapping[str, str] = SYSTEM_NODE_LABEL) -> dict[str, Any]:
    """Helm values of the driver chart: controller on the system nodes (``node_selector``), node
    plugin everywhere."""
    return {
        "controller": {
            # The region from the stack, not IMDS: pods cannot reach IMDS (hop limit 1).
            "region": region,
            "nodeSelector": dict(node_selector),
            "serviceAccount": {"create": True, "name": CONTROLLER_SERVICE_ACCOUNT},
        },
        # The node plugin must run on the tainted Trainium nodes, where training mounts the volume.
        "node": {"tolerateAllTaints": True},
    }


def persistent_volume(
    name: str, file_system: TrainingFileSystem, namespace: str, claim_name: str
) -> Mapping[str, Any]:
    """The static PersistentVolume of ``file_system``, reserved for ``namespace/claim_name``."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": f"{file_system.storage_gib}Gi"},
            "volumeMode": "Filesystem",
            "accessModes": ["ReadWriteMany"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "mountOptions": list(MOUNT_OPTIONS),
            "claimRef": {"namespace": namespace, "name": claim_name},
            "csi": {
                "driver": CSI_DRIVER_NAME,
                "volumeHandle": file_system.file_system_id,
                # The driver's keys, lower case: NodePublishVolume reads "dnsname" (refuses the
                # mount without it) and "mountname" (else "fsx", wrong for PERSISTENT_2) from the
                # volume context (aws-fsx-csi-driver v1.9.0, pkg/driver/node.go:108-119).
                "volumeAttributes": {
                    "dnsname": file_system.dns_name,
                    "mountname": file_system.mount_name,
                },
            },
        },
    }


def persistent_volume_claim(name: str, namespace: str, volume_name: str) -> Mapping[str, Any]:
    """The ReadWriteMany claim bound by name to ``volume_name`` (empty class: no provisioning)."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "",
            "volumeName": volume_name,
            "resources": {"requests": {"storage": CLAIM_REQUEST}},
        },
    }
