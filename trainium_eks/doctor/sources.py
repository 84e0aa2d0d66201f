"""What the deployment pulls in: the Kubernetes version from EKS, the base image, the datasets and
phase 2's start checkpoint (their sizes, and their staging times against the waits derived from
the sizes synth assumed), and the held-out books."""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from trainium_job.neuron_stack import NEURON_STACK

from ..config import PlatformConfig
from ..jobs.dataset_staging import PUBLIC_SOURCE_BYTES
from ..jobs.heldout_staging import PG19_TEST_PARQUET
from ..report.job_estimate import first_data_deadline, phase2_data_deadline, staging_estimates
from ..versions import KUBERNETES_RELEASES
from .aws import ACCESS_DENIED_CODES, error_code
from .check_list import PUBLIC_ECR, ImageRef, head_manifest
from .findings import Status, Verdict
from .target import Target

#: ``versionStatus`` values of EKS DescribeClusterVersions (``status`` in older answers).
STANDARD_SUPPORT = {"STANDARD_SUPPORT", "standard-support"}
EXTENDED_SUPPORT = {"EXTENDED_SUPPORT", "extended-support"}
#: HTTP redirects (RFC 9110 section 15.4): a file that answers one is there.
REDIRECTS = {301, 302, 303, 307, 308}


def kubernetes_version(t: Target) -> Verdict:
    """The configured Kubernetes version offered by EKS in the region, and its support phase."""
    c = t.config
    others = f"set kubernetes_version to one EKS offers of {', '.join(KUBERNETES_RELEASES)}"
    try:
        answer = t.aws.client("eks").describe_cluster_versions(
            clusterVersions=[c.kubernetes_version], includeAll=True
        )
    except ClientError as err:
        if error_code(err) != "InvalidParameterException":
            raise
        answer = {"clusterVersions": []}
    rows = [v for v in answer["clusterVersions"] if v.get("clusterVersion") == c.kubernetes_version]
    if not rows:
        return Verdict(
            Status.FAIL, f"EKS in {c.region} does not offer Kubernetes {c.kubernetes_version}", others
        )
    row = rows[0]
    phase = row.get("versionStatus") or row.get("status", "")
    if phase in STANDARD_SUPPORT:
        end = row.get("endOfStandardSupportDate")
        until = f" until {end:%Y-%m-%d}" if end else ""
        return Verdict(Status.OK, f"Kubernetes {c.kubernetes_version} is in standard support{until}")
    if phase in EXTENDED_SUPPORT:
        return Verdict(
            Status.WARN,
            f"Kubernetes {c.kubernetes_version} is in extended support (billed per cluster hour on top)",
            others,
        )
    return Verdict(
        Status.FAIL, f"Kubernetes {c.kubernetes_version} is {phase or 'not supported'} in EKS", others
    )


def base_image(t: Target) -> Verdict:
    """The training image's base (trainium_job/neuron_stack.py) exists in its public registry."""
    image = NEURON_STACK.base_image
    ref = ImageRef.parse(image)
    if ref.registry != PUBLIC_ECR:
        return Verdict(Status.WARN, f"{image} is not on {PUBLIC_ECR}: not checked")
    try:
        answer = head_manifest(ref, t.http)
    except urllib.error.URLError as err:
        return Verdict(Status.WARN, f"could not reach {PUBLIC_ECR} ({err.reason})", "check the network")
    if answer.status == 200:
        return Verdict(Status.OK, f"{image} exists ({answer.digest or 'no digest given'})")
    if answer.status == 404:
        return Verdict(
            Status.FAIL,
            f"{image} does not exist in the registry",
            "pick a published tag (AWS deep-learning-containers list) for NEURON_STACK in trainium_job/neuron_stack.py",
        )
    if answer.status == 429:
        return Verdict(
            Status.WARN, f"{PUBLIC_ECR} throttled the check (HTTP 429)", "run it again in a minute"
        )
    return Verdict(Status.WARN, f"{PUBLIC_ECR} answered HTTP {answer.status} for {image}", "")


def dataset_source(t: Target) -> Verdict:
    """Phase 1's ``s3://`` dataset readable without signing, as its staging Job reads it
    (``aws s3 cp|sync --no-sign-request``, trainium_eks.jobs.dataset_staging), its size and
    staging time against the wait derived from the table's size (:func:`_staging_time`)."""
    c = t.config
    if not c.training_enabled or c.preparation_enabled:
        return Verdict(Status.OK, "not used (training_enabled=false or preparation_enabled=true)")
    if c.training_phases == "2":
        return Verdict(Status.OK, "not used (training_phases=2: phase 1 is not trained)")
    return _readable_unsigned(t, c.training_dataset_source, "training_dataset_source", phase=1)


