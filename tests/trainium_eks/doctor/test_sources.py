"""Kubernetes version in EKS, the base image in its registry, the datasets readable without signing,
their sizes against the waits derived from the sizes synth assumed, the held-out books reachable (a
stand-in HTTP server for their host)."""

from __future__ import annotations

import http.server
import socket
import threading
import urllib.error
from collections.abc import Iterator

import pytest

from tests.trainium_eks.doctor.stubs import (
    DIGEST,
    HELDOUT_HEAD,
    RegistryAnswers,
    aws_with,
    cluster_versions_call,
    config,
    head_object_call,
    list_objects_call,
    registry_answers,
    target,
)
from trainium_eks.doctor import sources
from trainium_eks.doctor.check_list import HttpAnswer, urllib_http
from trainium_eks.doctor.findings import Status
from trainium_eks.jobs.dataset_staging import (
    NEURON_PHASE1_CHECKPOINT,
    PUBLIC_BERT_SHARDS,
    PUBLIC_BERT_SHARDS_512,
    PUBLIC_SOURCE_BYTES,
)
from trainium_eks.jobs.heldout_staging import PG19_TEST_PARQUET
from trainium_eks.jobs.staging_eta import UNKNOWN_SIZE_DEADLINE_S
from trainium_eks.report.job_estimate import first_data_deadline, phase2_data_deadline
from trainium_eks.versions import DEFAULT_KUBERNETES_VERSION, KUBERNETES_RELEASES
from trainium_job.neuron_stack import NEURON_STACK


def test_given_the_version_in_standard_support_when_checked_then_ok_with_its_end():
    aws = aws_with([cluster_versions_call()])
    verdict = sources.kubernetes_version(target(aws))
    aws.assert_all_asked()
    assert verdict == (
        Status.OK,
        f"Kubernetes {DEFAULT_KUBERNETES_VERSION} is in standard support until 2027-09-01",
        "",
    )


def test_given_the_version_in_extended_support_when_checked_then_warn_of_the_cost():
    verdict = sources.kubernetes_version(target(aws_with([cluster_versions_call(status="EXTENDED_SUPPORT")])))
    assert verdict.status is Status.WARN
    assert "extended support" in verdict.found


@pytest.mark.parametrize(
    "call",
    [
        cluster_versions_call(rows=False),
        cluster_versions_call(status="UNSUPPORTED"),
        cluster_versions_call().failing("InvalidParameterException", 400),
    ],
)
def test_given_a_version_eks_does_not_offer_when_checked_then_fail_naming_the_library_versions(call):
    verdict = sources.kubernetes_version(target(aws_with([call])))
    assert verdict.status is Status.FAIL
    assert verdict.fix == f"set kubernetes_version to one EKS offers of {', '.join(KUBERNETES_RELEASES)}"


def test_given_the_base_image_in_the_registry_when_checked_then_its_manifest_is_asked_anonymously():
    http = registry_answers()
    verdict = sources.base_image(target(aws_with([]), http=http))
    assert verdict == (Status.OK, f"{NEURON_STACK.base_image} exists ({DIGEST})", "")
    token, manifest = http.requests
    name, tag = NEURON_STACK.base_image.removeprefix("public.ecr.aws/").rsplit(":", 1)
    assert token.full_url == f"https://public.ecr.aws/token/?scope=repository:{name}:pull"
    assert (manifest.get_method(), manifest.full_url) == (
        "HEAD",
        f"https://public.ecr.aws/v2/{name}/manifests/{tag}",
    )
    assert manifest.get_header("Authorization") == "Bearer anonymous"


def test_given_a_tag_the_registry_does_not_have_when_checked_then_fail_pointing_at_the_stack_table():
    verdict = sources.base_image(target(aws_with([]), http=registry_answers(404)))
    assert verdict.status is Status.FAIL
    assert "trainium_job/neuron_stack.py" in verdict.fix


def test_given_the_registry_throttles_when_checked_then_warn():
    assert sources.base_image(target(aws_with([]), http=registry_answers(429))).status is Status.WARN


def test_given_no_network_when_the_image_is_checked_then_warn_not_a_traceback():
    def offline(request):
        raise urllib.error.URLError("Name or service not known")

    verdict = sources.base_image(target(aws_with([]), http=offline))
    assert verdict.status is Status.WARN
    assert "could not reach public.ecr.aws" in verdict.found


