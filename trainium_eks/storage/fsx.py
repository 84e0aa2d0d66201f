"""FSx for Lustre: the shared file system training reads its dataset from and writes checkpoints to.

The rules FSx applies to capacity, throughput and S3 paths live here as plain functions, so the
configuration (:mod:`trainium_eks.config`) and the construct check them the same way.

Which changes are safe on a deployed file system (CloudFormation updates it in place):
    storage capacity upwards (to another valid size; FSx cannot shrink), the throughput tier of
    PERSISTENT_2, compression, backup retention, and adding/removing S3 associations (removing
    one keeps the files on FSx and in S3).
Which changes REPLACE it (a new, empty file system; the old one is never deleted, because both
DeletionPolicy and UpdateReplacePolicy are Retain, but its data must then be copied over by hand):
    the deployment type, the AZ or subnet (``trainium_az_id``, VPC), the security group, the KMS
    key, and a Lustre version downgrade. ``cdk diff`` shows "replace" for these: read it first.
    Expect such an update to fail and roll back at the cluster's PersistentVolume, whose volume
    source Kubernetes does not let change: a second guard, not a way to migrate.

Linking S3 (``s3_import_uri``, ``s3_export_uri``) has a price: FSx for Lustre backs up only
persistent file systems that are not linked to an S3 data repository (FSx for Lustre User Guide,
"Working with backups"; FSx API Reference, CreateBackup: "Are not linked to a data
repository"). What FSx does with the daily automatic backups of a file system that gets an
association later (refuse it, or stop backing up) is not documented, and not verified here.

Deleting the stack keeps the file system, its key and its security group. Its network interfaces
stay in the Trainium subnet, so :class:`~trainium_eks.network.vpc.TrainiumNetwork` retains that subnet
and the VPC it created as well, and the stack deletion completes.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence

from aws_cdk import RemovalPolicy, Token
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_fsx as fsx
from aws_cdk import aws_kms as kms
from constructs import Construct

from trainium_job.errors import ConfigError

from ..arguments import require_vpc
from ..versions import FSX_LUSTRE_VERSION

#: Deployment types the platform offers: PERSISTENT_2 (replicated, the default) or SCRATCH_2
#: (not replicated, cheaper, for short experiments).
DEPLOYMENT_TYPES = ("PERSISTENT_2", "SCRATCH_2")
#: PERSISTENT_2 SSD throughput tiers, MB/s per TiB (FSx API, UpdateFileSystemLustreConfiguration).
PERSISTENT_2_THROUGHPUT_TIERS = (125, 250, 500, 1000)
#: Lustre TCP port ranges (from, to): LNET on 988, and 1018-1023 (FSx for Lustre User Guide,
#: "File system access control with Amazon VPC").
LUSTRE_PORT_RANGES = ((988, 988), (1018, 1023))
#: Where the S3 associations appear inside the file system (pods see them under the claim's
#: mount, /data): the imported dataset, and the training runs (checkpoints, TensorBoard logs:
#: the training job writes them to /data/runs/<run>), which are exported.
DATASET_PATH = "/dataset"
OUTPUT_PATH = "/runs"
#: What FSx exports from :data:`OUTPUT_PATH` on its own: files and directories created, changed
#: and deleted there (the three ``AutoExportPolicy`` events: FSx API Reference, AutoExportPolicy;
#: ``Events`` of AWS::FSx::DataRepositoryAssociation AutoExportPolicy). DELETED keeps S3 from
#: holding every checkpoint the trainer ever pruned on FSx; a deleted file's object is deleted too.
EXPORT_EVENTS = ("NEW", "CHANGED", "DELETED")
#: What FSx imports at :data:`DATASET_PATH`: objects created, changed and deleted in S3.
IMPORT_EVENTS = ("NEW", "CHANGED", "DELETED")
#: The platform stack's output with :func:`export_task_command` (only with an export URI).
EXPORT_COMMAND_OUTPUT = "FsxExportCommand"
#: Where an export task's report of the files it failed to export goes, under the export URI
#: (FSx writes ``<this>/task-<id>/failures.csv``: FSx API Reference, CompletionReport).
EXPORT_REPORT_PREFIX = "fsx-export-reports"

_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_BUCKET_BAD_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
_BUCKET_BAD_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")
_S3_URI = re.compile(r"^s3://([^/]+)(?:/(.*))?$")


def storage_capacity_problem(deployment_type: str, storage_gib: int) -> str | None:
    """Why FSx would reject ``storage_gib`` for ``deployment_type``, or ``None``.

    SCRATCH_2 and PERSISTENT_2 (SSD) accept 1200 GiB, 2400 GiB, then increments of 2400 GiB
    (FSx API, CreateFileSystem StorageCapacity).
    """
    if storage_gib == 1200 or (storage_gib >= 2400 and storage_gib % 2400 == 0):
        return None
    lower = 1200 if storage_gib < 2400 else storage_gib // 2400 * 2400
    upper = 2400 if storage_gib < 2400 else lower + 2400
    nearest = f"{upper}" if storage_gib < 1200 else f"{lower} or {upper}"
    return f"{deployment_type} takes 1200 GiB or a multiple of 2400 GiB (nearest: {nearest})"


def resolved_throughput(deployment_type: str, throughput_per_tib: int | None) -> int | None:
    """The throughput tier to deploy: unset is 125 MB/s/TiB for PERSISTENT_2 (the cheapest tier;
    BERT reads ~1 KB per sequence and writes a ~4 GB checkpoint now and then, and 1.2 TiB at 125
    gives 150 MB/s), and stays unset for SCRATCH_2 (fixed throughput)."""
    if throughput_per_tib is None and deployment_type == "PERSISTENT_2":
        return 125
    return throughput_per_tib


def throughput_problem(deployment_type: str, throughput_per_tib: int | None) -> str | None:
    """Why FSx would reject ``throughput_per_tib`` (MB/s/TiB) for ``deployment_type``, or ``None``."""
    if deployment_type == "SCRATCH_2":
        if throughput_per_tib is not None:
            return "SCRATCH_2 has a fixed throughput (200 MB/s/TiB baseline); leave it unset"
        return None
    if throughput_per_tib not in PERSISTENT_2_THROUGHPUT_TIERS:
        return "PERSISTENT_2 tiers are " + ", ".join(map(str, PERSISTENT_2_THROUGHPUT_TIERS)) + " MB/s/TiB"
    return None


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/prefix`` -> (bucket, prefix ending in ``/`` or empty); ValueError with the fix."""
    match = _S3_URI.match(uri)
    if not match or any(c.isspace() or ord(c) < 32 for c in uri):
        raise ValueError("give an S3 URI such as 's3://my-bucket/bert/dataset/'")
    bucket, prefix = match.group(1), match.group(2) or ""
    if (
        not _BUCKET.match(bucket)
        or ".." in bucket
        or bucket.startswith(_BUCKET_BAD_PREFIXES)
        or bucket.endswith(_BUCKET_BAD_SUFFIXES)
        or _is_ip(bucket)
    ):
        raise ValueError(
            f"'{bucket}' is not a valid S3 bucket name (3-63 lower-case letters, digits, "
            "'.' or '-', starting and ending with a letter or digit)"
        )
    if "//" in prefix:
        raise ValueError("the prefix has an empty path segment ('//')")
    if len(uri) > 900:
        raise ValueError("S3 data repository paths are limited to 900 characters")
    return bucket, (prefix if not prefix or prefix.endswith("/") else prefix + "/")


