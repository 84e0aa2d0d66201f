"""The rehearsal's stand-in S3 for the model upload: moto's S3 API on the bridge.

moto 5.2.6 in server mode (``moto.server.ThreadedMotoServer``, the same S3 API the upload's own
tests run against: tests/training/trainer/test_upload_model.py says what it checks and what it
does not) runs as a program (this file) in the rehearsal's network namespace, as the stand-in
API server does (tests.rehearsal.kube_api), on ``<address>:PORT`` over plain HTTP: botocore takes
an ``http://`` endpoint URL and then sends each checksum as a header, not an aws-chunked trailer
(botocore 1.44.8 httpchecksum.py ``resolve_request_checksum_algorithm``: trailers over HTTPS only).
It creates the bucket, versioned as the platform's model bucket is, prints ``ready`` and answers
the harness on stdin: ``objects`` writes what the bucket holds to its folder (:data:`OBJECTS`,
each object's current bytes under ``objects/<key>``) and prints ``done``; closing stdin ends it.

A pod reaches it with :meth:`S3StandIn.env`: ``AWS_ENDPOINT_URL_S3`` (botocore's service-specific
endpoint variable, configprovider.py ``ConfiguredEndpointProvider``), stand-in credentials (on
EKS the pod's identity) and the region. moto takes any credentials.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

if __name__ != "__main__":  # the harness's side: the server itself runs isolated (python -I)
    from tests.rehearsal import bridge_server

#: The stand-in's port on the bridge address (HTTP's; the stand-in API server has 443 there).
PORT = 80
BUCKET = "rehearsal-models"
#: The region of the rehearsal's nodes (their providerIDs are in us-west-2d: tests.rehearsal.kube_api).
REGION = "us-west-2"
#: Stand-in credentials (the stand-in API server's EC2 endpoint takes the same).
ACCESS_KEY = "rehearsal"
#: What the bucket holds, written on ``objects``: key -> size, SHA-256 checksum and its type,
#: metadata, and how many versions the bucket keeps of it.
OBJECTS = "objects.json"
CONTENT = "objects"


# --- the server (runs in the network namespace) ---------------------------------------------------


def _client(address: str, port: int) -> Any:
    import boto3

    return boto3.session.Session().client(
        "s3",
        endpoint_url=f"http://{address}:{port}",
        region_name=REGION,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=ACCESS_KEY,
    )


def _snapshot(client: Any, bucket: str, folder: Path) -> None:
    """What the bucket holds, through the S3 API itself, into ``folder``."""
    versions: dict[str, int] = {}
    for page in client.get_paginator("list_object_versions").paginate(Bucket=bucket):
        for version in page.get("Versions", []):
            versions[version["Key"]] = versions.get(version["Key"], 0) + 1
    content = folder / CONTENT
    shutil.rmtree(content, ignore_errors=True)
    found = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for item in page.get("Contents", []):
            key = item["Key"]
            head = client.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
            found[key] = {
                "size": head["ContentLength"],
                "checksum_sha256": head.get("ChecksumSHA256"),
                "checksum_type": head.get("ChecksumType"),
                "metadata": head.get("Metadata", {}),
                "versions": versions.get(key, 0),
            }
            target = content / key
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(client.get_object(Bucket=bucket, Key=key)["Body"].read())
    (folder / (OBJECTS + ".tmp")).write_text(json.dumps(found, indent=1, sort_keys=True))
    (folder / (OBJECTS + ".tmp")).replace(folder / OBJECTS)


def serve(folder: Path, address: str, port: int, bucket: str) -> None:
    """Serve until stdin closes; prints ``ready`` once the bucket is there, ``done`` per snapshot."""
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").disabled = True  # a line per request otherwise
    server = ThreadedMotoServer(ip_address=address, port=port, verbose=False)
    server.start()
    client = _client(address, port)
    client.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": REGION})
    client.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() == "objects":
            _snapshot(client, bucket, folder)
            print("done", flush=True)
    server.stop()


# --- the harness's side ---------------------------------------------------------------------------


class S3StandIn:
    """The stand-in S3, run by ``enter`` (a command prefix into the bridge's network namespace) on
    ``address``:PORT with one versioned bucket; what it holds is read into ``folder``."""

    def __init__(
        self,
        folder: Path,
        enter: Sequence[str],
        address: str,
        *,
        bucket: str = BUCKET,
        port: int = PORT,
        preexec_fn: Callable[[], None] | None = None,
    ) -> None:
        self.folder, self.address, self.port, self.bucket = folder, address, port, bucket
        folder.mkdir(parents=True)
        # Its own credentials and endpoint only: none of this machine's AWS settings.
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        self.proc = bridge_server.start(
            enter,
            __file__,
            [str(folder), address, str(port), bucket],
            what="the stand-in S3",
            env={**env, "AWS_EC2_METADATA_DISABLED": "true"},
            preexec_fn=preexec_fn,
        )

    @property
    def endpoint(self) -> str:
        return f"http://{self.address}:{self.port}"

    def uri(self, prefix: str) -> str:
        """``s3://<bucket>/<prefix>``: the upload's second argument."""
        return f"s3://{self.bucket}/{prefix.strip('/')}"

    def env(self) -> dict[str, str]:
        """What a pod that uploads needs: the endpoint for S3 alone, stand-in credentials, the
        region (``AWS_REGION``, read by the upload before ``AWS_DEFAULT_REGION``, which botocore
        reads itself), and no instance metadata lookups."""
        return {
            "AWS_ENDPOINT_URL_S3": self.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": ACCESS_KEY,
            "AWS_REGION": REGION,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def objects(self) -> dict[str, dict[str, Any]]:
        """Key -> what the bucket holds of it now (size, ``checksum_sha256``, ``checksum_type``,
        ``metadata``, ``versions``); the bytes are then under :meth:`content`."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("objects\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline().strip()
        if line != "done":
            raise RuntimeError(f"the stand-in S3 did not list its objects: {line!r}")
        return dict(json.loads((self.folder / OBJECTS).read_text()))

    def content(self) -> Path:
        """The folder of the objects' bytes as of the last :meth:`objects`, by key."""
        return self.folder / CONTENT

    def download(self, prefix: str, into: Path) -> Path:
        """What ``aws s3 cp --recursive s3://<bucket>/<prefix>/ <into>/`` fetches now."""
        self.objects()
        shutil.copytree(self.content() / prefix.strip("/"), into)
        return into

    def close(self) -> None:
        bridge_server.stop(self.proc)


if __name__ == "__main__":
    serve(Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4])
    os._exit(0)
