"""EBS CSI driver add-on: pinned, credentials through Pod Identity, after the pod identity agent."""

from tests.support import resources
from tests.trainium_eks.addons import depends_on, logical_ids


def _addon(template, name):
    (found,) = [
        (k, r["Properties"])
        for k, r in resources(template, "AWS::EKS::Addon").items()
        if r["Properties"]["AddonName"] == name
    ]
    return found


def test_given_default_config_then_the_pinned_add_on_uses_pod_identity(platform_json):
    logical_id, props = _addon(platform_json, "aws-ebs-csi-driver")
    assert props["AddonVersion"] == "v1.62.0-eksbuild.1"
    (association,) = props["PodIdentityAssociations"]
    assert association["ServiceAccount"] == "ebs-csi-controller-sa"
    role_id = association["RoleArn"]["Fn::GetAtt"][0]
    role = platform_json["Resources"][role_id]["Properties"]
    (statement,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert statement["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert sorted(statement["Action"]) == ["sts:AssumeRole", "sts:TagSession"]
    (policy,) = role["ManagedPolicyArns"]
    assert policy["Fn::Join"][1][-1].endswith(":iam::aws:policy/service-role/AmazonEBSCSIDriverPolicy")


def test_given_default_config_then_driver_waits_for_the_pod_identity_agent(platform_json):
    logical_id, _ = _addon(platform_json, "aws-ebs-csi-driver")
    agent_id, _ = _addon(platform_json, "eks-pod-identity-agent")
    assert agent_id in depends_on(platform_json, logical_id)


def test_given_default_config_then_node_role_gets_no_ebs_permissions(platform_json):
    (driver_role,) = logical_ids(platform_json, "AWS::IAM::Role", "AddonsEbsCsiControllerRole")
    for logical_id, role in resources(platform_json, "AWS::IAM::Role").items():
        if logical_id != driver_role:
            assert "AmazonEBSCSIDriverPolicy" not in str(role["Properties"].get("ManagedPolicyArns")), (
                logical_id
            )