def export_task_command(file_system_id: str, region: str, export_uri: str) -> str:
    """The AWS CLI command that exports the files already under :data:`OUTPUT_PATH` to
    ``export_uri``.

    Automatic export acts on files as they are created, changed or deleted once the association
    exists (FSx for Lustre User Guide, "Exporting changes to the data repository"); a file written
    before it, such as a run finished before ``fsx_s3_export_uri`` was set, is exported only by
    an ``EXPORT_TO_REPOSITORY`` data repository task, which exports what was created or changed
    since the last export (the same page). ``--paths`` is relative to the file system's root
    (FSx API Reference, CreateDataRepositoryTask ``Paths``); the report lists the files that
    failed, under the export URI (CompletionReport ``Path``: within the linked repository).
    ``aws fsx describe-data-repository-tasks --task-ids <id>`` shows its progress: done when its
    ``Lifecycle`` is ``SUCCEEDED`` and ``Status.FailedCount`` is 0.
    """
    report = normalized_s3_uri(export_uri) + EXPORT_REPORT_PREFIX
    return (
        f"aws fsx create-data-repository-task --region {region} --file-system-id {file_system_id} "
        f"--type EXPORT_TO_REPOSITORY --paths {OUTPUT_PATH.lstrip('/')} "
        f"--report Enabled=true,Scope=FAILED_FILES_ONLY,Format=REPORT_CSV_20191124,Path={report}"
    )


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def s3_uri_problem(uri: str) -> str | None:
    """Why ``uri`` cannot be a data repository path, or ``None``."""
    try:
        parse_s3_uri(uri)
    except ValueError as err:
        return str(err)
    return None