def test_given_a_refused_token_when_checked_then_the_status_is_reported():
    http = RegistryAnswers([HttpAnswer(403)])
    assert sources.base_image(target(aws_with([]), http=http)) == (
        Status.WARN,
        f"public.ecr.aws answered HTTP 403 for {NEURON_STACK.base_image}",
        "",
    )


BUCKET, KEY = PUBLIC_BERT_SHARDS.removeprefix("s3://").split("/", 1)
#: The table's figure of the public tar, which the default waits are derived from.
TABLE_BYTES = PUBLIC_SOURCE_BYTES[PUBLIC_BERT_SHARDS]


def minutes(seconds: int) -> int:
    return seconds // 60


def test_given_the_public_tar_when_checked_then_it_is_read_unsigned_like_the_staging_job():
    aws = aws_with([head_object_call(BUCKET, KEY)])
    verdict = sources.dataset_source(target(aws))
    aws.assert_all_asked()
    assert verdict.status is Status.OK
    assert aws.asked == [("s3", True)]
    assert verdict.found.startswith(f"{PUBLIC_BERT_SHARDS} is readable without signing: 45.0 GB")


@pytest.mark.parametrize("size", [TABLE_BYTES, TABLE_BYTES - 5 * 10**9], ids=["equal", "smaller"])
def test_given_the_tar_no_larger_than_the_table_when_checked_then_ok_with_its_staging_time(size):
    # HeadObject's ContentLength is the object's size in bytes (Amazon S3 API Reference,
    # HeadObject, "Content-Length"): the bytes `aws s3 cp` streams into the staging Job.
    aws = aws_with([head_object_call(BUCKET, KEY, size=size)])
    verdict = sources.dataset_source(target(aws))
    wait = minutes(first_data_deadline(config()).seconds)
    assert verdict.status is Status.OK and verdict.fix == ""
    assert (
        f": {size / 1e9:,.1f} GB (the table's 50.0 GB); staging: {size / 1e9:,.0f} GB at the file system's"
        in (verdict.found)
    )
    assert verdict.found.endswith(f"min, within its wait of {wait} min")


def test_given_the_tar_larger_than_the_table_when_checked_then_warn_with_the_wait_it_needs():
    aws = aws_with([head_object_call(BUCKET, KEY, size=TABLE_BYTES + 10 * 10**9)])
    verdict = sources.dataset_source(target(aws))
    wait = minutes(first_data_deadline(config()).seconds)
    assert verdict.status is Status.WARN
    assert "60.0 GB, 10.0 GB more than the table's 50.0 GB its wait is derived from" in verdict.found
    assert "staging: 60 GB at the file system's" in verdict.found
    needed = int(verdict.fix.removeprefix("set training_data_deadline_minutes to at least "))
    assert needed > wait
    assert verdict.found.endswith(
        f"its wait allows {wait} min, {needed - wait} min short of twice the estimate"
    )


def test_given_the_wait_the_fix_names_when_checked_again_then_ok():
    larger = head_object_call(BUCKET, KEY, size=TABLE_BYTES + 10 * 10**9)
    fix = sources.dataset_source(target(aws_with([larger]))).fix
    needed = fix.removeprefix("set training_data_deadline_minutes to at least ")
    verdict = sources.dataset_source(
        target(aws_with([larger]), config(training_data_deadline_minutes=needed))
    )
    assert verdict.status is Status.OK
    assert verdict.found.endswith(f"within its wait of {needed} min")


def test_given_a_wait_set_shorter_than_twice_the_staging_when_checked_then_warn_naming_the_key():
    aws = aws_with([head_object_call(BUCKET, KEY, size=TABLE_BYTES)])
    verdict = sources.dataset_source(target(aws, config(training_data_deadline_minutes="10")))
    assert verdict.status is Status.WARN
    assert "50.0 GB, its wait set by training_data_deadline_minutes" in verdict.found
    assert "its wait allows 10 min, 40 min short of twice the estimate" in verdict.found


@pytest.mark.parametrize(
    ("code", "status", "words"), [("403", 403, "not readable"), ("404", 404, "does not exist")]
)
def test_given_a_tar_that_cannot_be_read_when_checked_then_fail(code, status, words):
    aws = aws_with([head_object_call(BUCKET, KEY).failing(code, status)])
    verdict = sources.dataset_source(target(aws))
    assert verdict.status is Status.FAIL
    assert words in verdict.found


def test_given_a_private_source_when_checked_then_the_fix_names_the_fsx_import():
    source = "s3://my-private-bucket/bert/shards.tar"
    aws = aws_with([head_object_call("my-private-bucket", "bert/shards.tar").failing("403", 403)])
    verdict = sources.dataset_source(target(aws, config(training_dataset_source=source)))
    assert "fsx_s3_import_uri" in verdict.fix


