"""An exported model folder into S3, each file with a SHA-256 checksum S3 verifies, then read back.

    python -m training.trainer.upload_model MODEL_DIR s3://BUCKET/PREFIX [--deadline_s SECONDS]

MODEL_DIR is a folder ``training.trainer.export`` wrote (config.json, model.safetensors, the
tokenizer files, README.md); every file in it goes to ``s3://BUCKET/PREFIX/<relative path>``:

- sent with ``ChecksumAlgorithm="SHA256"`` through boto3's transfer manager (s3transfer 0.19.3,
  the classic one: :data:`TRANSFER`). A file under :data:`PART_SIZE` is one PutObject, whose
  SHA-256 botocore computes over the body and sends as ``x-amz-checksum-sha256`` (a header over
  plain HTTP, an aws-chunked trailer over HTTPS: botocore 1.44.8 httpchecksum.py
  ``resolve_request_checksum_algorithm``, ``_apply_request_header_checksum``,
  ``_apply_request_trailer_checksum``); S3 computes its own and rejects the request when they
  differ, then stores it: HeadObject returns the base64 SHA-256 of the whole file. A file of
  :data:`PART_SIZE` or more is a multipart upload: CreateMultipartUpload with ``x-amz-checksum-algorithm: SHA256``, each
  UploadPart with the part's SHA-256 (checked by S3 the same way), CompleteMultipartUpload with
  each part's checksum (s3transfer upload.py ``UploadPartTask``, ``UPLOAD_PART_ARGS``);
  S3 has no full-object SHA-256 for a multipart object, only the COMPOSITE one: the SHA-256 of
  the parts' concatenated SHA-256 digests, with ``-<parts>`` (Amazon S3 User Guide, "Checking
  object integrity in Amazon S3": full-object checksums are for the CRC algorithms, composite
  for SHA-1 and SHA-256 as well). The parts are :data:`PART_SIZE` bytes (s3transfer's
  ``ChunksizeAdjuster`` keeps that size below 10,000 parts), so the composite is computed here
  from the same parts and compared. CRC-64/NVME would give a full-object value, but botocore
  computes it only with ``awscrt``, which the training image does not install.
- then checked: for every local file HeadObject with ``ChecksumMode="ENABLED"``; its
  ``ChecksumSHA256`` (the digest before any ``-<parts>``) and ``ContentLength`` must equal the
  local file's. A missing or different object fails the upload with one line naming it.

On a second run a file whose object already has the same size and SHA-256 is not sent again
(the summary says how many). Objects under the prefix that the folder no longer has are left
(the bucket is versioned) and named. Each object also carries the file's plain SHA-256 as the
metadata ``sha256`` (``x-amz-meta-sha256``), for ``sha256sum`` after a download: S3 does not
check it.

Credentials come from the default chain (EKS Pod Identity in the pod). The region is
``AWS_REGION``'s, else ``AWS_DEFAULT_REGION``'s, else the bucket's (HeadBucket's
``x-amz-bucket-region``, which S3 also sends with a 403, as botocore's own redirector reads it:
botocore utils.py ``S3RegionRedirectorv2.get_bucket_region``). ``AWS_ENDPOINT_URL_S3`` sends the
calls elsewhere (tests, the offline rehearsal): botocore reads it itself (configprovider.py
``ConfiguredEndpointProvider``, the service-specific variable before ``AWS_ENDPOINT_URL``).

Bounded: every call has the connect and read timeouts and the retries of :func:`client_config`,
and the whole run ``--deadline_s`` (default :func:`default_deadline_s`); past it the program
prints one line, cancels the transfers (a multipart upload cancelled is aborted; parts left by
one that could not be are removed by the bucket's lifecycle rule) and exits.

Exit status: 0 uploaded and verified; 1 anything else (one line ``error: ...`` on stderr), the
deadline included; 2 a command line argparse refuses.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Final

from trainium_job.paths import model_commands

#: Bytes of each part of a multipart upload, and the size from which a file is sent in parts
#: (s3transfer's defaults are 8 MiB; BERT-large's 1.34 GB model.safetensors is 80 parts of this).
#: The composite checksum compared after the upload is computed with the same parts.
PART_SIZE: Final = 16 * 2**20
#: Requests in flight at once (s3transfer's default ``max_concurrency``); the transfer manager
#: holds up to 10 parts in memory (its ``max_in_memory_upload_chunks``): 160 MiB.
CONCURRENCY: Final = 10
#: Seconds to open a connection to S3, and to wait for a read on it (botocore's defaults are 60 each).
CONNECT_TIMEOUT_S: Final = 10
READ_TIMEOUT_S: Final = 60
#: Attempts of each call, the first included, in botocore's "standard" retry mode (its default
#: is 3): throttling, 5xx and connection errors are retried with jittered backoff.
MAX_ATTEMPTS: Final = 5
#: The rate the default deadline assumes (a low one for 10 connections from one instance to S3 in
#: its region), the factor of slack on top, and the least deadline.
ASSUMED_RATE_BYTES_PER_S: Final = 100 * 10**6
DEADLINE_FACTOR: Final = 2
MIN_DEADLINE_S: Final = 300
#: Seconds given, past the deadline, to cancel the transfers (and abort their multipart uploads).
CANCEL_GRACE_S: Final = 10
CHECKSUM_ALGORITHM: Final = "SHA256"
#: The object metadata key of the file's plain SHA-256 (hex).
SHA256_METADATA: Final = "sha256"
#: The transfer manager that sends the parts this module computes the composite checksum of: the
#: classic one, also where ``awscrt`` is installed (its CRT manager chooses its own part size).
TRANSFER: Final = "classic"
FAILED: Final = 1
_READ_BLOCK = 2**20


class UploadError(RuntimeError):
    """An upload that did not happen or does not match; the message is one line naming the object."""


@dataclass(frozen=True)
class S3Uri:
    """``s3://bucket/prefix``: the prefix without its trailing ``/``."""

    bucket: str
    prefix: str

    @classmethod
    def parse(cls, text: str) -> S3Uri:
        bucket, _, prefix = text.removeprefix("s3://").partition("/")
        prefix = prefix.strip("/")
        if not text.startswith("s3://") or not bucket or not prefix or "//" in prefix:
            raise UploadError(
                f"{text!r}: give s3://BUCKET/PREFIX, such as s3://models/bert-large-phase1/model"
            )
        return cls(bucket, prefix)

    def key(self, name: str) -> str:
        return f"{self.prefix}/{name}"

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}/"


