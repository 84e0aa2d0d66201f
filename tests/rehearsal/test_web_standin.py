"""The rehearsal's stand-in web server (tests.rehearsal.web_standin) on its own: a process in a
network namespace of its own, plugged into the bridge as a pod is, fetches the served URL over TLS,
trusting the stand-in's certificate through ``SSL_CERT_FILE`` as the pods do; the host name check
is the real one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.rehearsal.cluster import BRIDGE, die_with_test
from tests.rehearsal.substitutions import WEB_ADDRESS
from tests.rehearsal.web_standin import WebStandIn

URL = "https://huggingface.co/datasets/someone/books/resolve/0123abcd/data/test.parquet"
#: A pod's client: urllib's HTTPS handshake with the default context (OpenSSL's default verify
#: paths: SSL_CERT_FILE), connected to the stand-in's address, the URL's host as the TLS name.
CLIENT = """
import http.client, socket, ssl, sys
address, host, path = sys.argv[1:]
conn = http.client.HTTPSConnection(host, context=ssl.create_default_context(), timeout=30)
conn.sock = ssl.create_default_context().wrap_socket(socket.create_connection((address, 443)), server_hostname=host)
conn.request("GET", path)
reply = conn.getresponse()
sys.stdout.buffer.write(str(reply.status).encode() + b"\\n" + reply.read())
"""


@pytest.fixture()
def served(tmp_path: Path) -> Path:
    path = tmp_path / "books.parquet"
    path.write_bytes(os.urandom(3000))
    return path


@pytest.fixture()
def web(network, served, tmp_path):
    standin = WebStandIn(tmp_path / "web", network.enter(), WEB_ADDRESS, {URL: served}, BRIDGE, die_with_test)
    yield standin
    standin.close()


def fetch(pod: list[str], web: WebStandIn, host: str, path: str) -> subprocess.CompletedProcess[bytes]:
    (web.folder / "trusted.crt").write_bytes(web.certificate())
    env = {**os.environ, "SSL_CERT_FILE": str(web.folder / "trusted.crt")}
    return subprocess.run(
        [*pod, sys.executable, "-I", "-c", CLIENT, WEB_ADDRESS, host, path],
        env=env,
        capture_output=True,
        timeout=60,
    )


def test_given_a_pod_on_the_bridge_then_the_served_url_answers_with_its_file_over_checked_tls(
    web, pod, served
):
    # When a pod asks for the URL's path from the URL's host
    done = fetch(pod, web, "huggingface.co", URL.removeprefix("https://huggingface.co"))
    # Then it gets the file, its TLS check of the host name passing on the stand-in's certificate
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert done.stdout == b"200\n" + served.read_bytes()
    assert web.hosts_lines() == [f"{WEB_ADDRESS}\thuggingface.co"]
    assert web.requests() == [{"method": "GET", "url": URL.removeprefix("https://"), "status": 200}]


def test_given_another_path_then_404_and_another_host_name_fails_the_tls_check(web, pod):
    # Given a path the stand-in does not serve: 404, recorded
    other = fetch(pod, web, "huggingface.co", "/datasets/someone/books/resolve/main/data/test.parquet")
    assert other.returncode == 0 and other.stdout.startswith(b"404\n")
    assert [r["status"] for r in web.requests()] == [404]
    # And a host name its certificate does not name: the client refuses the handshake
    wrong = fetch(pod, web, "example.org", "/")
    assert wrong.returncode != 0 and b"CERTIFICATE_VERIFY_FAILED" in wrong.stderr


@pytest.mark.parametrize(
    "url", ["http://huggingface.co/x", "https://huggingface.co:8443/x", "https://huggingface.co/x?rev=1"]
)
def test_given_a_url_it_cannot_serve_as_the_pod_asks_then_refused_before_it_starts(url, tmp_path):
    with pytest.raises(ValueError, match="https://<host>/<path> URLs only"):
        WebStandIn(tmp_path / "web", ["false"], WEB_ADDRESS, {url: tmp_path}, BRIDGE)
    assert not (tmp_path / "web").exists()
