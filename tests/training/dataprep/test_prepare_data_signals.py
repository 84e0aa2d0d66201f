"""SIGINT and SIGTERM stop ``python -m training.dataprep.prepare_data`` at any phase, cleanly.

Real signals to a real subprocess: sent when the tool logs that a phase started, to the tool
alone (``kill``) or to its whole process group (Ctrl-C in a terminal, ``kill -- -PGID``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from training.dataprep.synthetic import build_vocab, write_corpus

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("signals")
    text = write_corpus(root / "corpus.txt", n_docs=1500, seed=5)
    return text, build_vocab([text], root / "vocab.txt", vocab_size=400)


def start(corpus, out: Path, workers: int) -> subprocess.Popen:
    text, vocab = corpus
    args = [
        "--input",
        str(text),
        "--vocab",
        str(vocab),
        "--output_dir",
        str(out),
        "--dupe_factor",
        "2",
        "--chunk_mb",
        "0.05",
        "--samples_per_shard",
        "40",
        "--num_workers",
        str(workers),
        "--no_progress",
    ]
    return subprocess.Popen(
        [sys.executable, "-m", "training.dataprep.prepare_data", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize(
    "phase, sig, to_group, workers",
    [
        ("tokenize+mask:", signal.SIGINT, True, 2),  # Ctrl-C while the spawned workers start and build
        ("tokenize+mask:", signal.SIGTERM, False, 1),
        ("shuffle:", signal.SIGTERM, True, 2),  # the workers die of it too: the pool breaks
        ("write:", signal.SIGINT, False, 1),  # while shards are being written
        ("write:", signal.SIGTERM, False, 2),
    ],
)
def test_given_a_stop_signal_at_a_phase_then_exit_128_plus_signal_and_nothing_published(
    corpus, tmp_path, phase, sig, to_group, workers
):
    out = tmp_path / "set"
    proc = start(corpus, out, workers)
    seen = []
    for line in proc.stdout:  # the tool logs each phase as it starts
        seen.append(line)
        if line.startswith(phase):
            (os.killpg if to_group else os.kill)(proc.pid, sig)
            break
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, (seen, stdout, stderr)
    assert stderr.splitlines() == [
        f"python -m training.dataprep.prepare_data: interrupted by {sig.name}: "
        f"stopped; nothing published, {out} unchanged"
    ]
    assert "wrote" not in stdout
    assert list(tmp_path.iterdir()) == []  # no set, and no staging directory left behind
    deadline = time.monotonic() + 10
    while group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not group_alive(proc.pid), "worker processes outlived the tool"


def test_given_no_signal_then_the_same_command_publishes_a_set(corpus, tmp_path):
    proc = start(corpus, tmp_path / "set", 2)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr
    phases = [
        line.split(":")[0] for line in stdout.splitlines() if ":" in line and not line.startswith("wrote")
    ]
    assert phases == ["tokenize+mask", "shuffle", "write", "publish"]
    assert (tmp_path / "set" / "manifest.json").is_file()
    assert len(list((tmp_path / "set").glob("*_training_*.hdf5"))) > 10  # a long write phase to hit
