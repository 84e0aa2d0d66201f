"""The rehearsal's story, played once: the gang waits for the dataset, staging publishes it, the
gang precompiles and trains, one pod is stopped as Kubernetes stops it, Volcano's policy ends
the rest, the gang is started again and resumes, the staging Job runs again, TensorBoard serves
the run. Each phase records what it saw in :class:`Observations`; the tests assert on them.
"""

from __future__ import annotations

import json
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from tests.rehearsal.cluster import Cluster, Pod, container_exit_code
from tests.rehearsal.manifests import Workload
from training import checkpoint as ckpt
from training.synthetic import SMALL_SET_FLAGS, make_shards
from trainium_eks.dataset_staging import PUBLIC_BERT_SHARDS
from trainium_job.paths import JobPaths, job_paths

#: The small variant's names, so the test knows where the job keeps its files (``job_paths``).
DATASET, CACHE_SET, RUN = "rehearsal-shards", "rehearsal-cache", "rehearsal-run"
NPROC_PER_NODE = 2
MAX_STEPS = 40
CHECKPOINT_EVERY = 3
#: Steps logged before the SIGTERM (the run must be well inside its schedule).
STEPS_BEFORE_STOP = 2
#: The pod stopped: not the one that hosts the rendezvous store (pod 0), the harder case.
VICTIM = 1
#: Polls of the dataset marker each gang pod makes before staging starts.
POLLS_BEFORE_STAGING = 2
#: Seconds a phase may take on 2 busy cores before the rehearsal gives up.
PHASE_TIMEOUT_S = 240


def variant_context(vocab_size: int) -> dict[str, str]:
    """Context of the small variant: tiny BERT, 2 nodes x ``NPROC_PER_NODE`` workers, 1
    micro-batch of 2 per optimizer step, ``MAX_STEPS`` steps, a checkpoint every
    ``CHECKPOINT_EVERY``."""
    return {
        "training_model": "tiny",
        "training_nproc_per_node": str(NPROC_PER_NODE),
        "training_batch_size": "2",
        "training_global_batch": str(2 * 2 * NPROC_PER_NODE),
        "training_max_steps": str(MAX_STEPS),
        "training_checkpoint_every": str(CHECKPOINT_EVERY),
        "training_dataset_name": DATASET,
        "training_cache_set": CACHE_SET,
        "training_run_name": RUN,
        "training_script_args": json.dumps({"vocab_size": str(vocab_size), "warmup_steps": "2"}),
    }


def source_tar(root: Path, env: dict[str, str]) -> tuple[Path, int]:
    """(a tar of 4 small shards laid out in a folder as the public tar is, their vocab size)."""
    shards = make_shards(root, n_docs=40, flags={**SMALL_SET_FLAGS, "num_shards": 4}, env=env, timeout=120)
    tar = root / "bert_pretrain_wikicorpus_tokenized_hdf5_seqlen128.tar"
    with tarfile.open(tar, "w") as archive:
        for path in shards.files:
            archive.add(path, arcname=f"{tar.stem}/{path.name}")
    return tar, shards.vocab_size


class RehearsalError(AssertionError):
    """A phase did not reach its end; the message carries every pod's log tail."""


@dataclass
class Stop:
    """What happened to one gang pod after the SIGTERM to the victim."""

    code: int
    ended_by: str  # "SIGTERM" (the victim), "itself", or the Volcano policy's action
    seconds: float  # from its own SIGTERM (or the victim's, for "itself") to its end
    grace_period_s: int


@dataclass
class Observations:
    paths: JobPaths
    fsx: Path
    claim_path: str  # where the gang mounts the claim (/data)
    waiting_stop: Stop | None = None
    polls_before_staging: dict[str, int] = field(default_factory=dict)
    files_before_staging: list[str] = field(default_factory=list)
    staging_code: int | None = None
    staging_log: str = ""
    marker_time: float = 0.0
    steps_at_stop: list[int] = field(default_factory=list)
    stops: dict[str, Stop] = field(default_factory=dict)
    newest_after_stop: Path | None = None
    relaunch_codes: dict[str, int | None] = field(default_factory=dict)
    relaunch_time: float = 0.0
    #: Host name -> log, of the first gang and of the relaunched one.
    gang_logs: list[dict[str, str]] = field(default_factory=list)
    restage_code: int | None = None
    restage_log: str = ""
    calls: list[dict[str, Any]] = field(default_factory=list)  # every stand-in call, at the end
    tensorboard: dict[str, Any] = field(default_factory=dict)
    logs: dict[str, str] = field(default_factory=dict)  # pod name -> log, for failure messages

    def local(self, pod_path: str) -> Path:
        """Where a path on the claim (``/data/...``) is on this machine."""
        return self.fsx / Path(pod_path).relative_to(self.claim_path)

    def records(self) -> list[dict[str, Any]]:
        """Rank 0's per-step records (``train_log.jsonl`` in the run's output directory)."""
        path = self.local(self.paths.output_dir) / "train_log.jsonl"
        text = path.read_text() if path.exists() else ""
        # Read while rank 0 appends: a line without its newline is not complete yet.
        return [json.loads(x) for x in text.split("\n")[:-1]]


