"""Deployment checks of the platform's configuration: each field, and the rules between fields.

Every check raises :class:`ConfigError` naming the context key the user typed, its value and the
fix. The ``training_*`` keys: :mod:`.job_checks`.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
import unicodedata
from typing import Any

from aws_cdk.region_info import RegionInfo

from trainium_job import checks
from trainium_job.errors import ConfigError
from trainium_job.instances import INSTANCE_FACTS
from trainium_job.naming import DNS1123_LABEL, HASH_CHARS, MAX_LABEL

from ..fsx import DEPLOYMENT_TYPES as FSX_DEPLOYMENT_TYPES
from ..fsx import resolved_throughput as fsx_resolved_throughput
from ..fsx import s3_uri_problem as fsx_s3_uri_problem
from ..fsx import s3_uris_overlap as fsx_s3_uris_overlap
from ..fsx import storage_capacity_problem as fsx_storage_capacity_problem
from ..fsx import throughput_problem as fsx_throughput_problem
from ..network import subnet_layout_problem
from ..versions import ADDON_EVIDENCE, ADDON_PINS, KUBERNETES_RELEASES
from .job_checks import validate_training
from .schema import PlatformSettings

OPTIONAL_ADDONS = {"container_insights": "cloudwatch-observability", "etcd_enabled": "ebs-csi-driver"}
#: Managed add-ons the platform always installs.
ALWAYS_ON_ADDONS = ("pod-identity-agent", "node-monitoring-agent", "vpc-cni")


def unverified_addons(kubernetes_version: str) -> list[str]:
    """Always-on managed add-on pins with no published evidence for ``kubernetes_version``."""
    return [
        f"{ADDON_PINS[k].name} {ADDON_PINS[k].version}"
        for k in ALWAYS_ON_ADDONS
        if kubernetes_version not in ADDON_EVIDENCE[k]
    ]


EFA_LAYOUTS = ("efa", "efa-only")
CAPACITY_TYPES = ("on-demand", "capacity-block")

_AZ_ID = re.compile(r"^[a-z]{2,6}[0-9]-az[0-9]+$")
_AZ_NAME = re.compile(r"^[a-z]{2}(-[a-z]+)+-[0-9][a-z]$")
_REGION = re.compile(r"^[a-z]{2,4}(-[a-z]+)+-[0-9]$")
_ROLE_OR_USER_ARN = re.compile(r"^arn:(aws[a-z-]*):iam::[0-9]{12}:(role|user)/[\w+=,.@/-]{1,512}$")
_CAPACITY_RESERVATION = re.compile(r"^cr-[0-9a-f]{17}$")
_NAME_PREFIX = re.compile(r"^[a-z][a-z0-9-]{0,19}$")
_VPC_ID = re.compile(r"^vpc-[0-9a-f]{8}([0-9a-f]{9})?$")
_SUBNET_ID = re.compile(r"^subnet-[0-9a-f]{8}([0-9a-f]{9})?$")
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
#: Partitions whose AZ-ID scheme is verified: ``<country><direction><n>`` (``usw2-az4``,
#: ``cnnw1-az1``) and GovCloud's ``us-gov-west-1`` -> ``usgw1`` (the IDs ``aws ec2
#: describe-availability-zones`` returns there). Trainium is offered in none of the others.
AZ_ID_PARTITIONS = ("aws", "aws-cn", "aws-us-gov")
#: Partitions the platform deploys to: aws-cn lacks EKS Pod Identity (EKS user guide, "EKS Pod
#: Identities": not available in China regions).
SUPPORTED_PARTITIONS = ("aws", "aws-us-gov")
_QUALIFIERS = {"gov": "g"}

# What AWS enforces on tags (Tagging AWS resources, "Tag naming limits and requirements"):
# 50 user tags per resource, keys 1-128 and values 0-256 Unicode characters of letters,
# digits, white space and _ . : / = + - @, and the `aws:` prefix reserved in any letter case.
MAX_TAGS = 50
#: Tag keys the platform sets itself on some resources (the launch template's Name).
PLATFORM_TAG_KEYS = ("Name",)
MAX_TAG_KEY, MAX_TAG_VALUE = 128, 256
_TAG_PUNCTUATION = set("_.:/=+-@")
#: Largest share of the IPv4 space the public endpoint may be opened to without the opt-in:
#: 2**24 addresses (one /8, 1/256 of IPv4); an organisation's egress ranges are far smaller.
MAX_PUBLIC_ENDPOINT_ADDRESSES = 2**24


def region_partition(region: str) -> str | None:
    """The partition of ``region`` from aws-cdk-lib's region facts, or None for an unknown region."""
    if region not in {r.name for r in RegionInfo.regions}:
        return None
    return RegionInfo.get(region).partition


