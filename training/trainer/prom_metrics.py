"""Prometheus metrics of a training run (``--metrics_port``), for the platform's Prometheus.

One process per node serves them: the one with ``LOCAL_RANK`` 0, so every pod of a job answers
on the port its PodMonitor scrapes (a pod without a server would show as a target down). Every
server exports the step and checkpoint progress, which every rank knows without a device sync;
the values read back from the device (loss, learning rate, throughput, MFU, step time) exist
only where the step reporter runs, on global rank 0, so no other pod exports a stale zero.

Names follow the Prometheus conventions ("Metric and label naming": a ``bert_train`` prefix,
base units in the name such as ``_seconds``, ``_ratio`` for 0-1 fractions, ``_total`` only on
counters). The set is ``trainium_job.telemetry.TRAINING_METRICS``, which the dashboard and the
alert rules read.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Enum, Gauge, Info, start_http_server

from trainium_job.hang import PHASES
from trainium_job.restarts import CAUSES, Totals
from trainium_job.telemetry import TRAINING_METRICS

log = logging.getLogger(__name__)

PREFIX = "bert_train"
#: The held-out evaluation's gauges, without the prefix.
EVAL_NAMES = ("eval_mlm_loss", "eval_mlm_accuracy_ratio", "eval_nsp_accuracy_ratio", "eval_step")


def _gauge(name: str, registry: CollectorRegistry) -> Gauge:
    return Gauge(name, TRAINING_METRICS[name][0], registry=registry)


class TrainingMetrics:
    """The run's metrics in their own registry (no process or GC collectors of the client)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self.info = Info(PREFIX, TRAINING_METRICS["bert_train_info"][0], registry=r)
        self.step = _gauge("bert_train_step", r)
        self.max_steps = _gauge("bert_train_max_steps", r)
        self.last_step_time = _gauge("bert_train_last_step_timestamp_seconds", r)
        self.checkpoint_interval = _gauge("bert_train_checkpoint_interval_steps", r)
        self.last_checkpoint_step = _gauge("bert_train_last_checkpoint_step", r)
        self.last_checkpoint_time = _gauge("bert_train_last_checkpoint_timestamp_seconds", r)
        self.checkpoint_seconds = _gauge("bert_train_checkpoint_duration_seconds", r)
        # The client adds ``_total`` to a counter's name on exposition.
        self.checkpoints = Counter(
            "bert_train_checkpoints", TRAINING_METRICS["bert_train_checkpoints_total"][0], registry=r
        )
        # The step watchdog's view (training.trainer.watchdog): one series per phase, 1 for the current.
        self.phase = Enum(
            "bert_train_phase", TRAINING_METRICS["bert_train_phase"][0], states=list(PHASES), registry=r
        )
        self.hang_bound = _gauge("bert_train_hang_bound_seconds", r)
        # Rank 0's values are registered with their first report: absent, not 0, until then
        # (and on every other node, whose process never reports).
        self.reported: dict[str, Gauge] = {}
        self.restart_metrics: tuple[Counter, Counter, Gauge] | None = None
        self.eval_gauges: dict[str, Gauge] | None = None
        self._server: Any = None

    def started(
        self,
        *,
        step: int,
        max_steps: int,
        checkpoint_every: int,
        resumed_from: int | None,
        labels: Mapping[str, str],
    ) -> None:
        """The run's fixed facts, and where it starts (a resume counts as the last checkpoint)."""
        self.info.info(dict(labels))
        self.step.set(step)
        self.max_steps.set(max_steps)
        self.checkpoint_interval.set(checkpoint_every)
        self.last_checkpoint_step.set(resumed_from or 0)
        self.last_step_time.set(time.time())

    def stepped(self, step: int) -> None:
        """After every optimizer step (host values only: no device sync)."""
        self.step.set(step)
        self.last_step_time.set(time.time())

    def report(
        self, *, loss: float, lr: float, grad_norm: float, seq_per_s: float, step_s: float, mfu: float | None
    ) -> None:
        """Rank 0's values of a logged step (MFU only when the device peak is known)."""
        values = {
            "loss": loss,
            "learning_rate": lr,
            "grad_norm": grad_norm,
            "sequences_per_second": seq_per_s,
            "step_duration_seconds": step_s,
            "mfu_ratio": mfu,
        }
        for name, value in values.items():
            if value is None:
                continue
            if name not in self.reported:
                self.reported[name] = _gauge(f"{PREFIX}_{name}", self.registry)
            self.reported[name].set(value)
        self._evaluation()  # rank 0 reports: its evaluation series exist from now on

    def _evaluation(self) -> dict[str, Gauge]:
        """Rank 0's evaluation gauges, made at its first report or evaluation: NaN until one."""
        if self.eval_gauges is None:
            self.eval_gauges = {name: _gauge(f"{PREFIX}_{name}", self.registry) for name in EVAL_NAMES}
            for gauge in self.eval_gauges.values():
                gauge.set(float("nan"))
        return self.eval_gauges

    def evaluated(self, *, step: int, mlm_loss: float, mlm_accuracy: float, nsp_accuracy: float) -> None:
        """Rank 0's held-out evaluation (``training.trainer.evaluate``)."""
        gauges = self._evaluation()
        for name, value in zip(EVAL_NAMES, (mlm_loss, mlm_accuracy, nsp_accuracy, float(step)), strict=True):
            gauges[name].set(value)

    def watchdog(self, phase: str, bound_s: float | None) -> None:
        """The step watchdog's phase and bound (None: no bound now)."""
        self.phase.state(phase)
        self.hang_bound.set(bound_s or 0.0)

    def restarts(self, totals: Totals) -> None:
        """The restart ledger's totals (rank 0, once at its start): every cause from 0, so a
        restart shows as an increase of its series and the series exist before the first."""
        if self.restart_metrics is not None:
            raise RuntimeError("the restart totals are exported once per process")
        r = self.registry
        count = Counter(
            "bert_train_restarts", TRAINING_METRICS["bert_train_restarts_total"][0], ["cause"], registry=r
        )
        lost = Counter(
            "bert_train_lost_seconds",
            TRAINING_METRICS["bert_train_lost_seconds_total"][0],
            ["cause"],
            registry=r,
        )
        nodes = _gauge("bert_train_suspect_nodes", r)
        for cause in CAUSES:
            count.labels(cause).inc(totals.count[cause])
            lost.labels(cause).inc(totals.lost_s[cause])
        nodes.set(len({host for host, _ in totals.nodes}))
        self.restart_metrics = (count, lost, nodes)

    def checkpointed(self, step: int, seconds: float) -> None:
        self.last_checkpoint_step.set(step)
        self.last_checkpoint_time.set(time.time())
        self.checkpoint_seconds.set(seconds)
        self.checkpoints.inc()

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:
        """HTTP on ``port`` (every path answers with the metrics), in a daemon thread."""
        self._server, _ = start_http_server(port, addr=addr, registry=self.registry)
        log.info("Prometheus metrics on port %d", port)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def start_metrics(port: int, *, local_rank: int) -> TrainingMetrics | None:
    """The node's metrics server (``LOCAL_RANK`` 0 when ``port`` is set), else None."""
    if not port or local_rank != 0:
        return None
    metrics = TrainingMetrics()
    metrics.serve(port)
    return metrics
