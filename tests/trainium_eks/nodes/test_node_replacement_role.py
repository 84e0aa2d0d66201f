"""The node replacement role built alone: its refusal of a wrong capacity and what a deploy keeps
(the construct ids under which CloudFormation knows its resources, the role's description)."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import aws_eks_v2 as eks
from aws_cdk.assertions import Template

from trainium_eks.nodes.health_checks import NodeReplacementRole
from trainium_job.errors import ConfigError


def _stack() -> tuple[cdk.Stack, eks.ICluster]:
    stack = cdk.Stack(cdk.App(), "R", env=cdk.Environment(account="111122223333", region="us-west-2"))
    return stack, eks.Cluster.from_cluster_attributes(stack, "C", cluster_name="c")


@pytest.mark.parametrize(("nodegroup_name", "node_pool"), [("ng", "trainium"), (None, None)])
def test_given_both_or_neither_capacity_then_the_role_is_refused_naming_the_fields_and_the_fix(
    nodegroup_name, node_pool
):
    stack, cluster = _stack()
    with pytest.raises(ConfigError) as e:
        NodeReplacementRole(
            stack, "Role", cluster=cluster, nodegroup_name=nodegroup_name, node_pool=node_pool
        )
    assert str(e.value) == (
        f"config 'NodeReplacementRole.nodegroup_name / node_pool' = {(nodegroup_name, node_pool)!r} is "
        "invalid: give exactly one: the Trainium nodegroup's name, or the Karpenter NodePool's"
    )


def test_given_the_role_then_its_resources_keep_their_ids_and_the_role_says_what_it_is_for():
    # A resource's logical id comes from its construct path: another id makes CloudFormation
    # replace the association (delete and create) on the next deploy of an existing platform
    stack, cluster = _stack()
    NodeReplacementRole(stack, "Replace", cluster=cluster, node_pool="trainium")
    template = Template.from_stack(stack).to_json()["Resources"]
    ids = {
        resource["Properties"]["ServiceAccount"]: logical_id
        for logical_id, resource in template.items()
        if resource["Type"] == "AWS::EKS::PodIdentityAssociation"
    }
    assert ids["node-health-check"].startswith("ReplacePodIdentity")
    assert ids["bert-trainer"].startswith("ReplaceTrainingPodIdentity")
    (role,) = [r for r in template.values() if r["Type"] == "AWS::IAM::Role"]
    assert role["Properties"]["Description"] == (
        "Trainium node health check: terminate a failed node of this cluster (EKS Pod Identity)"
    )
