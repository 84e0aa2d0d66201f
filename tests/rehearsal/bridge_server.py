"""What the rehearsal's stand-in servers (the API server, S3, the web) share on the harness's side.

Each runs as a program of its own (its module file, ``python -I``) in the bridge's network
namespace, where the pods reach it: :func:`start` runs it there and returns once it prints
``ready``; :func:`stop` ends it. The HTTPS ones answer with a self-signed certificate that
:func:`self_signed` makes with ``openssl`` (``ca.crt`` and ``tls.key`` in their folder).
"""

from __future__ import annotations

import select
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

#: Seconds a server may take to print ``ready`` (each starts in about one; moto's in a few).
START_DEADLINE_S = 60


def start(
    enter: Sequence[str],
    script: str,
    args: Sequence[str],
    *,
    what: str,
    env: Mapping[str, str] | None = None,
    preexec_fn: Callable[[], None] | None = None,
) -> subprocess.Popen[str]:
    """``script`` with ``args``, run by ``enter`` (a command prefix into the bridge's network
    namespace), once it has printed ``ready``; its stdin stays open (closing it ends the server).
    One that prints nothing else, ends or says nothing for :data:`START_DEADLINE_S` is killed."""
    proc = subprocess.Popen(
        [*enter, sys.executable, "-I", script, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=None if env is None else dict(env),
        start_new_session=True,
        preexec_fn=preexec_fn,
    )
    assert proc.stdout is not None
    readable, _, _ = select.select([proc.stdout], [], [], START_DEADLINE_S)
    line = proc.stdout.readline().strip() if readable else f"nothing within {START_DEADLINE_S} s"
    if line != "ready":
        stop(proc)
        raise RuntimeError(f"{what} did not start: {line!r}")
    return proc


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def self_signed(folder: Path, common_name: str, alt_names: Sequence[str]) -> None:
    """An EC P-256 key (``tls.key``) and a certificate for it valid one day (``ca.crt``), naming
    ``alt_names`` (``IP:...``, ``DNS:...``) as its subject alternative names."""
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-days", "1", "-subj", f"/CN={common_name}",
            "-addext", f"subjectAltName={','.join(alt_names)}",
            "-keyout", str(folder / "tls.key"), "-out", str(folder / "ca.crt"),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )  # fmt: skip
