"""The scene of a job of the user's own program: the example app ``examples/my_training_job`` (the
platform and ``TrainiumTrainingJob`` of its own image, ``job/``) on the rehearsal's cluster.

Its pods are those the example's template asks for, run as synthesized: an init container from
the library's tools image copies the library's runtime into the pod's ``runtime`` volume, then
the pod program (from that copy) runs the driver and fabric checks and torchrun runs the image's
``/app/train.py`` across the gang. While it trains, one pod is deleted as the kubelet stops it;
the Job's policies decide what Volcano does, the gang is started again and the program resumes
from its newest checkpoint to the end. Meanwhile the pod program's metrics port answers and its
spend records are written. The images are the template's own builds: the files the user's
Dockerfile and the tools Dockerfile COPY from their build contexts (the cloud assembly's assets).

The job is the example's, with what the rehearsal's 2 cores can run (:func:`variant`): a
worker per pod core for 2, the fabric floor 0 (gloo between two pods on one machine is far from
EFA's bandwidth), fewer steps.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from tests.rehearsal.cluster import Cluster, Pod
from tests.rehearsal.manifests import Workload
from tests.rehearsal.scenario import (
    Observations,
    Rehearsal,
    Stop,
    default_ami_tag,
    driver_version,
    image_packages,
)
from tests.support import REPO, cli_env
from trainium_job.paths import job_paths
from trainium_job.pod_program import loads
from trainium_job.pod_program.description import JobDescription
from trainium_job.pod_program.metrics import PROGRAM_METRICS_PORT

EXAMPLE: Final = REPO / "examples" / "my_training_job"
#: The example's job, made small: workers per pod, train.py's steps, the fabric check's floor.
NPROC_PER_NODE: Final = 1
STEPS: Final = 500
#: Steps train.py logs before a pod is deleted (the stop must land well inside the schedule).
STEPS_BEFORE_STOP: Final = 5
#: The pod deleted: not the one that hosts the rendezvous store (pod 0), the harder case.
VICTIM: Final = 1
#: Seconds the synthesis of the example app may take.
SYNTH_TIMEOUT_S: Final = 600

OWN_JOB_PHASES: Final = ("train_until_deleted", "restarted")
#: train.py's per-step line (rank 0's) and its other lines (``job/train.py``).
STEP_LINE: Final = re.compile(r'^\{"step": (\d+),', re.MULTILINE)


def variant_code(steps: int = STEPS) -> str:
    """Python that synthesizes the example app into ``sys.argv[1]`` with the scene's job: the
    example's ``SPEC`` given :data:`NPROC_PER_NODE` workers, ``steps`` and a fabric floor of 0."""
    return (
        "import dataclasses, sys\n"
        "import app\n"
        "spec = dataclasses.replace(\n"
        f"    app.SPEC, nproc_per_node={NPROC_PER_NODE}, fabric_check_min_busbw_gbps=0,\n"
        f"    command=dataclasses.replace(app.SPEC.command, args=('--steps', '{steps}')),\n"
        ")\n"
        "app.main(sys.argv[1], spec=spec)\n"
    )


