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

from tests.contracts.image_build import EVENT_BUILD_ARN, TERMINAL_BUILD_STATUSES
from tests.support import resources
from trainium_eks.images import build_responder

BUILD_ID = "ContainerImageBuildAmd64e83729fe:0f1e"
STACK_ID = "arn:aws:cloudformation:us-west-2:123456789012:stack/trn-bert-training/1"
#: The builds to answer: every terminal status but SUCCEEDED, from CodeBuild's own list
#: (tests/contracts/image_build.py), not from the code's tuple.
ENDED_WITHOUT_SUCCESS = sorted(TERMINAL_BUILD_STATUSES - {"SUCCEEDED"})
#: Phases of a build that failed in its build phase: post_build ran and answered (the library's
#: buildspec answers whenever post_build runs to its end).
ANSWERED = [
    {"phaseType": "BUILD", "phaseStatus": "FAILED"},
    {"phaseType": "POST_BUILD", "phaseStatus": "SUCCEEDED"},
    {"phaseType": "FINALIZING", "phaseStatus": "SUCCEEDED"},
]
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


def _clients(url: str | None, phases: list[dict] | None = None, *, reads_logs: bool = True):
    codebuild = boto3.client(
        "codebuild", region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="x"
    )
    logs = boto3.client("logs", region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="x")
    env = [
        {"name": "stackId", "value": STACK_ID},
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
        "phases": phases if phases is not None else [{"phaseType": "BUILD", "phaseStatus": "STOPPED"}],
    }
    cb, lg = Stubber(codebuild), Stubber(logs)
    # The stub checks the call against botocore's model and the expected parameters: the build's
    # ID, which the event's ARN carries after "build/".
    cb.add_response("batch_get_builds", {"builds": [build]}, {"ids": [BUILD_ID]})
    if url and reads_logs:
        lg.add_response(
            "get_log_events",
            {"events": [{"timestamp": i, "message": m + "\n"} for i, m in enumerate(LOG_LINES[-20:])]},
            {"logGroupName": "trn-builds", "logStreamName": "0f1e", "startFromHead": False, "limit": 20},
        )
    return codebuild, logs, cb, lg


