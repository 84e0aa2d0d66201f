"""The answer for an image build that ended before its post_build: the function's own code, run
against stubbed CodeBuild and CloudWatch Logs clients and a local HTTP server as CloudFormation's
response URL; and the rule that sends it those builds, read in the synthesized template."""

from __future__ import annotations

import http.server
import json
import threading
from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber

from tests.support import resources
from trainium_eks import build_responder
from trainium_eks.training_image import ENDED_WITHOUT_SUCCESS

BUILD_ID = "ContainerImageBuildAmd64:0f1e"
LOG_LINES = [f"line {i}" for i in range(25)] + ["ERROR: pip's dependency resolver: torch==2.9.0 conflicts"]


@pytest.fixture
def response_url():
    received: list[tuple[dict, bytes]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_PUT(self):  # noqa: N802 (the stdlib's name)
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append((dict(self.headers), body))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *_):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/cfn-response?signature=x", received
    server.shutdown()


def _clients(url: str | None):
    codebuild = boto3.client(
        "codebuild", region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="x"
    )
    logs = boto3.client("logs", region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="x")
    env = [
        {
            "name": "stackId",
            "value": "arn:aws:cloudformation:us-west-2:123456789012:stack/trn-bert-training/1",
        },
        {"name": "requestId", "value": "req-1"},
        {"name": "logicalResourceId", "value": "TrainingImagesTrainingBuild4E013848"},
        {"name": "imageTag", "value": "training-cd90da1d9a987a5e"},
    ]
    if url:
        env.append({"name": "responseURL", "value": url})
    build = {
        "id": BUILD_ID,
        "currentPhase": "BUILD",
        "environment": {
            "type": "LINUX_CONTAINER",
            "image": "x",
            "computeType": "BUILD_GENERAL1_LARGE",
            "environmentVariables": env,
        },
        "logs": {"groupName": "trn-builds", "streamName": "0f1e"},
    }
    cb, lg = Stubber(codebuild), Stubber(logs)
    cb.add_response("batch_get_builds", {"builds": [build]}, {"ids": [BUILD_ID]})
    if url:
        lg.add_response(
            "get_log_events",
            {"events": [{"timestamp": i, "message": m + "\n"} for i, m in enumerate(LOG_LINES[-20:])]},
            {"logGroupName": "trn-builds", "logStreamName": "0f1e", "startFromHead": False, "limit": 20},
        )
    return codebuild, logs, cb, lg


def _event(status: str) -> dict:
    return {
        "detail-type": "CodeBuild Build State Change",
        "detail": {"build-status": status, "build-id": BUILD_ID},
    }


@pytest.mark.parametrize("status", ENDED_WITHOUT_SUCCESS)
def test_given_a_build_that_ended_without_success_then_cloudformation_gets_failed_with_its_last_lines(
    response_url, status
):
    url, received = response_url
    codebuild, logs, cb, lg = _clients(url)
    with cb, lg:
        result = build_responder.handler(_event(status), None, codebuild=codebuild, logs=logs)
    assert result == "answered FAILED (200)"
    ((headers, body),) = received
    answer = json.loads(body)
    assert answer["Status"] == "FAILED" and answer["RequestId"] == "req-1"
    assert answer["LogicalResourceId"] == "TrainingImagesTrainingBuild4E013848"
    assert answer["PhysicalResourceId"] == "training-cd90da1d9a987a5e"
    assert f"image build {status} in phase BUILD" in answer["Reason"]
    assert answer["Reason"].endswith("ERROR: pip's dependency resolver: torch==2.9.0 conflicts")
    assert headers.get("Content-Type") == ""  # as the presigned URL was signed (no content type)


def test_given_a_succeeded_build_or_one_not_started_by_a_deploy_then_nothing_is_answered(response_url):
    _, received = response_url
    assert (
        build_responder.handler(_event("SUCCEEDED"), None, codebuild=object(), logs=object())
        == "nothing to answer"
    )
    codebuild, logs, cb, lg = _clients(None)
    with cb, lg:
        assert (
            build_responder.handler(_event("FAILED"), None, codebuild=codebuild, logs=logs)
            == "not a deploy-time build"
        )
    assert received == []


def test_given_the_template_then_the_rule_sends_the_project_s_ended_builds_to_the_function_s_own_code(
    training_json,
):
    ((_, rule),) = resources(training_json, "AWS::Events::Rule").items()
    pattern = rule["Properties"]["EventPattern"]
    ((project_id, _),) = resources(training_json, "AWS::CodeBuild::Project").items()
    assert pattern["source"] == ["aws.codebuild"] and pattern["detail-type"] == [
        "CodeBuild Build State Change"
    ]
    assert pattern["detail"] == {
        "project-name": [{"Ref": project_id}],
        "build-status": list(ENDED_WITHOUT_SUCCESS),
    }
    ((target,),) = [rule["Properties"]["Targets"]]
    function = training_json["Resources"][target["Arn"]["Fn::GetAtt"][0]]["Properties"]
    assert function["Code"]["ZipFile"] == Path(build_responder.__file__).read_text()
    assert len(function["Code"]["ZipFile"]) <= 4096  # CloudFormation's limit for inline code
    role = training_json["Resources"][function["Role"]["Fn::GetAtt"][0]]["Properties"]
    statements = [st for p in role["Policies"] for st in p["PolicyDocument"]["Statement"]]
    actions = {
        a for st in statements for a in (st["Action"] if isinstance(st["Action"], list) else [st["Action"]])
    }
    assert actions == {
        "codebuild:BatchGetBuilds",
        "logs:GetLogEvents",
        "logs:CreateLogStream",
        "logs:PutLogEvents",
    }
    assert "ManagedPolicyArns" not in role and "*" not in [st["Resource"] for st in statements]