def synthesize(outdir: Path, steps: int = STEPS) -> dict[str, Any]:
    """The example app synthesized by its own ``main`` (cdk-nag gated, as ``cdk synth`` runs it)
    into the cloud assembly ``outdir``, with the scene's job (:func:`variant_code`): the checkout
    on its path, the context of its cdk.json as the CDK CLI hands it over (CDK_CONTEXT_JSON);
    its template."""
    env = cli_env()
    context = json.loads((EXAMPLE / "cdk.json").read_text()).get("context", {})
    env.update(
        {"PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1", "CDK_CONTEXT_JSON": json.dumps(context)}
    )
    done = subprocess.run(
        [sys.executable, "-c", variant_code(steps), str(outdir)],
        cwd=EXAMPLE,
        env=env,
        capture_output=True,
        text=True,
        timeout=SYNTH_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    (template,) = outdir.glob("*.template.json")
    return json.loads(template.read_text())


@dataclass
class Start:
    """One start of a gang pod: its init container (exit code, log), what it left in the pod's
    runtime volume (paths, and the owner of each), and the pod's log."""

    init_code: int | None = None
    init_log: str = ""
    runtime_files: list[str] = field(default_factory=list)
    runtime_owners: set[int] = field(default_factory=set)
    log: str = ""
    code: int | None = None


@dataclass
class OwnJobObservations(Observations):
    """What the scene saw, by host name where per pod."""

    description: JobDescription | None = None
    first: dict[str, Start] = field(default_factory=dict)
    second: dict[str, Start] = field(default_factory=dict)
    #: The newest step train.py had logged when the pod was deleted.
    steps_before_stop: int = 0
    #: The Volcano Job's action for the deleted pod's failure.
    action: str | None = None
    #: The checkpoints in the run directory once the first gang had ended, oldest step first.
    checkpoints_after_stop: list[str] = field(default_factory=list)
    complete: dict[str, Any] | None = None
    #: The spend records in the job's spend folder at the end, and whether a stop marker is there.
    spend_records: list[dict[str, Any]] = field(default_factory=list)
    spend_stop: bool = False
    #: Whether the pods ran as the users their securityContexts name (the harness could map
    #: them: ``Network.ids``), or all as root.
    users_mapped: bool = False

    def logs_of(self, starts: dict[str, Start]) -> str:
        return "\n".join(s.log for s in starts.values())


class OwnJobScene(Rehearsal):
    """Plays :data:`OWN_JOB_PHASES` with the helpers of the rehearsal's story."""

    def __init__(self, cluster: Cluster, workload: Workload) -> None:
        described = loads(workload.worker.command[-1])
        (phase,) = described.phases
        run = Path(phase.run_dir).name
        seen = OwnJobObservations(
            # The run directory is what this job keeps on the claim (output_dir: /data/runs/<run>).
            paths=job_paths(dataset_name="-", cache_set="-", run_name=run),
            fsx=cluster.fsx,
            claim_path=workload.worker.claim_path(),
            phases=OWN_JOB_PHASES,
            description=described,
            users_mapped=cluster.network.ids > 1,
        )
        if seen.local(phase.run_dir) != seen.local(seen.paths.output_dir):
            raise ValueError(f"the job's run directory {phase.run_dir} is not below /data/runs")
        super().__init__(cluster, workload, seen)
        self.own = seen
        self.run_dir = seen.local(phase.run_dir)

    # --- phases -----------------------------------------------------------------------------------
    def train_until_deleted(self) -> None:
        """The gang trains (each pod's program metrics scraped); the victim is deleted, Volcano's
        policy for its failure reaches the other pod."""
        self.start_gang()
        starts = self._started_pods(self.own.first)
        try:
            self._until(lambda: self._steps(self.gang) >= 1, "train.py logs its first step")
            self._scrape_program_metrics()
            self._until(lambda: self._steps(self.gang) >= STEPS_BEFORE_STOP, "train.py logs its steps")
            self.own.steps_before_stop = self._steps(self.gang)
            victim, grace = self.gang[VICTIM], self.workload.worker.grace_period_s
            t0 = time.monotonic()
            code = self.cluster.stop(victim, grace)
            self.own.stops[victim.hostname] = Stop(code, "SIGTERM", time.monotonic() - t0, grace)
            self.own.action = self.workload.action_for_failure(code) if code != 0 else None
            for pod in self.gang:
                if pod is not victim:
                    self.own.stops[pod.hostname] = self._after_failure(pod, self.own.action, grace)
        finally:
            for pod in self.gang:
                starts[pod.hostname].log = pod.output()
                starts[pod.hostname].code = pod.wait(0)
        found = sorted(self.run_dir.glob("checkpoint-*.pt"), key=lambda p: int(p.stem.split("-")[1]))
        self.own.checkpoints_after_stop = [p.name for p in found]

    def restarted(self) -> None:
        """RestartJob's second half: the same pods again, to the end of train.py's schedule."""
        self.own.relaunch_time = time.time()
        self.start_gang()
        starts = self._started_pods(self.own.second)
        try:
            codes = self._wait_all(self.gang, "the restarted gang")
        finally:
            for pod in self.gang:
                starts[pod.hostname].log = pod.output()
        for host, code in codes.items():
            starts[host].code = code
        complete = self.run_dir / "COMPLETE"
        self.own.complete = json.loads(complete.read_text()) if complete.exists() else None
        budget = self.own.description.budget if self.own.description else None
        if budget is not None:
            spend = self.own.local(budget.spend_dir)
            self.own.spend_records = [json.loads(p.read_text()) for p in sorted(spend.glob("*.json"))]
            self.own.spend_stop = (spend / "STOP").exists()

    # --- helpers ----------------------------------------------------------------------------------
    def _started_pods(self, starts: dict[str, Start]) -> dict[str, Start]:
        """Each gang pod's init container, and what it left in the pod's runtime volume; the
        phase fails if a pod failed in its init container."""
        worker = self.workload.worker
        for pod in self.gang:
            start = starts.setdefault(pod.hostname, Start())
            for ran in [*pod.inits, *([pod] if pod.container != worker.container else [])]:
                start.init_code, start.init_log = ran.wait(0), ran.output()
            if pod.container != worker.container:
                raise self._failed(f"{pod.name} failed in its init container {pod.container}")
            assert pod.pod_dir is not None
            for mount in worker.mounts:
                if mount.kind == "emptyDir" and not mount.memory:
                    folder = pod.pod_dir / f"empty-{mount.volume}"
                    found = sorted(p for p in folder.rglob("*") if p.is_file())
                    start.runtime_files += [str(Path(mount.path) / p.relative_to(folder)) for p in found]
                    start.runtime_owners |= {p.stat().st_uid for p in found}
        return starts

    @staticmethod
    def _steps(gang: list[Pod]) -> int:
        """The newest step train.py's rank 0 has logged, in whichever pod it runs."""
        return max((int(s) for pod in gang for s in STEP_LINE.findall(pod.output())), default=0)

    def _after_failure(self, pod: Pod, action: str | None, grace: int) -> Stop:
        """A pod other than the deleted one, once Volcano's ``action`` reaches it."""
        t1 = time.monotonic()
        if not pod.running:
            return Stop(pod.wait(0) or 0, "itself", 0.0, grace)
        if action == "RestartJob":  # Volcano deletes every pod of the job, then starts it again
            return Stop(self.cluster.stop(pod, grace), action, time.monotonic() - t1, grace)
        waited = pod.wait(grace)  # nothing ends it: does it end by itself within a grace period?
        code = self.cluster.stop(pod, 0) if waited is None else waited
        return Stop(code, action or "itself", time.monotonic() - t1, grace)

    def _scrape_program_metrics(self) -> None:
        """GET /metrics on every gang pod's program metrics port, as the PodMonitor does."""
        for pod in self.gang:
            status, body = self.cluster.http_get(f"http://{pod.address}:{PROGRAM_METRICS_PORT}/metrics")
            self.own.metrics.setdefault(pod.hostname, []).append(body if status == 200 else "")


def play(root: Path, workload: Workload) -> OwnJobObservations:
    """The scene on a fresh cluster under ``root`` (nodes of the AMI release the platform pins by
    default, the Neuron runtime of the image the job's image builds on); every pod is gone when it
    returns."""
    cluster = Cluster(
        root,
        workload,
        s3_objects={},
        dpkg_versions=image_packages(),
        driver_version=driver_version(default_ami_tag()),
    )
    try:
        scene = OwnJobScene(cluster, workload)
        scene.play()
        return scene.own
    finally:
        cluster.close()
