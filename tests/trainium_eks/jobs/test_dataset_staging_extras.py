"""What the staging Job does besides the shards: the vocabulary beside them, and phase 2's start.

Run for real with bash as tests/trainium_eks/jobs/test_dataset_staging.py runs the script: ``/data``
is a temporary directory, ``aws`` a stand-in on PATH that copies a local file. The ``https://``
vocabulary is served by a local HTTP server (the one change to the script: its scheme), and a
start checkpoint is written in the Neuron tutorial's format and imported by the real
``training.trainer.import_neuron``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import served_folder
from tests.training.trainer.test_data import make_shards
from tests.training.trainer.test_import_neuron import tutorial_checkpoint
from trainium_eks.jobs.dataset_staging import (
    CHECKPOINTS_DIR,
    NEURON_PHASE1_CHECKPOINT,
    check_start_source,
    check_vocab_source,
    staging_script,
    start_path,
)
from trainium_job.errors import ConfigError
from trainium_job.paths import job_paths

REPO = Path(__file__).resolve().parents[3]
PATHS = job_paths(dataset_name="wiki512", cache_set="c", run_name="r")
#: aws s3 cp|sync --no-sign-request --only-show-errors SRC DEST, on local folders.
FAKE_AWS = """#!/bin/bash
set -eu
src="$FAKE_S3/${5#s3://}"
if [ "$2" = sync ]; then exec cp -r "$src/." "$6"; fi
[ -f "$src" ] || { echo "fatal error: An error occurred (404) when calling the HeadObject operation" >&2; exit 1; }
exec cp "$src" "$6"
"""
VOCAB = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\n"


def run(script: str, root: Path) -> subprocess.CompletedProcess[str]:
    script = script.replace("/data/", f"{root}/data/").replace("=/data/", f"={root}/data/")
    bin_dir = root / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "aws").write_text(FAKE_AWS)
    (bin_dir / "aws").chmod(0o755)
    path = f"{bin_dir}:{Path(sys.executable).parent}:{os.environ['PATH']}"
    env = {**os.environ, "PATH": path, "FAKE_S3": str(root / "s3"), "PYTHONPATH": str(REPO)}
    return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture()
def root(tmp_path) -> Path:
    """An FSx with phase 2's shards staged by an earlier deploy, and an S3 bucket."""
    data_dir = tmp_path / "data" / "datasets" / "wiki512"
    data_dir.mkdir(parents=True)
    (data_dir / ".staged").write_text("3 shards\n")
    (tmp_path / "s3" / "bucket").mkdir(parents=True)
    (tmp_path / "s3" / "bucket" / "vocab.txt").write_text(VOCAB)
    return tmp_path


@pytest.fixture()
def web(tmp_path) -> Iterator[str]:
    """http://127.0.0.1:<port>/ serving ``tmp_path/web``."""
    with served_folder(tmp_path / "web") as url:
        yield url


@pytest.mark.parametrize("source", ["s3://bucket/vocab.txt", "fsx:/dataset/vocab.txt", "https"])
def test_given_staged_shards_when_a_vocab_source_then_it_lands_beside_them_once(root, web, source):
    (root / "data" / "dataset").mkdir()
    (root / "data" / "dataset" / "vocab.txt").write_text(VOCAB)
    (root / "web" / "rev").mkdir()
    (root / "web" / "rev" / "vocab.txt").write_text(VOCAB)
    given = "https://example.org/rev/vocab.txt" if source == "https" else source
    script = staging_script("s3://bucket/set.tar", PATHS, vocab=given)
    if source == "https":
        script = script.replace("https://example.org/", web)
    done = run(script, root)
    assert done.returncode == 0, done.stderr
    assert (root / "data" / "datasets" / "wiki512" / "vocab.txt").read_text() == VOCAB
    assert done.stdout.strip() == "dataset already staged"  # the shards were not fetched again
    (root / "s3" / "bucket" / "vocab.txt").unlink()
    again = run(script, root)
    assert again.returncode == 0, again.stderr  # present: not fetched again