def s3_uris_overlap(first: str, second: str) -> bool:
    """Whether two S3 URIs name the same or nested locations (FSx needs a distinct one per association)."""
    (b1, p1), (b2, p2) = parse_s3_uri(first), parse_s3_uri(second)
    return b1 == b2 and (p1.startswith(p2) or p2.startswith(p1))


def normalized_s3_uri(uri: str) -> str:
    """``uri`` with its prefix ending in ``/`` (how FSx reports an association's path)."""
    bucket, prefix = parse_s3_uri(uri)
    return f"s3://{bucket}/{prefix}"


class TrainingFileSystem(Construct):
    """An FSx for Lustre file system in the Trainium AZ, reachable only from the cluster's nodes.

    Defaults: PERSISTENT_2 at 125 MB/s/TiB, 1200 GiB, LZ4 compression, Lustre 2.15, encrypted
    with a rotating customer-managed KMS key (PERSISTENT_2; SCRATCH_2 always uses the FSx service
    key), daily backups kept 7 days (PERSISTENT_2), and RETAIN: deleting the stack or replacing
    the file system never deletes it (nor its key and security group). See the module docstring
    for which changes replace it, and what a stack delete leaves behind.

    Built from the L1 ``CfnFileSystem``: the L2 ``LustreFileSystem`` always adds a 988-1023
    self-ingress rule to the group, wider than the two port ranges Lustre uses.

    Security group: TCP 988 and 1018-1023 in from ``client_security_group_ids`` and from itself,
    the same out to them (file servers talk to each other and call back to clients); nothing
    else in or out. The clients' groups get the matching inbound rules from this group.

    Attributes:
        file_system: the ``CfnFileSystem``.
        security_group: the file system's security group.
        kms_key: the KMS key (``None`` for SCRATCH_2).
        file_system_id, dns_name, mount_name: what a Lustre client (or a CSI volume) needs.
        storage_gib: the capacity.
        associations: S3 data repository associations, by file system path.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        vpc: ec2.IVpc,
        subnet: ec2.ISubnet,
        client_security_group_ids: Sequence[str],
        deployment_type: str = "PERSISTENT_2",
        storage_gib: int = 1200,
        throughput_per_tib: int | None = None,
        compression: bool = True,
        s3_import_uri: str | None = None,
        s3_export_uri: str | None = None,
        backup_retention_days: int | None = None,
        removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
    ) -> None:
        """
        Args:
            vpc: the VPC of the file system's security group.
            subnet: the one subnet of the file system (the Trainium AZ's).
            client_security_group_ids: security groups of the Lustre clients (the EKS cluster
                security group); at least one.
            deployment_type: one of :data:`DEPLOYMENT_TYPES`. Default "PERSISTENT_2".
            storage_gib: capacity, 1200 or a multiple of 2400. Default 1200.
            throughput_per_tib: PERSISTENT_2 tier in MB/s/TiB (:data:`PERSISTENT_2_THROUGHPUT_TIERS`).
                Default None: 125 for PERSISTENT_2; must stay None for SCRATCH_2 (see
                :func:`resolved_throughput`).
            compression: LZ4 data compression. Default True.
            s3_import_uri: S3 URI linked at :data:`DATASET_PATH`, with automatic import of new,
                changed and deleted objects. Default None: no import.
            s3_export_uri: S3 URI linked at :data:`OUTPUT_PATH`, with automatic export of the
                files created, changed and deleted there from then on (:data:`EXPORT_EVENTS`; a
                file deleted on FSx is deleted in S3). Files already there are exported by one
                task (:func:`export_task_command`). Default None: no export.
            backup_retention_days: days of daily backups, 0 to 90 (0: none). Default None: 7 for
                PERSISTENT_2, none for SCRATCH_2 (which has no backups).
            removal_policy: what a stack delete or a replacement does to the file system and its
                security group. Default ``RemovalPolicy.RETAIN``.
        """
        super().__init__(scope, id)
        vpc = require_vpc(vpc)
        persistent = deployment_type == "PERSISTENT_2"
        throughput_per_tib = resolved_throughput(deployment_type, throughput_per_tib)
        if backup_retention_days is None:
            backup_retention_days = 7 if persistent else 0
        self._check(
            deployment_type,
            storage_gib,
            throughput_per_tib,
            backup_retention_days,
            s3_import_uri,
            s3_export_uri,
            client_security_group_ids,
        )
        self.storage_gib = storage_gib
        self.security_group = self._security_group(vpc, client_security_group_ids)
        self.kms_key = self._key() if persistent else None
        lustre = fsx.CfnFileSystem.LustreConfigurationProperty(
            deployment_type=deployment_type,
            per_unit_storage_throughput=throughput_per_tib if persistent else None,
            data_compression_type="LZ4" if compression else "NONE",
            automatic_backup_retention_days=backup_retention_days if persistent else None,
            copy_tags_to_backups=True if persistent else None,
        )
        self.file_system = self._file_system(subnet, storage_gib, lustre)
        self._retain_with_file_system(removal_policy)
        self.file_system_id: str = self.file_system.ref
        self.dns_name: str = self.file_system.attr_dns_name
        self.mount_name: str = self.file_system.attr_lustre_mount_name
        self.associations = self._associations(s3_import_uri, s3_export_uri)

    def _key(self) -> kms.Key:
        """The PERSISTENT_2 file system's key (SCRATCH_2 always uses the FSx service key)."""
        return kms.Key(
            self,
            "Key",
            enable_key_rotation=True,
            description="FSx for Lustre training data at rest",
            # Without its key the file system's data is unreadable: keep it as long as the data.
            removal_policy=RemovalPolicy.RETAIN,
        )

    def _security_group(self, vpc: ec2.IVpc, client_security_group_ids: Sequence[str]) -> ec2.SecurityGroup:
        """Lustre's ports between the file servers and to and from the clients, nothing else."""
        group = ec2.SecurityGroup(
            self,
            "SecurityGroup",
            vpc=vpc,
            allow_all_outbound=False,
            description="FSx for Lustre: Lustre ports to and from the EKS nodes and its own file servers",
        )
        for low, high in LUSTRE_PORT_RANGES:
            port = ec2.Port.tcp_range(low, high) if low != high else ec2.Port.tcp(low)
            group.add_ingress_rule(group, port, "Lustre between file servers")
            group.add_egress_rule(group, port, "Lustre between file servers")
            for index, group_id in enumerate(client_security_group_ids):
                peer = ec2.Peer.security_group_id(group_id)
                group.add_ingress_rule(peer, port, "Lustre from EKS nodes")
                group.add_egress_rule(peer, port, "Lustre to EKS nodes")
                # Clients accept the file servers' connections too (FSx guide, client rules).
                ec2.CfnSecurityGroupIngress(
                    self,
                    f"ClientIngress{index}Tcp{low}" + (f"To{high}" if high != low else ""),
                    group_id=group_id,
                    ip_protocol="tcp",
                    from_port=low,
                    to_port=high,
                    source_security_group_id=group.security_group_id,
                    description="Lustre from FSx file servers",
                )
        return group

    def _file_system(
        self,
        subnet: ec2.ISubnet,
        storage_gib: int,
        lustre: fsx.CfnFileSystem.LustreConfigurationProperty,
    ) -> fsx.CfnFileSystem:
        return fsx.CfnFileSystem(
            self,
            "FileSystem",
            file_system_type="LUSTRE",
            file_system_type_version=FSX_LUSTRE_VERSION,
            storage_type="SSD",
            storage_capacity=storage_gib,
            subnet_ids=[subnet.subnet_id],
            security_group_ids=[self.security_group.security_group_id],
            kms_key_id=self.kms_key.key_id if self.kms_key else None,
            lustre_configuration=lustre,
        )

    def _retain_with_file_system(self, removal_policy: RemovalPolicy) -> None:
        """The file system, its group and the group's rules share ``removal_policy``; the file
        system waits for the rules."""
        self.file_system.apply_removal_policy(removal_policy)
        # FSx refuses to create a file system whose group does not yet let Lustre in from itself;
        # the self-referencing rules are separate resources, so wait for all of the group's rules.
        # The group and its rules share the file system's fate: a retained file system whose
        # self-referencing rules were deleted could no longer talk among its own servers.
        self.security_group.apply_removal_policy(removal_policy)
        for child in self.security_group.node.children:
            if isinstance(child, (ec2.CfnSecurityGroupIngress, ec2.CfnSecurityGroupEgress)):
                self.file_system.node.add_dependency(child)
                child.apply_removal_policy(removal_policy)

    def _associations(
        self, s3_import_uri: str | None, s3_export_uri: str | None
    ) -> dict[str, fsx.CfnDataRepositoryAssociation]:
        """The S3 data repository associations, by file system path."""
        associations: dict[str, fsx.CfnDataRepositoryAssociation] = {}
        if s3_import_uri:
            associations[DATASET_PATH] = self._associate(
                "DatasetImport",
                DATASET_PATH,
                s3_import_uri,
                import_events=list(IMPORT_EVENTS),
                export_events=None,
            )
        if s3_export_uri:
            associations[OUTPUT_PATH] = self._associate(
                "OutputExport",
                OUTPUT_PATH,
                s3_export_uri,
                import_events=None,
                export_events=list(EXPORT_EVENTS),
            )
        return associations

    def _associate(
        self,
        id: str,
        path: str,
        uri: str,
        *,
        import_events: list[str] | None,
        export_events: list[str] | None,
    ) -> fsx.CfnDataRepositoryAssociation:
        return fsx.CfnDataRepositoryAssociation(
            self,
            id,
            file_system_id=self.file_system_id,
            file_system_path=path,
            data_repository_path=normalized_s3_uri(uri),
            batch_import_meta_data_on_create=import_events is not None,
            s3=fsx.CfnDataRepositoryAssociation.S3Property(
                auto_import_policy=fsx.CfnDataRepositoryAssociation.AutoImportPolicyProperty(
                    events=import_events
                )
                if import_events
                else None,
                auto_export_policy=fsx.CfnDataRepositoryAssociation.AutoExportPolicyProperty(
                    events=export_events
                )
                if export_events
                else None,
            ),
        )

    @staticmethod
    def _check(
        deployment_type: str,
        storage_gib: int,
        throughput_per_tib: int | None,
        backup_retention_days: int,
        s3_import_uri: str | None,
        s3_export_uri: str | None,
        client_security_group_ids: Sequence[str],
    ) -> None:
        if deployment_type not in DEPLOYMENT_TYPES:
            raise ConfigError(
                "deployment_type", deployment_type, f"choose one of {', '.join(DEPLOYMENT_TYPES)}"
            )
        if not Token.is_unresolved(storage_gib):
            problem = storage_capacity_problem(deployment_type, storage_gib)
            if problem:
                raise ConfigError("storage_gib", storage_gib, problem)
        problem = throughput_problem(deployment_type, throughput_per_tib)
        if problem:
            raise ConfigError("throughput_per_tib", throughput_per_tib, problem)
        if deployment_type == "SCRATCH_2" and backup_retention_days:
            raise ConfigError(
                "backup_retention_days", backup_retention_days, "SCRATCH_2 has no automatic backups"
            )
        if not 0 <= backup_retention_days <= 90:
            raise ConfigError("backup_retention_days", backup_retention_days, "use 0 to 90")
        for name, uri in (("s3_import_uri", s3_import_uri), ("s3_export_uri", s3_export_uri)):
            if uri and not Token.is_unresolved(uri):
                problem = s3_uri_problem(uri)
                if problem:
                    raise ConfigError(name, uri, problem)
        if (
            s3_import_uri
            and s3_export_uri
            and not Token.is_unresolved(s3_import_uri)
            and not Token.is_unresolved(s3_export_uri)
            and s3_uris_overlap(s3_import_uri, s3_export_uri)
        ):
            raise ConfigError(
                "s3_export_uri",
                s3_export_uri,
                f"overlaps s3_import_uri ({s3_import_uri}); each S3 association needs its "
                "own, non-nested bucket or prefix",
            )
        if not client_security_group_ids:
            raise ConfigError(
                "client_security_group_ids",
                list(client_security_group_ids),
                "give the security group(s) of the Lustre clients (the EKS cluster security group)",
            )
