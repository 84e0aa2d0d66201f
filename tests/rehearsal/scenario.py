"""The rehearsal's story, played once: the gang on nodes with a driver the image refuses stops
at once; a gang pod that waits for a dataset stops at once on SIGTERM; a staging that gives up
(its source broken) ends the gang that waits for it and its submitter at once, no Volcano Job
created; then the job's submitter waits while staging publishes the dataset, and only then creates
the Volcano Job, whose gang precompiles, checks the fabric and trains (its metrics scraped), one pod
is stopped as Kubernetes stops it,
Volcano's policy ends the rest, the gang is started again and resumes, the staging Job runs
again, TensorBoard serves the run; last, the gang meets nodes whose EFA counters stand still and
the job is aborted. Then six fresh nodes come up: the node-health-check DaemonSet's pod checks
each (four have a fault, one for each of its checks) and labels and taints it through a stand-in
Kubernetes API, and
the gang goes where the scheduler may put it. Last, two fresh nodes whose check never gives a
verdict (one hangs, one is killed at every start and restarted) must end failed and replaced
once the verdict's bound, shortened to seconds, has passed. Each phase records what it saw in
:class:`Observations`; the tests assert on them.
"""

from __future__ import annotations

import json
import os
import re
import signal
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote

from tests.rehearsal import efa
from tests.rehearsal.cluster import Cluster, Pod, container_exit_code, die_with_test
from tests.rehearsal.kube_api import KubeApi, gang_placement, node_object, schedulable, selects
from tests.rehearsal.manifests import Workload
from tests.rehearsal.substitutions import POD_NETWORK
from tests.support import REPO
from training.dataprep.synthetic import SMALL_SET_FLAGS, make_shards
from training.node.driver_check import RUNTIME_PACKAGE
from training.trainer import checkpoint as ckpt
from trainium_eks.jobs.dataset_staging import PUBLIC_BERT_SHARDS
from trainium_eks.versions import DEFAULT_KUBERNETES_VERSION, default_neuron_ami_release, neuron_ami_release
from trainium_job.instances import instance_facts
from trainium_job.neuron_stack import NEURON_STACK
from trainium_job.paths import JobPaths, job_paths
from trainium_job.scheduling import INSTANCE_TYPE_LABEL, TRAINIUM_NODE_LABEL
from trainium_job.telemetry import METRICS_PORT

#: The small variant's names, so the test knows where the job keeps its files (``job_paths``).
DATASET, CACHE_SET, RUN = "rehearsal-shards", "rehearsal-cache", "rehearsal-run"
NPROC_PER_NODE = 2
MAX_STEPS = 40
CHECKPOINT_EVERY = 3
#: Steps logged before the SIGTERM (the run must be well inside its schedule).
STEPS_BEFORE_STOP = 2
#: The pod stopped: not the one that hosts the rendezvous store (pod 0), the harder case.
VICTIM = 1
#: The step watchdog's floor in the rehearsal (``--hang_floor_s``; 300 s by default): above any
#: step of the tiny model on 2 busy cores (well under 5 s), short enough for the hang scene.
HANG_FLOOR_S = 20
#: Steps the relaunched gang logs before one of its workers is stopped for good (SIGSTOP): past
#: the watchdog's warm-up (3 steps unbounded, --hang_warmup_steps) and into its bounded steps.
STEPS_BEFORE_HANG = 5
#: The worker stopped: LOCAL_RANK 1 of the :data:`VICTIM` pod, so the watchdogs that fire are
#: those of every other rank, rank 0 (which writes the step log and the ledger) among them.
HUNG_LOCAL_RANK = 1
#: Stops tried before one lands in an optimizer step (see ``Rehearsal._stop_in_a_step``).
STOP_ATTEMPTS = 6
#: Seconds after a SIGSTOP for the other ranks to reach the collective that waits for the stopped one.
PHASE_SETTLE_S = 2.0
#: Polls of the dataset marker the submitter makes before staging starts.
POLLS_BEFORE_STAGING = 2
#: What the aws stand-in answers for the source in the failed-staging scene (an S3 error as the
#: AWS CLI prints one).
SOURCE_ERROR = "An error occurred (AccessDenied) when calling the GetObject operation: Access Denied"
#: Seconds a phase may take on 2 busy cores before the rehearsal gives up.
PHASE_TIMEOUT_S = 240
#: Seconds the deep-check scene's pods may take to label every node: their compute checks load
#: torch in 128 processes (32 NeuronCores on each of the four nodes that get that far), about
#: 155 s on 2 otherwise idle cores.
DEEP_CHECK_TIMEOUT_S = 2 * PHASE_TIMEOUT_S
#: Seconds the other gang pods get to end by themselves after the first one failed, before the
#: harness applies the Job's policy to them.
SAME_FAILURE_S = 30
#: Bytes the stopped pod's node must have sent since the gang's start before the SIGTERM that
#: breaks the fabric check off: two of its all-reduces (each sends 3/2 of the 8 MiB buffer).
FABRIC_BYTES_BEFORE_STOP = 2 * 12 * 2**20
#: The Neuron version strings the pods read, as recorded (each file says where it comes from).
RECORDED_VERSIONS = REPO / "tests" / "training" / "node" / "recorded" / "neuron_versions"
#: An EKS Neuron AMI release whose driver (2.29.0.0) the image's runtime does not run: it
#: "requires Neuron Runtime Library 2.33 or later" (trainium_job/neuron_stack.py).
REFUSED_DRIVER_AMI = "v20260714"
#: The deep check's fresh nodes (none of the gang's earlier ones).
HEALTH_NODE = "rehearsal-new-node-{}"
HEALTH_NODES = 6
#: Node index -> the check its fault fails, one node per check; the other two nodes are healthy
#: (the gang's two). ``devices``: ``neuron-ls`` lists :data:`DEVICES_MISSING` device fewer;
#: ``compute``: NeuronCore :data:`FAULTY_CORE` gets its products wrong; ``collective``:
#: ``nccom-test`` reports a failed run; ``efa``: the driver lists :data:`EFA_MISSING` EFA device fewer.
FAULTS: Final = {1: "devices", 3: "compute", 4: "collective", 5: "efa"}
DEVICES_MISSING = 1
FAULTY_CORE = 5
EFA_MISSING = 1
#: The no-verdict scene's nodes, each with a check that never gives a verdict: ``hang``, its
#: ``neuron-ls`` never answers; ``crash``, the same, and its check's process is killed (as the
#: kernel's OOM killer would) at each start once it runs a check, its container restarted.
SILENT_NODE = "rehearsal-silent-node-{}"
SILENT_FAULTS: Final = {0: "hang", 1: "crash"}
#: The verdict's bound in that scene (``--verdict-deadline-s``; 3,660 s on a trn1.32xlarge): long
#: enough for a few starts of the crashing check on 2 busy cores, short for the suite.
NO_VERDICT_DEADLINE_S = 20
#: Seconds between a crashed container's end and its restart (the kubelet's back-off starts at
#: 10 s and doubles; shortened here as the bound is).
RESTART_BACKOFF_S = 1.0
#: The gang's driver check line on a supported pair (training.node.driver_check ``verdict``).
DRIVER_CHECK_OK = ": a supported pair"
#: The pod program's (and the submitter's) line while it waits (trainium_job.waits ``wait_for``),
#: at the start of a line (the step watchdog's line says "waiting for" too, later in its line).
WAITING = "\nwaiting for "


