"""Every pinned component, and which Kubernetes versions each declares itself compatible with.

Each pin is declared, with its evidence and its rows, in the module that installs it: an add-on's
in its ``trainium_eks.addons`` module (its ``ADDON`` declaration lists them), the platform's own
parts' beside their constructs (the VPC CNI, the FSx CSI driver, Karpenter). This module gathers
them into :data:`PINS` and adds the two rows no pin carries: the kubectl layer and the EKS Neuron
AMI. The default Kubernetes version is the newest on which every component is declared compatible
(tested); for another version the synth review prints a ``warning:`` line per component that is
not, with its source.
"""

from __future__ import annotations

from collections.abc import Iterable

from .addons.registry import ADDONS
from .cluster.eks_cluster import VPC_CNI
from .nodes import karpenter
from .storage import fsx_csi
from .versions import (
    KUBERNETES_RELEASES,
    AddonPin,
    Declared,
    default_neuron_ami_release,
    neuron_ami_release,
)

__all__ = ["KUBERNETES_COMPATIBILITY", "PINS"]

#: Every pinned component by key (how the review, the configuration checks and the compatibility
#: rows name it): the platform's own parts', then each add-on's in the registry's order.
PINS: dict[str, AddonPin] = {
    "vpc-cni": VPC_CNI,
    "fsx-csi-driver": fsx_csi.CHART,
    "karpenter-crd": karpenter.CRD_CHART,
    "karpenter": karpenter.CHART,
    **{key: pin for addon in ADDONS for key, pin in addon.pins.items()},
}


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


#: The rows no pin carries: the kubectl layer of each version, and the Neuron AMI release pinned for it.
_UNPINNED: dict[str, dict[str, Declared]] = {
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

#: Component -> Kubernetes version -> declaration, for the charts, the kubectl layer and the
#: Neuron AMI (the managed add-ons' evidence is on their pins: :func:`declared` reads both).
KUBERNETES_COMPATIBILITY: dict[str, dict[str, Declared]] = {
    **{key: dict(pin.compatibility) for key, pin in PINS.items() if pin.repository is not None},
    **_UNPINNED,
}


def declared(component: str, kubernetes_version: str) -> Declared:
    """What ``component`` (a key of :data:`PINS` with rows, or of the unpinned rows) declares for
    ``kubernetes_version``; not compatible where nothing was found."""
    rows = PINS[component].compatibility if component in PINS else _UNPINNED[component]
    cell = rows.get(kubernetes_version)
    if cell is not None:
        return cell
    if component in PINS and PINS[component].managed:
        return Declared(
            False, f"no published evidence that EKS offers it for Kubernetes {kubernetes_version}"
        )
    return Declared(False, f"no declaration found for Kubernetes {kubernetes_version}")


def components() -> tuple[str, ...]:
    """Every component with rows: the pins' (charts and managed add-ons; images have none), then
    the kubectl layer and the Neuron AMI."""
    return (*(key for key, pin in PINS.items() if pin.compatibility), *_UNPINNED)


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
    if component in PINS:
        pin = PINS[component]
        return f"{pin.name} {pin.version}"
    return {"kubectl-layer": "the kubectl layer", "neuron-ami": "the EKS AL2023 Neuron AMI"}[component]
