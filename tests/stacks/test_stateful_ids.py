"""Stateful resources keep their logical IDs: an upgrade must never replace stored data.

The IDs are those of the platform template synthesized before the platform became a construct
and the workload a stack of its own (commit cc646eb, stack ``TrainiumPlatform``). CloudFormation
replaces a resource whose logical ID changes: a new VPC, an empty file system, a new key.

The stack's construct ID is now its name (``trn-bert-platform``); logical IDs do not include it,
except those of the rules a security group has with itself, which keep the IDs they had
(:mod:`stacks.legacy_ids`): a renamed rule would be created before the old one is deleted, and
EC2 refuses the duplicate.
"""

from __future__ import annotations

import pytest

from tests.support import resources

#: logical ID -> resource type, for every resource that holds data or identity.
STATEFUL = {
    "NetworkVpc7FB7348F": "AWS::EC2::VPC",
    "NetworkVpcpublicSubnet1Subnet00617657": "AWS::EC2::Subnet",
    "NetworkVpcpublicSubnet2SubnetDCAA7C9A": "AWS::EC2::Subnet",
    "NetworkVpcprivateSubnet1Subnet9EC58498": "AWS::EC2::Subnet",
    "NetworkVpcprivateSubnet2Subnet6E5E8804": "AWS::EC2::Subnet",
    "NetworkFlowLogsKey9F917D90": "AWS::KMS::Key",
    "NetworkFlowLogs2BEC3212": "AWS::Logs::LogGroup",
    "ClusterSecretsKey462B29B5": "AWS::KMS::Key",
    "ClusterControlPlaneSecurityGroupE5E5A265": "AWS::EC2::SecurityGroup",
    "ClusterC2E21B66": "AWS::EKS::Cluster",
    "ClusterSystemNodesB72BD2B8": "AWS::EKS::Nodegroup",
    "ClusterKubectlProviderHandlerLogGroupB0C4128C": "AWS::Logs::LogGroup",
    "ClusterKubectlProviderframeworkonEventLogGroup2AC81D98": "AWS::Logs::LogGroup",
    "StorageSecurityGroupDB13F6CD": "AWS::EC2::SecurityGroup",
    "StorageKeyBAA9457B": "AWS::KMS::Key",
    "StorageFileSystem61EA7B3D": "AWS::FSx::FileSystem",
    "RegistryRepositoryC6C96DCD": "AWS::ECR::Repository",
    # Since issue 43 (not in commit cc646eb's template): the trained models.
    "ModelBucketEBB1ADF4": "AWS::S3::Bucket",
}

#: Those of the Trainium capacity, by ``trainium_capacity``: the fixed nodegroup's (the platform's
#: only mode at commit cc646eb) and Karpenter's (the default since issue 34 item 13). Switching
#: modes replaces these and nothing else (docs/capacity.md).
CAPACITY_STATEFUL = {
    "nodegroup": {
        "TrainiumLaunchTemplateEfaSecurityGroup5B81B93E": "AWS::EC2::SecurityGroup",
        "TrainiumLaunchTemplatePlacementGroup2DCF9C2A": "AWS::EC2::PlacementGroup",
        "TrainiumNodegroupFD1F543B": "AWS::EKS::Nodegroup",
    },
    "karpenter": {
        "TrainiumPoolEfaSecurityGroup342AE3DE": "AWS::EC2::SecurityGroup",
        "TrainiumPoolPlacementGroupFF1CE4D9": "AWS::EC2::PlacementGroup",
    },
}

#: Of those, the ones a stack delete keeps (DeletionPolicy Retain): the data and its keys.
RETAINED = {
    "NetworkVpc7FB7348F",
    "NetworkVpcprivateSubnet1Subnet9EC58498",
    "NetworkFlowLogsKey9F917D90",
    "NetworkFlowLogs2BEC3212",
    "ClusterSecretsKey462B29B5",
    "ClusterKubectlProviderHandlerLogGroupB0C4128C",
    "ClusterKubectlProviderframeworkonEventLogGroup2AC81D98",
    "StorageSecurityGroupDB13F6CD",
    "StorageKeyBAA9457B",
    "StorageFileSystem61EA7B3D",
    "RegistryRepositoryC6C96DCD",
    "ModelBucketEBB1ADF4",
}


