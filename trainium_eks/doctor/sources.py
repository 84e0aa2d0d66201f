"""What the deployment pulls in: the Kubernetes version from EKS, the base image, the datasets and
phase 2's start checkpoint."""

from __future__ import annotations

import urllib.error

from botocore.exceptions import ClientError

from trainium_job.neuron_stack import NEURON_STACK

from ..versions import KUBERNETES_RELEASES
from .aws import ACCESS_DENIED_CODES, error_code
from .check_list import PUBLIC_ECR, ImageRef, head_manifest
from .findings import Status, Verdict
from .target import Target

#: ``versionStatus`` values of EKS DescribeClusterVersions (``status`` in older answers).
STANDARD_SUPPORT = {"STANDARD_SUPPORT", "standard-support"}
EXTENDED_SUPPORT = {"EXTENDED_SUPPORT", "extended-support"}


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
    (``aws s3 cp|sync --no-sign-request``, trainium_eks.jobs.dataset_staging)."""
    c = t.config
    if not c.training_enabled or c.preparation_enabled:
        return Verdict(Status.OK, "not used (training_enabled=false or preparation_enabled=true)")
    if c.training_phases == "2":
        return Verdict(Status.OK, "not used (training_phases=2: phase 1 is not trained)")
    return _readable_unsigned(t, c.training_dataset_source, "training_dataset_source")


def phase2_dataset_source(t: Target) -> Verdict:
    """Phase 2's ``s3://`` dataset, as :func:`dataset_source` checks phase 1's."""
    c = t.config
    if not c.training_enabled or c.preparation_enabled or c.training_phases == "1":
        return Verdict(Status.OK, "not used (no phase 2 from a staged dataset)")
    return _readable_unsigned(t, c.phase2_dataset_source, "phase2_dataset_source")


def phase2_start(t: Target) -> Verdict:
    """Phase 2's start checkpoint (``phase2_init_from``, with ``training_phases=2``) readable
    without signing, as the phase-2 staging Job downloads it: a missing one fails that Job only
    once the Trainium nodes are coming up (they are asked for with it), so it is checked here,
    before the deploy."""
    c = t.config
    if not c.training_enabled or c.training_phases != "2":
        return Verdict(Status.OK, "not used (phase 2 starts from phase 1's checkpoint)")
    return _readable_unsigned(t, c.phase2_init_from, "phase2_init_from")


def _readable_unsigned(t: Target, source: str, key_name: str) -> Verdict:
    """An ``s3://`` object (a ``.tar`` or a ``.pt``) or prefix readable without signing; a
    source on FSx is not checked from here."""
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
            head = s3.head_object(Bucket=bucket, Key=key)
            size = head["ContentLength"] / 1e9
            return Verdict(Status.OK, f"{source} is readable without signing ({size:,.1f} GB)")
        listing = s3.list_objects_v2(Bucket=bucket, Prefix=key, MaxKeys=1)
    except ClientError as err:
        code = error_code(err)
        if code in ACCESS_DENIED_CODES:
            return Verdict(Status.FAIL, f"{source} is not readable without signing ({code})", private)
        if code in ("404", "NoSuchKey", "NoSuchBucket", "NotFound"):
            return Verdict(Status.FAIL, f"{source} does not exist ({code})", f"check {key_name}")
        raise
    if listing.get("KeyCount", 0) == 0:
        return Verdict(Status.FAIL, f"no objects under {source}", f"check {key_name}")
    return Verdict(Status.OK, f"{source} lists without signing")
