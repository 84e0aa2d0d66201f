"""The whole report: every check on one stubbed account, errors as lines, the exit code."""

from __future__ import annotations

import io
import json

import pytest

from tests.trainium_eks.doctor.stubs import (
    MODEL_BUCKET,
    REQUIREMENT,
    RESERVATION,
    Call,
    addresses_call,
    aws_with,
    bootstrap_call,
    bucket_encryption_call,
    bucket_policy_call,
    cluster_versions_call,
    config,
    describe_stack_call,
    head_object_call,
    identity_call,
    offerings_call,
    public_access_block_call,
    quota_call,
    registry_answers,
    reservation,
    reservations_call,
    vpcs_call,
)
from trainium_eks.doctor import CHECKS, IAM_ACTIONS, main, run_checks
from trainium_eks.doctor.findings import Status
from trainium_eks.jobs.dataset_staging import PUBLIC_BERT_SHARDS, PUBLIC_BERT_SHARDS_512
from trainium_eks.jobs.heldout_staging import PG19_TEST_PARQUET
from trainium_eks.versions import (
    DATASET_NODE_INSTANCE_TYPE,
    DEFAULT_KUBERNETES_VERSION,
    SYSTEM_NODE_INSTANCE_TYPE,
)

BUCKET, KEY = PUBLIC_BERT_SHARDS.removeprefix("s3://").split("/", 1)
PHASE2_OBJECT = PUBLIC_BERT_SHARDS_512.removeprefix("s3://").split("/", 1)


def healthy_account() -> list[tuple[str, Call]]:
    """(check, call) of every AWS call the doctor makes for a reserved default platform, in order."""
    return [
        ("credentials", identity_call()),
        ("bootstrap", bootstrap_call()),
        ("kubernetes-version", cluster_versions_call()),
        ("vpc-quota", vpcs_call(1)),
        ("vpc-quota", quota_call("vpc", "L-F678F1CE", "VPCs per Region", 5)),
        ("eip-quota", addresses_call(0)),
        ("eip-quota", quota_call("ec2", "L-0263D0A3", "EC2-VPC Elastic IPs", 5)),
        (
            "system-offering",
            offerings_call(SYSTEM_NODE_INSTANCE_TYPE, ["usw2-az4", "usw2-az3"], ["usw2-az4", "usw2-az3"]),
        ),
        ("instance-offering", offerings_call("trn1.32xlarge", ["usw2-az4"], ["usw2-az4"])),
        # The default (Karpenter) capacity stages the dataset on its own node beside FSx.
        ("dataset-offering", offerings_call(DATASET_NODE_INSTANCE_TYPE, ["usw2-az4"], ["usw2-az4"])),
        ("trn-quota", quota_call("ec2", "L-2C3B7624", "Running On-Demand Trn instances", 256)),
        ("capacity-reservation", reservations_call(reservation())),
        ("dataset-source", head_object_call(BUCKET, KEY)),
        # Both phases by default: phase 2's shards too (its start is phase 1's checkpoint).
        ("phase2-dataset-source", head_object_call(*PHASE2_OBJECT)),
        # Deployed already: its model bucket as the platform sets it.
        ("model-bucket", describe_stack_call({"WorkloadModelBucketName": MODEL_BUCKET})),
        ("model-bucket", bucket_policy_call()),
        ("model-bucket", bucket_encryption_call()),
        ("model-bucket", public_access_block_call()),
    ]


RESERVED = {"capacity_reservation_id": RESERVATION}


def run(calls, **context):
    aws = aws_with(calls)
    findings = run_checks(config(**context), aws, bootstrap=lambda: REQUIREMENT, http=registry_answers())
    aws.assert_all_asked()
    return findings


def test_given_a_healthy_account_when_the_doctor_runs_then_every_check_is_one_ok_line():
    findings = run([call for _, call in healthy_account()], **RESERVED)
    assert [f.check for f in findings] == ["credentials", *(c.name for c in CHECKS)]
    assert {f.status for f in findings} == {Status.OK}, [
        f.line for f in findings if f.status is not Status.OK
    ]


def test_given_a_healthy_account_then_the_held_out_books_are_asked_for_with_one_head_after_phase_2s_start():
    http = registry_answers()
    findings = run_checks(
        config(**RESERVED),
        aws_with([call for _, call in healthy_account()]),
        bootstrap=lambda: REQUIREMENT,
        http=http,
    )
    checks = [f.check for f in findings]
    assert checks.index("heldout-source") == checks.index("phase2-start") + 1
    assert next(f for f in findings if f.check == "heldout-source").status is Status.OK
    # The registry's token and manifest (base-image), then the books' HEAD: nothing else over HTTP
    *_, books = http.requests
    assert (len(http.requests), books.get_method(), books.full_url) == (3, "HEAD", PG19_TEST_PARQUET)


CALLS = [(i, check, call) for i, (check, call) in enumerate(healthy_account()) if check != "credentials"]