def waits(log: str) -> int:
    """How many times a pod's log says it waited for something (a look at a marker)."""
    return ("\n" + log).count(WAITING)


def driver_version(ami_tag: str) -> str:
    """``/sys/module/neuron/version`` on a node of the EKS Neuron AMI release ``ami_tag``."""
    return (RECORDED_VERSIONS / f"sys_module_neuron_version.ami-{ami_tag}").read_text()


def default_ami_tag() -> str:
    """The tag of the AMI release the platform pins by default (its default Kubernetes version)."""
    release = neuron_ami_release(default_neuron_ami_release(DEFAULT_KUBERNETES_VERSION))
    assert release is not None
    return release.tag


def image_packages() -> dict[str, str]:
    """What ``dpkg-query`` answers in the training image: its Neuron runtime package's version."""
    recorded = RECORDED_VERSIONS / f"dpkg_query_runtime_lib.dlc-{NEURON_STACK.neuron_sdk}"
    return {RUNTIME_PACKAGE: recorded.read_text()}


def variant_context(vocab_size: int) -> dict[str, str]:
    """Context of the small variant: tiny BERT, 2 nodes x ``NPROC_PER_NODE`` workers, 1
    micro-batch of 2 per optimizer step, ``MAX_STEPS`` steps, a checkpoint every
    ``CHECKPOINT_EVERY``; the fabric check's floor 0 GB/s (gloo between the pods reaches ~0.1
    GB/s on 2 busy cores, and the key takes whole numbers: 0 checks the EFA path only). Phase 1
    only, without the export: the two phases are the scene of ``tests/rehearsal/test_two_phases.py``."""
    return {
        "training_phases": "1",
        "vocab_source": "",
        "training_fabric_check_min_busbw_gbps": "0",
        "training_model": "tiny",
        "training_nproc_per_node": str(NPROC_PER_NODE),
        "training_batch_size": "2",
        "training_global_batch": str(2 * 2 * NPROC_PER_NODE),
        "training_max_steps": str(MAX_STEPS),
        "training_checkpoint_every": str(CHECKPOINT_EVERY),
        "training_dataset_name": DATASET,
        "training_cache_set": CACHE_SET,
        "training_run_name": RUN,
        "training_script_args": json.dumps(
            {"vocab_size": str(vocab_size), "warmup_steps": "2", "hang_floor_s": str(HANG_FLOOR_S)}
        ),
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


#: The story's phases, in the order :meth:`Rehearsal.play` plays them (each a method of it).
PHASES: Final = (
    "refuse_driver",
    "stop_while_waiting",
    "failed_staging",
    "submit_after_staging",
    "train_until_stopped",
    "relaunch",
    "restage",
    "tensorboard",
    "fabric_fallback",
    "stop_in_fabric_check",
    "deep_check",
    "no_verdict",
)


@dataclass
class Stop:
    """What happened to one gang pod after the SIGTERM to the victim."""

    code: int
    ended_by: str  # "SIGTERM" (the victim), "itself", or the Volcano policy's action
    seconds: float  # from its own SIGTERM (or the victim's, for "itself") to its end
    grace_period_s: int


@dataclass
class Ended:
    """A gang that ended by itself: each pod's exit code, how it ended, its log; the Job's action."""

    codes: dict[str, int] = field(default_factory=dict)
    ended_by: dict[str, str] = field(default_factory=dict)  # "itself" or the policy's action
    logs: dict[str, str] = field(default_factory=dict)
    nodes: dict[str, str] = field(default_factory=dict)  # host name -> node name
    action: str | None = None  # the Volcano Job's action for the first failed pod
    #: The Job's action had each pod's failure been the first Volcano saw (None: it succeeded).
    actions: dict[str, str | None] = field(default_factory=dict)
    started: float = 0.0  # time.time() at the gang's start
    seconds: float = 0.0  # from the start until every pod had ended


@dataclass
class DeepCheck:
    """The node-health-check DaemonSet's pods on fresh nodes, then the gang's placement."""

    faults: dict[str, str] = field(default_factory=dict)  # node -> the check its fault fails
    registered: dict[str, dict[str, Any]] = field(default_factory=dict)  # the Nodes before
    #: Node -> whether the DaemonSet's pod may be scheduled there (before any check).
    daemon_fits: dict[str, bool] = field(default_factory=dict)
    codes: dict[str, int] = field(default_factory=dict)  # node -> its check pod's exit code
    logs: dict[str, str] = field(default_factory=dict)  # node -> its check pod's log
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)  # the Nodes after the checks
    requests: list[dict[str, Any]] = field(default_factory=list)  # every request to the stand-in
    seconds: float = 0.0  # from the first check pod's start until the last was removed
    phase_seconds: float = 0.0  # the whole scene, the gang's placement included
    #: The gang's nodes as the scheduler finds them after the checks, and with one good node only
    #: (None: no placement, the gang waits).
    placement: list[str] | None = None
    placement_one_good: list[str] | None = None
    gang_nodes: dict[str, str] = field(default_factory=dict)  # host name -> node name
    gang_logs: dict[str, str] = field(default_factory=dict)
    gang_codes: dict[str, int] = field(default_factory=dict)


