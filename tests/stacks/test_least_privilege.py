"""Effective IAM permissions of every role in the template: identity policies within boundaries.

No role may push to an ECR repository other than the platform's, or read S3 objects other than
the images' build context. cdklabs-deploy-time-build grants its build role reads of the whole CDK
asset bucket; the role's permissions boundary is what must cap them, so the check intersects
identity policies with boundaries (a granted wildcard ARN covers the allowed ARNs it matches).
"""

from __future__ import annotations

import fnmatch
import json
from typing import Any

from tests.support import resources, synth_platform, synth_training

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


def _text(resource: Any) -> str:
    """A resource as text: a ``Fn::Join`` joined, other intrinsics as their JSON."""
    if isinstance(resource, dict) and "Fn::Join" in resource:
        sep, parts = resource["Fn::Join"]
        return sep.join(p if isinstance(p, str) else json.dumps(p, sort_keys=True) for p in parts)
    return resource if isinstance(resource, str) else json.dumps(resource, sort_keys=True)


def _covers(granted: Any, resource: Any) -> bool:
    """Whether a granted resource (``*`` wildcards honoured) covers ``resource``."""
    return fnmatch.fnmatchcase(_text(resource), _text(granted))


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
            # The intersection: what the boundary allows that a grant covers, and the reverse.
            granted = [a for a in allowed if any(_covers(g, a) for g in granted)] + [
                g for g in granted if any(_covers(a, g) for a in allowed) and g not in allowed
            ]
        if granted:
            result[role_id] = granted
    return result


def test_given_default_app_then_only_the_build_role_can_push_and_only_to_the_platform_repository():
    platform, training = synth_platform(), synth_training()
    (repo_id,) = resources(platform, "AWS::ECR::Repository")
    assert effective(platform, PUSH_ACTIONS) == {}
    pushers = effective(training, PUSH_ACTIONS)
    assert len(pushers) == 1, pushers
    ((role_id, granted),) = pushers.items()
    assert role_id.startswith("ContainerImageBuildAmd64")
    # The training stack builds the ARN from the repository name the platform outputs.
    ((arn),) = {json.dumps(g, sort_keys=True): g["Fn::Join"][1] for g in granted}.values()
    assert arn[-2] == ":repository/", arn
    assert {"Ref": "AWS::AccountId"} in arn and any(":ecr:us-west-2:" in str(part) for part in arn), arn
    output = arn[-1]["Fn::GetStackOutput"]
    assert output["StackName"] == "trn-bert-platform"
    assert platform["Outputs"][output["OutputName"]]["Value"] == {"Ref": repo_id}


def test_given_default_app_then_only_the_build_role_and_the_model_writer_read_s3_objects_each_its_own():
    # The library grants s3:GetObject* on the whole asset bucket; the boundary cuts it to the one
    # zip both builds share. The model writer reads back what it uploaded: its runs' model
    # prefixes of the model bucket (the platform's output), nothing else. No other role reads S3.
    platform, training = synth_platform(), synth_training()
    assert effective(platform, S3_READ) == {}
    readers = effective(training, S3_READ)
    (build,) = [r for r in readers if r.startswith("ContainerImageBuildAmd64")]
    (writer,) = [r for r in readers if r.startswith("TrainingModelWriterRole")]
    assert sorted(readers) == sorted([build, writer])
    bucket = json.dumps(
        {
            "Fn::GetStackOutput": {
                "OutputName": "WorkloadModelBucketName",
                "Region": "us-west-2",
                "StackName": "trn-bert-platform",
            }
        },
        sort_keys=True,
    )
    assert sorted(_text(g).removeprefix("arn:") for g in readers[writer]) == [
        f'{{"Ref": "AWS::Partition"}}:s3:::{bucket}/{run}/model/*'
        for run in ("bert-large-phase1", "bert-large-phase2")
    ]
    granted = readers[build]
    assert len(granted) == 1 and _text(granted[0]).endswith(".zip"), granted
    sources = [
        r["Properties"]["sourceS3Url"] for r in resources(training, "Custom::CDKContainerImageBuild").values()
    ]
    zip_name = _text(granted[0]).rsplit("/", 1)[1]
    assert len(sources) == 2 and all(json.dumps(s).endswith(f'/{zip_name}"}}') for s in sources), sources


def test_given_the_build_role_without_its_boundary_then_the_check_sees_the_wildcards():
    template = json.loads(json.dumps(synth_training()))
    for role_id in resources(template, "AWS::IAM::Role"):
        template["Resources"][role_id]["Properties"].pop("PermissionsBoundary", None)
    assert any(_text(g).endswith("/*") for g in next(iter(effective(template, S3_READ).values())))