def _event(status: str) -> dict:
    return {
        "detail-type": "CodeBuild Build State Change",
        "detail": {"build-status": status, "build-id": EVENT_BUILD_ARN.format(build_id=BUILD_ID)},
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
    # StackId, RequestId and LogicalResourceId "should be copied verbatim from the request"
    # (CloudFormation User Guide, "Custom resource response objects"): the ones the library gave
    # the build
    assert answer["Status"] == "FAILED" and answer["RequestId"] == "req-1"
    assert answer["StackId"] == STACK_ID
    assert answer["LogicalResourceId"] == "TrainingImagesTrainingBuild4E013848"
    assert answer["PhysicalResourceId"] == "training-cd90da1d9a987a5e"
    assert f"image build {status} in phase BUILD" in answer["Reason"]
    # The last lines the log gave, one a line, in their order
    assert answer["Reason"].endswith("last log lines:\n" + "\n".join(LOG_LINES[-20:]))
    assert headers.get("Content-Type") == ""  # as the presigned URL was signed (no content type)


@pytest.mark.parametrize(
    "phases",
    [
        [{"phaseType": "PROVISIONING", "phaseStatus": "FAILED"}],  # before the buildspec ran
        [{"phaseType": "BUILD", "phaseStatus": "TIMED_OUT"}],  # at the build's limit
        [{"phaseType": "POST_BUILD", "phaseStatus": "FAILED"}],  # its answer did not go out
        [{"phaseType": "POST_BUILD", "phaseStatus": "STOPPED"}],
    ],
)
def test_given_a_build_whose_post_build_did_not_succeed_then_it_is_answered(response_url, phases):
    url, received = response_url
    codebuild, logs, cb, lg = _clients(url, phases)
    with cb, lg:
        result = build_responder.handler(_event("FAILED"), None, codebuild=codebuild, logs=logs)
    assert result == "answered FAILED (200)" and len(received) == 1


@pytest.mark.parametrize("status", ENDED_WITHOUT_SUCCESS)
def test_given_a_build_whose_post_build_succeeded_then_the_library_has_answered_and_it_is_not_answered_again(
    response_url, status
):
    # Given a build that ended without success after its post_build ran to its end: the library's
    # buildspec answered CloudFormation there (FAILED, or SUCCESS if only a later phase failed)
    url, received = response_url
    codebuild, logs, cb, lg = _clients(url, ANSWERED, reads_logs=False)
    # When its state change reaches the responder
    with cb, lg:
        result = build_responder.handler(_event(status), None, codebuild=codebuild, logs=logs)
    # Then nothing is sent: one answer per build
    assert result == "answered by its post_build" and received == []


#: A build record with only what botocore's model requires of it (codebuild service-2.json:
#: ``Build`` requires no member, ``ProjectEnvironment`` its type, image and computeType): a
#: build that failed before CodeBuild ran a phase or made a log stream (``logs`` may name the
#: group alone), and whose variables lack ``imageTag``.
BARE_ENVIRONMENT = {"type": "LINUX_CONTAINER", "image": "x", "computeType": "BUILD_GENERAL1_LARGE"}


@pytest.mark.parametrize("logs_location", [None, {"groupName": "trn-builds"}])
def test_given_a_build_that_ended_before_its_log_stream_then_it_is_answered_with_what_its_record_has(
    response_url, logs_location
):
    url, received = response_url
    codebuild, logs, cb, lg = _clients(url, reads_logs=False)
    variables = [
        {"name": name, "value": value}
        for name, value in (
            ("stackId", STACK_ID),
            ("requestId", "req-1"),
            ("logicalResourceId", "TrainingImagesTrainingBuild4E013848"),
            ("responseURL", url),
        )
    ]
    record = {"id": BUILD_ID, "environment": {**BARE_ENVIRONMENT, "environmentVariables": variables}}
    if logs_location is not None:
        record["logs"] = logs_location
    cb = Stubber(codebuild)
    cb.add_response("batch_get_builds", {"builds": [record]}, {"ids": [BUILD_ID]})
    # When it reaches the responder (the logs stub has no answer: a GetLogEvents call fails)
    with cb, lg:
        result = build_responder.handler(_event("FAULT"), None, codebuild=codebuild, logs=logs)
    # Then CloudFormation still gets FAILED, and a PhysicalResourceId, which "must be a non-empty
    # string" (CloudFormation User Guide, "Custom resource response objects"): the build's ID
    assert result == "answered FAILED (200)"
    ((_, body),) = received
    answer = json.loads(body)
    assert answer["PhysicalResourceId"] == BUILD_ID
    assert answer["Reason"] == f"image build FAULT in phase ? ({BUILD_ID}); last log lines:\n"


def test_given_a_build_without_environment_variables_then_it_is_not_a_deploy_time_build(response_url):
    # Given a build of the project started by hand, whose record has no variables at all
    _, received = response_url
    codebuild, logs, _, lg = _clients(None, reads_logs=False)
    cb = Stubber(codebuild)
    cb.add_response(
        "batch_get_builds",
        {"builds": [{"id": BUILD_ID, "environment": BARE_ENVIRONMENT}]},
        {"ids": [BUILD_ID]},
    )
    with cb, lg:
        result = build_responder.handler(_event("STOPPED"), None, codebuild=codebuild, logs=logs)
    assert result == "not a deploy-time build" and received == []


def test_given_a_response_url_that_does_not_answer_then_the_put_gives_up_before_the_function_s_limit(
    response_url, monkeypatch
):
    # Given an endpoint that never answers: without a timeout urlopen waits until Lambda stops the
    # function (its timeout: one minute, trainium_eks/images/training_image.py, BuildResponder), and the
    # failure is Lambda's, not the request's
    url, _ = response_url
    codebuild, logs, cb, lg = _clients(url)
    timeouts = []

    def urlopen(request, timeout=None):
        timeouts.append(timeout)
        raise TimeoutError("timed out")

    monkeypatch.setattr(build_responder.urllib.request, "urlopen", urlopen)
    with cb, lg, pytest.raises(TimeoutError):
        build_responder.handler(_event("FAILED"), None, codebuild=codebuild, logs=logs)
    ((timeout,),) = [timeouts]
    assert timeout is not None and 0 < timeout < 60


def test_given_the_call_lambda_makes_then_the_function_makes_its_own_codebuild_and_logs_clients(
    response_url, monkeypatch
):
    # Given the call as Lambda makes it, handler(event, context): no clients are passed, so the
    # function makes them with boto3.client and the service names botocore's models are filed
    # under (botocore 1.44.8: data/codebuild/, data/logs/; _clients makes the stubbed ones so)
    url, received = response_url
    codebuild, logs, cb, lg = _clients(url)
    made = {"codebuild": codebuild, "logs": logs}
    monkeypatch.setattr(build_responder.boto3, "client", lambda service: made.pop(service))
    # When a build that ended without success reaches it
    with cb, lg:
        result = build_responder.handler(_event("FAILED"), None)
    # Then it answered with one client of each service
    assert result == "answered FAILED (200)" and len(received) == 1 and made == {}


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
    assert pattern["detail"]["project-name"] == [{"Ref": project_id}]
    assert sorted(pattern["detail"]["build-status"]) == ENDED_WITHOUT_SUCCESS
    assert set(pattern["detail"]) == {"project-name", "build-status"}
    ((target,),) = [rule["Properties"]["Targets"]]
    function = training_json["Resources"][target["Arn"]["Fn::GetAtt"][0]]["Properties"]
    # Lambda reserves at most the account's unreserved concurrency minus 100 (Lambda Developer
    # Guide, "Configuring reserved concurrency for a function"): any reservation fails the stack
    # on an account whose quota is 10, as a new account's often is.
    assert "ReservedConcurrentExecutions" not in function
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
