"""EBS CSI driver (EKS managed add-on) and an encrypted gp3 StorageClass.

The cluster has no block-storage driver otherwise; etcd's volume needs one. The driver's
controller gets AWS credentials through EKS Pod Identity (a role trusted by
``pods.eks.amazonaws.com`` with the AWS managed ``AmazonEBSCSIDriverPolicy``, associated with
its ``ebs-csi-controller-sa`` service account), so the node role gains nothing. The pod identity
agent add-on must exist first (the caller orders it).

The StorageClass encrypts every volume (the account's ``aws/ebs`` key), binds at first consumer
(the volume lands in the pod's AZ) and deletes volumes with their claims: what lives here is
scratch state (rendezvous keys), not data worth keeping; training data lives on FSx.
"""

from __future__ import annotations

from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from ..cluster.managed_addons import managed_addon, pod_identity_role
from ..nag import EBS_CSI_ACKNOWLEDGEMENTS, acknowledge_own_findings
from ..versions import AddonPin, Declared
from .addon import POD_IDENTITY_AGENT, SYSTEM_NODES, AddOn, AddonContext
from .node_daemons import DaemonSettings, NodeDaemon, addon_daemons

CONTROLLER_SERVICE_ACCOUNT = "ebs-csi-controller-sa"


# EKS managed add-ons: EKS refuses a version it does not offer for the cluster's Kubernetes
# version, so each pin lists, per Kubernetes version, where it was seen offered (checked
# 2026-11: public configurations that pin the version next to that Kubernetes version's
# kube-proxy or cluster version; ``aws eks describe-addon-versions --kubernetes-version 1.35
# --addon-name <name>`` re-checks one).
#: The EBS CSI driver add-on.
ADDON_PIN = AddonPin(
    "aws-ebs-csi-driver",
    "v1.62.0-eksbuild.1",
    compatibility={
        "1.34": Declared(
            True,
            "public Terraform variable 'compatible with EKS 1.34' and the 2026-06-24 1.34 defaults",
        ),
        "1.35": Declared(
            True,
            "add-on validation (ACTIVE) of a public 1.35 cluster with kube-proxy v1.35.3-eksbuild.13",
        ),
        "1.36": Declared(
            True,
            "public Terraform configuration pinning it with kube-proxy v1.36.0-eksbuild.7",
        ),
    },
    managed=True,
)


class EbsCsiDriver(Construct):
    """The EBS CSI driver add-on (Pod Identity) and the ``gp3-encrypted`` StorageClass.

    Attributes:
        role: the controller's IAM role.
        addon: the ``aws_eks_v2.Addon``.
        storage_class_name: name of the StorageClass.
        storage_class: the ``KubernetesManifest`` holding it.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: eks.ICluster,
        storage_class_name: str = "gp3-encrypted",
        pin: AddonPin = ADDON_PIN,
    ) -> None:
        """
        Args:
            cluster: the cluster (with a kubectl provider).
            storage_class_name: name of the StorageClass. Default "gp3-encrypted".
            pin: add-on name and version. Default: :data:`ADDON_PIN`.
        """
        super().__init__(scope, id)
        self.storage_class_name = storage_class_name
        self.role = pod_identity_role(
            self,
            "ControllerRole",
            managed_policy="service-role/AmazonEBSCSIDriverPolicy",
            description="EBS CSI driver controller (EKS Pod Identity)",
        )
        self.addon = managed_addon(
            self, "Addon", cluster=cluster, pin=pin, pod_identity=(CONTROLLER_SERVICE_ACCOUNT, self.role)
        )
        self.storage_class = eks.KubernetesManifest(
            self,
            "StorageClass",
            cluster=cluster,
            manifest=[
                {
                    "apiVersion": "storage.k8s.io/v1",
                    "kind": "StorageClass",
                    "metadata": {"name": storage_class_name},
                    "provisioner": "ebs.csi.aws.com",
                    "parameters": {"type": "gp3", "encrypted": "true", "csi.storage.k8s.io/fstype": "ext4"},
                    "reclaimPolicy": "Delete",
                    "volumeBindingMode": "WaitForFirstConsumer",
                    "allowVolumeExpansion": True,
                }
            ],
        )
        acknowledge_own_findings(self, EBS_CSI_ACKNOWLEDGEMENTS)


def _build(context: AddonContext) -> EbsCsiDriver:
    return EbsCsiDriver(context.scope, "EbsCsi", cluster=context.cluster)


def _daemons(settings: DaemonSettings) -> tuple[NodeDaemon, ...]:
    if not (settings.etcd_enabled or settings.monitoring_enabled):
        return ()
    return addon_daemons(ADDON_PIN)


#: With etcd's or Prometheus's volume; on the system nodes, its credentials from Pod Identity.
ADDON = AddOn(
    name="ebs_csi",
    key=None,
    pins={"ebs-csi-driver": ADDON_PIN},
    after=(SYSTEM_NODES, POD_IDENTITY_AGENT),
    build=_build,
    enabled=lambda context: context.etcd_enabled or context.monitoring_enabled,
    daemons=_daemons,
)
