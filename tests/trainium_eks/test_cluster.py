"""EKS cluster: version, logging, secrets encryption, endpoint access, access entries, system nodes."""

from aws_cdk.assertions import Match, Template

from tests.support import resources, synth_platform
from trainium_eks.config import config_from_context


def _cluster(template_json):
    (cluster,) = resources(template_json, "AWS::EKS::Cluster").values()
    return cluster["Properties"]


def test_given_default_config_then_cluster_runs_the_pinned_version_with_all_logs(platform_json):
    props = _cluster(platform_json)
    assert props["Version"] == "1.36"
    assert [t["Type"] for t in props["Logging"]["ClusterLogging"]["EnabledTypes"]] == [
        "api", "audit", "authenticator", "controllerManager", "scheduler"]


def test_given_default_config_then_secrets_use_a_rotating_kms_key(platform_json):
    props = _cluster(platform_json)
    (encryption,) = props["EncryptionConfig"]
    assert encryption["Resources"] == ["secrets"]
    key_id = encryption["Provider"]["KeyArn"]["Fn::GetAtt"][0]
    assert platform_json["Resources"][key_id]["Properties"]["EnableKeyRotation"] is True


def test_given_default_config_then_endpoint_is_private_only(platform_json):
    vpc_config = _cluster(platform_json)["ResourcesVpcConfig"]
    assert vpc_config["EndpointPrivateAccess"] is True
    assert vpc_config["EndpointPublicAccess"] is False


def test_given_default_config_then_no_auto_mode_and_access_entries_api(platform_json):
    props = _cluster(platform_json)
    assert props["ComputeConfig"] == {"Enabled": False}
    assert props["AccessConfig"]["AuthenticationMode"] == "API"


def test_given_default_config_then_system_nodegroup_is_small_standard_al2023(platform_template):
    platform_template.has_resource_properties("AWS::EKS::Nodegroup", {
        "AmiType": "AL2023_x86_64_STANDARD",
        "InstanceTypes": ["m7i.large"],
        "Labels": {"trainium-eks/pool": "system"},
        "ScalingConfig": {"MinSize": 2, "DesiredSize": 2, "MaxSize": 2},
        "NodeRepairConfig": {"Enabled": True},
    })


def test_given_admins_and_public_cidrs_when_synthesized_then_access_entries_and_restricted_endpoint():
    # given
    context = {
        "endpoint_public_cidrs": "203.0.113.7/32",
        "admin_principal_arns": "arn:aws:iam::123456789012:role/Admin,arn:aws:iam::123456789012:user/ops",
    }
    config = config_from_context(context)
    # when
    template = Template.from_json(synth_platform(**context))
    # then
    template.has_resource_properties("AWS::EKS::Cluster", {"ResourcesVpcConfig": Match.object_like({
        "EndpointPublicAccess": True, "EndpointPrivateAccess": True, "PublicAccessCidrs": ["203.0.113.7/32"]})})
    for arn in config.admin_principal_arns:
        template.has_resource_properties("AWS::EKS::AccessEntry", {
            "PrincipalArn": arn,
            "AccessPolicies": [{"AccessScope": {"Type": "cluster"}, "PolicyArn": Match.any_value()}],
        })


def test_given_default_config_then_an_output_gives_the_kubeconfig_command(platform_json):
    (output,) = [o for k, o in platform_json["Outputs"].items() if k.startswith("ClusterUpdateKubeconfig")]
    (cluster_id,) = resources(platform_json, "AWS::EKS::Cluster")
    assert output["Value"] == {"Fn::Join": ["", [
        "aws eks update-kubeconfig --name ", {"Ref": cluster_id}, " --region us-west-2"]]}
