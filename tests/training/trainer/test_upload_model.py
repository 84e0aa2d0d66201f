"""The model's upload to S3 (training.trainer.upload_model) against moto's S3 in server mode.

moto 5.2.6 is the S3 API here, over HTTP on loopback, reached through ``AWS_ENDPOINT_URL_S3`` as
in the pod. What it checks and what it does not, read in its source at that version:

- PutObject and UploadPart store the ``x-amz-checksum-sha256`` they are sent without computing
  their own (moto/s3/responses.py ``_get_checksum``: "TODO: AWS computes the provided value and
  verifies it's the same"); S3 rejects a mismatch with BadDigest. So the stand-in does not catch
  a single PutObject corrupted after botocore hashed it (a test below shows it).
- CompleteMultipartUpload computes the object's COMPOSITE checksum from the bytes of the parts it
  holds (moto/s3/models.py ``MultipartChecksumBuilder``: SHA-256 of the parts' concatenated
  digests), whatever the client said of them: a corrupted part shows in HeadObject.
- HeadObject with ``x-amz-checksum-mode: ENABLED`` returns the stored value; for a multipart
  object without the ``-<parts>`` that its GetObject appends (responses.py ``head_object``,
  ``get_object``): the comparison reads only the digest.

So the HeadObject comparison is tested where moto computes what it stores (a multipart upload
corrupted in transit) and where the bytes sent are not the bytes hashed (the file changed during
the upload).
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import boto3
import pytest
import torch
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from moto.server import ThreadedMotoServer
from transformers import AutoTokenizer, BertConfig, BertForPreTraining, BertTokenizer
from werkzeug.serving import make_server

from tests.training.conftest import REPO
from training.trainer import upload_model
from training.trainer.upload_model import S3Uri, UploadError

#: The smallest part S3 takes but the last (moto/settings.py ``S3_UPLOAD_PART_MIN_SIZE``, S3's
#: 5 MiB), and s3transfer's least chunk size (utils.py ``MIN_UPLOAD_CHUNKSIZE``): the tests' parts,
#: so that the model's weights (about 19 MB) are a multipart upload of 4 parts.
PART = 5 * 2**20
REGION = "us-west-2"
PREFIX = "bert-tiny-phase1/model"
WEIGHTS = "model.safetensors"


@pytest.fixture(scope="module")
def moto_url():
    logging.getLogger("werkzeug").disabled = True  # moto's request log, on stderr otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture()
def s3_env(moto_url, monkeypatch, tmp_path):
    """The pod's S3 environment pointed at moto: endpoint, stand-in credentials, region."""
    for name in (
        "AWS_PROFILE",
        "AWS_DEFAULT_PROFILE",
        "AWS_SESSION_TOKEN",
        "AWS_ENDPOINT_URL",
        "AWS_DEFAULT_REGION",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", moto_url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_REGION", REGION)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setattr(upload_model, "PART_SIZE", PART)
    return moto_url


@pytest.fixture()
def s3(s3_env):
    return boto3.client("s3", region_name=REGION)


@pytest.fixture()
def bucket(s3):
    """A versioned bucket of its own, as the platform's model bucket is."""
    name = f"models-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name, CreateBucketConfiguration={"LocationConstraint": REGION})
    s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    return name


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """(a folder as the export writes it, the model in it): config.json, model.safetensors, the
    tokenizer files, README.md."""
    folder = tmp_path_factory.mktemp("exported") / "model"
    config = BertConfig(
        vocab_size=64, hidden_size=512, num_hidden_layers=2, num_attention_heads=8, intermediate_size=1024
    )
    config.architectures = ["BertForPreTraining"]
    torch.manual_seed(0)
    model = BertForPreTraining(config).eval()
    model.save_pretrained(folder)
    vocab = folder.parent / "vocab.txt"
    vocab.write_text(
        "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *(f"w{i}" for i in range(59))]) + "\n"
    )
    BertTokenizer(vocab=str(vocab), do_lower_case=True).save_pretrained(folder)
    shutil.copyfile(vocab, folder / "vocab.txt")
    (folder / "README.md").write_text("---\nlibrary_name: transformers\n---\n# bert-tiny\n")
    assert (folder / WEIGHTS).stat().st_size > 3 * PART
    return folder, model


@pytest.fixture()
def model_dir(exported, tmp_path):
    """A copy of the exported folder this test may change."""
    return Path(shutil.copytree(exported[0], tmp_path / "model"))


