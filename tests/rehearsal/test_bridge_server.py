"""The stand-in servers' start (tests.rehearsal.bridge_server): ready, or refused within its
deadline with what the server said, and ended either way."""

from __future__ import annotations

import time

import pytest

from tests.rehearsal import bridge_server


def server(tmp_path, code: str) -> str:
    script = tmp_path / "server.py"
    script.write_text(code)
    return str(script)


def test_given_a_server_that_says_ready_then_it_runs_until_stopped(tmp_path):
    proc = bridge_server.start(
        [], server(tmp_path, "print('ready', flush=True)\nimport sys\nsys.stdin.read()\n"), [], what="s"
    )
    assert proc.poll() is None
    bridge_server.stop(proc)
    assert proc.returncode is not None


def test_given_a_server_that_says_something_else_then_refused_with_its_line(tmp_path):
    with pytest.raises(RuntimeError, match="the stand-in did not start: 'address in use'"):
        bridge_server.start(
            [], server(tmp_path, "print('address in use', flush=True)\n"), [], what="the stand-in"
        )


def test_given_a_server_that_says_nothing_then_refused_at_the_deadline_and_killed(tmp_path, monkeypatch):
    monkeypatch.setattr(bridge_server, "START_DEADLINE_S", 1)
    code = "import time\ntime.sleep(600)\n"
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="did not start: 'nothing within 1 s'"):
        bridge_server.start([], server(tmp_path, code), [], what="the stand-in")
    assert time.monotonic() - started < 30
