"""A local Prometheus (Debian's 2.42, loopback only, data in a temp dir) scraping a real CPU training
run of a tiny BERT: what the dashboard's training panels show, without a cluster.

Used by test_local_prometheus.py and by ``python -m tests.trainium_eks.monitoring.panels``, which
plots the panels for docs/monitoring.md from the same query results.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.training.conftest import PYTHON, REPO, child_env, free_port, tiny_args, wait_for_http
from tests.trainium_eks.monitoring.promtool import tool
from training.dataprep.synthetic import SyntheticShards

#: How often the local Prometheus scrapes the run (the cluster's is 30 s; a tiny CPU run is short).
SCRAPE_INTERVAL_S = 1


@dataclass
class LocalPrometheus:
    url: str

    def _get(self, path: str, **params: Any) -> Any:
        query = urllib.parse.urlencode({k: str(v) for k, v in params.items()})
        with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=10) as r:
            body = json.loads(r.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        return self._get("/api/v1/query", query=expr, **({"time": at} if at is not None else {}))["result"]

    def query_range(self, expr: str, start: float, end: float, step: float = 1) -> list[dict[str, Any]]:
        return self._get("/api/v1/query_range", query=expr, start=start, end=end, step=step)["result"]


@contextmanager
def local_prometheus(tmp: Path, target: str, job: str = "bert-training") -> Iterator[LocalPrometheus]:
    """Prometheus on a free loopback port scraping ``target`` (host:port) every second."""
    config = {
        "global": {
            "scrape_interval": f"{SCRAPE_INTERVAL_S}s",
            "evaluation_interval": f"{SCRAPE_INTERVAL_S}s",
        },
        "scrape_configs": [{"job_name": job, "static_configs": [{"targets": [target]}]}],
    }
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    address = f"127.0.0.1:{free_port()}"
    log = open(tmp / "prometheus.log", "wb")
    proc = subprocess.Popen(
        [
            tool("prometheus"),
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address={address}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    server = LocalPrometheus(f"http://{address}")
    try:
        wait_for_http(f"{server.url}/-/ready", proc, tmp / "prometheus.log", timeout_s=60)
        yield server
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


@dataclass
class ScrapedRun:
    prometheus: LocalPrometheus
    start: float
    end: float


@contextmanager
def scraped_training_run(
    tmp: Path, shards: SyntheticShards, held_out: SyntheticShards, *, steps: int = 60
) -> Iterator[ScrapedRun]:
    """A CPU run with ``--metrics_port``, evaluated on ``held_out`` every 10 steps, scraped until
    Prometheus saw it advance ``steps`` optimizer steps, then stopped; the Prometheus stays up for
    queries over the run's time range."""
    port = free_port()
    # --peak_tflops: the CPU has no known peak, and MFU is only exported with one.
    args = tiny_args(
        shards, tmp / "run", "--max_steps", "2000", "--checkpoint_every", "10", "--metrics_port", str(port)
    )
    args += [
        "--peak_tflops",
        "0.05",
        "--eval_dir",
        str(held_out.dir),
        "--eval_every",
        "10",
        "--eval_samples",
        "16",
    ]
    with local_prometheus(tmp, f"127.0.0.1:{port}") as prometheus:
        start = time.time()
        run = subprocess.Popen(
            [PYTHON, "-m", "training.trainer.pretrain", *args],
            cwd=REPO,
            env=child_env(),
            stdout=subprocess.DEVNULL,
            stderr=open(tmp / "run.log", "wb"),
        )
        try:
            deadline = time.monotonic() + 300
            first: float | None = None
            while True:
                seen = prometheus.query("max(bert_train_step)")
                # Counted from the first scrape that saw a step: an idle machine's tiny run can
                # pass `steps` before Prometheus's first scrape, leaving one sample in the range.
                if seen:
                    step = float(seen[0]["value"][1])
                    first = step if first is None else first
                    if step - first >= steps:
                        break
                if run.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the run stopped or stalled: {(tmp / 'run.log').read_text()[-2000:]}")
                time.sleep(1)
            # Before the stop: once its target is gone Prometheus marks the series stale.
            end = time.time()
        finally:
            run.terminate()
            run.wait(timeout=120)
        yield ScrapedRun(prometheus, start, end)