def expected_checksum(path: Path) -> str:
    """What S3 stores as ``ChecksumSHA256`` for a file the transfer manager sends with ``PART``-byte
    parts (Amazon S3 User Guide, "Checking object integrity in Amazon S3"): the base64 SHA-256 of
    the file for one PutObject; for a multipart upload the base64 SHA-256 of the concatenated
    SHA-256 digests of the parts, with ``-<parts>``."""
    data = path.read_bytes()
    if len(data) < PART:
        return base64.b64encode(hashlib.sha256(data).digest()).decode()
    parts = [hashlib.sha256(data[i : i + PART]).digest() for i in range(0, len(data), PART)]
    return base64.b64encode(hashlib.sha256(b"".join(parts)).digest()).decode() + f"-{len(parts)}"


def uri_of(bucket: str) -> str:
    return f"s3://{bucket}/{PREFIX}"


def run(model_dir: Path, bucket: str, capsys, *extra: str) -> tuple[int, list[str], list[str]]:
    """``main`` as the pod runs it: (exit status, stdout lines, stderr lines)."""
    code = upload_model.main([str(model_dir), uri_of(bucket), *extra])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


def versions(s3, bucket: str) -> dict[str, int]:
    """Key -> how many versions of it the bucket holds."""
    found: dict[str, int] = {}
    for v in s3.list_object_versions(Bucket=bucket, Prefix=PREFIX + "/").get("Versions", []):
        found[v["Key"]] = found.get(v["Key"], 0) + 1
    return found


def download(s3, bucket: str, into: Path) -> Path:
    """What ``aws s3 cp --recursive s3://bucket/PREFIX/ into/`` fetches."""
    for item in s3.list_objects_v2(Bucket=bucket, Prefix=PREFIX + "/")["Contents"]:
        target = into / item["Key"].removeprefix(PREFIX + "/")
        target.parent.mkdir(parents=True, exist_ok=True)
        s3.download_file(bucket, item["Key"], str(target))
    return into


