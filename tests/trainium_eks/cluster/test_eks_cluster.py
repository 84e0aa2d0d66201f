"""EKS cluster: version, logging, secrets encryption, endpoint access, access entries, system nodes."""

import json
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk.assertions import Match, Template

from tests.support import resources, synth_platform
from trainium_eks.cluster.eks_cluster import TrainiumCluster
from trainium_eks.config import config_from_context
from trainium_job.errors import ConfigError


def _cluster(template_json):
    (cluster,) = resources(template_json, "AWS::EKS::Cluster").values()
    return cluster["Properties"]


def test_given_default_config_then_cluster_runs_the_pinned_version_with_all_logs(platform_json):
    props = _cluster(platform_json)
    assert props["Version"] == "1.35"
    assert [t["Type"] for t in props["Logging"]["ClusterLogging"]["EnabledTypes"]] == [
        "api",
        "audit",
        "authenticator",
        "controllerManager",
        "scheduler",
    ]


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
    platform_template.has_resource_properties(
        "AWS::EKS::Nodegroup",
        {
            "AmiType": "AL2023_x86_64_STANDARD",
            "InstanceTypes": ["m7i.large"],
            "Labels": {"trainium-eks/pool": "system"},
            "ScalingConfig": {"MinSize": 2, "DesiredSize": 2, "MaxSize": 2},
            "NodeRepairConfig": {"Enabled": True},
        },
    )


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
    template.has_resource_properties(
        "AWS::EKS::Cluster",
        {
            "ResourcesVpcConfig": Match.object_like(
                {
                    "EndpointPublicAccess": True,
                    "EndpointPrivateAccess": True,
                    "PublicAccessCidrs": ["203.0.113.7/32"],
                }
            )
        },
    )
    for arn in config.admin_principal_arns:
        template.has_resource_properties(
            "AWS::EKS::AccessEntry",
            {
                "PrincipalArn": arn,
                "AccessPolicies": [{"AccessScope": {"Type": "cluster"}, "PolicyArn": Match.any_value()}],
            },
        )


def test_given_default_config_then_an_output_gives_the_kubeconfig_command(platform_json):
    (output,) = [o for k, o in platform_json["Outputs"].items() if k.startswith("ClusterUpdateKubeconfig")]
    (cluster_id,) = resources(platform_json, "AWS::EKS::Cluster")
    assert output["Value"] == {
        "Fn::Join": ["", ["aws eks update-kubeconfig --name ", {"Ref": cluster_id}, " --region us-west-2"]]
    }


def test_given_default_config_then_creator_gets_no_implicit_admin_and_kubectl_waits_for_its_entry(
    platform_json,
):
    assert _cluster(platform_json)["AccessConfig"]["BootstrapClusterCreatorAdminPermissions"] is False
    entries = resources(platform_json, "AWS::EKS::AccessEntry")
    functions = {
        k: v
        for k, v in resources(platform_json, "AWS::Lambda::Function").items()
        if k.startswith("ClusterKubectlProvider")
    }
    assert len(functions) == 2
    for logical_id, function in functions.items():
        # The provider's own admin entry: its principal is the handler's role.
        (entry,) = [e for e in function["DependsOn"] if e in entries]
        assert entries[entry]["Properties"]["PrincipalArn"]["Fn::GetAtt"][0].startswith(
            "ClusterKubectlProviderHandlerServiceRole"
        ), logical_id


def _pull_only_ecr(template, role_id: str) -> None:
    role = template["Resources"][role_id]
    policies = [p["Fn::Join"][1][-1] for p in role["Properties"]["ManagedPolicyArns"]]
    assert ":iam::aws:policy/AmazonEC2ContainerRegistryPullOnly" in policies
    assert not any("ReadOnly" in p for p in policies)


@pytest.mark.parametrize(("mode", "nodegroup_count"), [("default", 1), ("nodegroup", 2)])
def test_given_either_capacity_mode_then_every_nodegroup_node_has_imdsv2_hop_limit_1_and_pull_only_ecr(
    platform_json, nodegroup_platform_json, mode, nodegroup_count
):
    # The default has the system nodegroup only (Karpenter launches the Trainium nodes; their
    # IMDS is the launch template's: tests/contracts/test_karpenter.py compares the two).
    template = platform_json if mode == "default" else nodegroup_platform_json
    nodegroups = resources(template, "AWS::EKS::Nodegroup")
    templates = resources(template, "AWS::EC2::LaunchTemplate")
    assert len(nodegroups) == nodegroup_count
    for ng in nodegroups.values():
        lt_id = ng["Properties"]["LaunchTemplate"]["Id"]["Ref"]
        options = templates[lt_id]["Properties"]["LaunchTemplateData"]["MetadataOptions"]
        assert options == {"HttpTokens": "required", "HttpEndpoint": "enabled", "HttpPutResponseHopLimit": 1}
        _pull_only_ecr(template, ng["Properties"]["NodeRole"]["Fn::GetAtt"][0])