PREFIX = "s3://my-bucket/bert/shards/"


def test_given_a_prefix_source_when_checked_then_every_page_is_summed_unsigned():
    # ListObjectsV2 answers at most MaxKeys keys a page; IsTruncated with NextContinuationToken
    # asks for the next, sent back as ContinuationToken (Amazon S3 API Reference, ListObjectsV2).
    aws = aws_with(
        [
            list_objects_call("my-bucket", "bert/shards/", [2 * 10**9] * 3, more="page-3"),
            list_objects_call("my-bucket", "bert/shards/", [10**9] * 2, after="page-3"),
        ]
    )
    verdict = sources.dataset_source(target(aws, config(training_dataset_source=PREFIX)))
    aws.assert_all_asked()
    assert verdict.status is Status.OK
    assert verdict.found.startswith(
        f"{PREFIX} is readable without signing: 8.0 GB in 5 objects; staging: 8 GB"
    )
    # Not in the table: its wait is the one for a source of unknown size.
    assert verdict.found.endswith(f"within its wait of {minutes(UNKNOWN_SIZE_DEADLINE_S)} min")


def test_given_a_prefix_too_large_for_the_wait_of_an_unknown_size_when_checked_then_warn():
    aws = aws_with([list_objects_call("my-bucket", "bert/shards/", [1_000 * 10**9] * 2)])
    verdict = sources.dataset_source(target(aws, config(training_dataset_source=PREFIX)))
    assert verdict.status is Status.WARN
    assert "2,000.0 GB in 2 objects, a size synth does not know" in verdict.found
    assert verdict.fix.startswith("set training_data_deadline_minutes to at least ")


def test_given_a_prefix_past_the_pages_read_when_checked_then_warn_that_the_sum_is_a_floor(monkeypatch):
    monkeypatch.setattr(sources, "LIST_PAGES", 2)
    aws = aws_with(
        [
            list_objects_call("my-bucket", "bert/shards/", [10**9], more="page-1"),
            list_objects_call("my-bucket", "bert/shards/", [10**9], after="page-1", more="page-2"),
        ]
    )
    verdict = sources.dataset_source(target(aws, config(training_dataset_source=PREFIX)))
    aws.assert_all_asked()
    assert verdict.status is Status.WARN
    assert "at least 2.0 GB in its first 2 objects" in verdict.found
    assert "twice the whole prefix's staging time" in verdict.fix


def test_given_an_empty_prefix_when_checked_then_fail():
    aws = aws_with([list_objects_call("my-bucket", "bert/shards/", [])])
    verdict = sources.dataset_source(target(aws, config(training_dataset_source=PREFIX)))
    assert verdict == (Status.FAIL, f"no objects under {PREFIX}", "check training_dataset_source")


def test_given_a_listing_refused_on_its_second_page_when_checked_then_fail_as_not_readable():
    aws = aws_with(
        [
            list_objects_call("my-bucket", "bert/shards/", [10**9], more="page-1"),
            list_objects_call("my-bucket", "bert/shards/", after="page-1").failing("AccessDenied", 403),
        ]
    )
    verdict = sources.dataset_source(target(aws, config(training_dataset_source=PREFIX)))
    aws.assert_all_asked()
    assert verdict.status is Status.FAIL
    assert verdict.found == f"{PREFIX} is not readable without signing (AccessDenied)"
    assert "fsx_s3_import_uri" in verdict.fix


@pytest.mark.parametrize(
    "context",
    [
        {"training_dataset_source": "fsx:/dataset/shards"},
        {"preparation_enabled": "true", "training_phases": "1"},
        {"training_enabled": "false"},
    ],
)
def test_given_no_s3_source_in_use_when_checked_then_ok_without_a_call(context):
    aws = aws_with([])
    assert sources.dataset_source(target(aws, config(**context))).status is Status.OK
    assert aws.asked == []


PHASE2_BUCKET, PHASE2_KEY = PUBLIC_BERT_SHARDS_512.removeprefix("s3://").split("/", 1)
START_BUCKET, START_KEY = NEURON_PHASE1_CHECKPOINT.removeprefix("s3://").split("/", 1)
PHASE2_ALONE = {"training_phases": "2", "phase2_init_from": NEURON_PHASE1_CHECKPOINT}


