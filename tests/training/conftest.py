"""Fixtures of the pretraining tests: shards made by the data tool, an etcd server, ports."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.training.corpus import build_vocab, write_corpus

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
# Worker processes of the distributed tests: one thread each (2 cores, 4+ processes).
CHILD_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, **CHILD_ENV, **extra)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


class Shards:
    """Shards written by ``python -m training.prepare_data`` from a synthetic corpus."""

    def __init__(self, directory: Path, vocab_size: int) -> None:
        self.dir = directory
        self.vocab_size = vocab_size

    @property
    def files(self) -> list[Path]:
        return sorted(self.dir.glob("*_training_*.hdf5"))


@pytest.fixture(scope="session")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Shards:
    """6 shards of ~75 samples (seq 128, 20 predictions) over a 400-piece vocabulary."""
    root = tmp_path_factory.mktemp("prepared")
    corpus = write_corpus(root / "corpus.txt", n_docs=60, seed=0)
    vocab = build_vocab([corpus], root / "vocab.txt", vocab_size=400)
    out = root / "shards"
    subprocess.run(
        [
            PYTHON,
            "-m",
            "training.prepare_data",
            "--input",
            str(corpus),
            "--vocab",
            str(vocab),
            "--output_dir",
            str(out),
            "--num_shards",
            "6",
            "--dupe_factor",
            "2",
            "--num_workers",
            "1",
            "--max_seq_len",
            "128",
            "--max_pred_len",
            "20",
            "--seed",
            "7",
        ],
        check=True,
        cwd=REPO,
        env=child_env(),
        capture_output=True,
        timeout=120,
    )
    vocab_size = sum(1 for _ in open(vocab, encoding="utf-8"))
    result = Shards(out, vocab_size)
    assert len(result.files) == 6
    return result


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory: pytest.TempPathFactory):
    """An etcd serving the v2 API on a free localhost port (torchrun's etcd rendezvous needs v2).

    FAILS (does not skip) without the binary: the etcd rendezvous is a required check.
    """
    binary = shutil.which("etcd")
    if binary is None:
        pytest.fail(
            "etcd is not installed: run `make etcd` or `apt-get install -y etcd-server` "
            "(Debian's etcd 3.4 serves the v2 API with --enable-v2)",
            pytrace=False,
        )
    data_dir = tmp_path_factory.mktemp("etcd")
    client, peer = free_port(), free_port()
    endpoint = f"127.0.0.1:{client}"
    log = open(data_dir / "etcd.log", "wb")
    proc = subprocess.Popen(
        [
            binary,
            "--name",
            "test",
            "--data-dir",
            str(data_dir / "data"),
            "--enable-v2",
            "--listen-client-urls",
            f"http://{endpoint}",
            "--advertise-client-urls",
            f"http://{endpoint}",
            "--listen-peer-urls",
            f"http://127.0.0.1:{peer}",
            "--initial-advertise-peer-urls",
            f"http://127.0.0.1:{peer}",
            "--initial-cluster",
            f"test=http://127.0.0.1:{peer}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://{endpoint}/v2/keys/", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"etcd did not start: {(data_dir / 'etcd.log').read_text()[-2000:]}")
            time.sleep(0.2)
        yield endpoint
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
