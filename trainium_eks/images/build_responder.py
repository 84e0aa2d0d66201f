"""Answers CloudFormation for an image build that ended without answering it, with the build's last
log lines: the Lambda function of :class:`trainium_eks.training_image.TrainingImages` (inline code).

The library's buildspec answers from ``post_build``, which a build stopped at its limit, stopped by
hand or failed in CodeBuild itself does not reach; the stack would then wait the custom resource's
hour. An EventBridge rule sends each build that ended without success here; the build's record
(BatchGetBuilds) holds the response URL and request the library passed to it (``responseURL``,
``stackId``, ``requestId``, ``logicalResourceId``, ``imageTag``) and its phases. A build whose
``post_build`` succeeded has answered (its last command is the answer), so it is left alone: each
build is answered once. Standard library and boto3 only (the Lambda runtime's).
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
    # The event names the build by ARN (...:build/<project>:<uuid>); BatchGetBuilds takes IDs.
    build_id = detail["build-id"].split(":build/", 1)[-1]
    (build,) = codebuild.batch_get_builds(ids=[build_id])["builds"]
    env = {v["name"]: v["value"] for v in build["environment"].get("environmentVariables", [])}
    if "responseURL" not in env:
        return "not a deploy-time build"
    phases = {p.get("phaseType"): p.get("phaseStatus") for p in build.get("phases", [])}
    if phases.get("POST_BUILD") == "SUCCEEDED":
        return "answered by its post_build"
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
    reason = f"image build {status} in phase {phase} ({build_id}); last log lines:\n{tail}"
    body = json.dumps(
        {
            "Status": "FAILED",
            "Reason": reason,
            "PhysicalResourceId": env.get("imageTag", build_id),
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
