"""The run's restarts as its trainer sees them (``trainium_job.restarts`` holds the ledger).

At every start of training, global rank 0 appends to ``<output_dir>/restarts.jsonl``: the lines
of the hang markers a watchdog left, a ``failure`` line when torchrun restarted the workers with
no marker saying why, and its ``resume`` line; then it reads the whole ledger and exports its
totals (``bert_train_restarts_total{cause}``, ``bert_train_lost_seconds_total{cause}``,
``bert_train_suspect_nodes``). At the end of a run that finished, rank 0 logs one line:
``restarts: 3 (hang 1, preemption 2); lost 14 min (hang 9, preemption 5); nodes named:
ip-10-0-1-5 (hang 1)``, or ``restarts: none``. A ledger that cannot be read or written costs a
warning, never the run.
"""

from __future__ import annotations

import logging
from pathlib import Path

from trainium_job.paths import RESTART_LEDGER
from trainium_job.restarts import Totals, ledger_summary, read, record_start, restarts, totals

from .prom_metrics import TrainingMetrics

log = logging.getLogger(__name__)


def started(
    run_dir: Path, *, checkpoint: int | None, torchrun_restart: int, metrics: TrainingMetrics | None
) -> Totals | None:
    """Record this start (rank 0) and export the ledger's totals; None when the ledger failed."""
    try:
        record_start(run_dir, checkpoint=checkpoint, torchrun_restart=torchrun_restart)
        found = totals(restarts(read(run_dir / RESTART_LEDGER)))
    except OSError as e:
        log.warning("restart ledger %s: %s; restarts are not counted", run_dir / RESTART_LEDGER, e)
        return None
    if metrics is not None:
        metrics.restarts(found)
    return found


def summary(run_dir: Path) -> str:
    """The run's summary line (read again: the ledger may have grown since the start)."""
    try:
        return ledger_summary(run_dir)
    except OSError as e:
        return f"restarts: unknown ({run_dir / RESTART_LEDGER}: {e})"