class Rehearsal:
    """Plays the phases in order on one cluster; ``seen`` holds what they observed."""

    def __init__(self, cluster: Cluster, workload: Workload) -> None:
        self.cluster = cluster
        self.workload = workload
        self.seen = Observations(
            paths=job_paths(dataset_name=DATASET, cache_set=CACHE_SET, run_name=RUN),
            fsx=cluster.fsx,
            claim_path=workload.worker.claim_path(),
        )
        self.gang: list[Pod] = []
        self.started = 0.0  # when the gang started

    def play(self) -> Observations:
        self.stop_while_waiting()
        self.start_gang()
        self.wait_until_polling()
        self.stage()
        self.train_until_stopped()
        self.relaunch()
        self.restage()
        self.tensorboard()
        self.seen.calls = self.cluster.calls()
        return self.seen

    # --- phases -----------------------------------------------------------------------------
    def stop_while_waiting(self) -> None:
        """A gang pod deleted before the dataset is there (``kubectl delete``, a re-deploy)."""
        pod = self.cluster.start_worker(0)
        self.gang = [pod]
        self._until(lambda: any(c["host"] == pod.hostname for c in self.cluster.calls("sleep")), "a poll")
        t0 = time.monotonic()
        code = self.cluster.stop(pod, self.workload.worker.grace_period_s)
        self.seen.waiting_stop = Stop(
            code, "SIGTERM", time.monotonic() - t0, self.workload.worker.grace_period_s
        )

    def start_gang(self) -> None:
        """Volcano's gang start: every replica at once."""
        self.started = time.time()
        self.gang = [self.cluster.start_worker(i) for i in range(self.workload.replicas)]

    def wait_until_polling(self) -> None:
        """Until every gang pod has polled the (absent) dataset marker a few times."""

        def polls() -> dict[str, int]:
            hosts = [c["host"] for c in self.cluster.calls("sleep") if c["time"] > self.started]
            return {p.hostname: hosts.count(p.hostname) for p in self.gang}

        self._until(lambda: min(polls().values()) >= POLLS_BEFORE_STAGING, "the gang polls the marker")
        self.seen.polls_before_staging = polls()
        self.seen.files_before_staging = sorted(
            str(p.relative_to(self.cluster.fsx)) for p in self.cluster.fsx.rglob("*")
        )

    def stage(self) -> None:
        pod = self.cluster.start_staging()
        self.seen.staging_code = pod.wait(PHASE_TIMEOUT_S)
        self.seen.staging_log = pod.output()
        marker = self.seen.local(self.seen.paths.dataset_marker)
        self.seen.marker_time = marker.stat().st_mtime if marker.exists() else 0.0
        if self.seen.staging_code != 0:
            raise self._failed("staging")

    def train_until_stopped(self) -> None:
        """Precompile and training, then the victim's SIGTERM; Volcano's policy for the others."""
        self._until(lambda: len(self.seen.records()) >= STEPS_BEFORE_STOP, "training logs its first steps")
        victim, grace = self.gang[VICTIM], self.workload.worker.grace_period_s
        t0 = time.monotonic()
        code = self.cluster.stop(victim, grace)
        self.seen.stops[victim.hostname] = Stop(code, "SIGTERM", time.monotonic() - t0, grace)
        # The victim failed: Volcano applies the Job's policy for PodFailed to the others.
        action = self.workload.policies.get("PodFailed" if code != 0 else "", "")
        for pod in self.gang:
            if pod is victim:
                continue
            if not pod.running:
                ended = container_exit_code(pod.proc.wait())
                self.seen.stops[pod.hostname] = Stop(ended, "itself", time.monotonic() - t0, grace)
                continue
            t1 = time.monotonic()
            if action == "RestartJob":  # Volcano deletes every pod of the job, then starts it again
                other = self.cluster.stop(pod, grace)
            else:  # nothing ends it: does it end by itself within a grace period?
                waited = pod.wait(grace)
                other = self.cluster.stop(pod, 0) if waited is None else waited
            self.seen.stops[pod.hostname] = Stop(other, action or "itself", time.monotonic() - t1, grace)
        self.seen.steps_at_stop = [r["step"] for r in self.seen.records()]
        self.seen.newest_after_stop = ckpt.newest_complete(
            ckpt.checkpoint_root(self.seen.local(self.seen.paths.output_dir))
        )
        self.seen.gang_logs.append({p.hostname: p.output() for p in self.gang})

    def relaunch(self) -> None:
        """RestartJob's second half: the same commands in fresh pods, run to the end."""
        self.seen.relaunch_time = time.time()
        self.gang = [self.cluster.start_worker(i) for i in range(self.workload.replicas)]
        deadline = time.monotonic() + PHASE_TIMEOUT_S
        for pod in self.gang:
            self.seen.relaunch_codes[pod.hostname] = pod.wait(max(1.0, deadline - time.monotonic()))
        self.seen.gang_logs.append({p.hostname: p.output() for p in self.gang})
        if set(self.seen.relaunch_codes.values()) != {0}:
            raise self._failed("the relaunched gang")

    def restage(self) -> None:
        """The staging Job again (a re-deploy, a second job on the same dataset)."""
        pod = self.cluster.start_staging()
        self.seen.restage_code = pod.wait(PHASE_TIMEOUT_S)
        self.seen.restage_log = pod.output()

    def tensorboard(self) -> None:
        """TensorBoard's command: ready on its probe, then its run list and the loss scalars."""
        spec = self.workload.tensorboard
        pod = self.cluster.start_tensorboard()
        base = f"http://127.0.0.1:{spec.port}"
        tb: dict[str, Any] = {"runs": [], "loss_steps": []}
        try:
            probe = base + (spec.readiness_path or "/")
            self._until(lambda: self.cluster.http_get(probe)[0] == 200, "TensorBoard ready", gang=False)

            def runs() -> list[str]:
                status, body = self.cluster.http_get(f"{base}/data/runs")
                return json.loads(body) if status == 200 else []

            self._until(lambda: bool(runs()), "TensorBoard lists a run", gang=False)
            tb["runs"] = runs()
            status, body = self.cluster.http_get(f"{base}/data/plugin/scalars/tags")
            tb["tags"] = json.loads(body) if status == 200 else {}
            run = next((r for r in tb["runs"] if "train/loss" in tb["tags"].get(r, {})), None)
            if run is not None:
                url = f"{base}/data/plugin/scalars/scalars?run={quote(run)}&tag={quote('train/loss')}"
                status, body = self.cluster.http_get(url)
                tb["loss_steps"] = [point[1] for point in json.loads(body)] if status == 200 else []
        finally:
            tb["code"] = self.cluster.stop(pod, spec.grace_period_s)
            self.seen.logs[pod.name] = pod.output()
        self.seen.tensorboard = tb

    # --- helpers -------------------------------------------------------------------------------
    def _until(self, condition: Callable[[], bool], what: str, *, gang: bool = True) -> None:
        """Poll ``condition``; fail on the timeout, or (``gang``) when a gang pod ends first."""
        deadline = time.monotonic() + PHASE_TIMEOUT_S
        while not condition():
            if time.monotonic() > deadline:
                raise self._failed(f"timed out: {what}")
            if gang and any(not p.running for p in self.gang):
                raise self._failed(f"a gang pod ended before: {what}")
            time.sleep(0.1)

    def _keep_logs(self) -> None:
        for pod in self.cluster.pods:
            self.seen.logs[pod.name] = pod.output()

    def _failed(self, what: str) -> RehearsalError:
        self._keep_logs()
        tails = "\n".join(f"--- {name}\n{log[-3000:]}" for name, log in self.seen.logs.items())
        return RehearsalError(f"rehearsal: {what}\n{tails}")


def play(root: Path, workload: Workload, tar: Path) -> Observations:
    """The whole story on a fresh cluster under ``root``; every pod is gone when it returns."""
    cluster = Cluster(root, workload, s3_objects={PUBLIC_BERT_SHARDS: tar})
    try:
        return Rehearsal(cluster, workload).play()
    finally:
        cluster.close()
