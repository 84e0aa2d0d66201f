"""Pinned versions: the one table of what the platform deploys.

Kubernetes and its kubectl layer are pinned together: the cluster's version must have both an
``aws_eks_v2.KubernetesVersion`` member in the pinned aws-cdk-lib and a
``aws-cdk.lambda-layer-kubectl-vNN`` package (pinned in requirements.txt).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypedDict

from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_lambda
from constructs import Construct

from trainium_job.neuron_stack import NEURON_STACK


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

#: The newest version on which every pinned component is declared compatible
#: (:func:`trainium_eks.compatibility.newest_compatible_version`, tested): Volcano 1.15 marks 1.36
#: '-' (not fully compatible). 1.36 stays selectable; the synth review then warns.
DEFAULT_KUBERNETES_VERSION = "1.35"

#: Instance type of the small nodegroup that runs controllers (Volcano, etcd, TensorBoard,
#: CoreDNS) so they never occupy Trainium capacity.
SYSTEM_NODE_INSTANCE_TYPE = "m7i.large"

#: With ``trainium_capacity=karpenter``: the instance type Karpenter launches for the dataset
#: staging pod (2-4 vCPU, 4-8 GiB: ``STAGING_RESOURCES``), so staging never starts a Trainium
#: node. 4 vCPU / 16 GiB: the pod and the node's DaemonSets fit beside each other.
DATASET_NODE_INSTANCE_TYPE = "m7i.xlarge"

#: Lustre version of the FSx file system: 2.15, the newest FSx offers (2.10, 2.12, 2.15; FSx API
#: CreateFileSystem FileSystemTypeVersion) and the one FSx recommends for new file systems.
FSX_LUSTRE_VERSION = "2.15"


class ChartSource(TypedDict):
    """Where ``aws_eks_v2.HelmChart`` gets a chart: its ``repository``, ``chart`` and ``version``."""

    repository: str
    chart: str
    version: str


@dataclass(frozen=True)
class ChartEvidence:
    """Where a chart pin was seen published: its entry in the repository's index.

    Attributes:
        version: the chart version the entry lists (must equal the pin's).
        created: the entry's ``created`` time (an OCI chart: its release date).
        digest: the entry's ``digest`` (SHA-256 of the chart archive; an OCI chart: its manifest
            digest), or ``None`` where the index has none.
        app_version: the entry's ``appVersion`` (the software the chart installs), if given.
        index: the index read: ``<repository>@<commit>:<path>`` of the copy (a Helm repository's
            ``index.yaml`` is published from that repository), or where an OCI chart's digest
            was recorded.
    """

    version: str
    created: str
    digest: str | None
    app_version: str | None
    index: str


@dataclass(frozen=True)
class AddonPin:
    """One pinned cluster add-on: a Helm chart, an EKS managed add-on or a container image.

    Attributes:
        name: Helm chart name, EKS add-on name, or image repository.
        version: chart version, add-on version (``vX.Y.Z-eksbuild.N``), or image tag.
        repository: Helm repository (``https://`` index or the chart's ``oci://`` reference);
            ``None`` for managed add-ons and images.
        evidence: for a chart, its index entry (:class:`ChartEvidence`); every chart pin has one
            (tested). Managed add-ons have :data:`ADDON_EVIDENCE` per Kubernetes version instead.
    """

    name: str
    version: str
    repository: str | None = None
    evidence: ChartEvidence | None = None

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
#: --kubernetes-version 1.35 --addon-name <name>``). Which Kubernetes versions each component
#: declares itself compatible with: :mod:`trainium_eks.compatibility`.
ADDON_PINS: dict[str, AddonPin] = {
    # aws-neuron/neuron-helm-charts release 1.10.0 (2026-08-19): device plugin 2.32.0.0. The
    # chart follows Neuron SDK releases (1.9.0 = SDK 2.31); the device plugin talks to the
    # node's driver, not to the container's Neuron runtime.
    "neuron": AddonPin(
        "neuron-helm-chart",
        "1.10.0",
        "oci://public.ecr.aws/neuron/neuron-helm-chart",
        ChartEvidence(
            version="1.10.0",
            created="2026-08-19 (GitHub release 1.10.0 of aws-neuron/neuron-helm-charts, commit 8ca1e5c)",
            digest="sha256:ed5d8f73b7a05d3a1edf17b2bfaf277ea995ad1c65b115fa8ba2c7b4dc649346",
            app_version=None,
            index="`helm show values oci://public.ecr.aws/neuron/neuron-helm-chart --version 1.10.0` "
            "output with its digest, recorded in a public Trainium workshop (2026-09)",
        ),
    ),
    # aws/eks-charts, stable/aws-efa-k8s-device-plugin: chart v0.5.30 = image v0.5.20 (commit
    # bfe91c4, 2026-07-21, "add latest EFA instance types"), the newest chart in the index; its
    # instance list includes trn1.32xlarge, trn1n.32xlarge, trn2.48xlarge. (The former pin
    # v0.5.32 appears in no index or tag of the repository.)
    "efa": AddonPin(
        "aws-efa-k8s-device-plugin",
        "v0.5.30",
        "https://aws.github.io/eks-charts",
        ChartEvidence(
            version="v0.5.30",
            # The index was regenerated on 2026-08-03: every entry carries that time.
            created="2026-08-03T22:57:26.17434684Z",
            digest="43b3d666f81a40b7f7ac88ee04a64954abaaa061b1e5f54dc7ce4beb3374e32a",
            app_version="v0.5.20",
            index="aws/eks-charts@c7f9ea5:index.yaml (branch gh-pages)",
        ),
    ),
    # volcano-sh/helm-charts: 1.15.0 is the newest chart its index lists (source: volcano-sh/volcano
    # tag v1.15.0, installer/helm/chart/volcano). volcano-sh/volcano has a v1.15.1 tag
    # (2026-07-30), but no index entry for chart 1.15.1 could be read; the former pin 1.15.2 has
    # no tag in either repository. Kubernetes support: trainium_eks.compatibility.
    "volcano": AddonPin(
        "volcano",
        "1.15.0",
        "https://volcano-sh.github.io/helm-charts",
        ChartEvidence(
            version="1.15.0",
            created="2026-06-01T01:50:51.684557227Z",
            digest="2dd37565917a9b9929385ab4d1f6561cb04d104a993285dab266df1d6644bb3b",
            app_version="1.15.0",
            index="volcano-sh/helm-charts@be34e95:index.yaml",
        ),
    ),
    # Karpenter (aws/karpenter-provider-aws v1.14.1, 2026-08-20), only with
    # trainium_capacity=karpenter. Chart version = app version: the release script stamps both
    # before `helm push` (hack/release/common.sh L100-101, L114-115); Kubernetes 1.35 needs >= 1.9
    # and 1.36 >= 1.13 (website/content/en/v1.14/upgrading/compatibility.md L18-20). The CRDs come
    # from their own chart, as the upgrade guide recommends (its templates are upgraded with it;
    # the main chart's crds/ folder is installed once and never upgraded).
    "karpenter-crd": AddonPin(
        "karpenter-crd",
        "1.14.1",
        "oci://public.ecr.aws/karpenter/karpenter-crd",
        ChartEvidence(
            version="1.14.1",
            created="2026-08-20 (tag v1.14.1 of aws/karpenter-provider-aws, commit bde00654)",
            digest=None,
            app_version="1.14.1",
            # The chart is the tag's charts/karpenter-crd, whose Chart.yaml still reads 1.13.0 (L5-6):
            # the release script writes 1.14.1 into it before packaging (hack/release/common.sh
            # L100-101). Not main's later copy (1d927085 reads 1.14.1 but changed the CRDs).
            index="aws/karpenter-provider-aws@bde00654:charts/karpenter-crd/Chart.yaml L5-6 (1.13.0, "
            "stamped 1.14.1 at release: hack/release/common.sh L100-101)",
        ),
    ),
    "karpenter": AddonPin(
        "karpenter",
        "1.14.1",
        "oci://public.ecr.aws/karpenter/karpenter",
        ChartEvidence(
            version="1.14.1",
            created="2026-08-20 (tag v1.14.1 of aws/karpenter-provider-aws, commit bde00654)",
            digest=None,
            app_version="1.14.1",
            # As above; the controller image is stamped into values.yaml at release too
            # (common.sh L80-82), and the release's docs commit records what was pushed.
            index="aws/karpenter-provider-aws@bde00654:charts/karpenter/Chart.yaml L5-6 (1.13.0, "
            "stamped 1.14.1 at release: hack/release/common.sh L100-101); controller image digest "
            "sha256:723130949e4cab989461ff07d1be4cd781d63515432494641b33c235f300ae23 "
            "(1d927085:charts/karpenter/values.yaml L129-131, stamped by common.sh L80-82)",
        ),
    ),
    # FSx for Lustre CSI driver, Helm chart of kubernetes-sigs/aws-fsx-csi-driver. Chart 1.17.0
    # ships driver v1.9.0 (chart 1.16.0 ships v1.8.0). 1.17.0 over 1.16.0: the two charts differ
    # only in the image tag, and the driver's v1.8.0..v1.9.0 changes are a newer Go toolchain and
    # dependencies (CHANGELOG "v1.9.0"): pkg/driver/node.go and controller.go are unchanged, so
    # the volume attributes and mount handling we rely on are the same. Both charts declare
    # kubeVersion >=1.20.0-0. The chart, not the EKS add-on: no `aws-fsx-csi-driver` add-on
    # version for Kubernetes 1.35/1.36 could be verified offline.
    "fsx-csi-driver": AddonPin(
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
    ),
    # etcd v3.5.32 (etcd-io/etcd #22016: released with v3.6.13, 2026-07-01), the newest 3.5
    # patch seen; 3.6 removed the v2 API the etcd rendezvous needs. The project's primary
    # registry; tag-pinned (no digest could be verified offline).
    "etcd": AddonPin("gcr.io/etcd-development/etcd", "v3.5.32"),
    # prometheus-community/helm-charts tag kube-prometheus-stack-88.5.3 (ea930bae, 2026-08-21), the
    # newest in the snapshot read: Chart.yaml version 88.5.3, appVersion v0.93.1 (the operator),
    # kubeVersion ">=1.25.0-0"; it bundles Prometheus v3.14.0, Alertmanager v0.34.0, Grafana
    # 13.2.0 (grafana chart 12.11.1), node-exporter v1.12.1 (chart 4.56.1) and kube-state-metrics
    # v2.20.0 (chart 8.4.0). The index's digest could not be read offline.
    "kube-prometheus-stack": AddonPin(
        "kube-prometheus-stack",
        "88.5.3",
        "https://prometheus-community.github.io/helm-charts",
        ChartEvidence(
            version="88.5.3",
            created="2026-08-21 (commit date of the release tag kube-prometheus-stack-88.5.3)",
            # The repository's gh-pages index.yaml is larger than the stored copies keep, so the
            # chart archive's digest could not be read; the release tag's Chart.yaml is the evidence.
            digest=None,
            app_version="v0.93.1",
            index="prometheus-community/helm-charts@ea930bae:charts/kube-prometheus-stack/Chart.yaml "
            "(release tag kube-prometheus-stack-88.5.3)",
        ),
    ),
    # Neuron's own DaemonSet pins this tag (aws-neuron/aws-neuron-sdk
    # src/k8/k8s-neuron-monitor-daemonset.yml L43 at 81ce03ae, 2026-08-21; unchanged since SDK
    # 2.22.0). Tag-pinned (no digest could be verified offline).
    "neuron-monitor": AddonPin("public.ecr.aws/neuron/neuron-monitor", "1.3.0"),
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
    # configuration (2026), and for 1.30-1.35 in a public CDK configuration. The former
    # v4.10.3-eksbuild.1 predates 1.36.
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
        "1.34": "public CDK (aws_eks_v2) configuration pinning it for KubernetesVersion.V1_34 with "
        "kube-proxy v1.34.6-eksbuild.13",
        "1.35": "the same configuration, for KubernetesVersion.V1_35 with kube-proxy v1.35.3-eksbuild.13",
        "1.36": "public Terraform configuration pinning it with kube-proxy v1.36.0-eksbuild.9",
    },
}


@dataclass(frozen=True)
class NeuronAmiRelease:
    """One release of the EKS AL2023 Neuron AMI (``amiType AL2023_x86_64_NEURON``).

    Attributes:
        tag: the amazon-eks-ami release (``v20260625``).
        neuron_driver: its ``aws-neuronx-dkms`` package version.
        release_versions: Kubernetes minor -> the nodegroup ``releaseVersion`` of that release.
    """

    tag: str
    neuron_driver: str
    release_versions: Mapping[str, str]


#: Known EKS Neuron AMI releases, newest first: awslabs/amazon-eks-ami ``CHANGELOG.md`` (main
#: 81fec2e8, 2026-07-23), the AL2023_x86_64_NEURON column's ``aws-neuronx-dkms`` and each
#: Kubernetes version's release. The AMI build installs the newest driver of its day
#: (``templates/al2023/provisioners/install-neuron-driver.sh``), so only a pinned release pins
#: the driver. Kubernetes 1.36 images use kernel 6.18, which needs a driver with Neuron 2.28.1's
#: "compatibility issue with Linux kernel 6.18" fix: every 1.36 release here has driver 2.28+.
NEURON_AMI_RELEASES: tuple[NeuronAmiRelease, ...] = (
    # Driver 2.29 "requires Neuron Runtime Library 2.33 or later" (Neuron 2.31.0 known issue):
    # no PyTorch/XLA training image has it (the last, Neuron 2.30, ships runtime 2.32.31).
    NeuronAmiRelease(
        "v20260714",
        "2.29.0.0",
        {"1.36": "1.36.2-20260714", "1.35": "1.35.6-20260714", "1.34": "1.34.9-20260714"},
    ),
    NeuronAmiRelease(
        "v20260625",
        "2.28.0.0",
        {"1.36": "1.36.2-20260625", "1.35": "1.35.6-20260625", "1.34": "1.34.9-20260625"},
    ),
    NeuronAmiRelease(
        "v20260618",
        "2.28.0.0",
        {"1.36": "1.36.2-20260618", "1.35": "1.35.6-20260618", "1.34": "1.34.9-20260618"},
    ),
    NeuronAmiRelease(
        "v20260610",
        "2.28.0.0",
        {"1.36": "1.36.1-20260610", "1.35": "1.35.5-20260610", "1.34": "1.34.8-20260610"},
    ),
    NeuronAmiRelease("v20260505", "2.27.4.0", {"1.35": "1.35.4-20260505", "1.34": "1.34.7-20260505"}),
    NeuronAmiRelease("v20260423", "2.27.4.0", {"1.35": "1.35.4-20260423", "1.34": "1.34.7-20260423"}),
    NeuronAmiRelease("v20260415", "2.27.4.0", {"1.35": "1.35.3-20260415", "1.34": "1.34.6-20260415"}),
    NeuronAmiRelease("v20260409", "2.27.4.0", {"1.35": "1.35.3-20260409", "1.34": "1.34.6-20260409"}),
    NeuronAmiRelease("v20260403", "2.26.10.0", {"1.35": "1.35.2-20260403"}),
)


def neuron_ami_release(release_version: str) -> NeuronAmiRelease | None:
    """The known AMI release a nodegroup ``releaseVersion`` belongs to, if any."""
    return next((r for r in NEURON_AMI_RELEASES if release_version in r.release_versions.values()), None)


def default_neuron_ami_release(kubernetes_version: str) -> str:
    """The newest known ``releaseVersion`` for ``kubernetes_version`` whose Neuron driver runs the
    training image's runtime (``trainium_job.neuron_stack.NEURON_STACK``)."""
    for release in NEURON_AMI_RELEASES:
        if kubernetes_version in release.release_versions and NEURON_STACK.supports_driver(
            release.neuron_driver
        ):
            return release.release_versions[kubernetes_version]
    raise KeyError(
        f"no known EKS Neuron AMI release for Kubernetes {kubernetes_version} with a driver {NEURON_STACK.driver_range}"
    )