def test_given_both_phases_when_checked_then_phase2_shards_are_read_unsigned_too():
    aws = aws_with([head_object_call(PHASE2_BUCKET, PHASE2_KEY)])
    verdict = sources.phase2_dataset_source(target(aws))
    aws.assert_all_asked()
    assert verdict.status is Status.OK and aws.asked == [("s3", True)]
    assert verdict.found.startswith(PUBLIC_BERT_SHARDS_512)
    assert verdict.found.endswith(f"within its wait of {minutes(phase2_data_deadline(config()).seconds)} min")


def test_given_phase2_shards_larger_than_the_table_after_phase1_then_warn_that_no_key_sets_that_wait():
    aws = aws_with([head_object_call(PHASE2_BUCKET, PHASE2_KEY, size=TABLE_BYTES + 10 * 10**9)])
    verdict = sources.phase2_dataset_source(target(aws))
    assert verdict.status is Status.WARN
    assert "10.0 GB more than the table's 50.0 GB" in verdict.found
    wait = minutes(phase2_data_deadline(config()).seconds)
    short = int(verdict.found.rsplit(f"its wait allows {wait} min, ", 1)[1].split(" min short")[0])
    # training_data_deadline_minutes sets the first phase's wait only (trainium_eks.workload).
    assert short > 0 and "training_data_deadline_minutes" not in verdict.fix
    assert verdict.fix.startswith(
        f"none needed unless phase 1 takes under {short} min: phase 2 is staged while"
    )


def test_given_phase2_alone_when_checked_then_phase1_shards_are_not_asked_for():
    aws = aws_with([])
    verdict = sources.dataset_source(target(aws, config(**PHASE2_ALONE)))
    assert verdict.status is Status.OK and "training_phases=2" in verdict.found
    assert aws.asked == []


@pytest.mark.parametrize("context", [{"training_phases": "1"}, {"training_enabled": "false"}])
def test_given_no_phase2_when_checked_then_its_shards_are_not_asked_for(context):
    aws = aws_with([])
    assert sources.phase2_dataset_source(target(aws, config(**context))).status is Status.OK
    assert aws.asked == []


def test_given_a_prepared_phase1_when_checked_then_phase2_shards_are_still_read():
    # The preparation makes phase 1's shards; phase 2's are staged from phase2_dataset_source
    # (trainium_eks.workload: Phase2DatasetStaging whenever training_phases is not 1).
    source = "s3://my-bucket/wiki512/"
    aws = aws_with([list_objects_call("my-bucket", "wiki512/", [10**9])])
    context = {"preparation_enabled": "true", "phase2_dataset_source": source}
    verdict = sources.phase2_dataset_source(target(aws, config(**context)))
    aws.assert_all_asked()
    assert verdict.status is Status.OK and verdict.found.startswith(source)


def test_given_phase2_alone_from_neurons_checkpoint_when_checked_then_it_is_read_unsigned():
    aws = aws_with([head_object_call(START_BUCKET, START_KEY, size=4_010_000_000)])
    verdict = sources.phase2_start(target(aws, config(**PHASE2_ALONE)))
    aws.assert_all_asked()
    assert verdict.status is Status.OK
    assert verdict.found.startswith(
        f"{NEURON_PHASE1_CHECKPOINT} is readable without signing: 4.0 GB (the table's 4.0 GB); "
        "staging: 50 GB + a 4.0 GB start checkpoint at the file system's"
    )


def test_given_a_start_checkpoint_larger_than_the_table_when_checked_then_warn_naming_the_first_wait():
    table = PUBLIC_SOURCE_BYTES[NEURON_PHASE1_CHECKPOINT]
    aws = aws_with([head_object_call(START_BUCKET, START_KEY, size=table + 40 * 10**9)])
    verdict = sources.phase2_start(target(aws, config(**PHASE2_ALONE)))
    assert verdict.status is Status.WARN
    assert "44.0 GB, 40.0 GB more than the table's 4.0 GB its wait is derived from" in verdict.found
    assert verdict.fix.startswith("set training_data_deadline_minutes to at least ")


def test_given_a_start_checkpoint_that_does_not_exist_when_checked_then_fail_naming_the_key():
    missing = "s3://my-bucket/checkpoints/ckpt_100.pt"
    aws = aws_with([head_object_call("my-bucket", "checkpoints/ckpt_100.pt").failing("404", 404)])
    context = {**PHASE2_ALONE, "phase2_init_from": missing}
    verdict = sources.phase2_start(target(aws, config(**context)))
    assert verdict == (Status.FAIL, f"{missing} does not exist (404)", "check phase2_init_from")


