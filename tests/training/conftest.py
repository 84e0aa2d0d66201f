"""Fixtures of the pretraining tests: shards made by the data tool, a held-out set, an etcd server, ports."""

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

from training.dataprep.synthetic import (
    SMALL_SET_FLAGS,
    SyntheticShards,
    make_shards,
    prepare_data_command,
    write_corpus,
)

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
# Worker processes of the distributed tests: one thread each (2 cores, 4+ processes).
CHILD_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_http(url: str, proc: subprocess.Popen[bytes], log: Path, *, timeout_s: float) -> None:
    """Poll ``url`` until it answers 200; RuntimeError with the log's tail when the server process
    ends first or ``timeout_s`` passes (also used outside pytest: ``make panels``)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{log.stem} did not start: {log.read_text()[-2000:]}")
        time.sleep(0.2)


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, **CHILD_ENV, **extra)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def run_module(module: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -m MODULE ARGS`` from the repository, its output captured as text."""
    return subprocess.run(
        [PYTHON, "-m", module, *args], cwd=REPO, capture_output=True, text=True, timeout=timeout
    )


def tiny_args(data: SyntheticShards, out: Path, *extra: str) -> list[str]:
    """pretrain flags for a tiny BERT on the test shards (extra flags override earlier ones)."""
    return [
        "--data_dir",
        str(data.dir),
        "--output_dir",
        str(out),
        "--model",
        "tiny",
        "--vocab_size",
        str(data.vocab_size),
        "--batch_size",
        "4",
        "--grad_accum_usteps",
        "2",
        "--max_steps",
        "8",
        "--warmup_steps",
        "2",
        "--lr",
        "2e-3",
        "--seed",
        "11",
        *extra,
    ]


def sigterm_during(monkeypatch: pytest.MonkeyPatch, step: int) -> None:
    """A SIGTERM to this process during optimizer step ``step`` of an in-process run (what a pod's
    deletion sends): the run's own handler (``training.trainer.stop``) takes it."""
    import signal

    from training.trainer import pretrain

    real, done = pretrain.optimizer_step, []

    def stepping(*args, **kwargs):
        result = real(*args, **kwargs)
        done.append(1)
        if len(done) == step:
            os.kill(os.getpid(), signal.SIGTERM)
        return result

    monkeypatch.setattr(pretrain, "optimizer_step", stepping)


@pytest.fixture(scope="session")
def shards(tmp_path_factory: pytest.TempPathFactory) -> SyntheticShards:
    """6 shards of ~75 samples (seq 128, 20 predictions) over a 400-piece vocabulary."""
    root = tmp_path_factory.mktemp("prepared")
    flags = {**SMALL_SET_FLAGS, "num_shards": 6}
    result = make_shards(root, n_docs=60, flags=flags, env=child_env(), timeout=120)
    assert len(result.files) == 6
    return result


def make_held_out(root: Path, vocab: Path, *, seq_len: int = 128, max_pred_len: int = 20) -> SyntheticShards:
    """A held-out set for ``--eval_dir``: 2 shards of other documents (another corpus seed) made
    with the training set's vocab.txt, in ``root/held-out-seq<seq_len>`` (also used outside
    pytest: ``make panels``)."""
    corpus = write_corpus(root / "corpus.txt", n_docs=20, seed=99)
    flags = {**SMALL_SET_FLAGS, "num_shards": 2, "max_seq_len": seq_len, "max_pred_len": max_pred_len}
    out = root / f"held-out-seq{seq_len}"
    command = prepare_data_command(input=corpus, vocab=vocab, output_dir=out, **flags)
    done = subprocess.run(command, env=child_env(), capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return SyntheticShards(out, vocab)


@pytest.fixture(scope="session")
def held_out(shards: SyntheticShards, tmp_path_factory: pytest.TempPathFactory) -> SyntheticShards:
    """The held-out set of ``shards`` (seq 128, 20 predictions): other documents, the same vocab.txt."""
    return make_held_out(tmp_path_factory.mktemp("held_out"), shards.vocab)


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
        wait_for_http(f"http://{endpoint}/v2/keys/", proc, data_dir / "etcd.log", timeout_s=30)
        yield endpoint
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
