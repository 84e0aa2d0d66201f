"""The spend-ceiling scene: a job with a small ``training_budget_usd`` on the rehearsal's cluster,
stopped at its ceiling, then redeployed with a raised one.

The gang trains phase 1 (exported with the staged vocabulary). Once it has logged a step, the
job's earlier attempts are made to have spent nearly all of its ceiling: the harness writes one
spend record of an earlier pod (a node, a start and a last look, as a pod's program writes them:
``trainium_job.pod_program.spend``), worth the ceiling. At their next look the pods find the
spend at the ceiling: training stops as at a SIGTERM (the trainer checkpoints), pod 0 exports the
model of the stopped run, and every pod ends with the ceiling's code, which aborts the Job. Then
the job is redeployed with a raised ceiling (a template of its own, so a Volcano Job of another
name): its gang resumes from the stop's checkpoint, trains to the end and exports the final model
over the stopped run's.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from tests.rehearsal.cluster import Cluster
from tests.rehearsal.manifests import Workload
from tests.rehearsal.scenario import (
    DATASET,
    Ended,
    Observations,
    Rehearsal,
    default_ami_tag,
    driver_version,
    image_packages,
)
from tests.rehearsal.two_phases import VOCAB_SOURCE, Sources, two_phase_context
from training.trainer import checkpoint as ckpt
from trainium_eks.jobs.dataset_staging import PUBLIC_BERT_SHARDS
from trainium_job.paths import job_paths
from trainium_job.pod_program import loads

#: The scene's run: long enough that the stop lands well before its end.
RUN, CACHE = "rehearsal-budget", "rehearsal-cache-budget"
MAX_STEPS, CHECKPOINT_EVERY = 200, 5
#: The ceilings: the first small (at least the config check's least: one precompile on the job's
#: nodes), the second raised.
CEILING_USD, RAISED_USD = 20, 2000
#: Steps the gang logs before the earlier attempts' record is written.
STEPS_BEFORE_CEILING = 2

BUDGET_PHASES: Final = ("stage", "stopped_at_ceiling", "raised_ceiling")


def budget_context(vocab_size: int, ceiling_usd: int) -> dict[str, str]:
    """The rehearsal's small variant, phase 1 only, exported, with a spend ceiling."""
    context = two_phase_context(vocab_size)
    for key in [k for k in context if k.startswith("phase2_")]:
        del context[key]
    context.update(
        {
            "training_phases": "1",
            "vocab_source": VOCAB_SOURCE,
            "training_max_steps": str(MAX_STEPS),
            "training_checkpoint_every": str(CHECKPOINT_EVERY),
            "training_cache_set": CACHE,
            "training_run_name": RUN,
            "training_budget_usd": str(ceiling_usd),
        }
    )
    return context


@dataclass
class BudgetObservations(Observations):
    """What the scene saw: the stopped gang, what was exported then, the resumed gang."""

    stopped: Ended = field(default_factory=Ended)
    stop_marker: dict = field(default_factory=dict)
    #: The newest checkpoint, whether the model was exported and marked as a stopped run's, then.
    checkpoint_at_stop: Path | None = None
    exported_at_stop: bool = False
    complete_at_stop: bool = False
    stopped_export_marked: bool = False
    card_at_stop: str = ""
    resume_time: float = 0.0
    resumed_codes: dict[str, int] = field(default_factory=dict)


class BudgetScene(Rehearsal):
    """Plays :data:`BUDGET_PHASES` with the helpers of the rehearsal's story."""

    def __init__(self, cluster: Cluster, workload: Workload, raised: Workload) -> None:
        seen = BudgetObservations(
            paths=job_paths(dataset_name=DATASET, cache_set=CACHE, run_name=RUN),
            fsx=cluster.fsx,
            claim_path=workload.worker.claim_path(),
            phases=BUDGET_PHASES,
        )
        super().__init__(cluster, workload, seen)
        self.budget = seen
        self.raised = raised

    def stopped_at_ceiling(self) -> None:
        """The gang trains; its earlier attempts are made to have spent the ceiling; it stops."""
        self.budget.started = time.time()
        gang = [self.cluster.start_worker(i) for i in range(self.workload.replicas)]
        self.gang = gang
        self._until(lambda: len(self.budget.records()) >= STEPS_BEFORE_CEILING, "the gang trains", pods=gang)
        described = loads(self.workload.worker.command[3]).budget
        assert described is not None, "the scene's template has no spend ceiling"
        earlier = Path(self.budget.local(described.spend_dir)) / "earlier-node.earlier-pod.1.json"
        seconds = described.usd / described.usd_per_node_hour * 3600
        earlier.write_text(
            json.dumps(
                {
                    "node": "earlier-node",
                    "pod": "earlier-pod",
                    "phase": "phase 1",
                    "start": 1.0,
                    "last": 1.0 + seconds,
                }
            )
        )
        self.budget.stopped = self._ended(gang, started=self.budget.started)
        self.budget.gang_logs.append(self.budget.stopped.logs)
        run = self.budget.local(self.budget.paths.output_dir)
        self.budget.checkpoint_at_stop = ckpt.newest_complete(ckpt.checkpoint_root(run))
        model = self.budget.local(self.budget.paths.model_dir)
        self.budget.exported_at_stop = (model / "config.json").exists()
        self.budget.complete_at_stop = self.budget.local(self.budget.paths.complete_marker).exists()
        self.budget.stopped_export_marked = (run / "model.stopped-export").exists()
        self.budget.card_at_stop = (model / "README.md").read_text() if (model / "README.md").exists() else ""
        marker = self.budget.local(described.spend_dir) / "STOP"
        self.budget.stop_marker = json.loads(marker.read_text()) if marker.exists() else {}

    def raised_ceiling(self) -> None:
        """The job redeployed with a raised ceiling: a new Volcano Job, resumed from the stop."""
        self.cluster.workload = self.workload = self.raised
        self.budget.resume_time = time.time()
        self.gang = [self.cluster.start_worker(i) for i in range(self.workload.replicas)]
        try:
            self.budget.resumed_codes = self._wait_all(self.gang, "the gang of the raised ceiling")
        finally:
            self.budget.gang_logs.append({p.hostname: p.output() for p in self.gang})


def play(root: Path, workload: Workload, raised: Workload, made: Sources) -> BudgetObservations:
    """The scene on a fresh cluster under ``root``; every pod is gone when it returns."""
    cluster = Cluster(
        root,
        workload,
        s3_objects={PUBLIC_BERT_SHARDS: made.phase1, VOCAB_SOURCE: made.vocab},
        dpkg_versions=image_packages(),
        driver_version=driver_version(default_ami_tag()),
        s3=True,  # the job uploads its exports: its pods read the model bucket's name
    )
    try:
        scene = BudgetScene(cluster, workload, raised)
        scene.play()
        return scene.budget
    finally:
        cluster.close()