def phase2_dataset_source(t: Target) -> Verdict:
    """Phase 2's ``s3://`` dataset, as :func:`dataset_source` checks phase 1's (staged with
    ``preparation_enabled`` too: the preparation makes phase 1's shards only)."""
    c = t.config
    if not c.training_enabled or c.training_phases == "1":
        return Verdict(Status.OK, "not used (no phase 2)")
    return _readable_unsigned(t, c.phase2_dataset_source, "phase2_dataset_source", phase=2)


def phase2_start(t: Target) -> Verdict:
    """Phase 2's start checkpoint (``phase2_init_from``, with ``training_phases=2``) readable
    without signing, as the phase-2 staging Job downloads it: a missing one fails that Job only
    once the Trainium nodes are coming up (they are asked for with it), so it is checked here,
    before the deploy."""
    c = t.config
    if not c.training_enabled or c.training_phases != "2":
        return Verdict(Status.OK, "not used (phase 2 starts from phase 1's checkpoint)")
    return _readable_unsigned(t, c.phase2_init_from, "phase2_init_from", phase=2)


def heldout_source(t: Target) -> Verdict:
    """The held-out books (:data:`~trainium_eks.jobs.heldout_staging.PG19_TEST_PARQUET`) reachable
    without signing, as the held-out staging Job downloads them during training (a missing file
    costs every evaluation, not the training): a HEAD of the pinned URL, its redirect not followed
    (Hugging Face answers with the file's storage location and ``X-Linked-Size``, read as
    huggingface_hub 2.4.0 ``file_download.py`` ``get_hf_file_metadata`` reads it)."""
    c = t.config
    if not c.training_enabled or not any(job.eval_dir for job in c.phase_jobs):
        return Verdict(Status.OK, "not used (no held-out set: heldout_enabled=false or no vocabulary)")
    return reachable_https(t, PG19_TEST_PARQUET)


def reachable_https(t: Target, url: str) -> Verdict:
    """``url`` there for an anonymous HEAD: 200, or a redirect (its size when the answer gives it)."""
    fix = (
        "pin PG19_TEST_PARQUET (trainium_eks/jobs/heldout_staging.py) to a revision that has the file, "
        "or set heldout_enabled=false"
    )
    try:
        answer = t.http(urllib.request.Request(url, method="HEAD"))
    except urllib.error.URLError as err:
        return Verdict(Status.WARN, f"could not reach {url} ({err.reason})", "check the network")
    size = answer.headers.get("x-linked-size") or (
        answer.headers.get("content-length") if answer.status == 200 else None
    )
    about = f" ({int(size) / 1e6:,.1f} MB)" if size and size.isdigit() else ""
    if answer.status == 200 or (answer.status in REDIRECTS and answer.headers.get("location")):
        return Verdict(Status.OK, f"{url} is reachable without signing{about}")
    if answer.status == 404:
        return Verdict(Status.FAIL, f"{url} does not exist (HTTP 404)", fix)
    if answer.status in (401, 403):
        return Verdict(Status.FAIL, f"{url} needs signing in (HTTP {answer.status})", fix)
    if answer.status == 429:
        return Verdict(Status.WARN, f"{url} throttled the check (HTTP 429)", "run it again in a minute")
    return Verdict(Status.WARN, f"{url} answered HTTP {answer.status}", "")


#: Keys of one ListObjectsV2 page: S3's most ("returns some or all (up to 1,000) of the objects",
#: Amazon S3 API Reference, ListObjectsV2).
LIST_PAGE_KEYS = 1000
#: Pages read of a prefix source at most (100,000 objects; a shard set has hundreds): beyond,
#: the size summed is a lower bound.
LIST_PAGES = 100


@dataclass(frozen=True)
class Size:
    """Bytes of a source: an object's ``ContentLength``, or the sum of a prefix's objects."""

    bytes: int
    #: Objects summed (1 for an object).
    objects: int = 1
    #: False when a prefix had more than :data:`LIST_PAGES` pages: ``bytes`` is a lower bound.
    complete: bool = True

    def words(self) -> str:
        gb = f"{self.bytes / 1e9:,.1f} GB"
        if self.objects == 1 and self.complete:
            return gb
        if not self.complete:
            return f"at least {gb} in its first {self.objects:,} objects"
        return f"{gb} in {self.objects:,} objects"


