"""The Indexed-Job workers, run as separate local processes with the Job's environment.

Each "pod" is ``python -m training.dataprep.prepare_indexed`` with ``JOB_COMPLETION_INDEX`` set, as
Kubernetes sets it; the shared work folder plays FSx. Their shard set must equal, byte for byte,
the one ``python -m training.dataprep.prepare_data`` makes on one machine with the same seed and settings.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from training.dataprep.shard_format import current_umask
from training.dataprep.synthetic import build_vocab, prepare_data_command, write_corpus

REPO = Path(__file__).resolve().parents[3]
SETTINGS = [
    "--dupe_factor",
    "2",
    "--seed",
    "11",
    "--chunk_mb",
    "0.02",
    "--samples_per_shard",
    "300",
    "--output_prefix",
    "own",
    "--no_progress",
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, Path, Path]:
    """A two-file corpus folder, its vocab, and the single-machine shard set made from them."""
    root = tmp_path_factory.mktemp("indexed")
    folder = root / "corpus"
    folder.mkdir()
    first = write_corpus(folder / "a.txt", n_docs=150, seed=21)
    write_corpus(folder / "b.txt", n_docs=90, seed=22)
    vocab = build_vocab([first], root / "vocab.txt", vocab_size=400)
    single = root / "single"
    done = subprocess.run(
        [*prepare_data_command(input=folder, vocab=vocab, output_dir=single, num_workers=1), *SETTINGS],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return folder, vocab, single


def start_pod(index: int, completions: int, corpus_dir: Path, vocab: Path, root: Path, workers: int = 1):
    args = [
        "--input",
        str(corpus_dir),
        "--vocab",
        str(vocab),
        "--output_dir",
        str(root / "datasets" / "own"),
        "--completions",
        str(completions),
        "--work_dir",
        str(root / "datasets" / ".own-work"),
        "--marker",
        str(root / "datasets" / "own.prepared"),
        "--num_workers",
        str(workers),
        "--poll_seconds",
        "0.1",
        "--barrier_timeout",
        "120",
        *SETTINGS,
    ]
    env = {**os.environ, "JOB_COMPLETION_INDEX": str(index)}
    return subprocess.Popen(
        [sys.executable, "-m", "training.dataprep.prepare_indexed", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_job(completions: int, corpus_dir: Path, vocab: Path, root: Path, workers: int = 1) -> list:
    pods = [start_pod(i, completions, corpus_dir, vocab, root, workers) for i in range(completions)]
    outputs = [pod.communicate(timeout=300) for pod in pods]
    return [(pod.returncode, *output) for pod, output in zip(pods, outputs, strict=True)]


def same_bytes(a: Path, b: Path) -> None:
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir())
    assert len([n for n in names if n.endswith(".hdf5")]) >= 3
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


@pytest.mark.parametrize("completions, workers", [(3, 1), (2, 2)])
def test_given_pods_on_another_mount_then_the_set_is_bit_identical_to_the_single_machine_one(
    corpus, tmp_path, completions, workers
):
    folder, vocab, single = corpus
    mounted = tmp_path / "fsx" / "dataset" / "corpus"  # the same files where FSx would show them
    shutil.copytree(folder, mounted)
    results = run_job(completions, mounted, vocab, tmp_path / "fsx", workers)
    for index, (returncode, _, stderr) in enumerate(results):
        assert (returncode, stderr) == (0, ""), index
    assert results[0][1].splitlines()[-1].startswith("pod 0: published ")
    assert all(out.splitlines()[-1].startswith(f"pod {i}: ") for i, (_, out, _) in enumerate(results))
    datasets = tmp_path / "fsx" / "datasets"
    same_bytes(single, datasets / "own")  # shards and manifest.json alike
    assert (datasets / "own").stat().st_mode & 0o777 == 0o777 & ~current_umask()  # not mkdtemp's 0700
    assert (datasets / "own.prepared").read_text().endswith(" shards\n")
    assert sorted(p.name for p in datasets.iterdir()) == ["own", "own.prepared"]  # work folder removed
    again = run_job(completions, mounted, vocab, tmp_path / "fsx", workers)
    assert all(
        code == 0
        and out.strip() == f"{datasets / 'own'}: already prepared ({datasets / 'own.prepared'} exists)"
        for code, out, _ in again
    )


def test_given_pod_0_stopped_by_sigterm_when_restarted_then_the_job_still_makes_the_same_set(
    corpus, tmp_path
):
    folder, vocab, single = corpus
    others = [start_pod(i, 3, folder, vocab, tmp_path) for i in (1, 2)]
    first = start_pod(0, 3, folder, vocab, tmp_path)
    for line in first.stdout:
        if line.startswith("samples:"):  # after the pool, while its units' samples are made
            first.send_signal(signal.SIGTERM)
            break
    _, stderr = first.communicate(timeout=120)
    assert first.returncode == 143, stderr
    assert stderr.splitlines() == [
        "python -m training.dataprep.prepare_indexed: interrupted by SIGTERM: pod 0 stopped; nothing published"
    ]
    assert not (tmp_path / "datasets" / "own").exists()
    retry = start_pod(0, 3, folder, vocab, tmp_path)  # what the Job's backoffLimitPerIndex does
    stdout, stderr = retry.communicate(timeout=300)
    assert retry.returncode == 0, stderr
    assert all(pod.wait(timeout=60) == 0 for pod in others)
    same_bytes(single, tmp_path / "datasets" / "own")


def test_given_a_folder_without_matching_files_then_every_pod_stops_with_one_line_and_exit_2(
    corpus, tmp_path
):
    _, vocab, _ = corpus
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "readme.md").write_text("A sentence.\n", encoding="utf-8")
    results = run_job(2, folder, vocab, tmp_path)
    for returncode, _, stderr in results:
        assert returncode == 2  # the Job's podFailurePolicy fails the whole Job on it
        (line,) = stderr.splitlines()
        assert f"--input {folder}: directory holds no file matching '*.txt'" in line
    assert not (tmp_path / "datasets" / "own").exists()


def test_given_bad_bytes_in_one_pods_unit_then_every_pod_fails_with_that_line_and_nothing_is_published(
    corpus, tmp_path
):
    folder, vocab, _ = corpus
    bad = tmp_path / "corpus"
    shutil.copytree(folder, bad)
    (bad / "b.txt").write_bytes((bad / "b.txt").read_bytes() + "Straße\n".encode("latin-1"))
    results = run_job(2, bad, vocab, tmp_path)
    own_error = [err for _, _, err in results if "invalid utf-8 at line" in err and "stopped:" not in err]
    assert len(own_error) == 1  # the pod whose unit holds the byte
    for returncode, _, stderr in results:
        assert returncode == 2
        (line,) = stderr.splitlines()
        assert re.search(
            rf"--input {re.escape(str(bad / 'b.txt'))}: invalid utf-8 at line \d+, byte offset \d+", line
        )
    assert not (tmp_path / "datasets" / "own").exists()
    assert not (tmp_path / "datasets" / "own.prepared").exists()