def az_id_prefix(region: str) -> str | None:
    """The AZ-ID prefix AWS uses for ``region`` (``us-west-2`` -> ``usw2``), if derivable."""
    parts = region.split("-")
    if len(parts) not in (3, 4) or parts[-2] not in _DIRECTIONS or not parts[-1].isdigit():
        return None
    if len(parts) == 4 and parts[1] not in _QUALIFIERS:
        return None
    middle = _QUALIFIERS[parts[1]] if len(parts) == 4 else ""
    return f"{parts[0]}{middle}{_DIRECTIONS[parts[-2]]}{parts[-1]}"


def _tag_text_ok(text: str) -> bool:
    return all(ch in _TAG_PUNCTUATION or unicodedata.category(ch)[0] in "LNZ" for ch in text)


def tag_problem(key: Any, value: Any) -> str | None:
    """Why AWS would refuse the tag ``key``=``value`` (None when it is valid)."""
    if not isinstance(key, str) or not isinstance(value, str):
        return "tag keys and values are strings"
    if not 1 <= len(key) <= MAX_TAG_KEY:
        return f"tag keys are 1-{MAX_TAG_KEY} characters"
    if len(value) > MAX_TAG_VALUE:
        return f"tag values are at most {MAX_TAG_VALUE} characters"
    if key.lower().startswith("aws:"):
        return "the 'aws:' prefix is reserved for AWS"
    if key in PLATFORM_TAG_KEYS:
        return f"the platform sets '{key}' itself; use another key"
    if not _tag_text_ok(key) or not _tag_text_ok(value):
        return "use letters, digits, spaces and _ . : / = + - @ only"
    return None


#: Every name built from ``name_prefix``: (what, how it is built, the service's rule, max length).
#: Stack names: CloudFormation; repository names: ECR (each path component); the job name:
#: a DNS-1123 label, which also leaves room for its pods' ``-worker-<i>`` host-name suffix.
_STACK_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9-]*$")
_ECR_COMPONENT = re.compile(r"^[a-z0-9]+(?:[._-][a-z0-9]+)*$")


def name_prefix_problem(prefix: str, nodes: int) -> str | None:
    """Why a name built from ``prefix`` would be refused (None when all are valid)."""
    pod_suffix = len(f"-worker-{max(nodes - 1, 0)}")
    derived = (
        ("CloudFormation stack name", f"{prefix}-platform", _STACK_NAME, 128),
        ("ECR repository name", f"{prefix}/training", None, 256),
        ("Volcano job name", f"{prefix}-{'0' * HASH_CHARS}", DNS1123_LABEL, MAX_LABEL - pod_suffix),
    )
    for what, name, rule, max_len in derived:
        ok = (
            all(_ECR_COMPONENT.match(part) for part in name.split("/"))
            if rule is None
            else bool(rule.match(name))
        )
        if not ok or len(name) > max_len:
            return (
                f"the {what} '{name}' built from it is invalid; use lower-case letters and digits "
                f"with single '-' between them, starting with a letter"
            )
    return None


