"""Tests of training.dataprep.shard_format: manifests, verification, staging and publishing of a set."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.training.conftest import run_module
from tests.training.trainer.test_data import make_shards
from training.dataprep.shard_format import (
    ManifestError,
    ShardSetError,
    manifest_for_existing,
    open_staging,
    publish,
    read_manifest,
    verify_checksums,
    write_manifest,
)
from trainium_job.paths import MANIFEST_NAME


def shard_format_cli(*args: str) -> subprocess.CompletedProcess:
    return run_module("training.dataprep.shard_format", *args, timeout=60)


def test_given_foreign_shards_when_a_manifest_is_made_then_it_records_counts_shapes_and_checksums(tmp_path):
    make_shards(tmp_path, 3, 5)
    first = manifest_for_existing(tmp_path, source="s3://bucket/set.tar")
    write_manifest(tmp_path, first)
    body = json.loads((tmp_path / MANIFEST_NAME).read_text())
    assert body["count"] == 3 and body["samples"] == 15
    assert (body["seq_len"], body["max_pred_len"], body["seed"]) == (128, 20, None)
    assert body["settings"] == {"source": "s3://bucket/set.tar"}
    assert [s["name"] for s in body["shards"]] == [f"x_training_{i}.hdf5" for i in range(3)]
    assert all(len(s["sha256"]) == 64 and s["samples"] == 5 for s in body["shards"])
    assert read_manifest(tmp_path) == first
    # No time stamps or absolute paths: the same shards always give the same manifest.
    assert manifest_for_existing(tmp_path, source="s3://bucket/set.tar").to_json() == first.to_json()


def test_given_a_changed_shard_when_verified_then_the_file_is_named(tmp_path):
    paths = make_shards(tmp_path, 2, 4)
    write_manifest(tmp_path, manifest_for_existing(tmp_path))
    assert verify_checksums(tmp_path).samples == 8
    data = bytearray(paths[1].read_bytes())
    data[-1] ^= 0xFF  # same size, other content: only the checksum can tell
    paths[1].write_bytes(bytes(data))
    read_manifest(tmp_path)  # sizes still match
    with pytest.raises(ManifestError, match=r"x_training_1\.hdf5: SHA-256 \w+ differs from the manifest's"):
        verify_checksums(tmp_path)


def test_given_a_broken_manifest_then_the_error_says_how_to_remake_it(tmp_path):
    make_shards(tmp_path, 1, 4)
    (tmp_path / MANIFEST_NAME).write_text('{"format": "something-else"}')
    with pytest.raises(ManifestError, match=r"not a bert-pretraining-hdf5 v1 manifest .* remake it with"):
        read_manifest(tmp_path)


def test_given_the_cli_then_write_and_verify_work_and_a_missing_pattern_is_one_line(tmp_path):
    make_shards(tmp_path, 2, 3)
    (tmp_path / "x_training_1.hdf5").rename(tmp_path / "reference_output.hdf5")
    done = shard_format_cli("write", str(tmp_path), "--pattern", "*.hdf5")
    assert done.returncode == 0, done.stderr
    assert "2 shards, 6 samples" in done.stdout
    assert shard_format_cli("verify", str(tmp_path)).returncode == 0
    failed = shard_format_cli("write", str(tmp_path), "--pattern", "*.h5")
    assert failed.returncode == 1
    assert failed.stderr.splitlines() == [
        f"python -m training.dataprep.shard_format: error: {tmp_path}: no files match "
        "'*.h5'; give --pattern for other shard names"
    ]


# --- staging and publishing ----------------------------------------------------------------


def _complete_set(staging: Path, shards: int) -> None:
    make_shards(staging, shards, 2)
    write_manifest(staging, manifest_for_existing(staging))


def test_given_a_new_directory_when_published_then_the_set_appears_whole_and_staging_is_gone(tmp_path):
    out = tmp_path / "sets" / "wiki"
    staging = open_staging(out, overwrite=False)
    assert staging.parent == out.parent and staging.name.startswith(".wiki.staging-")
    _complete_set(staging, 2)
    assert not out.exists()  # nothing visible before publishing
    publish(staging, out)
    assert sorted(p.name for p in (tmp_path / "sets").iterdir()) == ["wiki"]
    assert len(read_manifest(out).shards) == 2


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o755), (0o027, 0o750), (0o077, 0o700)])
def test_given_a_umask_when_published_then_the_set_has_the_mode_a_new_folder_would_not_the_stagings_0700(
    tmp_path, umask, mode
):
    # Readers running as another user (the training pods) must be able to open the set.
    out = tmp_path / "wiki"
    previous = os.umask(umask)
    try:
        staging = open_staging(out, overwrite=False)
        assert staging.stat().st_mode & 0o777 == 0o700  # mkdtemp's
        _complete_set(staging, 2)
        publish(staging, out)
    finally:
        os.umask(previous)
    assert out.stat().st_mode & 0o777 == mode
    assert all(p.stat().st_mode & 0o777 == mode & 0o666 for p in out.iterdir())


def test_given_an_old_set_when_overwritten_then_only_the_new_one_remains(tmp_path):
    out = tmp_path / "wiki"
    first = open_staging(out, overwrite=False)
    _complete_set(first, 3)
    publish(first, out)
    with pytest.raises(ShardSetError, match=r"already holds 3 shard\(s\) .*pass --overwrite"):
        open_staging(out, overwrite=False)
    second = open_staging(out, overwrite=True)
    _complete_set(second, 1)
    publish(second, out)
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST_NAME, "x_training_0.hdf5"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wiki"]  # the replaced set is deleted


def test_given_a_set_without_manifest_then_it_is_not_published(tmp_path):
    staging = open_staging(tmp_path / "wiki", overwrite=False)
    make_shards(staging, 1, 2)
    with pytest.raises(ShardSetError, match="only a complete set is published"):
        publish(staging, tmp_path / "wiki")
    assert not (tmp_path / "wiki").exists()


@pytest.mark.parametrize(
    "setup, message",
    [
        (
            lambda d: (d / "notes.txt").write_text("mine"),
            r"holds other files \(notes\.txt\); .*new or empty directory",
        ),
        (lambda d: None, None),  # an empty directory is fine
    ],
)
def test_given_an_existing_directory_then_only_an_empty_one_or_a_set_is_taken(tmp_path, setup, message):
    out = tmp_path / "out"
    out.mkdir()
    setup(out)
    if message is None:
        staging = open_staging(out, overwrite=False)
        _complete_set(staging, 1)
        publish(staging, out)
        assert (out / MANIFEST_NAME).is_file()
    else:
        with pytest.raises(ShardSetError, match=message):
            open_staging(out, overwrite=True)
        assert [p.name for p in out.iterdir()] == ["notes.txt"]


def test_given_an_unwritable_place_then_one_line_names_it():
    # /sys refuses new entries even to root, so this holds whoever runs the tests.
    with pytest.raises(
        ShardSetError, match=r"^--output_dir /sys/shards: cannot write in /sys \(.+\); choose a directory"
    ):
        open_staging("/sys/shards", overwrite=False)
