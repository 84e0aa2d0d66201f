"""FSx for Lustre: properties, placement, exact network rules, RETAIN, S3 associations, FSx rules."""

import shlex

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk.assertions import Template

from tests.support import resources, synth_platform
from trainium_eks.storage.fsx import (
    TrainingFileSystem,
    export_task_command,
    parse_s3_uri,
    s3_uris_overlap,
    storage_capacity_problem,
    throughput_problem,
)
from trainium_job.errors import ConfigError

CLIENT_SG = "sg-0123456789abcdef0"


def _file_system(template_json):
    (fs,) = resources(template_json, "AWS::FSx::FileSystem").items()
    return fs


def _small_stack(**props):
    """A stack holding only a VPC and the file system (no cluster): fast, for variants."""
    stack = cdk.Stack(cdk.App(), "Fsx", env=cdk.Environment(region="us-west-2"))
    vpc = ec2.Vpc(
        stack,
        "Vpc",
        max_azs=1,
        nat_gateways=0,
        subnet_configuration=[
            ec2.SubnetConfiguration(name="private", subnet_type=ec2.SubnetType.PRIVATE_ISOLATED)
        ],
    )
    TrainingFileSystem(
        stack, "Fs", vpc=vpc, subnet=vpc.isolated_subnets[0], client_security_group_ids=[CLIENT_SG], **props
    )
    return Template.from_stack(stack).to_json()


def test_given_default_config_then_a_persistent_2_lustre_2_15_file_system_with_lz4(platform_json):
    _, fs = _file_system(platform_json)
    props = fs["Properties"]
    assert (
        props["FileSystemType"],
        props["FileSystemTypeVersion"],
        props["StorageType"],
        props["StorageCapacity"],
    ) == ("LUSTRE", "2.15", "SSD", 1200)
    assert props["LustreConfiguration"] == {
        "DeploymentType": "PERSISTENT_2",
        "PerUnitStorageThroughput": 125,
        "DataCompressionType": "LZ4",
        "AutomaticBackupRetentionDays": 7,
        "CopyTagsToBackups": True,
    }


def test_given_the_nodegroup_mode_then_file_system_lives_in_the_trainium_az_private_subnet(
    nodegroup_platform_json,
):
    # The nodegroup names its subnet; Karpenter's nodes get the same one (the default: its
    # EC2NodeClass is compared with the launch in tests/contracts/test_karpenter.py).
    template = nodegroup_platform_json
    _, fs = _file_system(template)
    (subnet_ref,) = fs["Properties"]["SubnetIds"]
    subnet = template["Resources"][subnet_ref["Ref"]]["Properties"]
    assert subnet["AvailabilityZoneId"] == "usw2-az4"
    assert subnet["MapPublicIpOnLaunch"] is False
    # The same subnet as the Trainium nodegroup.
    (trainium,) = [
        n
        for n in resources(template, "AWS::EKS::Nodegroup").values()
        if n["Properties"]["AmiType"] == "AL2023_x86_64_NEURON"
    ]
    assert trainium["Properties"]["Subnets"] == [subnet_ref]


def test_given_default_config_then_encrypted_with_a_rotating_retained_kms_key(platform_json):
    _, fs = _file_system(platform_json)
    key = platform_json["Resources"][fs["Properties"]["KmsKeyId"]["Ref"]]
    assert key["Type"] == "AWS::KMS::Key"
    assert key["Properties"]["EnableKeyRotation"] is True
    assert (key["DeletionPolicy"], key["UpdateReplacePolicy"]) == ("Retain", "Retain")


def test_given_default_config_then_a_stack_delete_or_replacement_keeps_the_file_system(platform_json):
    _, fs = _file_system(platform_json)
    assert (fs["DeletionPolicy"], fs["UpdateReplacePolicy"]) == ("Retain", "Retain")