@dataclass
class NoVerdict:
    """The node-health-check DaemonSet's pods on nodes whose check never gives a verdict."""

    faults: dict[str, str] = field(default_factory=dict)  # node -> "hang" or "crash"
    registered: dict[str, dict[str, Any]] = field(default_factory=dict)  # the Nodes before
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)  # the Nodes after
    requests: list[dict[str, Any]] = field(default_factory=list)  # every request to the stand-in
    starts: dict[str, int] = field(default_factory=dict)  # node -> its check container's starts
    codes: dict[str, int] = field(default_factory=dict)  # node -> its last container's exit code
    logs: dict[str, str] = field(default_factory=dict)  # node -> its check pod's log (every start)
    #: Node -> seconds from its pod's first start until it was labelled.
    seconds: dict[str, float] = field(default_factory=dict)


@dataclass
class Observations:
    paths: JobPaths
    fsx: Path
    claim_path: str  # where the gang mounts the claim (/data)
    #: The gang on nodes whose Neuron driver the image's runtime does not run.
    refused_driver: Ended = field(default_factory=Ended)
    waiting_stop: Stop | None = None
    #: A staging that gave up: the gang that waited for its dataset, and the submitter.
    failed_staging: Ended = field(default_factory=Ended)
    failed_staging_code: int | None = None
    failed_staging_log: str = ""
    failed_submitter_code: int | None = None
    failed_submitter_log: str = ""
    failed_marker_time: float = 0.0
    #: The submitter's polls before staging started, its exit code and log, what it created and when.
    polls_before_staging: int = 0
    files_before_staging: list[str] = field(default_factory=list)
    submitter_code: int | None = None
    submitter_log: str = ""
    submitted: dict[str, Any] = field(default_factory=dict)  # name -> the Volcano Job created
    submit_time: float = 0.0
    #: Requests to the stand-in API before the submission (none may create a Volcano Job).
    requests_before_marker: list[dict[str, Any]] = field(default_factory=list)
    staging_code: int | None = None
    staging_log: str = ""
    marker_time: float = 0.0
    steps_at_stop: list[int] = field(default_factory=list)
    stops: dict[str, Stop] = field(default_factory=dict)
    newest_after_stop: Path | None = None
    relaunch_codes: dict[str, int | None] = field(default_factory=dict)
    relaunch_time: float = 0.0
    #: The relaunched gang's worker stopped for good: when (time.time()), and the last step rank 0
    #: had logged then.
    hang_time: float = 0.0
    steps_before_hang: int = 0
    #: The phase the gang's other ranks were in after each SIGSTOP (the last one: ``step``).
    hang_phases: list[str] = field(default_factory=list)
    #: Host name -> log, of the first gang and of the relaunched one.
    gang_logs: list[dict[str, str]] = field(default_factory=list)
    #: Host name -> node name of the gang's pods.
    gang_nodes: dict[str, str] = field(default_factory=dict)
    #: Host name -> the /metrics bodies scraped from its pod while training, in order.
    metrics: dict[str, list[str]] = field(default_factory=dict)
    #: The gang on nodes whose EFA counters stand still (a TCP fallback).
    fabric_fallback: Ended = field(default_factory=Ended)
    #: The gang with one pod deleted while the fabric check's all-reduce runs.
    stopped_in_check: Ended = field(default_factory=Ended)
    restage_code: int | None = None
    restage_log: str = ""
    deep_check: DeepCheck = field(default_factory=DeepCheck)
    no_verdict: NoVerdict = field(default_factory=NoVerdict)
    calls: list[dict[str, Any]] = field(default_factory=list)  # every stand-in call, at the end
    tensorboard: dict[str, Any] = field(default_factory=dict)
    logs: dict[str, str] = field(default_factory=dict)  # pod name -> log, for failure messages
    #: The phases that reached their end, in order (:data:`PHASES`).
    done: list[str] = field(default_factory=list)
    #: The phase that failed and why (every pod's log tail), or None: the story stops there, and
    #: each test that needs that phase or a later one fails with this message, naming it.
    failed_phase: str | None = None
    failure: str = ""
    #: The story these observations are of: its phases in order (:data:`PHASES`, or a scene's).
    phases: tuple[str, ...] = PHASES

    def require(self, phase: str) -> None:
        """Fail the calling test, naming the phase, unless ``phase`` and those before it ended."""
        if phase not in self.phases:
            raise ValueError(f"no rehearsal phase {phase!r}: {', '.join(self.phases)}")
        if phase not in self.done:
            failed = self.failed_phase or "an earlier phase"
            after = "" if failed == phase else f", so {phase!r} did not play"
            raise RehearsalError(f"rehearsal phase {failed!r} failed{after}: {self.failure}")

    def local(self, pod_path: str) -> Path:
        """Where a path on the claim (``/data/...``) is on this machine."""
        return self.fsx / Path(pod_path).relative_to(self.claim_path)

    def records(self, paths: JobPaths | None = None) -> list[dict[str, Any]]:
        """Rank 0's per-step training records (``train_log.jsonl`` in the run's output directory,
        or in ``paths``' run's), without the held-out evaluations' (:meth:`evaluations`)."""
        return [r for r in self._log(paths) if not any(k.startswith("eval_") for k in r)]

    def evaluations(self, paths: JobPaths | None = None) -> list[dict[str, Any]]:
        """Rank 0's held-out evaluation records (``eval_*`` values) in the same file."""
        return [r for r in self._log(paths) if any(k.startswith("eval_") for k in r)]

    def _log(self, paths: JobPaths | None) -> list[dict[str, Any]]:
        path = self.local((paths or self.paths).output_dir) / "train_log.jsonl"
        text = path.read_text() if path.exists() else ""
        # Read while rank 0 appends: a line without its newline is not complete yet.
        return [json.loads(x) for x in text.split("\n")[:-1]]


