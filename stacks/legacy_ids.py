"""Logical IDs that would follow the platform stack's construct ID, pinned to the former one.

aws-cdk-lib names a security-group rule that references its own group after that group's unique
ID (``from <unique id>:<port>``), and a unique ID includes the stack's construct ID. The platform
stack's construct ID was ``TrainiumPlatform`` until it became the stack's name (so that the CLI
selects it by that name). A rule whose logical ID changed would be created anew before the old
one is deleted: EC2 refuses the duplicate rule and the deployment fails. These rules keep the
IDs they had; nothing else in the template depends on the stack's construct ID.
"""

from __future__ import annotations

import hashlib
import re

from aws_cdk import Names, Stack
from aws_cdk import aws_ec2 as ec2
from constructs import IConstruct

#: The platform stack's construct ID before it was its name.
FORMER_CONSTRUCT_ID = "TrainiumPlatform"

# aws-cdk-lib's unique-ID scheme (core/lib/private/uniqueid.ts, makeUniqueId): path components
# without "Default", a human part without "Resource" components, consecutive duplicates and
# non-alphanumerics, then the first 8 hex digits (upper case) of the MD5 of the "/"-joined path.
_HIDDEN = "Default"
_HIDDEN_FROM_HUMAN = "Resource"
_HASH_LEN = 8
_MAX_HUMAN_LEN = 240


def unique_id(components: list[str]) -> str:
    """aws-cdk-lib's unique ID of a construct path (a logical ID for a stack-relative path)."""
    path = [c for c in components if c != _HIDDEN]
    digest = hashlib.md5("/".join(path).encode(), usedforsecurity=False).hexdigest()[:_HASH_LEN].upper()
    human: list[str] = []
    for component in path:
        if component != _HIDDEN_FROM_HUMAN and (not human or human[-1] != component):
            human.append(component)
    return "".join(re.sub(r"[^A-Za-z0-9]", "", c) for c in human)[:_MAX_HUMAN_LEN] + digest


def keep_self_rule_ids(stack: Stack, former_id: str = FORMER_CONSTRUCT_ID) -> list[str]:
    """Give every self-referencing security-group rule under ``stack`` the logical ID it had when
    the stack's construct ID was ``former_id``; returns those IDs."""
    kept = []
    for construct in stack.node.find_all():
        if not isinstance(construct, ec2.CfnSecurityGroupIngress | ec2.CfnSecurityGroupEgress):
            continue
        group = construct.node.scope
        if not isinstance(group, ec2.SecurityGroup):
            continue
        current = Names.unique_id(group)
        if current not in construct.node.id:
            continue
        former_group = unique_id([former_id, *_relative_path(stack, group)])
        path = [*_relative_path(stack, group), construct.node.id.replace(current, former_group)]
        logical_id = unique_id(path)
        construct.override_logical_id(logical_id)
        kept.append(logical_id)
    return kept


def _relative_path(stack: Stack, construct: IConstruct) -> list[str]:
    # From the paths, not the scopes: two reads through the jsii kernel instead of two per scope.
    return construct.node.path.removeprefix(stack.node.path + "/").split("/")