def validate(c: PlatformSettings) -> None:
    """Every deployment check of ``c``; ConfigError naming the key the user typed."""
    if not _REGION.match(c.region):
        raise ConfigError("region", c.region, "use an AWS region code such as 'us-west-2'")
    partition = region_partition(c.region)
    if partition is None:
        raise ConfigError("region", c.region, "not an AWS region aws-cdk-lib knows; check the spelling")
    if partition not in SUPPORTED_PARTITIONS:
        why = (
            "EKS Pod Identity, which the add-ons' credentials use, is not offered in China regions"
            if partition == "aws-cn"
            else f"its partition {partition} is not supported"
        )
        raise ConfigError("region", c.region, f"{why}; use a region of {', '.join(SUPPORTED_PARTITIONS)}")
    for name, value in ((f.name, getattr(c, f.name)) for f in dataclasses.fields(c)):
        if isinstance(value, tuple):
            seen = set()
            for item in value:
                if item in seen:
                    raise ConfigError(name, item, "listed twice; give each entry once")
                seen.add(item)
    _validate_azs(c)
    _validate_nodes(c)
    _validate_access(c, partition)
    _validate_capacity(c)
    if not _NAME_PREFIX.match(c.name_prefix):
        raise ConfigError(
            "name_prefix", c.name_prefix, "use 1-20 lower-case letters, digits or '-', starting with a letter"
        )
    problem = name_prefix_problem(c.name_prefix, c.desired_nodes)
    if problem:
        raise ConfigError("name_prefix", c.name_prefix, problem)
    _validate_network(c)
    if not 1 <= c.system_nodes <= 10:
        raise ConfigError("system_nodes", c.system_nodes, "use 1 to 10")
    _validate_storage(c)
    _validate_addons(c)
    validate_training(c)
    _validate_tags(c)


def _validate_azs(c: PlatformSettings) -> None:
    """Two different AZ IDs (not names) of the region."""
    for name in ("trainium_az_id", "second_az_id"):
        value = getattr(c, name)
        if _AZ_NAME.match(value):
            raise ConfigError(
                name,
                value,
                "this is an AZ name; give the AZ ID (e.g. 'usw2-az4'), "
                "see `aws ec2 describe-availability-zones`",
            )
        if not _AZ_ID.match(value):
            raise ConfigError(name, value, "give an AZ ID such as 'usw2-az4'")
        prefix = az_id_prefix(c.region)
        if prefix is None:
            raise ConfigError(
                "region",
                c.region,
                "no AZ-ID scheme is known for it; use a region such as us-west-2 or us-gov-west-1",
            )
        if not value.startswith(prefix + "-"):
            raise ConfigError(name, value, f"AZ IDs of region {c.region} start with '{prefix}-'")
    if c.trainium_az_id == c.second_az_id:
        raise ConfigError(
            "second_az_id",
            c.second_az_id,
            "must differ from trainium_az_id: the EKS control plane needs two AZs",
        )


def _validate_nodes(c: PlatformSettings) -> None:
    """The instance type and the Trainium nodegroup's sizes."""
    checks.one_of("instance_type", c.instance_type, INSTANCE_FACTS)
    for name in (
        "min_nodes",
        "desired_nodes",
        "max_nodes",
        "root_volume_gib",
        "nat_gateways",
        "system_nodes",
    ):
        checks.whole_number(name, getattr(c, name))
    if c.max_nodes < 1:
        raise ConfigError("max_nodes", c.max_nodes, "must be at least 1")
    if c.min_nodes < 0:
        raise ConfigError("min_nodes", c.min_nodes, "must be 0 or more")
    if c.min_nodes > c.max_nodes:
        raise ConfigError("min_nodes", c.min_nodes, f"must not exceed max_nodes ({c.max_nodes})")
    if not c.min_nodes <= c.desired_nodes <= c.max_nodes:
        raise ConfigError(
            "desired_nodes",
            c.desired_nodes,
            f"must lie between min_nodes ({c.min_nodes}) and max_nodes ({c.max_nodes})",
        )
    if c.desired_nodes == 0:
        raise ConfigError("desired_nodes", 0, "training needs at least 1 Trainium node")
    if c.max_nodes > 1 and not c.facts.multi_node:
        raise ConfigError(
            "max_nodes",
            c.max_nodes,
            f"{c.instance_type} has no EFA for multi-node training; use 1 node or "
            "trn1.32xlarge / trn1n.32xlarge / trn2.48xlarge",
        )