def test_given_default_config_then_the_file_systems_group_and_its_own_rules_are_kept_with_it(platform_json):
    _, fs = _file_system(platform_json)
    (sg_ref,) = fs["Properties"]["SecurityGroupIds"]
    sg = sg_ref["Fn::GetAtt"][0]
    kept = [sg] + [
        k
        for k, r in platform_json["Resources"].items()
        if r["Type"] in ("AWS::EC2::SecurityGroupIngress", "AWS::EC2::SecurityGroupEgress")
        and r["Properties"]["GroupId"] == {"Fn::GetAtt": [sg, "GroupId"]}
    ]
    assert len(kept) == 5
    for logical_id in kept:
        resource = platform_json["Resources"][logical_id]
        assert (resource["DeletionPolicy"], resource["UpdateReplacePolicy"]) == ("Retain", "Retain")


def _rules_of(template_json, group_logical_id):
    """Every rule into or out of the group, inline or separate, and every client rule naming it
    as source: (direction, protocol, from, to, peer logical id or CIDR)."""

    def peer(value):
        return value["Fn::GetAtt"][0] if isinstance(value, dict) and "Fn::GetAtt" in value else value

    def rule(direction, props, other):
        return (direction, props["IpProtocol"], props["FromPort"], props["ToPort"], other)

    group = template_json["Resources"][group_logical_id]["Properties"]
    rules = {
        rule("in", r, peer(r.get("SourceSecurityGroupId", r.get("CidrIp"))))
        for r in group.get("SecurityGroupIngress", [])
    }
    rules |= {
        rule("out", r, peer(r.get("DestinationSecurityGroupId", r.get("CidrIp"))))
        for r in group.get("SecurityGroupEgress", [])
    }
    for res in template_json["Resources"].values():
        props = res.get("Properties", {})
        if res["Type"] == "AWS::EC2::SecurityGroupIngress":
            if peer(props["GroupId"]) == group_logical_id:
                rules.add(rule("in", props, peer(props.get("SourceSecurityGroupId", props.get("CidrIp")))))
            elif peer(props.get("SourceSecurityGroupId")) == group_logical_id:
                rules.add(rule("client-in", props, peer(props["GroupId"])))
        if res["Type"] == "AWS::EC2::SecurityGroupEgress" and peer(props["GroupId"]) == group_logical_id:
            rules.add(rule("out", props, peer(props.get("DestinationSecurityGroupId", props.get("CidrIp")))))
    return rules


def test_given_default_config_then_only_lustre_ports_between_nodes_and_file_servers(platform_json):
    _, fs = _file_system(platform_json)
    (sg_ref,) = fs["Properties"]["SecurityGroupIds"]
    sg = sg_ref["Fn::GetAtt"][0]
    (cluster_id,) = resources(platform_json, "AWS::EKS::Cluster")
    expected = set()
    for low, high in ((988, 988), (1018, 1023)):
        for direction, other in (
            ("in", sg),
            ("out", sg),
            ("in", cluster_id),
            ("out", cluster_id),
            ("client-in", cluster_id),
        ):
            expected.add((direction, "tcp", low, high, other))
    # Exactly these: no CIDR source or destination, no other port, no other group.
    assert _rules_of(platform_json, sg) == expected


def test_given_the_nodegroup_mode_then_the_cluster_group_is_the_one_both_nodegroups_carry(
    nodegroup_platform_json,
):
    # Managed nodegroups without their own groups get the cluster group; the Trainium launch
    # template lists it on every interface: that is why it is the FSx client group (Karpenter's
    # nodes carry the same groups: tests/contracts/test_karpenter.py).
    (cluster_id,) = resources(nodegroup_platform_json, "AWS::EKS::Cluster")
    (lt,) = [
        lt
        for lt in resources(nodegroup_platform_json, "AWS::EC2::LaunchTemplate").values()
        if "NetworkInterfaces" in lt["Properties"]["LaunchTemplateData"]
    ]
    for nic in lt["Properties"]["LaunchTemplateData"]["NetworkInterfaces"]:
        assert {"Fn::GetAtt": [cluster_id, "ClusterSecurityGroupId"]} in nic["Groups"]


def test_given_default_config_then_file_system_waits_for_its_self_referencing_rules(platform_json):
    logical_id, fs = _file_system(platform_json)
    depends = set(fs.get("DependsOn", []))
    self_rules = {
        k
        for k, r in platform_json["Resources"].items()
        if r["Type"] in ("AWS::EC2::SecurityGroupIngress", "AWS::EC2::SecurityGroupEgress")
        and k.startswith("StorageSecurityGroup")
    }
    assert len(self_rules) == 4 and self_rules <= depends


