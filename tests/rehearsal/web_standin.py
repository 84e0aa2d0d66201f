"""The rehearsal's stand-in for the web: the ``https://`` downloads a pod makes, answered on the
bridge.

A pod that downloads from the internet (the held-out staging Job fetches PG-19's Parquet file from
huggingface.co with ``urllib``) meets this server instead: an HTTPS server (``http.server`` with
``ssl``) on its own bridge address, :data:`ADDRESS`, port 443, serving each synthesized URL's path
from a local file and nothing else (404). The pods reach it by name: the harness adds a line for
each of its hosts to every pod's /etc/hosts and points ``SSL_CERT_FILE`` at its certificate, which
OpenSSL's default verify paths read (``X509_get_default_cert_file_env``; Python's
``ssl.create_default_context`` loads them), so the pod's TLS check of the host name is the real one.
The certificate is self-signed, made by ``openssl`` for exactly the hosts of the URLs served.

Like the stand-in API server (tests.rehearsal.kube_api) it runs as a program (this file) in the
bridge's network namespace; every request is recorded (:meth:`WebStandIn.requests`).
"""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

if __name__ != "__main__":  # the harness's side: the server itself runs isolated (python -I)
    from tests.rehearsal import bridge_server

#: HTTPS's port.
PORT = 443
#: What the server serves: URL path -> local file (written by the harness).
FILES = "files.json"
#: One JSON line per request: method, host, path, status.
REQUESTS = "requests.jsonl"


# --- the server (runs in the network namespace) ---------------------------------------------------


def _handler(folder: Path, files: Mapping[str, str], lock: threading.Lock) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            key = f"{self.headers.get('Host', '')}{self.path}"
            path = files.get(key)
            status = 200 if path is not None else 404
            with lock, open(folder / REQUESTS, "a") as log:
                log.write(json.dumps({"method": "GET", "url": key, "status": status}) + "\n")
            if path is None:
                self.send_error(404)
                return
            body = Path(path).read_bytes()
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler


def serve(folder: Path, address: str, port: int) -> None:
    """Serve until stdin closes (the harness's end); prints ``ready`` once listening."""
    files = json.loads((folder / FILES).read_text())
    httpd = ThreadingHTTPServer((address, port), _handler(folder, files, threading.Lock()))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(folder / "ca.crt", folder / "tls.key")
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    print("ready", flush=True)
    sys.stdin.read()
    httpd.shutdown()


# --- the harness's side ---------------------------------------------------------------------------


class WebStandIn:
    """The stand-in web server, run by ``enter`` (a command prefix into the bridge's network
    namespace) on ``address``, which it adds to the bridge ``device``; ``urls``: each ``https://`` URL
    it serves -> the local file it answers with. Its files (certificate, records) under ``folder``."""

    def __init__(
        self,
        folder: Path,
        enter: Sequence[str],
        address: str,
        urls: Mapping[str, Path],
        device: str,
        preexec_fn: Callable[[], None] | None = None,
    ) -> None:
        self.folder, self.address = folder, address
        parts = {url: urlsplit(url) for url in urls}
        wrong = [
            url for url, p in parts.items() if p.scheme != "https" or p.port or p.query or not p.hostname
        ]
        if wrong:
            raise ValueError(f"the web stand-in serves https://<host>/<path> URLs only, not {wrong}")
        self.hosts = tuple(sorted({str(p.hostname) for p in parts.values()}))
        folder.mkdir(parents=True)
        served = {f"{p.hostname}{p.path}": str(Path(urls[url]).resolve()) for url, p in parts.items()}
        (folder / FILES).write_text(json.dumps(served))
        bridge_server.self_signed(folder, self.hosts[0], [f"DNS:{h}" for h in self.hosts])
        subprocess.run([*enter, "ip", "addr", "add", f"{address}/32", "dev", device], check=True, timeout=30)
        self.proc = bridge_server.start(
            enter, __file__, [str(folder), address, str(PORT)], what="the web stand-in", preexec_fn=preexec_fn
        )

    def certificate(self) -> bytes:
        """The self-signed certificate the pods trust (``SSL_CERT_FILE``)."""
        return (self.folder / "ca.crt").read_bytes()

    def hosts_lines(self) -> list[str]:
        """The /etc/hosts line of each host it serves."""
        return [f"{self.address}\t{host}" for host in self.hosts]

    def requests(self) -> list[dict[str, Any]]:
        path = self.folder / REQUESTS
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def close(self) -> None:
        bridge_server.stop(self.proc)


if __name__ == "__main__":
    serve(Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]))
