"""Effective IAM permissions of every role in the template: identity policies within boundaries.

No role may push to an ECR repository other than the platform's, or read S3 objects other than
the CDK asset bucket's. cdk-ecr-deployment grants both on '*'; the copy role's permissions
boundary is what must cap them, so the check intersects identity policies with boundaries.
"""

from __future__ import annotations

import fnmatch
import json
from typing import Any

from tests.support import resources, synth_app, synth_platform, synth_training

PUSH_ACTIONS = (
    "ecr:PutImage",
    "ecr:InitiateLayerUpload",
    "ecr:UploadLayerPart",
    "ecr:CompleteLayerUpload",
    "ecr:BatchDeleteImage",
)
S3_READ = ("s3:GetObject",)
#: AWS managed policies the stack attaches; none grants ECR push or S3 object reads (their
#: documents in the AWS Managed Policy Reference). An unknown one fails the test until reviewed.
MANAGED_WITHOUT_PUSH_OR_S3_READ = {
    "service-role/AWSLambdaBasicExecutionRole",
    "service-role/AWSLambdaVPCAccessExecutionRole",
    "AmazonEKSClusterPolicy",
    "AmazonEKSWorkerNodePolicy",
    "AmazonEKS_CNI_Policy",
    "AmazonEC2ContainerRegistryPullOnly",
    "AmazonEC2ContainerRegistryReadOnly",
    "AmazonElasticContainerRegistryPublicReadOnly",
    "service-role/AmazonEBSCSIDriverPolicy",
    "CloudWatchAgentServerPolicy",
}


def _as_list(value: Any) -> list:
    return value if isinstance(value, list) else [value]


def _grants(statements: list[dict], actions: tuple[str, ...]) -> list[Any]:
    """Resources on which ``statements`` allow any of ``actions`` (wildcards in actions honoured)."""
    granted = []
    for st in statements:
        if st.get("Effect") != "Allow":
            continue
        if any(fnmatch.fnmatch(a, pattern) for a in actions for pattern in _as_list(st.get("Action", []))):
            granted += _as_list(st.get("Resource", []))
    return granted


def _managed_name(arn: Any) -> str:
    text = json.dumps(arn)
    return text.split(":iam::aws:policy/")[-1].split('"')[0]


def effective(template: dict, actions: tuple[str, ...]) -> dict[str, list[Any]]:
    """Role logical id -> resources it is effectively allowed ``actions`` on."""
    policies = resources(template, "AWS::IAM::Policy")
    managed = resources(template, "AWS::IAM::ManagedPolicy")
    result = {}
    for role_id, role in resources(template, "AWS::IAM::Role").items():
        props = role["Properties"]
        statements = [s for p in props.get("Policies", []) for s in p["PolicyDocument"]["Statement"]]
        for policy in policies.values():
            if {"Ref": role_id} in policy["Properties"].get("Roles", []):
                statements += policy["Properties"]["PolicyDocument"]["Statement"]
        for arn in props.get("ManagedPolicyArns", []):
            if isinstance(arn, dict) and "Ref" in arn:
                statements += managed[arn["Ref"]]["Properties"]["PolicyDocument"]["Statement"]
            else:
                assert _managed_name(arn) in MANAGED_WITHOUT_PUSH_OR_S3_READ, (role_id, arn)
        granted = _grants(statements, actions)
        boundary = props.get("PermissionsBoundary")
        if boundary is not None and granted:
            allowed = _grants(managed[boundary["Ref"]]["Properties"]["PolicyDocument"]["Statement"], actions)
            granted = allowed if "*" in granted else [r for r in granted if r in allowed or "*" in allowed]
        if granted:
            result[role_id] = granted
    return result


def test_given_default_app_then_only_the_copy_role_can_push_and_only_to_the_platform_repository():
    platform, training = synth_platform(), synth_training()
    (repo_id,) = resources(platform, "AWS::ECR::Repository")
    assert effective(platform, PUSH_ACTIONS) == {}
    pushers = effective(training, PUSH_ACTIONS)
    assert len(pushers) == 1, pushers
    ((role_id, granted),) = pushers.items()
    assert role_id.startswith("TrainingImagesCopyRole")
    # The training stack builds the ARN from the repository name the platform outputs.
    ((arn),) = [g["Fn::Join"][1] for g in granted]
    assert arn[-2] == ":repository/", arn
    assert {"Ref": "AWS::AccountId"} in arn and any(":ecr:us-west-2:" in str(part) for part in arn), arn
    output = arn[-1]["Fn::GetStackOutput"]
    assert output["StackName"] == "trn-bert-platform"
    assert platform["Outputs"][output["OutputName"]]["Value"] == {"Ref": repo_id}


def test_given_default_app_then_no_role_can_read_s3_objects():
    # The copy reads no S3 (its source is the asset repository); the library's s3:GetObject on '*'
    # is cut by the boundary. Nothing else in either stack reads S3 objects.
    for template in synth_app().values():
        assert effective(template, S3_READ) == {}


def test_given_copy_role_without_its_boundary_then_the_check_sees_the_wildcards():
    template = json.loads(json.dumps(synth_training()))
    for role_id in resources(template, "AWS::IAM::Role"):
        template["Resources"][role_id]["Properties"].pop("PermissionsBoundary", None)
    assert "*" in next(iter(effective(template, S3_READ).values()))
    assert any("*" in granted for granted in effective(template, PUSH_ACTIONS).values())