def _validate_access(c: PlatformSettings, partition: str) -> None:
    """Kubernetes version, public endpoint and the admin principals (of the region's partition)."""
    if c.kubernetes_version not in KUBERNETES_RELEASES:
        raise ConfigError(
            "kubernetes_version", c.kubernetes_version, f"supported: {', '.join(KUBERNETES_RELEASES)}"
        )
    _validate_endpoint(c)
    for arn in c.admin_principal_arns:
        match = _ROLE_OR_USER_ARN.match(arn)
        if not match:
            raise ConfigError(
                "admin_principal_arns",
                arn,
                f"give IAM role or user ARNs such as 'arn:{partition}:iam::123456789012:role/Admin'",
            )
        if match.group(1) != partition:
            raise ConfigError(
                "admin_principal_arns",
                arn,
                f"region {c.region} is in partition {partition}: use 'arn:{partition}:...'",
            )


def _validate_capacity(c: PlatformSettings) -> None:
    """Root volume, capacity reservation or Capacity Block, EFA layout."""
    if not 30 <= c.root_volume_gib <= 16384:
        raise ConfigError("root_volume_gib", c.root_volume_gib, "use 30 to 16384 GiB")
    checks.one_of("capacity_type", c.capacity_type, CAPACITY_TYPES)
    if c.capacity_reservation_id is not None and not _CAPACITY_RESERVATION.match(c.capacity_reservation_id):
        raise ConfigError(
            "capacity_reservation_id",
            c.capacity_reservation_id,
            "give a reservation id such as 'cr-0123456789abcdef0'",
        )
    if c.capacity_type == "capacity-block" and c.capacity_reservation_id is None:
        raise ConfigError("capacity_type", c.capacity_type, "a Capacity Block needs capacity_reservation_id")
    checks.one_of("efa_interface_layout", c.efa_interface_layout, EFA_LAYOUTS)


def _validate_network(c: PlatformSettings) -> None:
    """The created VPC's CIDR and NAT gateways, or an existing VPC and its subnets."""
    try:
        vpc_net = ipaddress.ip_network(c.vpc_cidr, strict=True)
    except ValueError:
        raise ConfigError("vpc_cidr", c.vpc_cidr, "give an IPv4 CIDR such as '10.0.0.0/16'") from None
    if vpc_net.version != 4:
        raise ConfigError(
            "vpc_cidr", c.vpc_cidr, "the VPC's primary CIDR is IPv4; give one such as '10.0.0.0/16'"
        )
    if not 16 <= vpc_net.prefixlen <= 28:
        raise ConfigError("vpc_cidr", c.vpc_cidr, "VPC CIDRs are /16 to /28 (Amazon VPC quotas); use a /16")
    if c.existing_vpc_id is None:
        problem = subnet_layout_problem(c.vpc_cidr)
        if problem:
            raise ConfigError("vpc_cidr", c.vpc_cidr, problem)
    if not 1 <= c.nat_gateways <= 2:
        raise ConfigError("nat_gateways", c.nat_gateways, "use 1 or 2")
    if c.existing_vpc_id is not None:
        if not _VPC_ID.match(c.existing_vpc_id):
            raise ConfigError("existing_vpc_id", c.existing_vpc_id, "give a VPC id such as 'vpc-0abc...'")
        if len(c.existing_private_subnet_ids) != 2:
            raise ConfigError(
                "existing_private_subnet_ids",
                list(c.existing_private_subnet_ids),
                "give two private subnet ids: the Trainium AZ's first, then the second AZ's",
            )
    elif c.existing_private_subnet_ids:
        raise ConfigError(
            "existing_private_subnet_ids",
            list(c.existing_private_subnet_ids),
            "only used together with existing_vpc_id",
        )
    for subnet in c.existing_private_subnet_ids:
        if not _SUBNET_ID.match(subnet):
            raise ConfigError(
                "existing_private_subnet_ids", subnet, "give subnet ids such as 'subnet-0abc...'"
            )


def _validate_addons(c: PlatformSettings) -> None:
    """Add-on switches, and a verified pin for each managed add-on they turn on."""
    for name in (
        "neuron_scheduler_extension",
        "neuron_node_problem_detector",
        "etcd_enabled",
        "container_insights",
    ):
        checks.flag(name, getattr(c, name))
    for option, pin in OPTIONAL_ADDONS.items():
        if getattr(c, option) and c.kubernetes_version not in ADDON_EVIDENCE[pin]:
            verified = ", ".join(ADDON_EVIDENCE[pin]) or "none"
            raise ConfigError(
                option,
                True,
                f"{ADDON_PINS[pin].name} {ADDON_PINS[pin].version} is not verified for "
                f"Kubernetes {c.kubernetes_version} (verified: {verified}); set {option}=false "
                "or use a verified kubernetes_version",
            )


