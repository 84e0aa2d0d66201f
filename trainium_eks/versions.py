"""Pinned versions: the one table of what the platform deploys.

Kubernetes and its kubectl layer are pinned together: the cluster's version must have both an
``aws_eks_v2.KubernetesVersion`` member in the pinned aws-cdk-lib and a
``aws-cdk.lambda-layer-kubectl-vNN`` package (pinned in requirements.txt).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypedDict

from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_lambda
from constructs import Construct


@dataclass(frozen=True)
class KubernetesRelease:
    """A Kubernetes minor version and the kubectl layer that matches it."""

    version: str
    layer_module: str
    layer_class: str

    @property
    def eks_version(self) -> eks.KubernetesVersion:
        return eks.KubernetesVersion.of(self.version)

    def kubectl_layer(self, scope: Construct, id: str) -> aws_lambda.ILayerVersion:
        """The kubectl/helm Lambda layer for this version (imported lazily: one package each)."""
        factory: Callable[..., aws_lambda.ILayerVersion] = getattr(
            importlib.import_module(self.layer_module), self.layer_class
        )
        return factory(scope, id)


def _release(minor: int) -> KubernetesRelease:
    return KubernetesRelease(
        version=f"1.{minor}",
        layer_module=f"aws_cdk.lambda_layer_kubectl_v{minor}",
        layer_class=f"KubectlV{minor}Layer",
    )


#: Versions this library can build, newest last. EKS standard support lasts 14 months from
#: release; 1.34 (Oct 2025) and 1.35 (Jan 2026) are in it today, 1.36 is the newest with both a
#: CDK enum member (aws-cdk-lib 2.275) and a kubectl layer (lambda-layer-kubectl-v36 2.0.1).
KUBERNETES_RELEASES: dict[str, KubernetesRelease] = {
    r.version: r for r in (_release(34), _release(35), _release(36))
}

DEFAULT_KUBERNETES_VERSION = "1.36"

#: Instance type of the small nodegroup that runs controllers (Volcano, etcd, TensorBoard,
#: CoreDNS) so they never occupy Trainium capacity.
SYSTEM_NODE_INSTANCE_TYPE = "m7i.large"

#: Lustre version of the FSx file system: 2.15, the newest FSx offers (2.10, 2.12, 2.15; FSx API
#: CreateFileSystem FileSystemTypeVersion) and the one FSx recommends for new file systems.
FSX_LUSTRE_VERSION = "2.15"


class ChartSource(TypedDict):
    """Where ``aws_eks_v2.HelmChart`` gets a chart: its ``repository``, ``chart`` and ``version``."""

    repository: str
    chart: str
    version: str


@dataclass(frozen=True)
class AddonPin:
    """One pinned cluster add-on: a Helm chart, an EKS managed add-on or a container image.

    Attributes:
        name: Helm chart name, EKS add-on name, or image repository.
        version: chart version, add-on version (``vX.Y.Z-eksbuild.N``), or image tag.
        repository: Helm repository (``https://`` index or the chart's ``oci://`` reference);
            ``None`` for managed add-ons and images.
    """

    name: str
    version: str
    repository: str | None = None

    @property
    def image(self) -> str:
        """``name:version``, for image pins."""
        return f"{self.name}:{self.version}"

    def chart_props(self) -> ChartSource:
        """``repository``/``chart``/``version`` keyword arguments of ``aws_eks_v2.HelmChart``."""
        if self.repository is None:
            raise ValueError(f"{self.name}: not a Helm chart pin (no repository)")
        return ChartSource(repository=self.repository, chart=self.name, version=self.version)


#: Every add-on the platform installs, pinned. Checked 2026-11 against the sources named here;
#: EKS rejects an add-on version it does not offer for the cluster's Kubernetes version, so a
#: cluster-version bump means re-checking the ``eksbuild`` rows (``aws eks describe-addon-versions
#: --kubernetes-version 1.36 --addon-name <name>``).
ADDON_PINS: dict[str, AddonPin] = {
    # aws-neuron/neuron-helm-charts release 1.10.0 (2026-08-19; `helm show values ... --version
    # 1.10.0` digest sha256:ed5d8f73...): device plugin 2.32.0.0. The chart follows Neuron SDK
    # releases (1.9.0 = SDK 2.31); the device plugin talks to the node's driver (the Neuron AMI
    # ships the newest), not to the container's Neuron 2.28 runtime, which newer drivers support.
    "neuron": AddonPin("neuron-helm-chart", "1.10.0", "oci://public.ecr.aws/neuron/neuron-helm-chart"),
    # aws/eks-charts: chart v0.5.29 = image v0.5.20 (PR #1338, 2026-06); v0.5.32 is the pin of
    # a recorded EKS 1.36 deployment with EFA nodes (awslabs/awsome-distributed-ai compatibility
    # matrix, 2026-09-16). Its instance list includes trn1.32xlarge, trn1n.32xlarge, trn2.48xlarge.
    "efa": AddonPin("aws-efa-k8s-device-plugin", "v0.5.32", "https://aws.github.io/eks-charts"),
    # volcano-sh/helm-charts index.yaml: 1.15.2 (2026-08-29) is the newest stable release. The
    # Volcano README marks v1.15 exact for Kubernetes 1.35 and '-' (works; cannot use newer API
    # features) for 1.36; only the 1.16 pre-releases are marked exact for 1.36.
    "volcano": AddonPin("volcano", "1.15.2", "https://volcano-sh.github.io/helm-charts"),
    # FSx for Lustre CSI driver, Helm chart of kubernetes-sigs/aws-fsx-csi-driver: chart 1.16.0
    # ships driver 1.9.0 (upstream PR #491, merged 2026-04-09; chart kubeVersion >=1.17). The
    # chart, not the EKS add-on: no `aws-fsx-csi-driver` add-on version for Kubernetes 1.36
    # could be verified offline, and EKS rejects an unknown one at deploy.
    "fsx-csi-driver": AddonPin(
        "aws-fsx-csi-driver", "1.16.0", "https://kubernetes-sigs.github.io/aws-fsx-csi-driver"
    ),
    # etcd v3.5.32 (etcd-io/etcd #22016: released with v3.6.13, 2026-07-01), the newest 3.5
    # patch seen; 3.6 removed the v2 API the etcd rendezvous needs. The project's primary
    # registry; tag-pinned (no digest could be verified offline).
    "etcd": AddonPin("gcr.io/etcd-development/etcd", "v3.5.32"),
    # EKS managed add-ons: EKS refuses a version it does not offer for the cluster's Kubernetes
    # version, so each is checked per version in ADDON_EVIDENCE below.
    "pod-identity-agent": AddonPin("eks-pod-identity-agent", "v1.3.10-eksbuild.3"),
    # Amazon VPC CNI: v1.23.1-eksbuild.1 as installed on an EKS 1.36 cluster (inventory of
    # 2026-09-24 in a public EKS 1.36 lab's architecture notes). EKS offers one VPC CNI build for
    # every supported Kubernetes version at a time (EKS user guide, "Amazon VPC CNI versions":
    # v1.20.1-eksbuild.3 for 1.27-1.33; earlier tables likewise), so it serves 1.34 and 1.35 too.
    "vpc-cni": AddonPin("vpc-cni", "v1.23.1-eksbuild.1"),
    "node-monitoring-agent": AddonPin("eks-node-monitoring-agent", "v1.6.6-eksbuild.1"),
    "ebs-csi-driver": AddonPin("aws-ebs-csi-driver", "v1.62.0-eksbuild.1"),
    # v6.2.0-eksbuild.1: pinned next to kube-proxy v1.36.0-eksbuild.9 in a public EKS 1.36
    # configuration (2026). The former v4.10.3-eksbuild.1 predates 1.36.
    "cloudwatch-observability": AddonPin("amazon-cloudwatch-observability", "v6.2.0-eksbuild.1"),
}

#: Published evidence that EKS offers each managed add-on pin for a Kubernetes version: pin key ->
#: {Kubernetes version: where it was seen}. Checked 2026-11 (public configurations that pin the
#: version next to that Kubernetes version's kube-proxy or cluster version). A missing version
#: means no evidence was found: an optional add-on is then refused on it (config checks), an
#: always-on one is flagged in the synth review.
ADDON_EVIDENCE: dict[str, dict[str, str]] = {
    "pod-identity-agent": {
        "1.34": "`aws eks describe-addon-versions --kubernetes-version 1.34` defaults of 2026-06-24 "
        "in a public Terraform configuration (with kube-proxy v1.34.6-eksbuild.11)",
        "1.35": "public Terraform configuration pinning it with kube-proxy v1.35.3-eksbuild.13",
        "1.36": "add-on versions a 1.36 cluster resolved to (public deployment record, 2026)",
    },
    "node-monitoring-agent": {
        "1.35": "add-on compatibility table of a public 1.35 deployment (kube-proxy v1.35.3-eksbuild.2)",
        "1.36": "public Terraform configuration with cluster_version 1.36 (defaultVersion query)",
    },
    "ebs-csi-driver": {
        "1.34": "public Terraform variable 'compatible with EKS 1.34' and the 2026-06-24 1.34 defaults",
        "1.35": "add-on validation (ACTIVE) of a public 1.35 cluster with kube-proxy v1.35.3-eksbuild.13",
        "1.36": "public Terraform configuration pinning it with kube-proxy v1.36.0-eksbuild.7",
    },
    "vpc-cni": {
        "1.34": "EKS offers one VPC CNI build for all supported versions (EKS user guide version table; "
        "a 2026 survey found v1.22.3-eksbuild.1 common to 1.30-1.36)",
        "1.35": "as for 1.34",
        "1.36": "installed on an EKS 1.36 cluster (public inventory, 2026-09-24)",
    },
    "cloudwatch-observability": {
        "1.36": "public Terraform configuration pinning it with kube-proxy v1.36.0-eksbuild.9",
    },
}
