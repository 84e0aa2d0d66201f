"""Which Kubernetes versions each pinned component declares itself compatible with, with sources.

One row per component, one cell per Kubernetes version of :data:`~trainium_eks.versions.KUBERNETES_RELEASES`.
The managed add-ons' rows are :data:`~trainium_eks.versions.ADDON_EVIDENCE` (EKS offers an
add-on version per Kubernetes version). The default Kubernetes version is the newest on which
every component is declared compatible (tested); for another version the synth review prints a
``warning:`` line per component that is not, with its source.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .versions import (
    ADDON_EVIDENCE,
    ADDON_PINS,
    KUBERNETES_RELEASES,
    default_neuron_ami_release,
    neuron_ami_release,
)


@dataclass(frozen=True)
class Declared:
    """What a component's own project says about one Kubernetes version.

    Attributes:
        compatible: True where it declares full compatibility (or a range that holds the version).
        source: where it says so (repository@commit:path:line, or a documentation page).
    """

    compatible: bool
    source: str


_VOLCANO_1_15 = Declared(
    True,
    "volcano-sh/volcano@v1.15.0:README.md:186 (Kubernetes compatibility: 'Volcano v1.15' row, ✓ down to 1.24)",
)
_FSX_1_17 = Declared(
    True,
    "kubernetes-sigs/aws-fsx-csi-driver index.yaml entry of chart 1.17.0: kubeVersion '>=1.20.0-0'; "
    "docs/README.md compatibility matrix: driver v1.9.0 on 'v1.20+'",
)
_EFA = Declared(
    True,
    "aws/eks-charts@bfe91c4:stable/aws-efa-k8s-device-plugin/Chart.yaml declares no kubeVersion; EKS "
    "User Guide, 'Manage EFA devices on Amazon EKS': the device plugin runs on all EKS-supported versions",
)
_KUBE_PROMETHEUS_STACK = Declared(
    True,
    "prometheus-community/helm-charts@ea930bae:charts/kube-prometheus-stack/Chart.yaml "
    "(kube-prometheus-stack-88.5.3): kubeVersion '>=1.25.0-0'; its grafana 12.11.1 subchart "
    "declares '^1.25.0-0'",
)
_NEURON = Declared(
    True,
    "neuron-helm-chart 1.10.0 declares no kubeVersion; EKS User Guide, 'Manage Neuron devices on Amazon "
    "EKS': the device plugin remains supported (its optional scheduler extension bundles kube-scheduler "
    "v1.31.12 and stays off)",
)

#: The CRDs come from the same release as the controller: one row each, one source.
_KARPENTER_1_14 = Declared(
    True,
    "aws/karpenter-provider-aws@1d927085:website/content/en/v1.14/upgrading/compatibility.md:18-20 "
    "(1.34: >= 1.6, 1.35: >= 1.9, 1.36: >= 1.13)",
)


def _kubectl(minor: int, kubectl: str, layer: str) -> Declared:
    return Declared(
        True,
        f"aws-cdk.lambda-layer-kubectl-v{minor} {layer} README: 'Kubectl Version: {kubectl}' (kubectl "
        "supports the API server's minor version, Kubernetes version skew policy)",
    )


def _neuron_ami(kubernetes_version: str) -> Declared:
    """The pinned EKS Neuron AMI release for ``kubernetes_version`` (its driver runs the image's
    Neuron runtime: :func:`trainium_eks.versions.default_neuron_ami_release`)."""
    release = default_neuron_ami_release(kubernetes_version)
    found = neuron_ami_release(release)
    assert found is not None, release
    return Declared(
        True,
        f"awslabs/amazon-eks-ami@81fec2e8:CHANGELOG.md, release {found.tag}: AL2023_x86_64_NEURON {release}",
    )


#: Component -> Kubernetes version -> declaration. Charts are keyed as in ``ADDON_PINS``.
KUBERNETES_COMPATIBILITY: dict[str, dict[str, Declared]] = {
    "volcano": {
        "1.34": _VOLCANO_1_15,
        "1.35": _VOLCANO_1_15,
        "1.36": Declared(
            False,
            "volcano-sh/volcano@ed72c7c81:README.md:191 ('Volcano v1.15' row: '-' for Kubernetes 1.36, "
            '"the Kubernetes version has features or API objects that Volcano can\'t use"; only master is ✓)',
        ),
    },
    "fsx-csi-driver": {"1.34": _FSX_1_17, "1.35": _FSX_1_17, "1.36": _FSX_1_17},
    "efa": {"1.34": _EFA, "1.35": _EFA, "1.36": _EFA},
    "neuron": {"1.34": _NEURON, "1.35": _NEURON, "1.36": _NEURON},
    "kube-prometheus-stack": {v: _KUBE_PROMETHEUS_STACK for v in ("1.34", "1.35", "1.36")},
    "karpenter": {v: _KARPENTER_1_14 for v in ("1.34", "1.35", "1.36")},
    "karpenter-crd": {v: _KARPENTER_1_14 for v in ("1.34", "1.35", "1.36")},
    "kubectl-layer": {
        "1.34": _kubectl(34, "1.34.0", "2.2.2"),
        "1.35": _kubectl(35, "1.35.2", "2.2.2"),
        "1.36": _kubectl(36, "1.36.3", "2.0.1"),
    },
    "neuron-ami": {
        "1.34": _neuron_ami("1.34"),
        "1.35": _neuron_ami("1.35"),
        "1.36": _neuron_ami("1.36"),
    },
}


def declared(component: str, kubernetes_version: str) -> Declared:
    """What ``component`` (a key of :data:`KUBERNETES_COMPATIBILITY` or of ``ADDON_EVIDENCE``)
    declares for ``kubernetes_version``; not compatible where nothing was found."""
    if component in ADDON_EVIDENCE:
        evidence = ADDON_EVIDENCE[component].get(kubernetes_version)
        if evidence is None:
            return Declared(
                False, f"no published evidence that EKS offers it for Kubernetes {kubernetes_version}"
            )
        return Declared(True, evidence)
    cell = KUBERNETES_COMPATIBILITY[component].get(kubernetes_version)
    return cell or Declared(False, f"no declaration found for Kubernetes {kubernetes_version}")


def components() -> tuple[str, ...]:
    """Every component with a row: the table's, then the managed add-ons'."""
    return (*KUBERNETES_COMPATIBILITY, *ADDON_EVIDENCE)


def not_compatible(kubernetes_version: str, among: Iterable[str]) -> list[tuple[str, Declared]]:
    """(component, declaration) of each of ``among`` not declared compatible with the version."""
    return [(c, d) for c in among if not (d := declared(c, kubernetes_version)).compatible]


def newest_compatible_version() -> str:
    """The newest Kubernetes version of ``KUBERNETES_RELEASES`` on which every component is
    declared compatible."""
    for version in reversed(KUBERNETES_RELEASES):
        if not not_compatible(version, components()):
            return version
    raise LookupError("no Kubernetes version on which every pinned component is declared compatible")


def label(component: str) -> str:
    """A component as the review names it: its pin (``volcano 1.15.0``) or its kind."""
    if component in ADDON_PINS:
        pin = ADDON_PINS[component]
        return f"{pin.name} {pin.version}"
    return {"kubectl-layer": "the kubectl layer", "neuron-ami": "the EKS AL2023 Neuron AMI"}[component]