def test_given_a_file_that_is_no_bert_vocab_then_the_job_fails_naming_the_source(root):
    (root / "s3" / "bucket" / "vocab.txt").write_text("<html>Not Found</html>\n")
    done = run(staging_script("s3://bucket/set.tar", PATHS, vocab="s3://bucket/vocab.txt"), root)
    assert done.returncode == 1
    assert "vocab_source s3://bucket/vocab.txt: not a BERT vocab.txt" in done.stderr
    assert not (root / "data" / "datasets" / "wiki512" / "vocab.txt").exists()


def test_given_a_neuron_checkpoint_when_staged_then_imported_where_phase_2_starts_and_marked(tmp_path):
    # Given: phase 2's shards not staged yet, and the tutorial's file in the bucket
    shards = tmp_path / "s3" / "bucket" / "shards"
    shards.mkdir(parents=True)
    made = make_shards(shards, 2, 4)
    vocab_size = 64
    src = tmp_path / "s3" / "neuron" / "ckpts" / "ckpt_28125.pt"
    src.parent.mkdir(parents=True)
    tutorial_checkpoint(src, vocab_size)
    start = "s3://neuron/ckpts/ckpt_28125.pt"
    # When
    done = run(staging_script("s3://bucket/shards/", PATHS, start=start, model="tiny"), tmp_path)
    # Then: imported under /data/checkpoints, the step from the file's name, and only then the marker
    assert done.returncode == 0, done.stderr
    dest = Path(f"{tmp_path}{start_path(start)}")
    assert dest.parent == Path(f"{tmp_path}{CHECKPOINTS_DIR}")
    assert [p.name for p in (dest / "checkpoints").iterdir()] == ["step_00028125"]
    assert (dest / ".imported").is_file()
    assert (tmp_path / "data" / "datasets" / "wiki512" / ".staged").read_text() == f"{len(made)} shards\n"
    assert not list(dest.parent.glob("*.pt")) and not list(
        (tmp_path / "data" / "datasets").glob(".staging-*")
    )


def test_given_a_missing_start_then_the_job_fails_with_the_path_and_writes_no_marker(tmp_path):
    shards = tmp_path / "s3" / "bucket" / "shards"
    shards.mkdir(parents=True)
    make_shards(shards, 1, 4)
    for start, said in [
        ("s3://neuron/none/ckpt_1.pt", "phase2_init_from s3://neuron/none/ckpt_1.pt: could not download it"),
        ("fsx:/runs/phase1", "phase2_init_from fsx:/runs/phase1: no directory /data/runs/phase1 on FSx"),
    ]:
        done = run(staging_script("s3://bucket/shards/", PATHS, start=start), tmp_path)
        assert done.returncode == 1 and said in done.stderr.replace(str(tmp_path), ""), done.stderr
        assert not (tmp_path / "data" / "datasets" / "wiki512" / ".staged").exists()


def test_given_start_sources_then_a_tutorial_file_or_an_fsx_directory_and_nothing_else():
    for good in (NEURON_PHASE1_CHECKPOINT, "s3://my-bucket/bert/ckpt_100.pt", "fsx:/runs/bert-large-phase1"):
        check_start_source("phase2_init_from", good)
    assert start_path("fsx:/runs/p1") == "/data/runs/p1"
    assert start_path(NEURON_PHASE1_CHECKPOINT) == f"{CHECKPOINTS_DIR}/dp_bert_large_hf_pretrain-ckpt_28125"
    for bad in (
        "s3://my-bucket/bert/model.bin",
        "s3://my-bucket/bert/",
        "/runs/p1",
        "fsx:/runs/../x",
        "gs://b/ckpt_1.pt",
    ):
        with pytest.raises(ConfigError, match=r"config 'phase2_init_from' = .*ckpt_<step>\.pt"):
            check_start_source("phase2_init_from", bad)


def test_given_vocab_sources_then_https_s3_object_or_fsx_file():
    for good in (
        "",
        "https://huggingface.co/org/m/resolve/abc/vocab.txt",
        "s3://b-1/v.txt",
        "fsx:/dataset/v.txt",
    ):
        check_vocab_source("vocab_source", good)
    for bad in ("http://x.org/vocab.txt", "s3://bucket/prefix/", "vocab.txt", "fsx:/../etc/passwd"):
        with pytest.raises(ConfigError, match="config 'vocab_source'"):
            check_vocab_source("vocab_source", bad)
