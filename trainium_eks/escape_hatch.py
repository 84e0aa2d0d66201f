"""Typed access to the CloudFormation (L1) resource under an aws-cdk-lib (L2) construct.

``node.default_child`` and ``node.find_child`` are typed ``IConstruct | None``; the platform reaches
through them for properties the L2 constructs do not expose (aws-cdk-lib's "escape hatches"). These
functions check what they return, so a renamed child in a later aws-cdk-lib fails at synth with the
construct's path instead of an ``AttributeError`` on ``None``.
"""

from __future__ import annotations

from typing import TypeVar, overload

from aws_cdk import CfnResource
from aws_cdk import aws_eks_v2 as eks
from constructs import IConstruct

T = TypeVar("T")


@overload
def l1(construct: IConstruct) -> CfnResource: ...
@overload
def l1(construct: IConstruct, kind: type[T]) -> T: ...


def l1(construct: IConstruct, kind: type[object] = CfnResource) -> object:
    """The L1 resource that ``construct`` wraps, checked to be a ``kind``."""
    child = construct.node.default_child
    if not isinstance(child, kind):
        raise TypeError(
            f"{construct.node.path}: its default child is {type(child).__name__}, not {kind.__name__}"
        )
    return child


def descendant(construct: IConstruct, path: str, kind: type[T]) -> T:
    """The construct at ``path`` (``A/B/C``) below ``construct``, checked to be a ``kind``."""
    found: IConstruct = construct
    for part in path.split("/"):
        found = found.node.find_child(part)
    if not isinstance(found, kind):
        raise TypeError(f"{found.node.path}: is {type(found).__name__}, not {kind.__name__}")
    return found


def as_icluster(cluster: eks.Cluster) -> eks.ICluster:
    """``cluster`` typed as the ``ICluster`` it implements.

    aws-cdk-lib's Python bindings declare ``kubectl_provider_options`` on ``ICluster`` but not on
    ``Cluster`` (an optional interface property that jsii leaves off the class), so a type checker
    does not see that a ``Cluster`` is an ``ICluster``; at run time it is one.
    """
    return cluster  # type: ignore[return-value]