@dataclass(frozen=True)
class LocalFile:
    """One file of the folder: its path relative to the folder (POSIX) and its size."""

    path: Path
    name: str
    size: int


@dataclass(frozen=True)
class Digest:
    """A file's plain SHA-256 (hex) and the checksum S3 reports for it (:func:`s3_checksum`)."""

    sha256: str
    s3: str


@dataclass(frozen=True)
class Remote:
    """What HeadObject says of an object: its size and ``ChecksumSHA256`` (None: it has none)."""

    size: int
    checksum: str | None


@dataclass
class Report:
    """What a run did: the names sent, the names skipped, the keys left under the prefix."""

    sent: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)
    sent_bytes: int = 0


def local_files(model_dir: Path) -> list[LocalFile]:
    """Every file under ``model_dir`` (a link to a file is read through; a link to a folder is not
    walked), by name; UploadError for no folder or no file."""
    if not model_dir.is_dir():
        raise UploadError(f"{model_dir}: no such folder; give the folder training.trainer.export wrote")
    files = []
    for root, _, names in os.walk(model_dir):
        for name in names:
            path = Path(root, name)
            files.append(LocalFile(path, path.relative_to(model_dir).as_posix(), path.stat().st_size))
    if not files:
        raise UploadError(f"{model_dir}: no files to upload")
    return sorted(files, key=lambda f: f.name)


def part_size_for(size: int, part_size: int) -> int | None:
    """The part size the transfer manager sends a file of ``size`` bytes with, None for one PutObject
    (s3transfer upload.py: multipart from ``multipart_threshold`` on, the chunk size adjusted by
    ``ChunksizeAdjuster``)."""
    from s3transfer.utils import ChunksizeAdjuster

    return ChunksizeAdjuster().adjust_chunksize(part_size, size) if size >= part_size else None


