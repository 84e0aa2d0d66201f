"""What the constructs accept for the objects they are given: one cluster type, an ``aws_eks_v2``
cluster (``eks.ICluster``), and a VPC object (``ec2.IVpc``).

A cluster of the user's own (``eks.Cluster``), one imported by attributes
(``eks.Cluster.from_cluster_attributes``) and :class:`~trainium_eks.TrainiumCluster`'s ``.cluster``
all qualify, as in aws-eks-v2 and cdk-eks-blueprints. The wrapper itself, or a cluster of the
older ``aws_eks`` module, is refused at synth with the field's name and the fix instead of an
``AttributeError`` (or jsii's deserialization error) deep inside a constructor.
"""

from __future__ import annotations

import re
from typing import TypeAlias, Union, overload

from aws_cdk import Stack, Token
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from constructs import IConstruct

from trainium_job.errors import ConfigError

#: What a ``cluster`` prop accepts. ``eks.Cluster`` is listed beside ``eks.ICluster`` because
#: aws-cdk-lib's Python bindings leave ``kubectl_provider_options`` off the class, so a type
#: checker does not see that a ``Cluster`` implements the interface (at run time it does).
AnyCluster: TypeAlias = Union[eks.ICluster, eks.Cluster]  # noqa: UP007 (jsii classes)


def require_cluster(value: object, field: str = "cluster") -> eks.ICluster:
    """``value`` as an ``eks.ICluster``, or :class:`ConfigError` naming ``field`` and the fix."""
    # jsii proxies of imported clusters are instances of neither class: they carry the interface's
    # members, of which every construct here reads cluster_name and the kubectl provider.
    if isinstance(value, eks.Cluster) or (
        hasattr(value, "cluster_name") and hasattr(value, "kubectl_provider") and hasattr(value, "node")
    ):
        return value  # type: ignore[return-value]
    if hasattr(value, "cluster") and isinstance(getattr(value, "cluster", None), eks.Cluster):
        kind = type(value).__name__
        raise ConfigError(field, kind, f"pass the aws_eks_v2 cluster itself: {field}=<your {kind}>.cluster")
    raise ConfigError(
        field,
        type(value).__name__,
        "give an aws_cdk.aws_eks_v2 cluster (eks.Cluster, eks.Cluster.from_cluster_attributes(...), "
        "or TrainiumCluster(...).cluster); clusters of the older aws_eks module are not supported",
    )


def kubernetes_version_of(cluster: eks.ICluster) -> str | None:
    """The Kubernetes ``major.minor`` of a cluster defined in this app, or None (an imported
    cluster, or a version that is a token): read from its ``AWS::EKS::Cluster`` resource."""
    child = cluster.node.default_child
    version = getattr(child, "version", None) if isinstance(child, eks.CfnCluster) else None
    if not isinstance(version, str) or Token.is_unresolved(version):
        return None
    return version


def check_stack_region(scope: IConstruct, region: str, *, owner: str) -> None:
    """The configuration's ``region`` is the region of the stack ``scope`` is in, when the stack
    names one: the configured AZ IDs, AMI and prices are that region's, and a stack elsewhere would
    fail only at deploy (subnets in AZs the region does not have)."""
    stack_region = Stack.of(scope).region
    if Token.is_unresolved(stack_region) or stack_region == region:
        return
    raise ConfigError(
        "region",
        region,
        f"{owner} is in a stack of {stack_region}: set the configuration's region (and its AZ IDs) to "
        f"{stack_region}'s, or put it in a stack with env=cdk.Environment(region={region!r})",
    )


def require_vpc(value: object, field: str = "vpc") -> ec2.IVpc:
    """``value`` as an ``ec2.IVpc``, or :class:`ConfigError` naming ``field`` and the fix (a VPC
    ID string is the common slip: jsii would answer with its deserialization error)."""
    if hasattr(value, "vpc_id") and hasattr(value, "node"):
        return value  # type: ignore[return-value]
    if isinstance(value, str):
        fix = (
            "give an ec2.IVpc, not its ID: ec2.Vpc.from_lookup(scope, 'Vpc', vpc_id=...) or "
            "ec2.Vpc.from_vpc_attributes(...); TrainiumPlatform takes the ID as existing_vpc_id"
        )
    else:
        fix = "give an ec2.IVpc (ec2.Vpc(...), or ec2.Vpc.from_lookup / from_vpc_attributes)"
    raise ConfigError(field, value, fix)


