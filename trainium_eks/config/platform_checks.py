"""Deployment checks of the platform's configuration: each field, and the rules between fields.

Every check raises :class:`ConfigError` naming the context key the user typed, its value and the
fix. A rule of a construct's prop is the construct's own ``check_*`` function (cluster, network,
launch template, nodegroup, registry, FSx), called here with the key's name, so the construct
and the configuration say the same. The ``training_*`` keys: :mod:`.job_checks`.
"""

from __future__ import annotations

import dataclasses
import re
import unicodedata
from typing import Any

from trainium_job import checks
from trainium_job.errors import ConfigError
from trainium_job.instances import INSTANCE_FACTS, az_offering_problem, region_offering_problem
from trainium_job.naming import (
    HASH_CHARS,
    digest_name,
    is_dns1123_label,
    platform_stack_name,
    pod_host_name,
    repository_name,
    training_stack_name,
)

from ..arguments import az_id_prefix
from ..cluster.eks_cluster import (
    check_admin_principal_arns,
    check_endpoint_public_cidrs,
    check_kubernetes_version,
    check_system_nodes,
    region_partition,
)
from ..compatibility import PINS
from ..images.repository import check_keep_images
from ..monitoring.options import MonitoringOptions, check_monitoring_options
from ..network.vpc import SUBNET_LAYOUT, check_existing_vpc, check_nat_gateways, check_vpc_cidr
from ..nodes.gang_wait import check_gang_wait
from ..nodes.launch_template import (
    check_capacity_block,
    check_capacity_reservation_id,
    check_efa_layout,
    check_root_volume_gib,
)
from ..nodes.node_pool import TRAINIUM_CAPACITY_MODES, check_karpenter_bounds
from ..nodes.nodegroup import check_multi_node, check_node_sizes, check_release_version
from ..storage.fsx import DEPLOYMENT_TYPES as FSX_DEPLOYMENT_TYPES
from ..storage.fsx import resolved_throughput as fsx_resolved_throughput
from ..storage.fsx import s3_uri_problem as fsx_s3_uri_problem
from ..storage.fsx import s3_uris_overlap as fsx_s3_uris_overlap
from ..storage.fsx import storage_capacity_problem as fsx_storage_capacity_problem
from ..storage.fsx import throughput_problem as fsx_throughput_problem
from .job_checks import validate_training
from .schema import PlatformSettings

OPTIONAL_ADDONS = {
    "container_insights": "cloudwatch-observability",
    "etcd_enabled": "ebs-csi-driver",
    "monitoring_enabled": "ebs-csi-driver",
}
#: Managed add-ons the platform always installs.
ALWAYS_ON_ADDONS = ("pod-identity-agent", "node-monitoring-agent", "vpc-cni")


def unverified_addons(kubernetes_version: str) -> list[str]:
    """Always-on managed add-on pins with no published evidence for ``kubernetes_version``."""
    return [
        f"{PINS[k].name} {PINS[k].version}"
        for k in ALWAYS_ON_ADDONS
        if kubernetes_version not in PINS[k].compatibility
    ]


CAPACITY_TYPES = ("on-demand", "capacity-block")
#: The keys of the Trainium nodegroup's minimum, desired and maximum size.
NODE_SIZE_KEYS = ("min_nodes", "desired_nodes", "max_nodes")

_AZ_ID = re.compile(r"^[a-z]{2,6}[0-9]-az[0-9]+$")
_AZ_NAME = re.compile(r"^[a-z]{2}(-[a-z]+)+-[0-9][a-z]$")
_REGION = re.compile(r"^[a-z]{2,4}(-[a-z]+)+-[0-9]$")
_NAME_PREFIX = re.compile(r"^[a-z][a-z0-9-]{0,19}$")
#: Partitions whose AZ-ID scheme is verified: ``<country><direction><n>`` (``usw2-az4``,
#: ``cnnw1-az1``) and GovCloud's ``us-gov-west-1`` -> ``usgw1`` (the IDs ``aws ec2
#: describe-availability-zones`` returns there). Trainium is offered in none of the others.
AZ_ID_PARTITIONS = ("aws", "aws-cn", "aws-us-gov")
#: Partitions the platform deploys to: aws-cn lacks EKS Pod Identity (EKS user guide, "EKS Pod
#: Identities": not available in China regions).
SUPPORTED_PARTITIONS = ("aws", "aws-us-gov")