def test_given_scratch_2_when_synthesized_then_no_kms_key_throughput_or_backups():
    template = _small_stack(deployment_type="SCRATCH_2", storage_gib=2400)
    _, fs = _file_system(template)
    assert "KmsKeyId" not in fs["Properties"]
    assert fs["Properties"]["LustreConfiguration"] == {
        "DeploymentType": "SCRATCH_2",
        "DataCompressionType": "LZ4",
    }
    assert fs["Properties"]["StorageCapacity"] == 2400
    assert resources(template, "AWS::KMS::Key") == {}


def test_given_other_tier_capacity_and_no_compression_then_they_reach_the_template():
    template = _small_stack(storage_gib=4800, throughput_per_tib=500, compression=False)
    _, fs = _file_system(template)
    assert fs["Properties"]["StorageCapacity"] == 4800
    assert fs["Properties"]["LustreConfiguration"]["PerUnitStorageThroughput"] == 500
    assert fs["Properties"]["LustreConfiguration"]["DataCompressionType"] == "NONE"


def test_given_s3_uris_then_dataset_is_imported_and_outputs_exported_at_fixed_paths():
    template = _small_stack(s3_import_uri="s3://my-data/bert/hdf5", s3_export_uri="s3://my-results/run1/")
    associations = {
        a["Properties"]["FileSystemPath"]: a["Properties"]
        for a in resources(template, "AWS::FSx::DataRepositoryAssociation").values()
    }
    assert associations["/dataset"]["DataRepositoryPath"] == "s3://my-data/bert/hdf5/"
    assert associations["/dataset"]["BatchImportMetaDataOnCreate"] is True
    assert associations["/dataset"]["S3"] == {"AutoImportPolicy": {"Events": ["NEW", "CHANGED", "DELETED"]}}
    # FSx API Reference, AutoExportPolicy: NEW, CHANGED and DELETED are its three events; with
    # DELETED a checkpoint the trainer prunes on FSx is deleted in S3 too, not kept there forever.
    assert associations["/runs"]["S3"] == {"AutoExportPolicy": {"Events": ["NEW", "CHANGED", "DELETED"]}}
    assert associations["/runs"]["DataRepositoryPath"] == "s3://my-results/run1/"
    assert associations["/runs"].get("BatchImportMetaDataOnCreate") is False


def test_given_an_export_uri_then_the_export_task_command_is_what_the_aws_cli_takes():
    command = export_task_command("fs-0123456789abcdef0", "us-west-2", "s3://my-results/run1")
    # AWS CLI create-data-repository-task: --type EXPORT_TO_REPOSITORY, --paths relative to the
    # file system's root (the association's /runs is "runs"), --report required; FSx API
    # Reference, CompletionReport: with Enabled, Scope FAILED_FILES_ONLY, Format REPORT_CSV_20191124
    # and a Path in the linked repository.
    assert shlex.split(command) == [
        "aws",
        "fsx",
        "create-data-repository-task",
        "--region",
        "us-west-2",
        "--file-system-id",
        "fs-0123456789abcdef0",
        "--type",
        "EXPORT_TO_REPOSITORY",
        "--paths",
        "runs",
        "--report",
        "Enabled=true,Scope=FAILED_FILES_ONLY,Format=REPORT_CSV_20191124,"
        "Path=s3://my-results/run1/fsx-export-reports",
    ]


def test_given_an_export_uri_then_the_platform_outputs_the_export_task_command_for_its_file_system():
    template = synth_platform(fsx_s3_export_uri="s3://my-results/runs")
    (file_system_id,) = resources(template, "AWS::FSx::FileSystem")
    (parts,) = template["Outputs"]["FsxExportCommand"]["Value"]["Fn::Join"][1:]
    assert parts[1] == {"Ref": file_system_id}
    assert parts[0].endswith("--file-system-id ") and "--type EXPORT_TO_REPOSITORY --paths runs" in parts[2]
    assert "FsxExportCommand" not in synth_platform()["Outputs"]