@pytest.mark.parametrize(
    ("context", "found"),
    [
        ({}, "not used (phase 2 starts from phase 1's checkpoint)"),
        (
            {**PHASE2_ALONE, "phase2_init_from": "fsx:/runs/bert-large-phase1"},
            "fsx:/runs/bert-large-phase1 is read on FSx by the staging Job; not checked from here",
        ),
    ],
)
def test_given_phase2_from_phase1_or_from_fsx_when_checked_then_no_call(context, found):
    aws = aws_with([])
    assert sources.phase2_start(target(aws, config(**context))) == (Status.OK, found, "")
    assert aws.asked == []


# --- the held-out books -------------------------------------------------------------------------


class StandIn(http.server.BaseHTTPRequestHandler):
    """A stand-in for the file's host: ``/pinned`` answers as Hugging Face answers a file kept in its
    storage (a redirect carrying its size), ``/plain`` with the file itself, ``/gone`` 404 and
    ``/gated`` 401. Every request is kept (method, path)."""

    seen: list[tuple[str, str]] = []

    def answer(self, body: bool) -> None:
        self.seen.append((self.command, self.path))
        status, headers = {
            "/pinned": (302, {"Location": "/storage/pg19.parquet", "X-Linked-Size": "24900000"}),
            "/storage/pg19.parquet": (200, {"Content-Length": "24900000"}),
            "/plain": (200, {"Content-Length": "1000"}),
            "/gone": (404, {}),
            "/gated": (401, {}),
        }.get(self.path, (500, {}))
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        if body and status == 200:  # a GET of the file: its bytes (what the check must not fetch)
            self.wfile.write(b"\0" * 1000)

    def do_HEAD(self) -> None:  # noqa: N802 (http.server's name)
        self.answer(body=False)

    def do_GET(self) -> None:  # noqa: N802
        self.answer(body=True)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def host() -> Iterator[str]:
    StandIn.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def test_given_the_default_workload_when_checked_then_one_anonymous_head_of_the_pinned_url():
    http_ = RegistryAnswers([HELDOUT_HEAD])
    verdict = sources.heldout_source(target(aws_with([]), http=http_))
    (request,) = http_.requests
    assert (request.get_method(), request.full_url) == ("HEAD", PG19_TEST_PARQUET)
    assert request.get_header("Authorization") is None
    assert verdict == (Status.OK, f"{PG19_TEST_PARQUET} is reachable without signing (24.9 MB)", "")


def test_given_a_host_that_redirects_to_its_storage_when_checked_over_http_then_ok_without_following(host):
    verdict = sources.reachable_https(target(aws_with([]), http=urllib_http), f"{host}/pinned")
    assert verdict == (Status.OK, f"{host}/pinned is reachable without signing (24.9 MB)", "")
    # One HEAD, answered by the redirect itself: the file is neither asked for again nor downloaded
    assert StandIn.seen == [("HEAD", "/pinned")]
    plain = sources.reachable_https(target(aws_with([]), http=urllib_http), f"{host}/plain")
    assert plain == (Status.OK, f"{host}/plain is reachable without signing (0.0 MB)", "")


@pytest.mark.parametrize(
    ("path", "status", "found"),
    [
        ("/gone", Status.FAIL, "does not exist (HTTP 404)"),
        ("/gated", Status.FAIL, "needs signing in (HTTP 401)"),
    ],
)
def test_given_a_file_gone_or_gated_when_checked_over_http_then_fail_naming_the_pin(
    host, path, status, found
):
    verdict = sources.reachable_https(target(aws_with([]), http=urllib_http), f"{host}{path}")
    assert (verdict.status, verdict.found) == (status, f"{host}{path} {found}")
    assert "PG19_TEST_PARQUET (trainium_eks/jobs/heldout_staging.py)" in verdict.fix
    assert "heldout_enabled=false" in verdict.fix


def test_given_no_host_when_checked_then_warn_it_could_not_tell():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}/pinned"
    verdict = sources.reachable_https(target(aws_with([]), http=urllib_http), closed)
    assert verdict.status is Status.WARN and verdict.found.startswith(f"could not reach {closed}")


@pytest.mark.parametrize(
    "context", [{"heldout_enabled": "false"}, {"vocab_source": ""}, {"training_enabled": "false"}]
)
def test_given_no_held_out_set_when_checked_then_nothing_is_asked(context):
    http_ = RegistryAnswers([])
    verdict = sources.heldout_source(target(aws_with([]), config(**context), http=http_))
    assert verdict.status is Status.OK and verdict.found.startswith("not used")
    assert http_.requests == []