def _blocks(handle: Any, length: int) -> Iterator[bytes]:
    while length > 0 and (block := handle.read(min(length, _READ_BLOCK))):
        length -= len(block)
        yield block


def s3_checksum(path: Path, size: int, part_size: int) -> Digest:
    """The file's SHA-256, and the ``ChecksumSHA256`` S3 stores for it when the transfer manager sends
    it with ``part_size``: the base64 SHA-256 of the file (one PutObject), or of its parts'
    concatenated SHA-256 digests followed by ``-<parts>`` (a multipart upload)."""
    whole = hashlib.sha256()
    parts: list[bytes] = []
    chunk = part_size_for(size, part_size)
    with open(path, "rb") as handle:
        while True:
            part = hashlib.sha256()
            read = 0
            for block in _blocks(handle, chunk or size):
                whole.update(block)
                part.update(block)
                read += len(block)
            if chunk is None or read == 0:
                break
            parts.append(part.digest())
    if chunk is None:
        return Digest(whole.hexdigest(), base64.b64encode(whole.digest()).decode())
    composite = base64.b64encode(hashlib.sha256(b"".join(parts)).digest()).decode()
    return Digest(whole.hexdigest(), f"{composite}-{len(parts)}")


def difference(remote: Remote | None, size: int, digest: Digest) -> str | None:
    """How the object differs from the file (one phrase), None when it has the same size and SHA-256.
    Only the digest is compared: S3 may or may not append the ``-<parts>`` of a composite checksum."""
    if remote is None:
        return "not in S3"
    if remote.size != size:
        return f"{remote.size} bytes in S3, {size} here"
    if remote.checksum is None:
        return "no SHA-256 checksum in S3 (uploaded without one)"
    if remote.checksum.split("-")[0] != digest.s3.split("-")[0]:
        return f"SHA-256 {remote.checksum} in S3, {digest.s3} here"
    return None