def test_given_default_config_then_the_karpenter_node_role_pulls_only_from_ecr(platform_json):
    (role_id,) = [
        k for k in resources(platform_json, "AWS::IAM::Role") if k.startswith("TrainiumPoolNodeRole")
    ]
    _pull_only_ecr(platform_json, role_id)


def test_given_default_config_then_vpc_cni_is_managed_with_network_policy_and_its_own_pod_identity(
    platform_json,
):
    addons = {
        a["Properties"]["AddonName"]: (k, a) for k, a in resources(platform_json, "AWS::EKS::Addon").items()
    }
    cni_id, cni = addons["vpc-cni"]
    props = cni["Properties"]
    assert props["ConfigurationValues"] == '{"enableNetworkPolicy":"true"}'
    assert props["ResolveConflicts"] == "OVERWRITE"
    (association,) = props["PodIdentityAssociations"]
    assert association["ServiceAccount"] == "aws-node"
    role = platform_json["Resources"][association["RoleArn"]["Fn::GetAtt"][0]]["Properties"]
    assert [p["Fn::Join"][1][-1] for p in role["ManagedPolicyArns"]] == [
        ":iam::aws:policy/AmazonEKS_CNI_Policy"
    ]
    agent_id, _ = addons["eks-pod-identity-agent"]
    for ng in resources(platform_json, "AWS::EKS::Nodegroup").values():
        # Credentials for aws-node exist before any node joins, and nodes hold no CNI policy.
        assert {cni_id, agent_id} <= set(ng["DependsOn"])
        node_role = platform_json["Resources"][ng["Properties"]["NodeRole"]["Fn::GetAtt"][0]]["Properties"]
        assert not any("CNI" in json.dumps(p) for p in node_role["ManagedPolicyArns"])


def _built_cluster(**props: Any) -> TrainiumCluster:
    """A TrainiumCluster built directly, as a library user would."""
    stack = cdk.Stack(cdk.App(), "Eks", env=cdk.Environment(region="us-west-2"))
    vpc = ec2.Vpc(
        stack,
        "Vpc",
        nat_gateways=0,
        subnet_configuration=[ec2.SubnetConfiguration(name="p", subnet_type=ec2.SubnetType.PRIVATE_ISOLATED)],
    )
    return TrainiumCluster(
        stack, "Cluster", vpc=vpc, subnets=vpc.isolated_subnets, **{"kubernetes_version": "1.36", **props}
    )


@pytest.mark.parametrize(
    "props,field,fix",
    [
        ({"system_nodes": 0}, "system_nodes", "use 1 to 10"),
        ({"system_nodes": 11}, "system_nodes", "use 1 to 10"),
        ({"kubernetes_version": "1.29"}, "kubernetes_version", "supported: 1.34, 1.35, 1.36"),
        ({"endpoint_public_cidrs": ["0.0.0.0/0"]}, "endpoint_public_cidrs", "open API endpoint"),
        ({"endpoint_public_cidrs": ["2001:db8::/48"]}, "endpoint_public_cidrs", "IPv4"),
        (
            {"endpoint_public_cidrs": ["10.0.0.0/7"]},
            "endpoint_public_cidrs",
            "endpoint_public_allow_broad=true",
        ),
        (
            {"admin_principal_arns": ["arn:aws:iam::123456789012:group/Admins"]},
            "admin_principal_arns",
            "IAM role or user ARNs such as 'arn:aws:iam::",
        ),
        (
            {"admin_principal_arns": ["arn:aws-cn:iam::123456789012:role/Admin"]},
            "admin_principal_arns",
            "region us-west-2 is in partition aws",
        ),
    ],
)
def test_given_a_bad_prop_when_a_library_user_builds_the_cluster_then_config_error_names_it(
    props, field, fix
):
    with pytest.raises(ConfigError) as err:
        _built_cluster(**props)
    assert err.value.field_name == field and fix in str(err.value)


def test_given_a_broad_endpoint_with_the_opt_in_when_built_directly_then_accepted():
    cluster = _built_cluster(endpoint_public_cidrs=["10.0.0.0/7"], endpoint_public_allow_broad=True)
    assert cluster.system_nodegroup is not None