def test_given_no_s3_uris_then_no_associations(platform_json):
    assert resources(platform_json, "AWS::FSx::DataRepositoryAssociation") == {}


@pytest.mark.parametrize(
    "props, message",
    [
        ({"storage_gib": 2000}, "'storage_gib' = 2000"),
        ({"throughput_per_tib": 200}, "'throughput_per_tib' = 200"),
        ({"deployment_type": "SCRATCH_2", "throughput_per_tib": 125}, "SCRATCH_2 has a fixed throughput"),
        ({"deployment_type": "SCRATCH_2", "backup_retention_days": 3}, "no automatic backups"),
        ({"deployment_type": "PERSISTENT_1"}, "deployment_type"),
        ({"s3_import_uri": "https://bucket/x"}, "s3_import_uri"),
        ({"s3_import_uri": "s3://bkt1/x/", "s3_export_uri": "s3://bkt1/x/out/"}, "overlaps"),
    ],
)
def test_given_invalid_props_when_constructed_then_config_error_names_the_prop(props, message):
    with pytest.raises(ConfigError, match=message):
        _small_stack(**props)


@pytest.mark.parametrize(
    "gib, ok",
    [
        (1200, True),
        (2400, True),
        (4800, True),
        (26400, True),
        (0, False),
        (1000, False),
        (1800, False),
        (3600, False),
        (2500, False),
    ],
)
def test_given_a_capacity_then_only_1200_or_multiples_of_2400_pass(gib, ok):
    assert (storage_capacity_problem("PERSISTENT_2", gib) is None) is ok


def test_given_a_bad_capacity_then_the_fix_names_the_nearest_valid_sizes():
    assert "nearest: 2400 or 4800" in storage_capacity_problem("PERSISTENT_2", 3600)
    assert "nearest: 1200 or 2400" in storage_capacity_problem("SCRATCH_2", 1800)


@pytest.mark.parametrize("tier", [125, 250, 500, 1000])
def test_given_a_persistent_2_tier_then_it_passes(tier):
    assert throughput_problem("PERSISTENT_2", tier) is None


@pytest.mark.parametrize("tier", [None, 0, 50, 100, 200, 2000])
def test_given_a_non_tier_then_persistent_2_rejects_it(tier):
    assert "125, 250, 500, 1000" in throughput_problem("PERSISTENT_2", tier)


@pytest.mark.parametrize(
    "uri, expected",
    [
        ("s3://my-bucket", ("my-bucket", "")),
        ("s3://my-bucket/", ("my-bucket", "")),
        ("s3://my.bucket-1/a/b", ("my.bucket-1", "a/b/")),
        ("s3://abc/a/b/", ("abc", "a/b/")),
    ],
)
def test_given_a_valid_s3_uri_then_it_parses_to_bucket_and_slash_ended_prefix(uri, expected):
    assert parse_s3_uri(uri) == expected


@pytest.mark.parametrize(
    "uri",
    [
        "my-bucket/prefix",
        "s3:/my-bucket",
        "s3://",
        "s3://ab",
        "s3://My-Bucket/x",
        "s3://-bucket/x",
        "s3://bucket-/x",
        "s3://my..bucket",
        "s3://192.168.1.1/x",
        "s3://xn--bucket/x",
        "s3://bucket-s3alias/x",
        "s3://my bucket/x",
        "s3://bucket/a//b",
        "s3://bucket/a b\n",
        "s3://" + "a" * 64,
    ],
)
def test_given_a_malformed_s3_uri_then_parsing_fails(uri):
    with pytest.raises(ValueError):
        parse_s3_uri(uri)


def test_given_two_uris_then_overlap_means_same_bucket_and_nested_prefixes():
    assert s3_uris_overlap("s3://bkt1/data", "s3://bkt1/data/out")
    assert s3_uris_overlap("s3://bkt1", "s3://bkt1/out")
    assert not s3_uris_overlap("s3://bkt1/data", "s3://bkt1/data-out")
    assert not s3_uris_overlap("s3://bkt1/data", "s3://bkt2/data")
