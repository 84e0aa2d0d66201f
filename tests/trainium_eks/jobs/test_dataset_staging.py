"""The staging Job's script, run for real with bash on local directories.

``/data`` (the FSx mount) becomes a temporary directory, and ``aws`` a stand-in on PATH that
streams a local tar (or copies a local folder): everything else is the script as applied.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from tests.rehearsal.cluster import PID1, launch, namespaces_available
from tests.training.trainer.test_data import make_shards
from training.dataprep.shard_format import read_manifest, verify_checksums
from trainium_eks.jobs.dataset_staging import staging_script
from trainium_job.paths import job_paths

REPO = Path(__file__).resolve().parents[3]
PATHS = job_paths(dataset_name="wiki", cache_set="c", run_name="r")
FAKE_AWS = """#!/bin/bash
# aws s3 cp --no-sign-request --only-show-errors SRC -   |   aws s3 sync ... SRC DEST
set -eu
[ "$2" = cp ] && exec cat "$FAKE_S3/${5#s3://}"
cp -r "$FAKE_S3/${5#s3://}/." "$6"
"""


def run_staging(source: str, root: Path) -> subprocess.CompletedProcess:
    script = (
        staging_script(source, PATHS).replace("/data/", f"{root}/data/").replace("=/data/", f"={root}/data/")
    )
    bin_dir = root / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "aws").write_text(FAKE_AWS)
    (bin_dir / "aws").chmod(0o755)
    # The test environment's python (with h5py) plays the training image's.
    path = f"{bin_dir}:{Path(sys.executable).parent}:{os.environ['PATH']}"
    env = {**os.environ, "PATH": path, "FAKE_S3": str(root / "s3"), "PYTHONPATH": str(REPO)}
    return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture()
def s3(tmp_path) -> Path:
    shards = make_shards(tmp_path / "made", 3, 4)
    bucket = tmp_path / "s3" / "bucket"
    (bucket / "prefix").mkdir(parents=True)
    with tarfile.open(bucket / "set.tar", "w") as archive:
        for path in shards:
            archive.add(path, arcname=f"hdf5_seq128/{path.name}")
        info = tarfile.TarInfo("hdf5_seq128/README")
        archive.addfile(info, io.BytesIO(b""))
    for path in shards:
        (bucket / "prefix" / path.name).write_bytes(path.read_bytes())
    (tmp_path / "data" / "corpus-shards").mkdir(parents=True)
    for path in shards:
        (tmp_path / "data" / "corpus-shards" / path.name).write_bytes(path.read_bytes())
    return tmp_path


@pytest.mark.parametrize("source", ["s3://bucket/set.tar", "s3://bucket/prefix/", "fsx:/corpus-shards"])
def test_given_a_source_when_staged_then_a_verified_set_with_manifest_and_marker_and_nothing_else(s3, source):
    done = run_staging(source, s3)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "staged 3 shards"
    data_dir = s3 / "data" / "datasets" / "wiki"
    manifest = verify_checksums(data_dir)
    assert (manifest.samples, manifest.seq_len, manifest.settings) == (12, 128, {"source": source})
    assert sorted(p.name for p in data_dir.iterdir()) == [
        ".staged",
        "manifest.json",
        *(f"x_training_{i}.hdf5" for i in range(3)),
    ]
    assert [p.name for p in (s3 / "data" / "datasets").iterdir()] == ["wiki"]  # no staging leftovers
    again = run_staging(source, s3)
    assert again.returncode == 0 and again.stdout.strip() == "dataset already staged"


def test_given_a_partial_earlier_attempt_when_staged_then_it_is_replaced(s3):
    leftover = s3 / "data" / "datasets" / "wiki"
    leftover.mkdir(parents=True)
    (leftover / "x_training_0.hdf5").write_bytes(b"half a shard")
    done = run_staging("s3://bucket/set.tar", s3)
    assert done.returncode == 0, done.stderr
    assert len(read_manifest(leftover).shards) == 3


def test_given_no_shards_at_the_source_then_the_job_fails_without_marker(s3):
    (s3 / "data" / "empty").mkdir()
    done = run_staging("fsx:/empty", s3)
    assert done.returncode == 1
    assert "no *_training_*.hdf5 shards found" in done.stderr
    assert not (s3 / "data" / "datasets" / "wiki").exists()


@pytest.mark.skipif(namespaces_available() is not None, reason=f"{namespaces_available()}")
def test_given_a_download_in_flight_when_sigterm_then_the_job_exits_143_and_leaves_nothing_on_fsx(s3):
    # As the container runs it: PID 1 of its own PID namespace, which gets no signal it has no
    # handler for. bash has one for SIGTERM because the script sets an EXIT trap (the worker
    # script had none: trainium_job.pid1). The download stalls half-way, as over a broken link.
    partial = s3 / "bin" / "aws"
    partial.parent.mkdir(exist_ok=True)
    partial.write_text(f'#!/bin/sh\nhead -c 30000 "{s3}/s3/bucket/set.tar"\nexec sleep 300\n')
    partial.chmod(0o755)
    script = staging_script("s3://bucket/set.tar", PATHS).replace("/data/", f"{s3}/data/")
    env = [f"PATH={partial.parent}:{Path(sys.executable).parent}:{os.environ['PATH']}", f"PYTHONPATH={REPO}"]
    pod = launch([*PID1, "env", *env, "bash", "-c", script], s3 / "log.txt", name="stage", hostname="stage")
    datasets = s3 / "data" / "datasets"
    try:
        deadline = time.monotonic() + 30
        while not any(datasets.glob(".staging-*/download/*")):  # the tar has begun to unpack
            assert pod.running and time.monotonic() < deadline, pod.output()
            time.sleep(0.05)
        pod.terminate()
        code = pod.wait(10)  # the Job's pod has Kubernetes' default 30 s grace period
    finally:
        pod.kill()
    assert code == 143, pod.output()
    assert list(datasets.iterdir()) == []  # the EXIT trap removed the partial download
