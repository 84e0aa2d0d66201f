"""Every role bound to a service account is built by the one Pod Identity helper
(``trainium_eks.cluster.managed_addons``): a role EKS Pod Identity may assume and tag the session
of, and an association naming the service account its consumer runs as."""

import aws_cdk as cdk
from aws_cdk.assertions import Template

from tests.support import ALL_OPTIONS, resources, synth_platform
from tests.trainium_eks.jobs.training_support import bare_cluster
from trainium_eks.cluster.managed_addons import (
    POD_IDENTITY_PRINCIPAL,
    pod_identity_association,
    pod_identity_role,
)
from trainium_eks.monitoring.names import PROMETHEUS_SERVICE_ACCOUNT
from trainium_eks.nodes.health_checks import SERVICE_ACCOUNT as HEALTH_CHECK_SERVICE_ACCOUNT
from trainium_eks.nodes.karpenter import KARPENTER_NAMESPACE, KARPENTER_SERVICE_ACCOUNT
from trainium_eks.storage.fsx_csi import CONTROLLER_SERVICE_ACCOUNT, DRIVER_NAMESPACE
from trainium_job.job import SERVICE_ACCOUNT as TRAINING_SERVICE_ACCOUNT

#: The trust the helper writes: Pod Identity assumes the role and tags its session.
POD_IDENTITY_TRUST = {
    "Statement": [
        {
            "Action": ["sts:AssumeRole", "sts:TagSession"],
            "Effect": "Allow",
            "Principal": {"Service": POD_IDENTITY_PRINCIPAL},
        }
    ],
    "Version": "2012-10-17",
}


def _role_id(association: dict) -> str:
    (role_id, _) = association["Properties"]["RoleArn"]["Fn::GetAtt"]
    return role_id


def test_given_the_helper_then_the_role_trusts_pod_identity_and_the_association_names_its_account():
    # Given a cluster and a role bound by the helper to one service account
    cluster = bare_cluster()
    stack = cdk.Stack.of(cluster)
    role = pod_identity_role(stack, "Role", description="test role")
    pod_identity_association(
        stack, "Binding", cluster=cluster, namespace="ns", service_account="sa", role=role
    )
    # When synthesized
    template = Template.from_stack(stack).to_json()
    # Then the role trusts Pod Identity with session tags and holds no managed policy
    (association,) = resources(template, "AWS::EKS::PodIdentityAssociation").values()
    role_props = template["Resources"][_role_id(association)]["Properties"]
    assert role_props["AssumeRolePolicyDocument"] == POD_IDENTITY_TRUST
    assert "ManagedPolicyArns" not in role_props
    # And the association gives that role to ns/sa
    assert association["Properties"]["Namespace"] == "ns"
    assert association["Properties"]["ServiceAccount"] == "sa"


def test_given_every_option_then_each_bound_role_is_the_helpers_for_its_consumers_account():
    # Given the platform with AMP remote write, Karpenter, the node replacement and FSx CSI
    template = synth_platform(**ALL_OPTIONS)
    associations = resources(template, "AWS::EKS::PodIdentityAssociation")
    # When each association is read back with its role
    bound = {
        (a["Properties"]["Namespace"], a["Properties"]["ServiceAccount"]): template["Resources"][_role_id(a)]
        for a in associations.values()
    }
    # Then each consumer's service account (as its own module names it) has one
    expected_accounts = {
        (KARPENTER_NAMESPACE, KARPENTER_SERVICE_ACCOUNT),
        (DRIVER_NAMESPACE, CONTROLLER_SERVICE_ACCOUNT),
    }
    assert expected_accounts <= set(bound), sorted(bound)
    accounts = {account for _, account in bound}
    assert {PROMETHEUS_SERVICE_ACCOUNT, HEALTH_CHECK_SERVICE_ACCOUNT, TRAINING_SERVICE_ACCOUNT} <= accounts
    # And every bound role trusts Pod Identity exactly as the helper writes it
    for key, role in bound.items():
        assert role["Properties"]["AssumeRolePolicyDocument"] == POD_IDENTITY_TRUST, key