@pytest.mark.parametrize(
    ("code", "status"),
    [("ThrottlingException", 400), ("RequestLimitExceeded", 503), ("AccessDeniedException", 403)],
)
@pytest.mark.parametrize(
    ("index", "check", "call"), CALLS, ids=[f"{c.service}.{c.operation}" for _, _, c in CALLS]
)
def test_given_any_call_throttled_or_denied_when_the_doctor_runs_then_its_check_warns_and_the_rest_run(
    index, check, call, code, status
):
    calls = []
    for i, (owner, healthy) in enumerate(healthy_account()):
        if i == index:
            calls.append(healthy.failing(code, status))
        elif not (owner == check and i > index):  # the failed check makes no further calls
            calls.append(healthy)
    findings = {f.check: f for f in run(calls, **RESERVED)}
    failed = findings.pop(check)
    if code == "AccessDeniedException" and call.unsigned:
        # Read without signing, as the staging Job reads it: a refusal is the Job's failure too.
        source = f"s3://{call.params['Bucket']}/{call.params['Key']}"
        assert (failed.status, failed.found) == (
            Status.FAIL,
            f"{source} is not readable without signing (AccessDeniedException)",
        )
    elif code == "AccessDeniedException":
        assert failed.status is Status.WARN
        assert failed.fix == f"grant {IAM_ACTIONS[call.operation]} to the caller (README: make doctor)"
    else:
        assert (failed.status, "throttled" in failed.found) == (Status.WARN, True)
    assert {f.status for f in findings.values()} == {Status.OK}


def test_given_credentials_aws_refuses_when_the_doctor_runs_then_one_fail_line_and_no_other_call():
    findings = run([identity_call().failing("InvalidClientTokenId", 403)])
    assert [(f.status, f.check) for f in findings] == [(Status.FAIL, "credentials")]


def test_given_a_blocker_when_main_runs_then_it_prints_the_lines_and_exits_1(tmp_path):
    (tmp_path / "cdk.json").write_text(json.dumps({"app": "x", "context": {"desired_nodes": 2}}))
    calls = [call for _, call in healthy_account() if call.operation != "DescribeCapacityReservations"]
    calls[
        calls.index(next(c for c in calls if c.params == {"ServiceCode": "ec2", "QuotaCode": "L-2C3B7624"}))
    ] = quota_call("ec2", "L-2C3B7624", "Running On-Demand Trn instances", 0)
    out = io.StringIO()
    code = main(
        ["--app-dir", str(tmp_path)],
        out=out,
        aws=aws_with(calls),
        bootstrap=lambda: REQUIREMENT,
        http=registry_answers(),
    )
    lines = out.getvalue().splitlines()
    assert code == 1
    assert lines[0] == (
        f"Checking us-west-2 (usw2-az4) for 2 x trn1.32xlarge, Kubernetes {DEFAULT_KUBERNETES_VERSION} (read-only)"
    )
    assert [line.split(" ", 2)[:2] for line in lines[1:-1]] == [
        ["ok", "credentials:"],
        *(["FAIL" if c.name == "trn-quota" else "ok", f"{c.name}:"] for c in CHECKS),
    ]
    assert lines[-1] == f"{len(CHECKS)} ok, 0 warn, 1 FAIL"


def test_given_only_warnings_when_main_runs_then_it_exits_0(tmp_path):
    (tmp_path / "cdk.json").write_text(json.dumps({"context": {}}))
    calls = [call for _, call in healthy_account() if call.operation != "DescribeCapacityReservations"]
    calls[1] = calls[1].failing("AccessDeniedException", 400)  # bootstrap: cannot tell
    out = io.StringIO()
    code = main(
        ["--app-dir", str(tmp_path)],
        out=out,
        aws=aws_with(calls),
        bootstrap=lambda: REQUIREMENT,
        http=registry_answers(),
    )
    assert code == 0
    assert "warn bootstrap: not allowed to call GetParameter" in out.getvalue()


def test_given_c_overrides_when_main_runs_then_they_win_over_cdk_json(tmp_path):
    (tmp_path / "cdk.json").write_text(json.dumps({"context": {"desired_nodes": 2}}))
    out = io.StringIO()
    main(
        ["--app-dir", str(tmp_path), "-c", "desired_nodes=4", "-c", "max_nodes=4"],
        out=out,
        aws=aws_with([identity_call().failing("ExpiredToken", 400)]),
        bootstrap=lambda: REQUIREMENT,
    )
    assert out.getvalue().startswith("Checking us-west-2 (usw2-az4) for 4 x trn1.32xlarge")


@pytest.mark.parametrize("args", [["-c", "desired_nodes"], ["-c", "desired_node=3"]])
def test_given_a_bad_override_when_main_runs_then_exit_2_with_one_line(tmp_path, capsys, args):
    assert main(["--app-dir", str(tmp_path), *args], aws=aws_with([])) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: config ") and len(err.splitlines()) == 1
