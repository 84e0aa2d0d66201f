"""Pre-flight: bad inputs fail before the first step, with one line naming the file and the fix."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import h5py
import numpy as np
import pytest

from tests.training.conftest import PYTHON, REPO, child_env
from tests.training.trainer.test_pretrain import args_for
from training.dataprep.shard_format import ShardEntry, read_manifest, sha256_of, write_manifest
from training.trainer import checkpoint as ckpt


def pretrain(shards, out: Path, *extra: str, data_dir: Path | None = None) -> subprocess.CompletedProcess:
    args = args_for(shards, out, "--max_steps", "2", *extra)
    if data_dir is not None:
        args[args.index("--data_dir") + 1] = str(data_dir)
    return subprocess.run(
        [PYTHON, "-m", "training.trainer.pretrain", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=child_env(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0"),
        timeout=300,
    )


def assert_one_line_error(proc: subprocess.CompletedProcess, pattern: str) -> str:
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [x for x in proc.stderr.splitlines() if x.startswith("error")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert re.search(pattern, errors[0]), errors[0]
    return errors[0]


def data_with_last(shards, tmp_path: Path, make_bad) -> Path:
    """The good shards plus one bad shard that sorts last (reached late in a real run)."""
    data = tmp_path / "data"
    shutil.copytree(shards.dir, data)
    bad = data / "zz_training_99.hdf5"
    make_bad(bad, shards.files[0])
    # In the set's manifest, as a damaged shard of a published set would be.
    manifest = read_manifest(data)
    entry = ShardEntry(bad.name, manifest.shards[0].samples, bad.stat().st_size, sha256_of(bad))
    write_manifest(data, replace(manifest, shards=(*manifest.shards, entry)))
    return data


def wrong_dtype(dst: Path, good: Path) -> None:
    shutil.copy(good, dst)
    with h5py.File(dst, "r+") as f:
        ids = f["masked_lm_ids"][()]
        del f["masked_lm_ids"]
        f.create_dataset("masked_lm_ids", data=ids.astype(np.int64))


def missing_key(dst: Path, good: Path) -> None:
    shutil.copy(good, dst)
    with h5py.File(dst, "r+") as f:
        del f["next_sentence_labels"]


def not_hdf5(dst: Path, good: Path) -> None:
    dst.write_bytes(good.read_bytes()[:2000])  # a copy cut short


@pytest.mark.parametrize(
    ("make_bad", "pattern"),
    [
        (wrong_dtype, r"zz_training_99.hdf5: dataset 'masked_lm_ids' has dtype int64, expected int32"),
        (missing_key, r"zz_training_99.hdf5: missing dataset 'next_sentence_labels'"),
        (not_hdf5, r"zz_training_99.hdf5: not a readable HDF5 file \(.*\); re-create or remove it"),
    ],
)
def test_given_a_bad_last_shard_then_one_line_error_before_any_step(shards, tmp_path, make_bad, pattern):
    data = data_with_last(shards, tmp_path, make_bad)
    out = tmp_path / "out"
    proc = pretrain(shards, out, data_dir=data)
    line = assert_one_line_error(proc, pattern)
    assert line.startswith("error [rank 0]: ") and str(data) in line
    # Nothing trained, nothing written but the (empty) output directories.
    assert not (out / "train_log.jsonl").exists() and not (out / "metrics.json").exists()
    assert list((out / "checkpoints").iterdir()) == []
    assert "step 1 |" not in proc.stdout


def test_given_debug_then_the_traceback_is_shown(shards, tmp_path):
    data = data_with_last(shards, tmp_path, missing_key)
    proc = pretrain(shards, tmp_path / "out", "--debug", data_dir=data)
    assert proc.returncode != 0 and "Traceback" in proc.stderr and "PreflightError" in proc.stderr


def test_given_no_shards_then_error_names_data_dir(shards, tmp_path):
    proc = pretrain(shards, tmp_path / "out", data_dir=tmp_path)
    assert_one_line_error(
        proc, rf"--data_dir {tmp_path}: no manifest.json; a shard set is used only with its manifest"
    )


def test_given_shards_without_their_manifest_then_one_line_error_says_how_to_make_one(shards, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(shards.dir, data)
    (data / "manifest.json").unlink()
    proc = pretrain(shards, tmp_path / "out", data_dir=data)
    line = assert_one_line_error(
        proc, rf"--data_dir {data}: \d+ \*_training_\*.hdf5 file\(s\) but no manifest.json"
    )
    assert f"python -m training.dataprep.shard_format write {data}" in line


@pytest.fixture
def read_only_dir(tmp_path):
    """A directory no one may write to, root included (immutable when we are root)."""
    path = tmp_path / "read-only"
    path.mkdir()
    if subprocess.run(["id", "-u"], capture_output=True, text=True).stdout.strip() == "0":
        subprocess.run(["chattr", "+i", str(path)], check=True)
        yield path
        subprocess.run(["chattr", "-i", str(path)], check=True)
    else:
        path.chmod(0o555)
        yield path
        path.chmod(0o755)


def test_given_read_only_output_dir_then_error_names_it_before_any_step(shards, read_only_dir):
    proc = pretrain(shards, read_only_dir)
    assert_one_line_error(
        proc,
        rf"--output_dir {read_only_dir}: not writable \(\w.*\); choose a "
        "writable directory or fix its permissions",
    )
    assert list(read_only_dir.iterdir()) == []


def test_given_every_checkpoint_damaged_then_error_before_any_step_and_nothing_deleted(shards, tmp_path):
    out = tmp_path / "out"
    assert pretrain(shards, out, "--checkpoint_every", "1").returncode == 0
    for step in (1, 2):
        (out / "checkpoints" / ckpt.step_dir_name(step) / "state.pt").write_bytes(b"")
    log_before = (out / "train_log.jsonl").read_text()
    proc = pretrain(shards, out, "--max_steps", "4", "--checkpoint_every", "1")
    assert_one_line_error(
        proc, r"none of the 2 checkpoints is usable \(newest: .*step_00000002/state.pt: 0 bytes"
    )
    assert (
        "checkpoint step_00000002 skipped" in proc.stderr
        and "checkpoint step_00000001 skipped" in proc.stderr
    )
    assert [s for s, _ in ckpt.step_dirs(out / "checkpoints")] == [1, 2]
    assert (out / "train_log.jsonl").read_text() == log_before  # no step was run
    assert json.loads((out / "metrics.json").read_text())["end_step"] == 2


def damaged_data(dst: Path, good: Path) -> None:
    """Header intact, compressed data damaged: only reading the data can tell."""
    with h5py.File(good, "r") as f:
        chunk = f["input_ids"].id.get_chunk_info(0)  # where the first gzip chunk lies in the file
    data = bytearray(good.read_bytes())
    start = chunk.byte_offset + chunk.size // 2
    for i in range(start, start + 64):
        data[i] ^= 0xFF
    dst.write_bytes(bytes(data))


@pytest.mark.parametrize("workers", ["0", "1"])
def test_given_shard_data_damaged_behind_a_good_header_then_one_line_error_when_read(
    shards, tmp_path, workers
):
    # Pre-flight reads headers only (a full read of every shard would take minutes on the real
    # dataset); the damage shows when the shard is loaded, and is reported in one line.
    data = tmp_path / "data"
    data.mkdir()
    damaged_data(data / "a_training_0.hdf5", shards.files[0])
    # A single HDF5 file as --data_dir: a damaged file cannot come with a valid manifest.
    proc = pretrain(shards, tmp_path / "out", "--num_workers", workers, data_dir=data / "a_training_0.hdf5")
    assert_one_line_error(proc, rf"{data}/a_training_0.hdf5: data unreadable \(.+\); re-create or remove it")
