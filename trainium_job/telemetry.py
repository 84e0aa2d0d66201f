"""Where a training pod serves its Prometheus metrics and what it serves: one named port, the same
on every pod, and the metric names the platform's dashboard and alerts read.

``training.trainer.pretrain --metrics_port`` starts the server in the process with ``LOCAL_RANK`` 0 of
each node (:mod:`training.trainer.prom_metrics`), so every pod of a job answers on the port once its
training process runs; the pod declares the port by name for the PodMonitor that scrapes it.
"""

from __future__ import annotations

from typing import Any, Final

#: Port of the training metrics (the c10d store is on 29400, Prometheus's own default is 9090).
METRICS_PORT: Final = 9400
#: Name of the port in the pod spec: the PodMonitor selects it by this name.
METRICS_PORT_NAME: Final = "metrics"
#: Ports of the EFA and FSx exporters of the tools image (node_exporter has 9100).
EFA_EXPORTER_PORT: Final = 9402
FSX_EXPORTER_PORT: Final = 9403
#: Label of the training pods that names their job; the PodMonitor copies it onto every series.
JOB_LABEL: Final = "trainium-eks/job"


def metrics_container_port() -> dict[str, Any]:
    """The training container's port entry for the metrics endpoint."""
    return {"name": METRICS_PORT_NAME, "containerPort": METRICS_PORT, "protocol": "TCP"}


#: The training metrics: exported name -> (help, ``rank0``: only global rank 0 exports it).
TRAINING_METRICS: dict[str, tuple[str, bool]] = {
    "bert_train_info": ("The run: model, device, precision, optimizer and run directory (value 1)", False),
    "bert_train_step": ("Optimizer steps done, counted over the whole schedule (resumes continue it)", False),
    "bert_train_max_steps": ("Optimizer steps of the whole schedule (--max_steps)", False),
    "bert_train_last_step_timestamp_seconds": (
        "Unix time of the last optimizer step (of the process start before the first)",
        False,
    ),
    "bert_train_checkpoint_interval_steps": (
        "Optimizer steps between checkpoints (--checkpoint_every)",
        False,
    ),
    "bert_train_last_checkpoint_step": (
        "Step of the newest checkpoint written or resumed from (0: none yet)",
        False,
    ),
    "bert_train_last_checkpoint_timestamp_seconds": ("Unix time of the last checkpoint written", False),
    "bert_train_checkpoint_duration_seconds": ("Wall time of the last checkpoint write", False),
    "bert_train_checkpoints_total": ("Checkpoints written by this process", False),
    "bert_train_loss": ("Training loss (MLM + NSP) of the last reported step", True),
    "bert_train_learning_rate": ("Learning rate of the last reported step", True),
    "bert_train_grad_norm": ("Global L2 norm of the gradients before clipping, last reported step", True),
    "bert_train_sequences_per_second": ("Sequences per second since the previous report", True),
    "bert_train_step_duration_seconds": (
        "Mean wall time of an optimizer step since the previous report",
        True,
    ),
    "bert_train_mfu_ratio": ("Model FLOPs utilization (0-1); absent when the device peak is unknown", True),
    # Held-out evaluation (--eval_dir): NaN from the first report until the first evaluation, and
    # in a run without one.
    "bert_train_eval_mlm_loss": ("Masked-LM loss on the held-out samples at the last evaluation", True),
    "bert_train_eval_mlm_accuracy_ratio": (
        "Masked-LM accuracy (0-1) on the held-out samples at the last evaluation (MLPerf: 0.720)",
        True,
    ),
    "bert_train_eval_nsp_accuracy_ratio": (
        "Next-sentence accuracy (0-1) on the held-out samples at the last evaluation",
        True,
    ),
    "bert_train_eval_step": ("Optimizer step of the last evaluation (NaN: none yet)", True),
    "bert_train_phase": (
        "What the training loop is in (trainium_job.hang.PHASES): warmup, step, evaluation, checkpoint, "
        "or hung (its step watchdog is ending the process)",
        False,
    ),
    "bert_train_hang_bound_seconds": (
        "Seconds the current optimizer step may wait before the step watchdog ends the process "
        "(0: no bound now, in warm-up, an evaluation, a checkpoint save, or with --hang_floor_s 0)",
        False,
    ),
    # The run's restart ledger (trainium_job.restarts), read by rank 0 at its start: the values
    # carry over from one attempt to the next, so they only grow over a run (across pods too).
    "bert_train_restarts_total": (
        "Restarts of the run so far by cause (trainium_job.restarts.CAUSES: hang, device, fabric, "
        "driver, failure, preemption), from its restart ledger",
        True,
    ),
    "bert_train_lost_seconds_total": (
        "Wall time the run's restarts cost by cause: from the newest point each could resume from "
        "(checkpoint or previous start) to the next start",
        True,
    ),
    "bert_train_suspect_nodes": (
        "Nodes the run's restart ledger names for a hang, device, fabric or driver cause (the names: "
        "the ledger and the run's last log line)",
        True,
    ),
}
