"""Answers CloudFormation for an image build that ended without answering it, with the build's last
log lines: the Lambda function of :class:`trainium_eks.training_image.TrainingImages` (inline code).

The library's buildspec answers from ``post_build``, which a build stopped at its limit, stopped by
hand or failed in CodeBuild itself does not reach; the stack would then wait the custom resource's
hour. An EventBridge rule sends each such build's "CodeBuild Build State Change" here; the build's
environment (BatchGetBuilds) holds the response URL and request the library passed to it
(``responseURL``, ``stackId``, ``requestId``, ``logicalResourceId``, ``imageTag``). Standard library
and boto3 only (the Lambda runtime's).
"""

import json
import urllib.request

import boto3

LOG_LINES = 20
REASON_CHARS = 3000


def handler(event, _context, codebuild=None, logs=None):
    detail = event["detail"]
    status = detail["build-status"]
    if status == "SUCCEEDED":
        return "nothing to answer"
    codebuild = codebuild or boto3.client("codebuild")
    logs = logs or boto3.client("logs")
    (build,) = codebuild.batch_get_builds(ids=[detail["build-id"]])["builds"]
    env = {v["name"]: v["value"] for v in build["environment"].get("environmentVariables", [])}
    if "responseURL" not in env:
        return "not a deploy-time build"
    where = build.get("logs", {})
    lines = []
    if where.get("groupName") and where.get("streamName"):
        events = logs.get_log_events(
            logGroupName=where["groupName"],
            logStreamName=where["streamName"],
            startFromHead=False,
            limit=LOG_LINES,
        )["events"]
        lines = [e["message"].rstrip() for e in events]
    tail = "\n".join(lines)[-REASON_CHARS:]
    phase = build.get("currentPhase", "?")
    reason = f"image build {status} in phase {phase} ({detail['build-id']}); last log lines:\n{tail}"
    body = json.dumps(
        {
            "Status": "FAILED",
            "Reason": reason,
            "PhysicalResourceId": env.get("imageTag", detail["build-id"]),
            "StackId": env["stackId"],
            "RequestId": env["requestId"],
            "LogicalResourceId": env["logicalResourceId"],
        }
    ).encode()
    request = urllib.request.Request(
        env["responseURL"], data=body, method="PUT", headers={"Content-Type": ""}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return f"answered FAILED ({response.status})"