class Rehearsal:
    """Plays the phases in order on one cluster; ``seen`` holds what they observed."""

    def __init__(self, cluster: Cluster, workload: Workload, seen: Observations | None = None) -> None:
        self.cluster = cluster
        self.workload = workload
        self.seen = seen or Observations(
            paths=job_paths(dataset_name=DATASET, cache_set=CACHE_SET, run_name=RUN),
            fsx=cluster.fsx,
            claim_path=workload.worker.claim_path(),
        )
        self.gang: list[Pod] = []
        self.started = 0.0  # when the gang started

    def play(self) -> Observations:
        """Each phase of :data:`PHASES` in order, until one fails: what it saw is kept and the
        failure recorded (the tests of the phases that ended still run)."""
        try:
            for phase in self.seen.phases:
                try:
                    getattr(self, phase)()
                except RehearsalError as e:
                    self.seen.failed_phase, self.seen.failure = phase, str(e)
                    break
                self.seen.done.append(phase)
        finally:
            self.seen.calls = self.cluster.calls()
        return self.seen

    # --- phases -----------------------------------------------------------------------------
    def refuse_driver(self) -> None:
        """The gang on nodes of an AMI release whose Neuron driver the image's runtime does not
        run (a ``trainium_ami_release_version`` pinned by hand); the dataset is not there yet."""
        good, self.cluster.driver_version = self.cluster.driver_version, driver_version(REFUSED_DRIVER_AMI)
        try:
            self.seen.refused_driver = self._run_until_ended()
        finally:
            self.cluster.driver_version = good

    def stop_while_waiting(self) -> None:
        """A gang pod deleted before the dataset is there (``kubectl delete``, a re-deploy): a job
        submitted before its data (by hand, through TorchX) waits on its node."""
        pod = self.cluster.start_worker(0)
        self.gang = [pod]
        self._until(lambda: waits(pod.output()) > 0, "a poll")
        t0 = time.monotonic()
        code = self.cluster.stop(pod, self.workload.worker.grace_period_s)
        self.seen.waiting_stop = Stop(
            code, "SIGTERM", time.monotonic() - t0, self.workload.worker.grace_period_s
        )

    def failed_staging(self) -> None:
        """A staging whose source fails (access denied) gives up after its attempts: the gang that
        waits for its dataset (started before it, as a job submitted by hand would be) and the job's
        submitter end at once with its reason; no Volcano Job is created."""
        seen = self.seen
        api = self._api("kube-api-failed-staging")
        self.cluster.s3_failure(PUBLIC_BERT_SHARDS, SOURCE_ERROR)
        try:
            submitter = self.cluster.start_submitter(api)
            seen.failed_staging = self._gang_against(self.cluster.start_staging)
            seen.failed_submitter_code = submitter.wait(PHASE_TIMEOUT_S)
            seen.failed_submitter_log = submitter.output()
            failed = self.seen.local(self.seen.paths.dataset_failed)
            seen.failed_marker_time = failed.stat().st_mtime if failed.exists() else 0.0
            if api.volcano_jobs():
                raise self._failed("the submitter created the Volcano Job of a failed staging")
        finally:
            self.cluster.s3_failure(PUBLIC_BERT_SHARDS, None)
            api.close()
            # The user fixes the source: a new staging Job, whose waiters no longer count the old
            # one's failed marker (trainium_job.waits). The harness stands for that by removing it.
            self.seen.local(self.seen.paths.dataset_failed).unlink(missing_ok=True)

    def _gang_against(self, start_staging: Callable[[], Pod]) -> Ended:
        """The gang started, then the staging (``start_staging``); the staging's code and log, and
        the gang's end, once the gang has ended."""
        gang = [self.cluster.start_worker(i) for i in range(self.workload.replicas)]
        self._until(
            lambda: all(waits(p.output()) > 0 for p in gang), "the gang waits for the dataset", pods=gang
        )
        staging = start_staging()
        self.seen.failed_staging_code = staging.wait(PHASE_TIMEOUT_S)
        self.seen.failed_staging_log = staging.output()
        return self._ended(gang, started=time.time())

    def submit_after_staging(self) -> None:
        """The job's submitter waits for the dataset while staging publishes it; it then creates the
        Volcano Job, and only then does Volcano start the gang (from that Job's pod template)."""
        seen = self.seen
        api = self._api("kube-api-submit")
        try:
            submitter = self.cluster.start_submitter(api)
            polls = lambda: waits(submitter.output())  # noqa: E731 - read twice below
            self._until(
                lambda: polls() >= POLLS_BEFORE_STAGING, "the submitter polls the marker", pods=[submitter]
            )
            seen.polls_before_staging = polls()
            seen.files_before_staging = sorted(
                str(p.relative_to(self.cluster.fsx)) for p in self.cluster.fsx.rglob("*")
            )
            self.stage()
            seen.requests_before_marker = [r for r in api.requests() if r["time"] < seen.marker_time]
            self._until(lambda: bool(api.volcano_jobs()), "the submitter creates the Volcano Job", gang=False)
            seen.submitted, seen.submit_time = api.volcano_jobs(), time.time()
            seen.submitter_code = submitter.wait(PHASE_TIMEOUT_S)
            seen.submitter_log = submitter.output()
        finally:
            api.close()
        if seen.submitter_code != 0:
            raise self._failed(f"the submitter exited {seen.submitter_code}")
        self.start_gang()

    def start_gang(self) -> None:
        """Volcano's gang start: every replica at once."""
        self.started = time.time()
        self.gang = [self.cluster.start_worker(i) for i in range(self.workload.replicas)]
        self.seen.gang_nodes = {p.hostname: p.node for p in self.gang}

    def stage(self) -> None:
        pod = self.cluster.start_staging()
        self.seen.staging_code = self._wait_all([pod], "staging")[pod.hostname]
        self.seen.staging_log = pod.output()
        marker = self.seen.local(self.seen.paths.dataset_marker)
        self.seen.marker_time = marker.stat().st_mtime if marker.exists() else 0.0
        if self.seen.staging_code != 0:
            raise self._failed("staging")

    def train_until_stopped(self) -> None:
        """Precompile, the fabric check and training (each pod's metrics scraped after the first
        logged step and again later), then the victim's SIGTERM; Volcano's policy for the others."""
        self._until(lambda: len(self.seen.records()) >= 1, "training logs its first step")
        self._scrape_metrics()
        self._until(lambda: len(self.seen.records()) >= STEPS_BEFORE_STOP, "training logs its first steps")
        self._scrape_metrics()
        victim, grace = self.gang[VICTIM], self.workload.worker.grace_period_s
        t0 = time.monotonic()
        code = self.cluster.stop(victim, grace)
        self.seen.stops[victim.hostname] = Stop(code, "SIGTERM", time.monotonic() - t0, grace)
        # The victim failed: Volcano applies the Job's policy for that failure to the others.
        action = self.workload.action_for_failure(code) if code != 0 else None
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
        """RestartJob's second half: the same commands in fresh pods, run to the end. On the way
        one worker stops for good (SIGSTOP: a device or a collective that never returns): the
        other ranks' watchdogs end them, torchrun restarts the worker group (its agent kills the
        stopped one) and the gang resumes from its newest checkpoint with no one acting."""
        self.seen.relaunch_time = time.time()
        self.gang = [self.cluster.start_worker(i) for i in range(self.workload.replicas)]
        try:
            self._until(
                lambda: len(self._records_since(self.seen.relaunch_time)) >= STEPS_BEFORE_HANG,
                "the relaunched gang logs its first steps",
            )
            self._stop_in_a_step(self.gang[VICTIM].worker("training.trainer.pretrain", HUNG_LOCAL_RANK))
            self.seen.relaunch_codes.update(self._wait_all(self.gang, "the relaunched gang"))
        finally:
            self.seen.gang_logs.append({p.hostname: p.output() for p in self.gang})

    def _stop_in_a_step(self, worker: int) -> None:
        """SIGSTOP ``worker`` while the gang is in an optimizer step. A checkpoint save has no
        bound by design (the watchdog's docstring: the collective timeout, 30 min, bounds a wait
        there), and a step takes ~0.1 s here against a save's ~0.1-0.3 s, so a stop lands in a
        save about as often as not: the other ranks then wait in the save, and the scene would
        test the collective timeout instead (two rehearsal runs in four did). So the stop is
        checked: a few seconds later the ranks still running report their phase on the pod's
        metrics port; if it is not ``step``, the worker is continued (SIGCONT) and stopped again
        after the next logged step."""
        metrics = f"http://{self.gang[VICTIM].address}:{METRICS_PORT}/metrics"
        for _ in range(STOP_ATTEMPTS):
            before = max(r["step"] for r in self._records_since(self.seen.relaunch_time))
            self.seen.steps_before_hang, self.seen.hang_time = before, time.time()
            os.kill(worker, signal.SIGSTOP)
            time.sleep(PHASE_SETTLE_S)
            status, body = self.cluster.http_get(metrics)
            # prometheus_client's Enum: the state is a label named after the metric.
            phase = re.search(r'^bert_train_phase\{bert_train_phase="(\w+)"\} 1\.0$', body, re.MULTILINE)
            self.seen.hang_phases.append(phase.group(1) if status == 200 and phase else "unknown")
            if self.seen.hang_phases[-1] == "step":
                return
            os.kill(worker, signal.SIGCONT)
            self._until(
                lambda before=before: (
                    max(r["step"] for r in self._records_since(self.seen.relaunch_time)) > before + 1
                ),
                "the gang steps again after a stop in a checkpoint save",
            )
        raise self._failed(
            f"no stop landed in an optimizer step in {STOP_ATTEMPTS} tries: {self.seen.hang_phases}"
        )

    def restage(self) -> None:
        """The staging Job again (a re-deploy, a second job on the same dataset)."""
        pod = self.cluster.start_staging()
        self.seen.restage_code = self._wait_all([pod], "staging again")[pod.hostname]
        self.seen.restage_log = pod.output()

    def tensorboard(self) -> None:
        """TensorBoard's command: ready on its probe, then its run list and the loss scalars."""
        spec = self.workload.tensorboard
        if spec is None:
            raise self._failed("the template has no TensorBoard")
        pod = self.cluster.start_tensorboard()
        base = f"http://{pod.address}:{spec.port}"
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

    def fabric_fallback(self) -> None:
        """The gang again on nodes whose EFA counters stand still while the all-reduce's bytes
        cross between the pods: what a node shows when the collectives fell back to TCP sockets.
        The dataset and cache markers are there, so the fabric check is the first long step."""
        self._longer_schedule()
        self.cluster.fabric.follow = False
        try:
            self.seen.fabric_fallback = self._run_until_ended()
        finally:
            self.cluster.fabric.follow = True

    def _longer_schedule(self) -> None:
        """The run's ``COMPLETE`` marker removed: what a redeploy with a longer schedule (a larger
        ``training_max_steps``) finds, a run short of its end, so the pods check the fabric again
        before training (a complete run is skipped, checks and all)."""
        self.seen.local(self.seen.paths.complete_marker).unlink(missing_ok=True)

    def stop_in_fabric_check(self) -> None:
        """The gang again, one pod deleted (drained, evicted) while the fabric check's all-reduce
        runs, once its node has sent :data:`FABRIC_BYTES_BEFORE_STOP`: Volcano's policy for that
        pod's failure must reach the other pod before any abort of the job does."""
        self._longer_schedule()
        counters = self.cluster.node(VICTIM).efa_counters / "tx_bytes"
        sent = int(counters.read_text())
        victim = VICTIM

        def stop(gang: list[Pod]) -> Pod:
            self._until(
                lambda: int(counters.read_text()) - sent >= FABRIC_BYTES_BEFORE_STOP,
                "the fabric check's all-reduce runs",
                pods=gang,
            )
            gang[victim].terminate()
            return gang[victim]

        self.seen.stopped_in_check = self._run_until_ended(stop=stop)

    def deep_check(self) -> None:
        """The ``node-health-check`` DaemonSet's pod on :data:`HEALTH_NODES` fresh nodes (each
        with the pending taint, its instance's EFA devices up), four of which have a fault (FAULTS);
        the Kubernetes and EC2 calls go to the stand-in API. As the DaemonSet controller does, a
        pod whose node no longer matches (it has been labelled) is deleted. Then the scheduler's
        part: where the gang's pods may go, and the gang started there."""
        started = time.monotonic()
        try:
            self._deep_check()
        finally:
            self.seen.deep_check.phase_seconds = time.monotonic() - started

    def _new_trainium_node(self, name: str, instance_type: str, efa_missing: int, instance_id: str) -> dict:
        """A fresh Trainium node of ``instance_type`` (its EFA devices, less ``efa_missing``), as the
        Node object it registers with."""
        node = self.cluster.node(name)
        efa.make_devices(node.sys_class, instance_facts(instance_type).efa_interfaces - efa_missing)
        labels = {INSTANCE_TYPE_LABEL: instance_type, **TRAINIUM_NODE_LABEL, "kubernetes.io/hostname": name}
        return node_object(name, labels, instance_id)

    def _deep_check(self) -> None:
        seen, worker = self.seen.deep_check, self.workload.worker
        daemon = self.workload.health_check
        if daemon is None or worker.instance_type is None:
            raise self._failed("the template has no node-health-check DaemonSet or no instance type")
        names = [HEALTH_NODE.format(i) for i in range(HEALTH_NODES)]
        seen.faults = {names[i]: kind for i, kind in FAULTS.items()}
        registered = []
        for i, name in enumerate(names):
            missing = EFA_MISSING if FAULTS.get(i) == "efa" else 0
            registered.append(
                self._new_trainium_node(name, worker.instance_type, missing, f"i-0{i + 1:016x}")
            )
        seen.registered = {n["metadata"]["name"]: n for n in registered}
        seen.daemon_fits = {
            n["metadata"]["name"]: schedulable(
                n, daemon.node_selector, daemon.tolerations, daemon.node_affinity
            )
            for n in registered
        }
        api = KubeApi(
            self.cluster.root / "kube-api",
            self.cluster.network.enter(),
            f"{POD_NETWORK}.1",
            registered,
            die_with_test,
        )
        try:
            for name, kind in seen.faults.items():
                host = f"node-health-check-{name}"
                if kind == "devices":
                    self.cluster.device_fault(host, DEVICES_MISSING)
                elif kind == "compute":
                    self.cluster.core_fault(host, FAULTY_CORE)
                elif kind == "collective":
                    self.cluster.collective_fault(host)
            t0 = time.monotonic()
            pods = {name: self.cluster.start_health_check(self.cluster.node(name), api) for name in names}
            deadline = t0 + DEEP_CHECK_TIMEOUT_S
            while len(seen.codes) < len(pods):
                current = api.nodes()
                for name, pod in pods.items():
                    if name in seen.codes:
                        continue
                    if not selects(current[name], daemon.node_selector, daemon.node_affinity):
                        seen.codes[name] = self.cluster.stop(pod, daemon.grace_period_s)
                        seen.logs[name] = pod.output()
                    elif not pod.running:
                        raise self._failed(
                            f"the deep check's pod on {name} ended before its node was labelled"
                        )
                if time.monotonic() > deadline:
                    raise self._failed("timed out: the deep check labels every node")
                time.sleep(0.2)
            seen.seconds = time.monotonic() - t0
            seen.nodes, seen.requests = api.nodes(), api.requests()
        finally:
            api.close()
        after = list(seen.nodes.values())
        seen.placement = gang_placement(
            after, self.workload.replicas, worker.node_selector, worker.tolerations
        )
        if seen.placement is None:
            raise self._failed("no placement for the gang after the deep check")
        one_good = [n for n in after if n["metadata"]["name"] != seen.placement[0]]
        seen.placement_one_good = gang_placement(
            one_good, self.workload.replicas, worker.node_selector, worker.tolerations
        )
        gang = [
            self.cluster.start_worker(i, self.cluster.node(name)) for i, name in enumerate(seen.placement)
        ]
        try:
            self._until(
                lambda: all(DRIVER_CHECK_OK in p.output() for p in gang),
                "the placed gang's driver check",
                pods=gang,
            )
        finally:
            for pod in gang:
                seen.gang_codes[pod.hostname] = self.cluster.stop(pod, worker.grace_period_s)
                seen.gang_nodes[pod.hostname] = pod.node
                seen.gang_logs[pod.hostname] = pod.output()

    def no_verdict(self) -> None:
        """The ``node-health-check`` DaemonSet's pod on fresh nodes whose check never gives a
        verdict (SILENT_FAULTS), with the verdict's bound shortened to
        :data:`NO_VERDICT_DEADLINE_S`: one whose check hangs, one whose check's process is
        killed at every start and restarted after a back-off as the kubelet restarts a
        DaemonSet's container. Each must end labelled, tainted and replaced like a failed node."""
        seen, worker = self.seen.no_verdict, self.workload.worker
        daemon = self.workload.health_check
        if daemon is None or worker.instance_type is None:
            raise self._failed("the template has no node-health-check DaemonSet or no instance type")
        names = {SILENT_NODE.format(i): kind for i, kind in SILENT_FAULTS.items()}
        seen.faults = dict(names)
        registered = []
        for i, name in enumerate(names):
            registered.append(self._new_trainium_node(name, worker.instance_type, 0, f"i-0{0xA0 + i:016x}"))
        seen.registered = {n["metadata"]["name"]: n for n in registered}
        api = KubeApi(
            self.cluster.root / "kube-api-no-verdict",
            self.cluster.network.enter(),
            f"{POD_NETWORK}.1",
            registered,
            die_with_test,
        )
        pods: dict[str, Pod] = {}
        try:
            for name in names:
                self.cluster.hang_fault(f"node-health-check-{name}")
            deadline_arg = ("--verdict-deadline-s", str(NO_VERDICT_DEADLINE_S))
            first = {}
            for name in names:
                pods[name] = self.cluster.start_health_check(self.cluster.node(name), api, deadline_arg)
                first[name], seen.starts[name] = time.monotonic(), 1
            killed = {name: 0 for name in names}  # the crashing check's kills so far
            until = time.monotonic() + NO_VERDICT_DEADLINE_S + PHASE_TIMEOUT_S
            while len(seen.codes) < len(pods):
                current = api.nodes()
                for name, pod in pods.items():
                    if name in seen.codes:
                        continue
                    if not selects(current[name], daemon.node_selector, daemon.node_affinity):
                        seen.seconds[name] = time.monotonic() - first[name]
                        seen.codes[name] = self.cluster.stop(pod, daemon.grace_period_s)
                        seen.logs[name] = pod.output()
                        continue
                    host = f"node-health-check-{name}"
                    ran = len([c for c in self.cluster.calls("neuron-ls") if c["host"] == host])
                    if names[name] == "crash" and pod.running and ran > killed[name]:
                        # The check's process dies while it runs a check, before a verdict.
                        os.kill(pod.pid1(), signal.SIGKILL)
                        pod.wait(30)
                        killed[name] = ran
                    if not pod.running:
                        if names[name] != "crash":
                            raise self._failed(
                                f"the check's pod on {name} ended before its node was labelled"
                            )
                        time.sleep(RESTART_BACKOFF_S)
                        pods[name] = self.cluster.restart(pod)
                        seen.starts[name] += 1
                if time.monotonic() > until:
                    raise self._failed("timed out: the nodes without a verdict are labelled")
                time.sleep(0.2)
            seen.nodes, seen.requests = api.nodes(), api.requests()
        finally:
            for name, pod in pods.items():
                seen.logs.setdefault(name, pod.output())
            api.close()

    # --- helpers -------------------------------------------------------------------------------
    def _api(self, name: str) -> KubeApi:
        """A stand-in API server (no Nodes) for the job's submitter."""
        return KubeApi(
            self.cluster.root / name, self.cluster.network.enter(), f"{POD_NETWORK}.1", [], die_with_test
        )

    def _ended(self, gang: list[Pod], *, started: float) -> Ended:
        """The gang's end: each pod's code once one failed (or every one ended), the others given
        :data:`SAME_FAILURE_S` before Volcano's action for that failure reaches them."""
        seen = Ended(started=started)
        seen.nodes = {p.hostname: p.node for p in gang}
        deadline = time.monotonic() + PHASE_TIMEOUT_S
        while all(p.running for p in gang):
            if time.monotonic() > deadline:
                raise self._failed("timed out: a gang pod ends")
            time.sleep(0.05)
        first = next(p for p in gang if not p.running)
        code = container_exit_code(first.proc.wait())
        seen.action = self.workload.action_for_failure(code) if code != 0 else None
        for pod in gang:
            ended = pod.wait(SAME_FAILURE_S)
            seen.ended_by[pod.hostname] = "itself" if ended is not None else str(seen.action)
            grace = self.workload.worker.grace_period_s
            seen.codes[pod.hostname] = ended if ended is not None else self.cluster.stop(pod, grace)
            seen.logs[pod.hostname] = pod.output()
        seen.seconds = time.time() - seen.started
        return seen

    def _run_until_ended(self, stop: Callable[[list[Pod]], Pod] | None = None) -> Ended:
        """Start the gang and wait until a pod fails (``stop`` may pick one and send it SIGTERM);
        then give the others :data:`SAME_FAILURE_S` to end by themselves before Volcano's action
        for that failure (RestartJob, AbortJob: both delete the pods first) reaches them. What
        the harness does not play is a restart."""
        seen = Ended(started=time.time())
        gang = [self.cluster.start_worker(i) for i in range(self.workload.replicas)]
        seen.nodes = {p.hostname: p.node for p in gang}
        stopped = stop(gang) if stop is not None else None
        deadline = time.monotonic() + PHASE_TIMEOUT_S
        while all(p.running for p in gang):
            if time.monotonic() > deadline:
                raise self._failed("timed out: a gang pod ends")
            time.sleep(0.05)
        first = next(p for p in gang if not p.running)
        code = container_exit_code(first.proc.wait())
        seen.action = self.workload.action_for_failure(code) if code != 0 else None
        for pod in gang:
            ended = pod.wait(SAME_FAILURE_S)
            seen.ended_by[pod.hostname] = (
                "SIGTERM" if pod is stopped else "itself" if ended is not None else str(seen.action)
            )
            grace = self.workload.worker.grace_period_s
            seen.codes[pod.hostname] = ended if ended is not None else self.cluster.stop(pod, grace)
            seen.logs[pod.hostname] = pod.output()
            code_of_pod = seen.codes[pod.hostname]
            seen.actions[pod.hostname] = (
                self.workload.action_for_failure(code_of_pod) if code_of_pod else None
            )
        seen.seconds = time.time() - seen.started
        return seen

    def _wait_all(self, pods: list[Pod], what: str) -> dict[str, int]:
        """Each pod's exit code once all have ended 0; at the first that ends otherwise, or at
        the timeout, the phase fails at once with every pod's log tail (its peers are not waited
        for: a gang whose member failed would only wait for it until the timeout)."""
        deadline = time.monotonic() + PHASE_TIMEOUT_S
        codes: dict[str, int] = {}
        while len(codes) < len(pods):
            for pod in pods:
                if pod.hostname not in codes and not pod.running:
                    codes[pod.hostname] = code = container_exit_code(pod.proc.wait())
                    if code != 0:
                        raise self._failed(f"{what}: {pod.name} exited {code}")
            if time.monotonic() > deadline:
                raise self._failed(f"timed out: {what}")
            time.sleep(0.05)
        return codes

    def _records_since(self, since: float) -> list[dict[str, Any]]:
        return [r for r in self.seen.records() if r["time"] > since]

    def _scrape_metrics(self) -> None:
        """GET /metrics on every gang pod's metrics port, as the PodMonitor does."""
        for pod in self.gang:
            status, body = self.cluster.http_get(f"http://{pod.address}:{METRICS_PORT}/metrics")
            self.seen.metrics.setdefault(pod.hostname, []).append(body if status == 200 else "")

    def _until(
        self, condition: Callable[[], bool], what: str, *, gang: bool = True, pods: list[Pod] | None = None
    ) -> None:
        """Poll ``condition``; fail on the timeout, or (``gang``) when a pod of the gang (or of
        ``pods``) ends first."""
        deadline = time.monotonic() + PHASE_TIMEOUT_S
        while not condition():
            if time.monotonic() > deadline:
                raise self._failed(f"timed out: {what}")
            if gang and any(not p.running for p in (self.gang if pods is None else pods)):
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
    """The whole story on a fresh cluster under ``root`` (nodes of the AMI release the platform
    pins by default); every pod is gone when it returns."""
    cluster = Cluster(
        root,
        workload,
        s3_objects={PUBLIC_BERT_SHARDS: tar},
        dpkg_versions=image_packages(),
        driver_version=driver_version(default_ami_tag()),
    )
    try:
        return Rehearsal(cluster, workload).play()
    finally:
        cluster.close()