#: The self-referencing security-group rules of the Trainium capacity, named after the stack's
#: former construct ID, by ``trainium_capacity``.
CAPACITY_SELF_RULES = {
    "nodegroup": {
        "TrainiumLaunchTemplateEfaSecurityGroupfromTrainiumPlatformTrainiumLaunchTemplateEfaSecurityGroupEE477FC4"
        "ALLTRAFFIC5EBFFE5F": "AWS::EC2::SecurityGroupIngress",
        "TrainiumLaunchTemplateEfaSecurityGrouptoTrainiumPlatformTrainiumLaunchTemplateEfaSecurityGroupEE477FC4"
        "ALLTRAFFIC7B80F657": "AWS::EC2::SecurityGroupEgress",
    },
    "karpenter": {
        "TrainiumPoolEfaSecurityGroupfromTrainiumPlatformTrainiumPoolEfaSecurityGroupE18F4748ALLTRAFFIC50BBFFB5": (
            "AWS::EC2::SecurityGroupIngress"
        ),
        "TrainiumPoolEfaSecurityGrouptoTrainiumPlatformTrainiumPoolEfaSecurityGroupE18F4748ALLTRAFFIC7D53CA5F": (
            "AWS::EC2::SecurityGroupEgress"
        ),
    },
}
#: Those of both modes (FSx's group).
SELF_RULES = {
    "StorageSecurityGroupfromTrainiumPlatformStorageSecurityGroup7D02911A988383AFECB": "AWS::EC2::SecurityGroupIngress",
    "StorageSecurityGrouptoTrainiumPlatformStorageSecurityGroup7D02911A9881AEDB72F": "AWS::EC2::SecurityGroupEgress",
    "StorageSecurityGroupfromTrainiumPlatformStorageSecurityGroup7D02911A10181023A1156E9E": (
        "AWS::EC2::SecurityGroupIngress"
    ),
    "StorageSecurityGrouptoTrainiumPlatformStorageSecurityGroup7D02911A1018102378206588": (
        "AWS::EC2::SecurityGroupEgress"
    ),
}


#: The platform template of each mode: the default is Karpenter.
MODES = ("karpenter", "nodegroup")


@pytest.fixture(params=MODES)
def mode(request) -> str:
    return request.param


@pytest.fixture
def mode_template(mode, platform_json, nodegroup_platform_json) -> dict:
    """The platform template of ``mode`` (the session's default synth, or the nodegroup's)."""
    return platform_json if mode == "karpenter" else nodegroup_platform_json


def _cases(table: dict[str, str], by_mode: dict[str, dict[str, str]]) -> list[tuple[str, str, str]]:
    """(mode, logical ID, type) of ``table``'s IDs in both modes and each mode's own."""
    return [
        *((m, k, t) for m in MODES for k, t in sorted(table.items())),
        *((m, k, t) for m in MODES for k, t in sorted(by_mode[m].items())),
    ]


def test_given_the_default_then_its_capacity_is_karpenter(platform_json):
    assert set(CAPACITY_STATEFUL["karpenter"]) <= set(platform_json["Resources"])


@pytest.mark.parametrize(("mode", "logical_id", "type_name"), _cases(SELF_RULES, CAPACITY_SELF_RULES))
def test_given_the_stack_named_by_its_id_then_each_self_rule_keeps_its_former_logical_id(
    mode_template, logical_id, type_name
):
    assert mode_template["Resources"][logical_id]["Type"] == type_name


def test_given_the_stack_named_by_its_id_then_no_logical_id_carries_that_name(mode_template):
    assert not [k for k in mode_template["Resources"] if "trnbertplatform" in k.lower()]


@pytest.mark.parametrize(("mode", "logical_id", "type_name"), _cases(STATEFUL, CAPACITY_STATEFUL))
def test_given_either_capacity_mode_then_the_stateful_resource_keeps_its_logical_id(
    mode_template, logical_id, type_name
):
    resource = mode_template["Resources"].get(logical_id)
    assert resource is not None, f"{logical_id} ({type_name}) is gone: CloudFormation would replace it"
    assert resource["Type"] == type_name
    if logical_id in RETAINED:
        assert resource["DeletionPolicy"] == resource["UpdateReplacePolicy"] == "Retain"


def test_given_either_capacity_mode_then_every_stateful_resource_of_the_platform_is_listed(
    mode, mode_template
):
    # A new VPC, key, file system or repository must be added above, so its ID is pinned too.
    listed = {**STATEFUL, **CAPACITY_STATEFUL[mode]}
    found = {k for t in set(listed.values()) for k in resources(mode_template, t)}
    assert found == set(listed)


def test_given_default_app_then_the_training_stack_holds_no_stored_data(training_json):
    stateful_types = set(STATEFUL.values()) - {"AWS::Logs::LogGroup"}
    held = {k: r for k, r in training_json["Resources"].items() if r["Type"] in stateful_types}
    # The one key: the image builds' (their logs and CodeBuild artifacts), deleted with the stack.
    ((key_id, key),) = held.items()
    assert key["Type"] == "AWS::KMS::Key" and key_id.startswith("TrainingImagesBuildKey")
    assert key["DeletionPolicy"] == "Delete"
