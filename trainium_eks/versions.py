"""Pinned versions: the one table of what the platform deploys.

Kubernetes and its kubectl layer are pinned together: the cluster's version must have both an
``aws_eks_v2.KubernetesVersion`` member in the pinned aws-cdk-lib and a
``aws-cdk.lambda-layer-kubectl-vNN`` package (pinned in requirements.txt).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypedDict

from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_lambda
from constructs import Construct

from trainium_job.allocatable import Resources
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


@dataclass(frozen=True)
class CpuNodeRange:
    """CPU nodes a Karpenter NodePool launches in any size of one instance family up to a largest
    one, under a vCPU limit (the most vCPUs of its nodes at once, whatever runs on them).

    Attributes:
        family: the instance family (requirement ``karpenter.k8s.aws/instance-family``).
        largest: the largest type it launches, of ``largest_vcpus`` vCPUs (requirement
            ``karpenter.k8s.aws/instance-cpu`` at most that).
        largest_allocatable: what Karpenter takes a node of ``largest`` to offer pods: it launches a
            node for a pod only if the pod and the node's DaemonSets fit in this.
        limit_vcpus: the NodePool's ``limits.cpu``.
    """

    family: str
    largest: str
    largest_vcpus: int
    largest_allocatable: Resources
    limit_vcpus: int


#: With ``trainium_capacity=karpenter``: the nodes Karpenter launches for the dataset preparation
#: pods (``preparation_enabled``), so that CPU work never starts a Trainium node. m7i up to
#: m7i.12xlarge (48 vCPU, 192 GiB: 4 GiB per vCPU, twice a preparation pod's 2 GiB per CPU), at
#: most 192 vCPUs at once: 4 x m7i.12xlarge, $9.68/h at m7i's list price of $0.0504 per vCPU-hour
#: (``trainium_eks.report.prices``), against $21.50/h for one trn1.32xlarge. The platform's own
#: fact, not a key: the training stack refuses a preparation that does not fit under it
#: (``trainium_eks.jobs.dataset_preparation.check_preparation_nodes``). m7i.12xlarge's
#: allocatable is Karpenter's (aws/karpenter-provider-aws@1d927085, v1.14.1,
#: website/content/en/v1.14/reference/instance-types.md L20379-20406: cpu 47810m, memory
#: 178933Mi, pods 234).
PREPARATION_NODES = CpuNodeRange(
    family="m7i",
    largest="m7i.12xlarge",
    largest_vcpus=48,
    largest_allocatable=Resources(millicpu=47810, memory_mib=178933, pods=234),
    limit_vcpus=192,
)

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
class Declared:
    """What a component's own project (or, for an EKS managed add-on, a published configuration)
    says about one Kubernetes version.

    Attributes:
        compatible: True where it declares full compatibility (or a range that holds the version).
        source: where it says so (repository@commit:path:line, or a documentation page).
    """

    compatible: bool
    source: str


@dataclass(frozen=True)
class AddonPin:
    """One pinned cluster component: a Helm chart, an EKS managed add-on or a container image.

    Each is declared in the module that installs it (an add-on's in its ``trainium_eks.addons``
    module), with the evidence it rests on; :data:`trainium_eks.compatibility.PINS` lists them all.

    Attributes:
        name: Helm chart name, EKS add-on name, or image repository.
        version: chart version, add-on version (``vX.Y.Z-eksbuild.N``), or image tag.
        repository: Helm repository (``https://`` index or the chart's ``oci://`` reference);
            ``None`` for managed add-ons and images.
        evidence: for a chart, its index entry (:class:`ChartEvidence`); every chart pin has one
            (tested).
        compatibility: Kubernetes minor -> what the component declares for it (:class:`Declared`):
            a chart's own declaration, or where a managed add-on's version was seen offered by EKS
            for that Kubernetes version. A version without a row is not declared compatible.
            Default: no rows (images).
        managed: an EKS managed add-on, whose versions EKS offers per Kubernetes version: a
            version without a row has no evidence that EKS offers the pin there (optional add-ons
            are refused on it, always-on ones flagged). Default False.
    """

    name: str
    version: str
    repository: str | None = None
    evidence: ChartEvidence | None = None
    compatibility: Mapping[str, Declared] = field(default_factory=dict, hash=False)
    managed: bool = False

    @property
    def image(self) -> str:
        """``name:version``, for image pins."""
        return f"{self.name}:{self.version}"

    def chart_props(self) -> ChartSource:
        """``repository``/``chart``/``version`` keyword arguments of ``aws_eks_v2.HelmChart``."""
        if self.repository is None:
            raise ValueError(f"{self.name}: not a Helm chart pin (no repository)")
        return ChartSource(repository=self.repository, chart=self.name, version=self.version)


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