def _readable_unsigned(t: Target, source: str, key_name: str, *, phase: int) -> Verdict:
    """An ``s3://`` object (a ``.tar`` or a ``.pt``) or prefix readable without signing, and its
    size against phase ``phase``'s staging wait; a source on FSx is not checked from here."""
    if not source.startswith("s3://"):
        return Verdict(Status.OK, f"{source} is read on FSx by the staging Job; not checked from here")
    bucket, _, key = source.removeprefix("s3://").partition("/")
    s3 = t.aws.client("s3", unsigned=True)
    private = (
        "the staging Job reads it with --no-sign-request: make it publicly readable, or import it "
        f"with fsx_s3_import_uri and set {key_name}=fsx:/..."
    )
    try:
        if key.endswith((".tar", ".pt")):
            size = Size(s3.head_object(Bucket=bucket, Key=key)["ContentLength"])
        else:
            size = _prefix_size(s3, bucket, key)
    except ClientError as err:
        code = error_code(err)
        if code in ACCESS_DENIED_CODES:
            return Verdict(Status.FAIL, f"{source} is not readable without signing ({code})", private)
        if code in ("404", "NoSuchKey", "NoSuchBucket", "NotFound"):
            return Verdict(Status.FAIL, f"{source} does not exist ({code})", f"check {key_name}")
        raise
    if size.objects == 0:
        return Verdict(Status.FAIL, f"no objects under {source}", f"check {key_name}")
    return _staging_time(t.config, source, size, phase=phase)


def _prefix_size(s3: Any, bucket: str, prefix: str) -> Size:
    """The objects under ``prefix`` summed, as ``aws s3 sync`` copies them all, page by page up
    to :data:`LIST_PAGES`."""
    ask: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "MaxKeys": LIST_PAGE_KEYS}
    total = objects = 0
    for _ in range(LIST_PAGES):
        page = s3.list_objects_v2(**ask)
        for row in page.get("Contents", ()):
            total, objects = total + row["Size"], objects + 1
        if not page.get("IsTruncated"):
            return Size(total, objects)
        ask["ContinuationToken"] = page["NextContinuationToken"]
    return Size(total, objects, complete=False)


def _staging_time(c: PlatformConfig, source: str, size: Size, *, phase: int) -> Verdict:
    """The source's size and its phase's staging estimate at that size (the review's, with the
    size read instead of the table's), against the wait for that staging: warn when the wait is
    shorter than twice the estimate (the rule the derived waits follow, trainium_eks.jobs.staging_eta),
    as it is when the source is larger than the table's figure the wait was derived from."""
    real = staging_estimates(c, sizes={**PUBLIC_SOURCE_BYTES, source: size.bytes})[phase]
    after_phase1 = phase == 2 and c.training_phases == "both"
    wait = phase2_data_deadline(c) if after_phase1 else first_data_deadline(c)
    table = PUBLIC_SOURCE_BYTES.get(source)
    short_min = max(real.deadline_s - wait.seconds, 0) // 60
    head = f"{source} is readable without signing: {size.words()}"
    if not short_min and size.complete:
        listed = f" (the table's {table / 1e9:,.1f} GB)" if table is not None else ""
        return Verdict(
            Status.OK,
            f"{head}{listed}; staging: {real.explain()}, within its wait of {wait.seconds // 60} min",
        )
    if wait.why == "training_data_deadline_minutes":
        derived = "its wait set by training_data_deadline_minutes"
    elif table is not None and size.bytes > table:
        more = (size.bytes - table) / 1e9
        derived = f"{more:,.1f} GB more than the table's {table / 1e9:,.1f} GB its wait is derived from"
    else:
        derived = "a size synth does not know"
    found = f"{head}, {derived}; staging: {real.explain()}; its wait allows {wait.seconds // 60} min"
    if size.complete:
        found += f", {short_min} min short of twice the estimate"
    else:
        found += ": the whole prefix takes longer"
    if after_phase1:
        under = f"{short_min} min" if size.complete else "the whole prefix's staging time"
        return Verdict(
            Status.WARN,
            found,
            f"none needed unless phase 1 takes under {under}: phase 2 is staged while phase 1 trains, "
            "and this wait (no key sets it) starts when phase 1 ends",
        )
    least = f"at least {real.deadline_s // 60}"
    if not size.complete:
        least = f"twice the whole prefix's staging time ({least})"
    return Verdict(Status.WARN, found, f"set training_data_deadline_minutes to {least}")
