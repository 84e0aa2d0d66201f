"""The pod program's own Prometheus metrics: where the pod is before training, what the job spent.

The trainer serves the training metrics once it runs (:mod:`trainium_job.telemetry`); before
that a pod waits, precompiles and checks the fabric on paid nodes, and only the program can say
so. It serves, on :data:`PROGRAM_METRICS_PORT`, the gauges of :data:`PROGRAM_METRICS` (the
dashboard's alerts read them: ``trainium_eks.monitoring.rules``). Standard library only.
"""

from __future__ import annotations

import http.server
import threading
from typing import Any, Final

#: Port of the program's metrics (the trainer's are on 9400, the exporters' on 9402 and 9403).
PROGRAM_METRICS_PORT: Final = 9401
#: Name of the port in the pod spec (the PodMonitor scrapes it by name).
PROGRAM_METRICS_PORT_NAME: Final = "program"
#: Where the pod's program is: one of these is 1 in ``trainium_job_program_step``.
STEPS: Final = ("starting", "waiting", "precompile", "fabric_check", "training", "exporting", "stopping")
#: Exported name -> help.
PROGRAM_METRICS: Final = {
    "trainium_job_program_start_timestamp_seconds": "Unix time the pod's program started",
    "trainium_job_not_training_since_timestamp_seconds": (
        "Unix time since which the pod has held its node without training (absent while it trains)"
    ),
    "trainium_job_start_bound_seconds": (
        "Seconds the pod may hold its node before the next phase trains: its waits' deadlines, its "
        "precompile's and the checks' bounds"
    ),
    "trainium_job_program_step": "1 for the step the pod's program is in (label step)",
    "trainium_job_spend_usd": "What the job's nodes have cost so far, at the list price (its own count)",
    "trainium_job_budget_usd": "The job's spend ceiling (training_budget_usd)",
}


class ProgramMetrics:
    """The gauges, and the HTTP server that serves them (one thread, started by :meth:`serve`)."""

    def __init__(self, *, start: float, budget_usd: float | None) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, Any] = {
            "trainium_job_program_start_timestamp_seconds": start,
            "trainium_job_not_training_since_timestamp_seconds": start,
            "trainium_job_start_bound_seconds": None,
            "trainium_job_spend_usd": 0.0 if budget_usd is not None else None,
            "trainium_job_budget_usd": budget_usd,
        }
        self.step = "starting"

    def set(self, name: str, value: float | None) -> None:
        with self._lock:
            self._values[name] = value

    def at(self, step: str) -> None:
        if step not in STEPS:
            raise ValueError(f"unknown program step {step!r}")
        with self._lock:
            self.step = step

    def text(self) -> str:
        """The Prometheus text exposition of the gauges."""
        lines = []
        with self._lock:
            values, step = dict(self._values), self.step
        for name, help_text in PROGRAM_METRICS.items():
            if name == "trainium_job_program_step":
                lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
                lines += [f'{name}{{step="{s}"}} {1 if s == step else 0}' for s in STEPS]
                continue
            value = values.get(name)
            if value is None:
                continue
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge", f"{name} {float(value)!r}"]
        return "\n".join(lines) + "\n"

    def serve(self, port: int) -> http.server.ThreadingHTTPServer:
        metrics = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404)
                    return
                body = metrics.text().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
                pass  # every scrape in the pod's log would drown its lines

        server = http.server.ThreadingHTTPServer(("", port), Handler)
        threading.Thread(target=server.serve_forever, name="program-metrics", daemon=True).start()
        return server