# What AWS enforces on tags (Tagging AWS resources, "Tag naming limits and requirements"):
# 50 user tags per resource, keys 1-128 and values 0-256 Unicode characters of letters,
# digits, white space and _ . : / = + - @, and the `aws:` prefix reserved in any letter case.
MAX_TAGS = 50
#: Tag keys the platform sets itself on some resources (the launch template's Name).
PLATFORM_TAG_KEYS = ("Name",)
MAX_TAG_KEY, MAX_TAG_VALUE = 128, 256
_TAG_PUNCTUATION = set("_.:/=+-@")


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


#: The services' rules for the names built from ``name_prefix`` (by ``trainium_job.naming``):
#: stack names, CloudFormation's (at most 128 characters); repository names, ECR's (each path
#: component, at most 256 characters in all); the job name a DNS-1123 label that leaves room
#: for its pods' ``-worker-<i>`` host names.
_STACK_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9-]{0,127}$")
_ECR_COMPONENT = re.compile(r"^[a-z0-9]+(?:[._-][a-z0-9]+)*$")
MAX_REPOSITORY_NAME = 256


def _repository_name_ok(name: str) -> bool:
    return len(name) <= MAX_REPOSITORY_NAME and all(_ECR_COMPONENT.match(part) for part in name.split("/"))


def name_prefix_problem(prefix: str, nodes: int) -> str | None:
    """Why a name built from ``prefix`` would be refused (None when all are valid)."""
    stacks = (platform_stack_name(prefix), training_stack_name(prefix))
    repository = repository_name(prefix)
    job = digest_name(prefix, "0" * HASH_CHARS)
    derived = (
        *(("CloudFormation stack name", stack, bool(_STACK_NAME.match(stack))) for stack in stacks),
        ("ECR repository name", repository, _repository_name_ok(repository)),
        ("Volcano job name", job, is_dns1123_label(pod_host_name(job, max(nodes - 1, 0)))),
    )
    for what, name, ok in derived:
        if not ok:
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
    _validate_access(c)
    _validate_capacity(c)
    if not _NAME_PREFIX.match(c.name_prefix):
        raise ConfigError(
            "name_prefix", c.name_prefix, "use 1-20 lower-case letters, digits or '-', starting with a letter"
        )
    problem = name_prefix_problem(c.name_prefix, c.desired_nodes)
    if problem:
        raise ConfigError("name_prefix", c.name_prefix, problem)
    _validate_network(c)
    check_system_nodes(c.system_nodes)
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
    problem = region_offering_problem(c.region)
    if problem:
        raise ConfigError("region", c.region, problem)


def offering_warnings(c: PlatformSettings) -> list[str]:
    """The Trainium AZ ID when the offline table does not list it for the instance type (a warning:
    the doctor's live check is the authority)."""
    problem = az_offering_problem(c.instance_type, c.region, c.trainium_az_id)
    return [f"trainium_az_id={c.trainium_az_id}: {problem}"] if problem else []


def _validate_nodes(c: PlatformSettings) -> None:
    """The instance type and the Trainium nodegroup's sizes (the nodegroup's own rules)."""
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
    check_node_sizes(c.min_nodes, c.desired_nodes, c.max_nodes, names=NODE_SIZE_KEYS)
    if c.desired_nodes == 0:
        raise ConfigError("desired_nodes", 0, "training needs at least 1 Trainium node")
    check_multi_node(c.facts, c.max_nodes, field="max_nodes")


