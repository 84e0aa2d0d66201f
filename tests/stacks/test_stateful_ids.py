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
    "TrainiumLaunchTemplateEfaSecurityGroup5B81B93E": "AWS::EC2::SecurityGroup",
    "TrainiumLaunchTemplatePlacementGroup2DCF9C2A": "AWS::EC2::PlacementGroup",
    "TrainiumNodegroupFD1F543B": "AWS::EKS::Nodegroup",
    "StorageSecurityGroupDB13F6CD": "AWS::EC2::SecurityGroup",
    "StorageKeyBAA9457B": "AWS::KMS::Key",
    "StorageFileSystem61EA7B3D": "AWS::FSx::FileSystem",
    "RegistryRepositoryC6C96DCD": "AWS::ECR::Repository",
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
}


#: The self-referencing security-group rules, named after the stack's former construct ID.
SELF_RULES = {
    "TrainiumLaunchTemplateEfaSecurityGroupfromTrainiumPlatformTrainiumLaunchTemplateEfaSecurityGroupEE477FC4"
    "ALLTRAFFIC5EBFFE5F": "AWS::EC2::SecurityGroupIngress",
    "TrainiumLaunchTemplateEfaSecurityGrouptoTrainiumPlatformTrainiumLaunchTemplateEfaSecurityGroupEE477FC4"
    "ALLTRAFFIC7B80F657": "AWS::EC2::SecurityGroupEgress",
    "StorageSecurityGroupfromTrainiumPlatformStorageSecurityGroup7D02911A988383AFECB": "AWS::EC2::SecurityGroupIngress",
    "StorageSecurityGrouptoTrainiumPlatformStorageSecurityGroup7D02911A9881AEDB72F": "AWS::EC2::SecurityGroupEgress",
    "StorageSecurityGroupfromTrainiumPlatformStorageSecurityGroup7D02911A10181023A1156E9E": (
        "AWS::EC2::SecurityGroupIngress"
    ),
    "StorageSecurityGrouptoTrainiumPlatformStorageSecurityGroup7D02911A1018102378206588": (
        "AWS::EC2::SecurityGroupEgress"
    ),
}


@pytest.mark.parametrize("logical_id", sorted(SELF_RULES))
def test_given_the_stack_named_by_its_id_then_each_self_rule_keeps_its_former_logical_id(
    platform_json, logical_id
):
    assert platform_json["Resources"][logical_id]["Type"] == SELF_RULES[logical_id]


def test_given_the_stack_named_by_its_id_then_no_logical_id_carries_that_name(platform_json):
    assert not [k for k in platform_json["Resources"] if "trnbertplatform" in k.lower()]


@pytest.mark.parametrize("logical_id", sorted(STATEFUL))
def test_given_default_app_then_the_stateful_resource_keeps_its_logical_id(platform_json, logical_id):
    resource = platform_json["Resources"].get(logical_id)
    assert resource is not None, (
        f"{logical_id} ({STATEFUL[logical_id]}) is gone: CloudFormation would replace it"
    )
    assert resource["Type"] == STATEFUL[logical_id]
    if logical_id in RETAINED:
        assert resource["DeletionPolicy"] == resource["UpdateReplacePolicy"] == "Retain"


def test_given_default_app_then_every_stateful_resource_of_the_platform_is_listed(platform_json):
    # A new VPC, key, file system or repository must be added above, so its ID is pinned too.
    stateful_types = set(STATEFUL.values())
    found = {k for t in stateful_types for k in resources(platform_json, t)}
    assert found == set(STATEFUL)


def test_given_default_app_then_the_training_stack_holds_no_stored_data(training_json):
    stateful_types = set(STATEFUL.values()) - {"AWS::Logs::LogGroup"}
    held = {k: r for k, r in training_json["Resources"].items() if r["Type"] in stateful_types}
    # The one key: the image builds' (their logs and CodeBuild artifacts), deleted with the stack.
    ((key_id, key),) = held.items()
    assert key["Type"] == "AWS::KMS::Key" and key_id.startswith("TrainingImagesBuildKey")
    assert key["DeletionPolicy"] == "Delete"