def _validate_tags(c: PlatformSettings) -> None:
    limit = MAX_TAGS - len(PLATFORM_TAG_KEYS)
    if len(c.tags) > limit:
        raise ConfigError(
            "tags",
            f"{len(c.tags)} tags",
            f"AWS allows {MAX_TAGS} tags per resource and "
            f"the platform sets {len(PLATFORM_TAG_KEYS)}; give at most {limit}",
        )
    for key, value in c.tags.items():
        problem = tag_problem(key, value)
        if problem:
            raise ConfigError("tags", {key: value}, problem)


def _validate_endpoint(c: PlatformSettings) -> None:
    """Public endpoint CIDRs: IPv4 (the cluster is IPv4), and together a small share of IPv4."""
    checks.flag("endpoint_public_allow_broad", c.endpoint_public_allow_broad)
    nets = []
    for cidr in c.endpoint_public_cidrs:
        try:
            net = ipaddress.ip_network(cidr, strict=True)
        except ValueError:
            raise ConfigError("endpoint_public_cidrs", cidr, "give CIDRs such as '203.0.113.7/32'") from None
        if net.version != 4:
            raise ConfigError(
                "endpoint_public_cidrs",
                cidr,
                "the cluster's endpoint is IPv4; give IPv4 CIDRs such as '203.0.113.7/32'",
            )
        if net.prefixlen == 0:
            raise ConfigError(
                "endpoint_public_cidrs", cidr, "an open API endpoint is not allowed; list your own CIDRs"
            )
        nets.append(net)
    covered = sum(n.num_addresses for n in ipaddress.collapse_addresses(nets))
    if covered > MAX_PUBLIC_ENDPOINT_ADDRESSES and not c.endpoint_public_allow_broad:
        raise ConfigError(
            "endpoint_public_cidrs",
            ",".join(c.endpoint_public_cidrs),
            f"together they open the endpoint to {covered:,} addresses (more than a /8); "
            "list your own ranges, or set endpoint_public_allow_broad=true",
        )


def _validate_storage(c: PlatformSettings) -> None:
    """FSx and ECR fields; the FSx rules are the construct's own (trainium_eks.fsx)."""
    checks.one_of("fsx_deployment_type", c.fsx_deployment_type, FSX_DEPLOYMENT_TYPES)
    for name in ("fsx_storage_gib", "ecr_keep_images"):
        checks.whole_number(name, getattr(c, name))
    problem = fsx_storage_capacity_problem(c.fsx_deployment_type, c.fsx_storage_gib)
    if problem:
        raise ConfigError("fsx_storage_gib", c.fsx_storage_gib, problem)
    if c.fsx_throughput_per_tib is not None:
        checks.whole_number("fsx_throughput_per_tib", c.fsx_throughput_per_tib)
    problem = fsx_throughput_problem(
        c.fsx_deployment_type, fsx_resolved_throughput(c.fsx_deployment_type, c.fsx_throughput_per_tib)
    )
    if problem:
        raise ConfigError("fsx_throughput_per_tib", c.fsx_throughput_per_tib, problem)
    checks.flag("fsx_compression", c.fsx_compression)
    for name in ("fsx_s3_import_uri", "fsx_s3_export_uri"):
        uri = getattr(c, name)
        if uri is not None:
            problem = fsx_s3_uri_problem(uri) if isinstance(uri, str) else "must be a string"
            if problem:
                raise ConfigError(name, uri, problem)
    if (
        c.fsx_s3_import_uri
        and c.fsx_s3_export_uri
        and fsx_s3_uris_overlap(c.fsx_s3_import_uri, c.fsx_s3_export_uri)
    ):
        raise ConfigError(
            "fsx_s3_export_uri",
            c.fsx_s3_export_uri,
            f"overlaps fsx_s3_import_uri ({c.fsx_s3_import_uri}); use a separate, "
            "non-nested bucket or prefix for the outputs",
        )
    if not 1 <= c.ecr_keep_images <= 1000:
        raise ConfigError("ecr_keep_images", c.ecr_keep_images, "use 1 to 1000")
