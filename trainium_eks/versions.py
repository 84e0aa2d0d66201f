"""Pinned versions: the one table of what the platform deploys.

Kubernetes and its kubectl layer are pinned together: the cluster's version must have both an
``aws_eks_v2.KubernetesVersion`` member in the pinned aws-cdk-lib and a
``aws-cdk.lambda-layer-kubectl-vNN`` package (pinned in requirements.txt).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

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

# [storage] pinned versions (FSx CSI driver add-on/chart) go here.
# [addons] pinned Helm charts, managed add-ons and images go here.