def test_given_an_exported_folder_then_every_file_lands_with_its_sha256_and_the_model_loads_from_a_download(
    s3, bucket, model_dir, exported, capsys, tmp_path
):
    # When the folder is uploaded as the pod does
    code, out, err = run(model_dir, bucket, capsys)
    # Then it succeeds, and every file is an object under the prefix whose SHA-256 checksum (as S3
    # reports it) and size are the file's, with the file's plain SHA-256 as metadata
    assert (code, err) == (0, [])
    files = sorted(p for p in model_dir.iterdir())
    assert {p.name for p in files} >= {
        "config.json",
        WEIGHTS,
        "tokenizer_config.json",
        "vocab.txt",
        "README.md",
    }
    for path in files:
        head = s3.head_object(Bucket=bucket, Key=f"{PREFIX}/{path.name}", ChecksumMode="ENABLED")
        want = expected_checksum(path)
        assert head["ChecksumSHA256"].split("-")[0] == want.split("-")[0], path.name
        assert head["ContentLength"] == path.stat().st_size
        assert head["Metadata"] == {"sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    assert "-" in expected_checksum(model_dir / WEIGHTS)  # the weights went in parts
    assert versions(s3, bucket) == {f"{PREFIX}/{p.name}": 1 for p in files}
    # And the last line names the URI, the counts and the two commands
    there = "bert-tiny-phase1-model"
    assert out[-1].startswith(f"s3://{bucket}/{PREFIX}/: {len(files)} files verified (SHA-256 and size): ")
    assert f"{len(files)} uploaded" in out[-1] and "0 skipped" in out[-1]
    assert f"aws s3 cp --recursive s3://{bucket}/{PREFIX}/ {there}/ ;" in out[-1]
    load = f"python -c \"from transformers import BertForPreTraining; BertForPreTraining.from_pretrained('{there}')\""
    assert out[-1].endswith(load)
    # And a download of the prefix loads in transformers with the same weights and tokenizer
    fetched = download(s3, bucket, tmp_path / there)
    model, info = BertForPreTraining.from_pretrained(fetched, output_loading_info=True)
    assert {k: v for k, v in info.items() if v} == {}
    original = exported[1].state_dict()
    assert all(torch.equal(v, original[k]) for k, v in model.state_dict().items())
    assert AutoTokenizer.from_pretrained(fetched)("w1 w2")["input_ids"] == [2, 6, 7, 3]


def test_given_a_second_run_then_nothing_is_sent_again(s3, bucket, model_dir, capsys):
    # Given the folder uploaded once
    assert run(model_dir, bucket, capsys)[0] == 0
    before = versions(s3, bucket)
    # When the same folder is uploaded again (a redeploy)
    code, out, err = run(model_dir, bucket, capsys)
    # Then every file is skipped, and no object got a new version
    assert (code, err) == (0, [])
    count = len(before)
    assert f"{count} files verified (SHA-256 and size): 0 uploaded (0.0 MB), {count} skipped" in out[-1]
    assert versions(s3, bucket) == before


def test_given_a_file_changed_here_then_only_it_is_sent_again(s3, bucket, model_dir, capsys):
    assert run(model_dir, bucket, capsys)[0] == 0
    # Given the model card rewritten locally (a re-export), the same length or not
    card = model_dir / "README.md"
    card.write_text(card.read_text() + "\nThe run stopped at step 3 of 6.\n")
    # When uploaded again
    code, out, err = run(model_dir, bucket, capsys)
    # Then that file alone is sent, after a line saying why, and S3 holds its new bytes
    assert (code, err) == (0, [])
    (why,) = [line for line in out if "uploading it again" in line]
    assert why.startswith("README.md: ") and "bytes in S3" in why
    assert "1 uploaded" in out[-1] and "skipped" in out[-1]
    got = s3.get_object(Bucket=bucket, Key=f"{PREFIX}/README.md")["Body"].read()
    assert got == card.read_bytes()
    assert {k: n for k, n in versions(s3, bucket).items() if n > 1} == {f"{PREFIX}/README.md": 2}


def test_given_a_remote_object_tampered_with_then_it_is_found_and_replaced(s3, bucket, model_dir, capsys):
    assert run(model_dir, bucket, capsys)[0] == 0
    # Given config.json replaced in S3 by other bytes of the same length (sent with their own
    # valid SHA-256, so S3 accepted them)
    config = (model_dir / "config.json").read_bytes()
    tampered = config.replace(b'"hidden_size": 512', b'"hidden_size": 256')
    assert len(tampered) == len(config) and tampered != config
    s3.put_object(Bucket=bucket, Key=f"{PREFIX}/config.json", Body=tampered, ChecksumAlgorithm="SHA256")
    # When the folder is uploaded again
    code, out, err = run(model_dir, bucket, capsys)
    # Then the object's SHA-256 is found to differ, it is sent again, and S3 holds the file
    assert (code, err) == (0, [])
    (why,) = [line for line in out if "uploading it again" in line]
    assert why.startswith("config.json: SHA-256 ") and " in S3, " in why
    assert s3.get_object(Bucket=bucket, Key=f"{PREFIX}/config.json")["Body"].read() == config


def test_given_a_part_corrupted_on_the_way_then_the_upload_fails_naming_the_weights(
    s3_env, bucket, model_dir, capsys, monkeypatch
):
    # Given a client whose second part of the weights loses a byte's value after botocore hashed it
    # (moto stores the part and computes the object's composite checksum from what it holds)
    made = upload_model.s3_client

    def corrupting_client(name):
        client = made(name)

        def flip(request, **_):
            if b"partNumber=2" in request.url.encode() and WEIGHTS in request.url:
                body = request.body.read()
                request.body = bytes([body[0] ^ 1]) + body[1:]

        client.meta.events.register("before-send.s3.UploadPart", flip)
        return client

    monkeypatch.setattr(upload_model, "s3_client", corrupting_client)
    # When the folder is uploaded
    code, out, err = run(model_dir, bucket, capsys)
    # Then the verification finds the weights' checksum differs, in one line, exit 1
    assert code == 1
    assert len(err) == 1 and err[0].startswith(f"error: s3://{bucket}/{PREFIX}/{WEIGHTS}: SHA-256 ")
    assert "in S3, " in err[0] and not any("files verified" in line for line in out)


def test_given_a_file_changed_during_its_upload_then_the_check_names_it(
    s3_env, bucket, model_dir, capsys, monkeypatch
):
    # Given config.json rewritten (same length) after it was hashed and before it is sent: S3
    # receives, and verifies, other bytes than the ones hashed
    hashed = upload_model.s3_checksum

    def hash_then_change(path, size, part_size):
        digest = hashed(path, size, part_size)
        if path.name == "config.json":
            path.write_bytes(path.read_bytes().replace(b"512", b"256"))
        return digest

    monkeypatch.setattr(upload_model, "s3_checksum", hash_then_change)
    code, out, err = run(model_dir, bucket, capsys)
    assert code == 1
    assert len(err) == 1 and err[0].startswith(f"error: s3://{bucket}/{PREFIX}/config.json: SHA-256 ")


def test_given_objects_the_folder_no_longer_has_then_they_are_left_and_named(s3, bucket, model_dir, capsys):
    s3.put_object(Bucket=bucket, Key=f"{PREFIX}/pytorch_model.bin", Body=b"old", ChecksumAlgorithm="SHA256")
    code, out, err = run(model_dir, bucket, capsys)
    assert (code, err) == (0, [])
    assert (
        f"s3://{bucket}/{PREFIX}/: left in S3, not in the folder (older versions kept): {PREFIX}/pytorch_model.bin"
        in out
    )
    assert s3.get_object(Bucket=bucket, Key=f"{PREFIX}/pytorch_model.bin")["Body"].read() == b"old"


def test_given_no_such_bucket_then_one_line_and_exit_1(s3_env, model_dir, capsys):
    code, out, err = run(model_dir, "no-such-bucket-here", capsys)
    assert code == 1
    assert len(err) == 1 and err[0].startswith(f"error: s3://no-such-bucket-here/{PREFIX}/: NoSuchBucket: ")


@pytest.mark.parametrize(
    ("model_dir_name", "uri", "message"),
    [
        ("missing", "s3://bucket/p", "no such folder"),
        ("model", "s3://bucket", "give s3://BUCKET/PREFIX"),
        ("model", "bucket/p", "give s3://BUCKET/PREFIX"),
    ],
)
def test_given_a_bad_argument_then_one_line_and_exit_1(model_dir, capsys, model_dir_name, uri, message):
    code = upload_model.main([str(model_dir.parent / model_dir_name), uri])
    err = capsys.readouterr().err.splitlines()
    assert code == 1 and len(err) == 1 and message in err[0]


@pytest.fixture()
def enforced_iam(moto_url, s3_env, bucket, monkeypatch):
    """Credentials of an IAM user allowed to list the bucket and read the prefix but not to put
    (grant_model_write without s3:PutObject), with moto's IAM checks on for every request."""
    iam = boto3.client("iam", region_name=REGION, endpoint_url=moto_url)
    user = f"uploader-{uuid.uuid4().hex[:8]}"
    iam.create_user(UserName=user)
    # IAM's action names (what grant_model_write gives) and the operation names moto 5.2.6 checks
    # instead (moto/core/responses.py ``_get_action``: the botocore operation's name)
    listing, reading = ["s3:ListBucket", "s3:ListObjectsV2"], ["s3:GetObject", "s3:HeadObject"]
    policy = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Action": listing, "Resource": f"arn:aws:s3:::{bucket}"},
            {"Effect": "Allow", "Action": reading, "Resource": f"arn:aws:s3:::{bucket}/{PREFIX}/*"},
        ],
    }
    iam.put_user_policy(UserName=user, PolicyName="read-only", PolicyDocument=json.dumps(policy))
    key = iam.create_access_key(UserName=user)["AccessKey"]
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key["AccessKeyId"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", key["SecretAccessKey"])

    def auth(count: str) -> None:  # moto's INITIAL_NO_AUTH_ACTION_COUNT (moto_api reset_auth_response)
        # text/plain: flask reads a form-encoded body as a form, and moto reads request.data
        headers = {"Content-Type": "text/plain"}
        urllib.request.urlopen(
            urllib.request.Request(f"{moto_url}/moto-api/reset-auth", count.encode(), headers)
        )

    auth("0")
    yield
    auth("inf")


def test_given_a_role_without_put_then_access_denied_in_one_line_and_exit_1(
    enforced_iam, bucket, model_dir, capsys
):
    code, out, err = run(model_dir, bucket, capsys)
    # The listing and the HeadObject calls pass; the first PutObject of the upload is refused
    assert code == 1 and len(err) == 1
    assert err[0].startswith(f"error: s3://{bucket}/{PREFIX}/") and err[0].endswith(
        ": AccessDenied: Access Denied (the pod's role may write only under its own prefix: grant_model_write)"
    )
    assert err[0].split(": AccessDenied")[0].removeprefix(f"error: s3://{bucket}/{PREFIX}/") in {
        p.name for p in model_dir.iterdir()
    }


def test_given_no_region_in_the_environment_then_the_bucket_s_is_used(s3_env, monkeypatch):
    # Given a bucket in eu-west-1 and neither AWS_REGION nor AWS_DEFAULT_REGION
    name = f"models-{uuid.uuid4().hex[:12]}"
    eu = boto3.client("s3", region_name="eu-west-1")
    eu.create_bucket(Bucket=name, CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
    monkeypatch.delenv("AWS_REGION")
    # Then the client is made in the bucket's region, read from HeadBucket
    assert upload_model.s3_client(name).meta.region_name == "eu-west-1"
    # And a region in the environment wins (AWS_REGION before AWS_DEFAULT_REGION)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "ap-south-1")
    assert upload_model.s3_client(name).meta.region_name == "ap-south-1"
    monkeypatch.setenv("AWS_REGION", "us-east-2")
    assert upload_model.s3_client(name).meta.region_name == "us-east-2"


def test_given_the_client_then_every_call_is_bounded():
    config = upload_model.client_config("us-west-2")
    assert (config.connect_timeout, config.read_timeout) == (10, 60)
    assert config.retries == {"max_attempts": 5, "mode": "standard"}


def test_given_sizes_then_the_default_deadline_is_twice_100_mb_per_s_and_at_least_5_minutes():
    assert upload_model.default_deadline_s(1_340_000_000) == 300
    assert upload_model.default_deadline_s(20 * 10**9) == 400
    assert upload_model.default_deadline_s(20 * 10**9 + 1) == 401


@pytest.fixture()
def stalling_s3(s3_env, bucket):
    """moto's S3 behind a link that holds every object PUT (PutObject, UploadPart) until the test
    ends: the bucket is there, listing and HeadObject answer, the upload never completes."""
    app = DomainDispatcherApplication(create_backend_app)
    release = threading.Event()

    def held(environ, start_response):
        if environ["REQUEST_METHOD"] == "PUT" and environ["PATH_INFO"].strip("/").count("/") >= 1:
            release.wait(120)
        return app(environ, start_response)

    server = make_server("127.0.0.1", 0, held, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    release.set()
    server.shutdown()


def test_given_an_upload_past_its_deadline_then_one_line_exit_1_and_no_wait_for_the_sockets(
    stalling_s3, bucket, model_dir
):
    # When the CLI runs with a 3 s deadline while S3 holds every PUT (its read timeout is 60 s)
    env = {**os.environ, "AWS_ENDPOINT_URL_S3": stalling_s3}
    t0 = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "training.trainer.upload_model",
            str(model_dir),
            uri_of(bucket),
            "--deadline_s",
            "3",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    took = time.monotonic() - t0
    # Then it ends with exit 1 and one line, within the deadline, the cancel's grace and the start
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines() == [
        f"error: s3://{bucket}/{PREFIX}/: not uploaded and verified within --deadline_s 3; the transfers are cancelled"
    ]
    assert took < 3 + upload_model.CANCEL_GRACE_S + 20


def test_given_moto_then_a_put_checksum_is_stored_unverified_unlike_s3(s3, bucket):
    # S3 answers 400 BadDigest to a PutObject whose x-amz-checksum-sha256 is not its body's
    # (Amazon S3 API Reference, PutObject, "x-amz-checksum-sha256"); moto 5.2.6 stores it.
    wrong = base64.b64encode(hashlib.sha256(b"other").digest()).decode()
    # botocore sends both headers as it does for the upload: the algorithm and the value
    s3.put_object(Bucket=bucket, Key="k", Body=b"body", ChecksumAlgorithm="SHA256", ChecksumSHA256=wrong)
    assert s3.head_object(Bucket=bucket, Key="k", ChecksumMode="ENABLED")["ChecksumSHA256"] == wrong


def test_given_an_s3_uri_then_its_bucket_and_prefix():
    assert S3Uri.parse("s3://models/run/model/") == S3Uri("models", "run/model")
    assert str(S3Uri("models", "run/model")) == "s3://models/run/model/"
    with pytest.raises(UploadError, match="give s3://BUCKET/PREFIX"):
        S3Uri.parse("s3://models/a//b")