#: AZ-ID prefixes: ``<country><qualifier><direction><n>`` (``us-west-2`` -> ``usw2``, ``us-gov-west-1``
#: -> ``usgw1``), the IDs ``aws ec2 describe-availability-zones`` returns.
_DIRECTIONS = {
    "north": "n",
    "south": "s",
    "east": "e",
    "west": "w",
    "central": "c",
    "northeast": "ne",
    "northwest": "nw",
    "southeast": "se",
    "southwest": "sw",
}
_QUALIFIERS = {"gov": "g"}


def az_id_prefix(region: str) -> str | None:
    """The AZ-ID prefix AWS uses for ``region`` (``us-west-2`` -> ``usw2``), if derivable."""
    parts = region.split("-")
    if len(parts) not in (3, 4) or parts[-2] not in _DIRECTIONS or not parts[-1].isdigit():
        return None
    if len(parts) == 4 and parts[1] not in _QUALIFIERS:
        return None
    middle = _QUALIFIERS[parts[1]] if len(parts) == 4 else ""
    return f"{parts[0]}{middle}{_DIRECTIONS[parts[-2]]}{parts[-1]}"


_AZ_NAME_REGION = re.compile(r"^([a-z]{2}(?:-[a-z]+)+-[0-9])[a-z]+$")


def check_subnet_az(subnet: ec2.ISubnet, az_id: str, *, field: str) -> None:
    """``subnet`` lies in ``az_id`` as far as synth can tell: its ``AvailabilityZoneId`` where it
    declares one; else the region of its AZ name against the AZ ID's (names map to IDs per account,
    so a name of the right region is not checked further). Unresolved tokens are skipped."""
    if Token.is_unresolved(az_id):
        return
    child = subnet.node.default_child
    declared = getattr(child, "availability_zone_id", None) if isinstance(child, ec2.CfnSubnet) else None
    where = subnet.subnet_id if not Token.is_unresolved(subnet.subnet_id) else subnet.node.path
    if isinstance(declared, str) and not Token.is_unresolved(declared):
        if declared != az_id:
            raise ConfigError(
                field,
                az_id,
                f"the Trainium subnet {where} is in {declared}: put the subnet in {az_id}, or give {declared}",
            )
        return
    try:
        name = subnet.availability_zone
    except Exception:  # an imported subnet given without its AZ: aws-cdk-lib refuses to guess
        return
    match = _AZ_NAME_REGION.match(name) if isinstance(name, str) and not Token.is_unresolved(name) else None
    prefix = az_id_prefix(match.group(1)) if match else None
    if prefix is not None and not az_id.startswith(prefix + "-"):
        raise ConfigError(
            field,
            az_id,
            f"the Trainium subnet {where} is in {name}, a zone of {match.group(1) if match else '?'}: "
            f"give one of its AZ IDs ({prefix}-az<n>; `aws ec2 describe-availability-zones` maps names to IDs)",
        )


class ClusterArgument:
    """A dataclass field that takes any ``aws_eks_v2`` cluster (:data:`AnyCluster`, checked by
    :func:`require_cluster`) and reads back as ``eks.ICluster``: what ``eks.KubernetesManifest`` and
    every other ``cluster=`` prop take, so a caller passes it on without a cast (jsii's
    ``eks.Cluster`` class is not seen as an ``ICluster`` by a type checker). Declare it as
    ``cluster: ClusterArgument = ClusterArgument()``: the field stays required."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._field = f"{owner.__name__}.{name}"
        self._slot = f"_{name}_value"

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> ClusterArgument: ...
    @overload
    def __get__(self, obj: object, owner: type | None = None) -> eks.ICluster: ...
    def __get__(self, obj: object | None, owner: type | None = None) -> eks.ICluster | ClusterArgument:
        if obj is None:
            # Read on the class (the dataclass machinery looking for a default): there is none.
            raise AttributeError(self._field)
        return getattr(obj, self._slot)

    def __set__(self, obj: object, value: AnyCluster) -> None:
        # object.__setattr__: also on frozen dataclasses, whose own __init__ sets fields this way.
        object.__setattr__(obj, self._slot, require_cluster(value, self._field))