def default_deadline_s(total_bytes: int) -> int:
    """The whole run's default bound: the bytes at :data:`ASSUMED_RATE_BYTES_PER_S`, times
    :data:`DEADLINE_FACTOR`, at least :data:`MIN_DEADLINE_S` seconds."""
    return max(MIN_DEADLINE_S, -(-total_bytes * DEADLINE_FACTOR // ASSUMED_RATE_BYTES_PER_S))


def client_config(region: str | None) -> Any:
    """botocore's Config of every call: the timeouts, the retries, a connection per transfer thread."""
    from botocore.config import Config

    return Config(
        region_name=region,
        connect_timeout=CONNECT_TIMEOUT_S,
        read_timeout=READ_TIMEOUT_S,
        retries={"max_attempts": MAX_ATTEMPTS, "mode": "standard"},
        max_pool_connections=CONCURRENCY,
    )


def explain(error: Exception, what: str) -> UploadError:
    """One line for a failed call on ``what`` (an S3 URI)."""
    from botocore.exceptions import ClientError

    if not isinstance(error, ClientError):
        return UploadError(f"{what}: {' '.join(str(error).split())}")
    info = error.response.get("Error", {})
    code = str(info.get("Code") or error.response.get("ResponseMetadata", {}).get("HTTPStatusCode"))
    text = f"{what}: {code}: {info.get('Message') or 'no message'}"
    if code in ("NoSuchBucket", "404"):
        text += " (is the bucket name the platform stack's WorkloadModelBucketName output?)"
    elif code in ("AccessDenied", "403", "AllAccessDisabled"):
        text += " (the pod's role may write only under its own prefix: grant_model_write)"
    return UploadError(text)


def s3_client(bucket: str) -> Any:
    """An S3 client from the default credential chain, in ``AWS_REGION``'s region, else
    ``AWS_DEFAULT_REGION``'s, else the bucket's (:func:`bucket_region`)."""
    import boto3

    session = boto3.session.Session()  # its own: boto3's default session keeps the first credentials
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if not region:
        region = bucket_region(session.client("s3", config=client_config("us-east-1")), bucket)
    return session.client("s3", config=client_config(region))


def bucket_region(client: Any, bucket: str) -> str:
    """The bucket's region from HeadBucket's ``x-amz-bucket-region``, sent with a 200, 301 or 403."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        headers = client.head_bucket(Bucket=bucket)["ResponseMetadata"]["HTTPHeaders"]
    except ClientError as e:
        headers = e.response.get("ResponseMetadata", {}).get("HTTPHeaders", {})
        if "x-amz-bucket-region" not in headers:
            raise explain(e, f"s3://{bucket}") from None
    except BotoCoreError as e:
        raise explain(e, f"s3://{bucket}") from None
    return str(headers["x-amz-bucket-region"])


def listing(client: Any, uri: S3Uri) -> set[str]:
    """The keys under ``<prefix>/`` (ListObjectsV2, a page at a time)."""
    keys = set()
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=uri.bucket, Prefix=uri.prefix + "/"):
        keys |= {item["Key"] for item in page.get("Contents", [])}
    return keys


def head(client: Any, uri: S3Uri, name: str) -> Remote | None:
    """The object's size and SHA-256 checksum (HeadObject with ChecksumMode), None where it is not."""
    from botocore.exceptions import ClientError

    try:
        answer = client.head_object(Bucket=uri.bucket, Key=uri.key(name), ChecksumMode="ENABLED")
    except ClientError as e:
        if e.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 404:
            return None
        raise
    return Remote(int(answer["ContentLength"]), answer.get("ChecksumSHA256"))


def transfer_manager(client: Any, part_size: int) -> Any:
    """The classic transfer manager, with the part size the checksums are computed for."""
    from boto3.s3.transfer import TransferConfig, create_transfer_manager

    config = TransferConfig(
        multipart_threshold=part_size,
        multipart_chunksize=part_size,
        max_concurrency=CONCURRENCY,
        preferred_transfer_client=TRANSFER,
    )
    return create_transfer_manager(client, config)


class Transfers:
    """The run's transfer manager and its futures, for the deadline to cancel from another thread."""

    def __init__(self) -> None:
        self.manager: Any = None
        self.futures: list[Any] = []

    def cancel(self, grace_s: float) -> None:
        """Cancel what is in flight (a multipart upload cancelled is aborted), waiting at most
        ``grace_s`` for it. Each future is cancelled on its own: ``TransferManager.shutdown(cancel=True)``
        of s3transfer 0.19.3 hands its message on as the exception type (manager.py ``shutdown``:
        ``self._shutdown(cancel, cancel, cancel_msg)``) and fails with a TypeError."""
        for future in list(self.futures):
            future.cancel()
        if self.manager is not None:
            stopping = threading.Thread(target=self.manager.shutdown, daemon=True)
            stopping.start()
            stopping.join(grace_s)


def send(
    client: Any, uri: S3Uri, files: Sequence[tuple[LocalFile, Digest]], part_size: int, transfers: Transfers
) -> None:
    """Upload ``files`` at once, each with its SHA-256 checksum; UploadError naming the first that failed."""
    if not files:
        return
    transfers.manager = manager = transfer_manager(client, part_size)
    with manager:
        for file, digest in files:
            extra = {"ChecksumAlgorithm": CHECKSUM_ALGORITHM, "Metadata": {SHA256_METADATA: digest.sha256}}
            transfers.futures.append(
                manager.upload(str(file.path), uri.bucket, uri.key(file.name), extra_args=extra)
            )
        for (file, _), future in zip(files, transfers.futures, strict=True):
            try:
                future.result()
            except Exception as e:
                raise explain(e, f"s3://{uri.bucket}/{uri.key(file.name)}") from None


def verify(client: Any, uri: S3Uri, files: Sequence[tuple[LocalFile, Digest]]) -> None:
    """HeadObject of every file's object: UploadError naming the first that is missing or differs."""
    wrong = []
    for file, digest in files:
        why = difference(head(client, uri, file.name), file.size, digest)
        if why is not None:
            wrong.append(f"s3://{uri.bucket}/{uri.key(file.name)}: {why}")
    if wrong:
        more = f" (and {len(wrong) - 1} more)" if len(wrong) > 1 else ""
        raise UploadError(f"{wrong[0]}{more}")


def upload(
    model_dir: Path,
    uri: S3Uri,
    *,
    client: Any,
    part_size: int = PART_SIZE,
    transfers: Transfers | None = None,
    say: Callable[[str], None] = print,
) -> Report:
    """Upload the files of ``model_dir`` that S3 lacks or holds otherwise, then verify every one.
    UploadError (one line) for a call that failed or an object that does not match."""
    from botocore.exceptions import BotoCoreError, ClientError

    report = Report()
    files = local_files(model_dir)
    try:
        remote = listing(client, uri)
        report.left = sorted(remote - {uri.key(f.name) for f in files})
        digests = [(f, s3_checksum(f.path, f.size, part_size)) for f in files]
        todo = []
        for file, digest in digests:
            if uri.key(file.name) in remote:
                why = difference(head(client, uri, file.name), file.size, digest)
                if why is None:
                    report.skipped.append(file.name)
                    continue
                say(f"{file.name}: {why}: uploading it again")
            todo.append((file, digest))
        send(client, uri, todo, part_size, transfers or Transfers())
        report.sent = [f.name for f, _ in todo]
        report.sent_bytes = sum(f.size for f, _ in todo)
        verify(client, uri, digests)
    except (ClientError, BotoCoreError) as e:
        raise explain(e, str(uri)) from None
    return report


def local_name(uri: S3Uri) -> str:
    """A folder name for the download: the prefix's segments joined by ``-``."""
    return "-".join(PurePosixPath(uri.prefix).parts)


def summary(uri: S3Uri, report: Report, files: int) -> str:
    """The last line: what was sent and skipped, where, and how to fetch and load the model."""
    fetch, load = model_commands(str(uri), local_name(uri))
    return (
        f"{uri}: {files} files verified (SHA-256 and size): {len(report.sent)} uploaded "
        f"({report.sent_bytes / 1e6:.1f} MB), {len(report.skipped)} skipped (already there, same SHA-256); "
        f"fetch: {fetch} ; load: {load}"
    )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m training.trainer.upload_model",
        description="Upload an exported model folder to S3 with SHA-256 checksums, then verify it.",
    )
    p.add_argument("model_dir", type=Path, help="the folder training.trainer.export wrote")
    p.add_argument("uri", help="s3://BUCKET/PREFIX: the files go to PREFIX/<relative path>")
    p.add_argument(
        "--deadline_s",
        type=float,
        default=None,
        help=f"bound of the whole run in seconds (default: the size at {ASSUMED_RATE_BYTES_PER_S // 10**6} "
        f"MB/s, x{DEADLINE_FACTOR}, at least {MIN_DEADLINE_S})",
    )
    return p


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr, flush=True)
    return FAILED


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.deadline_s is not None and not args.deadline_s > 0:
        return _fail(f"--deadline_s {args.deadline_s}: give a number of seconds above 0")
    try:
        uri = S3Uri.parse(args.uri)
        files = local_files(args.model_dir)
    except UploadError as e:
        return _fail(str(e))
    total = sum(f.size for f in files)
    deadline_s = args.deadline_s or default_deadline_s(total)
    print(
        f"{args.model_dir}: {len(files)} files, {total / 1e6:.1f} MB to {uri}, within {deadline_s:g} s",
        flush=True,
    )
    outcome: list[BaseException | Report] = []
    transfers = Transfers()

    def work() -> None:
        try:
            client = s3_client(uri.bucket)
            outcome.append(
                upload(args.model_dir, uri, client=client, part_size=PART_SIZE, transfers=transfers)
            )
        except BaseException as e:  # handed to the main thread, which reports it
            outcome.append(e)

    worker = threading.Thread(target=work, name="upload", daemon=True)
    worker.start()
    worker.join(deadline_s)
    if not outcome:
        _fail(
            f"{uri}: not uploaded and verified within --deadline_s {deadline_s:g}; the transfers are cancelled"
        )
        transfers.cancel(CANCEL_GRACE_S)
        sys.stdout.flush()
        os._exit(FAILED)  # the transfer threads may still wait on a socket: do not join them
    result = outcome[0]
    if isinstance(result, (UploadError, OSError)):  # OSError: a file of the folder unreadable
        return _fail(str(result))
    if isinstance(result, BaseException):
        raise result
    if result.left:
        print(
            f"{uri}: left in S3, not in the folder (older versions kept): {', '.join(result.left)}",
            flush=True,
        )
    print(summary(uri, result, len(files)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