def _validate_access(c: PlatformSettings) -> None:
    """Kubernetes version, public endpoint and the admin principals (the cluster's own rules)."""
    check_kubernetes_version(c.kubernetes_version)
    check_release_version(
        c.trainium_ami_release_version,
        kubernetes_version=c.kubernetes_version,
        field="trainium_ami_release_version",
    )
    checks.flag("endpoint_public_allow_broad", c.endpoint_public_allow_broad)
    check_endpoint_public_cidrs(c.endpoint_public_cidrs, allow_broad=c.endpoint_public_allow_broad)
    check_admin_principal_arns(c.admin_principal_arns, region=c.region)


def _validate_capacity(c: PlatformSettings) -> None:
    """Root volume, capacity reservation or Capacity Block, EFA layout (the launch template's rules)."""
    check_root_volume_gib(c.root_volume_gib)
    checks.one_of("capacity_type", c.capacity_type, CAPACITY_TYPES)
    check_capacity_reservation_id(c.capacity_reservation_id)
    if c.capacity_type == "capacity-block":
        check_capacity_block("capacity_type", c.capacity_type, c.capacity_reservation_id)
    check_efa_layout(c.efa_interface_layout, field="efa_interface_layout")
    checks.one_of("trainium_capacity", c.trainium_capacity, TRAINIUM_CAPACITY_MODES)
    checks.whole_number(
        "trainium_gang_wait_minutes", c.trainium_gang_wait_minutes, minimum=1, maximum=24 * 60
    )
    checks.whole_number("trainium_idle_minutes", c.trainium_idle_minutes, minimum=0, maximum=24 * 60)
    if c.trainium_capacity == "karpenter":
        check_karpenter_bounds(
            max_nodes=c.max_nodes,
            idle_minutes=c.trainium_idle_minutes,
            facts=c.facts,
            efa_layout=c.efa_interface_layout,
            # The created VPC's Trainium subnet; an existing one's size is not known offline.
            subnet_prefix_length=None if c.existing_vpc_id else dict(SUBNET_LAYOUT)["private"],
            idle_field="trainium_idle_minutes",
        )
    checks.flag("trainium_health_check", c.trainium_health_check)
    checks.flag("trainium_health_replace", c.trainium_health_replace)
    check_gang_wait(c.trainium_gang_wait_minutes, c.facts, health_check=c.trainium_health_check)


def _validate_network(c: PlatformSettings) -> None:
    """The created VPC's CIDR and NAT gateways, or an existing VPC and its subnets (the network's rules)."""
    check_vpc_cidr(c.vpc_cidr, created=c.existing_vpc_id is None, field="vpc_cidr")
    check_nat_gateways(c.nat_gateways)
    check_existing_vpc(c.existing_vpc_id, c.existing_private_subnet_ids)


def _validate_addons(c: PlatformSettings) -> None:
    """Add-on switches, and a verified pin for each managed add-on they turn on."""
    for name in (
        "neuron_scheduler_extension",
        "neuron_node_problem_detector",
        "etcd_enabled",
        "container_insights",
        "monitoring_enabled",
        "monitoring_exporters",
    ):
        checks.flag(name, getattr(c, name))
    check_monitoring_options(
        c.monitoring, keys={f.name: f"monitoring_{f.name}" for f in dataclasses.fields(MonitoringOptions)}
    )
    if not c.monitoring_enabled:
        for name in ("monitoring_amp_remote_write", "monitoring_alertmanager"):
            if getattr(c, name):
                raise ConfigError(
                    name, True, "it is part of the monitoring stack: set monitoring_enabled=true"
                )
    for option, key in OPTIONAL_ADDONS.items():
        pin = PINS[key]
        if getattr(c, option) and c.kubernetes_version not in pin.compatibility:
            verified = ", ".join(pin.compatibility) or "none"
            raise ConfigError(
                option,
                True,
                f"{pin.name} {pin.version} is not verified for "
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


def _validate_storage(c: PlatformSettings) -> None:
    """FSx and ECR fields; the FSx rules are the construct's own (trainium_eks.storage.fsx)."""
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
    check_keep_images(c.ecr_keep_images, field="ecr_keep_images")
