"""A job of the user's own program on its real pod commands (``tests.rehearsal.own_job_scene``):
the example app's pods get the library's runtime from the tools image's init container, check
the node and the fabric and run the image's script across the gang; a pod deleted while it trains
restarts the job, which resumes from its newest checkpoint to the end; the pod program serves its
metrics and counts the job's spend meanwhile."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.rehearsal.cluster import namespaces_available, pod_network_available
from tests.rehearsal.manifests import Workload, job_workload
from tests.rehearsal.own_job_scene import (
    EXAMPLE,
    NPROC_PER_NODE,
    STEPS,
    VICTIM,
    OwnJobObservations,
    Start,
    play,
    synthesize,
)
from trainium_eks.images.training_image import build_context
from trainium_job.exit_codes import SIGTERM_EXIT_CODE
from trainium_job.pod import RUNTIME_DIR, RUNTIME_PACKAGES

#: The driver check's line on a supported pair (training.node.driver_check ``verdict``).
DRIVER_CHECK_OK = ": a supported pair"
#: The user the init container runs as (its securityContext: trainium_job.pod).
INIT_USER = 65534


@pytest.fixture(scope="session")
def own_job_assembly(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Workload]:
    """The example app's cloud assembly with the scene's job, and the pods of its template."""
    outdir = tmp_path_factory.mktemp("own-job-assembly")
    return outdir, job_workload(synthesize(outdir), outdir)


@pytest.fixture(scope="session")
def own_job(
    tmp_path_factory: pytest.TempPathFactory, own_job_assembly: tuple[Path, Workload]
) -> OwnJobObservations:
    """The scene, played once; its pods are gone when it returns or fails."""
    why = namespaces_available() or pod_network_available()
    if why is not None:
        pytest.skip(f"the rehearsal's pods {why}")
    return play(tmp_path_factory.mktemp("own-job"), own_job_assembly[1])


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_given_the_example_s_assembly_then_its_pods_run_its_own_image_and_the_library_s_tools_image(
    own_job_assembly: tuple[Path, Workload],
):
    outdir, workload = own_job_assembly
    # The trainer runs the image built from the example's job folder...
    trainer = workload.images[workload.worker.container]
    assert trainer.context is not None and trainer.context.is_relative_to(outdir)
    assert _files(trainer.context) == _files(EXAMPLE / "job")
    assert trainer.dockerfile == trainer.context / "Dockerfile"
    # ...its init container the tools image, built from the library's build context
    (init,) = workload.worker.init_containers
    tools = workload.images[init.container]
    assert tools.context is not None and tools.context.is_relative_to(outdir)
    assert _files(tools.context) == _files(Path(build_context(None)))
    assert tools.dockerfile == tools.context / "tensorboard.Dockerfile"


def _check_start(start: Start, expected_runtime: set[str], users_mapped: bool) -> None:
    """A gang pod's start: its init container copied the runtime, its program checked the node
    and the fabric."""
    # The init container ended 0, having copied the tools image's packages whole as its own user
    # (the files it made are its own), before the pod's program started.
    assert start.init_code == 0, start.init_log
    assert set(start.runtime_files) == expected_runtime
    if users_mapped:
        assert start.runtime_owners == {INIT_USER}
    assert DRIVER_CHECK_OK in start.log, start.log[-3000:]
    assert "fabric check: all-reduce across 2 nodes, floor 0 GB/s" in start.log


def _runtime(workload: Workload) -> set[str]:
    """The files the init container's ``cp -R`` puts in the runtime folder: each package of the
    tools image's WORKDIR, by its name (trainium_job.pod RUNTIME_PACKAGES)."""
    (init,) = workload.worker.init_containers
    context = workload.images[init.container].context
    assert context is not None
    return {
        f"{RUNTIME_DIR}/{package}/{name}" for package in RUNTIME_PACKAGES
        for name in _files(context / package)
    }  # fmt: skip


@pytest.mark.after("train_until_deleted")
def test_given_the_gang_then_the_init_container_copies_the_runtime_and_the_program_checks_and_trains_across_the_pods(
    own_job: OwnJobObservations, own_job_assembly: tuple[Path, Workload]
):
    workload = own_job_assembly[1]
    assert len(own_job.first) == workload.replicas == 2
    for start in own_job.first.values():
        _check_start(start, _runtime(workload), own_job.users_mapped)
    # /app/train.py ran under torchrun across both pods: every rank (2 pods x NPROC_PER_NODE
    # workers) stopped at the deletion, after the same step.
    logs = own_job.logs_of(own_job.first)
    stops = re.findall(r"^rank (\d+): stopped by SIGTERM after step (\d+)$", logs, re.MULTILINE)
    assert sorted(int(rank) for rank, _ in stops) == list(range(2 * NPROC_PER_NODE)), logs[-3000:]
    assert len({step for _, step in stops}) == 1


@pytest.mark.after("train_until_deleted")
def test_given_the_gang_training_then_the_pod_program_serves_its_step_and_the_job_s_spend(
    own_job: OwnJobObservations,
):
    assert own_job.description is not None and own_job.description.budget is not None
    ceiling = own_job.description.budget.usd
    assert sorted(own_job.metrics) == sorted(own_job.first)
    for host, bodies in own_job.metrics.items():
        (body,) = bodies
        # The Prometheus text of the program's gauges (trainium_job.pod_program.metrics).
        assert 'trainium_job_program_step{step="training"} 1' in body, (host, body)
        spent = re.search(r"^trainium_job_spend_usd (\S+)$", body, re.MULTILINE)
        assert spent is not None and 0 < float(spent.group(1)) < ceiling, body
        assert re.search(rf"^trainium_job_budget_usd {ceiling}$", body, re.MULTILINE), body


@pytest.mark.after("restarted")
def test_given_a_pod_deleted_while_training_then_the_job_restarts_and_resumes_from_its_newest_checkpoint_to_the_end(
    own_job: OwnJobObservations, own_job_assembly: tuple[Path, Workload]
):
    workload = own_job_assembly[1]
    victim = sorted(own_job.first)[VICTIM]
    # The deleted pod ends with SIGTERM's code, for which the Job's policies restart the job.
    assert own_job.stops[victim].code == SIGTERM_EXIT_CODE, own_job.first[victim].log[-3000:]
    assert own_job.action == workload.action_for_failure(SIGTERM_EXIT_CODE) == "RestartJob"
    # train.py checkpointed the step where every rank stopped: its newest checkpoint.
    stopped = re.search(r"stopped by SIGTERM after step (\d+)", own_job.logs_of(own_job.first))
    assert stopped is not None
    step = int(stopped.group(1))
    assert 0 < step < STEPS and own_job.checkpoints_after_stop[-1] == f"checkpoint-{step}.pt"
    # The restarted pods started as the first ones did, and train.py resumed from there to its end.
    for start in own_job.second.values():
        _check_start(start, _runtime(workload), own_job.users_mapped)
    logs = own_job.logs_of(own_job.second)
    resumed = re.findall(r"^resumed from checkpoint-(\d+)\.pt \(step (\d+)\)$", logs, re.MULTILINE)
    assert resumed == [(str(step), str(step))], logs[-3000:]
    steps = [int(s) for s in re.findall(r'^\{"step": (\d+),', logs, re.MULTILINE)]
    assert steps[0] == step + 1 and steps[-1] == STEPS
    assert own_job.complete == {"step": STEPS}
    assert {s.code for s in own_job.second.values()} == {0}


@pytest.mark.after("restarted")
def test_given_two_starts_of_the_gang_then_each_pod_s_spend_records_are_on_the_claim(
    own_job: OwnJobObservations,
):
    # Each pod's program keeps its records in the job's spend folder (trainium_job.pod_program.spend:
    # one per start of its program and of each phase), naming its node and itself: both starts of
    # each pod are counted, and nothing reached the ceiling.
    records = own_job.spend_records
    hosts = sorted(own_job.first)
    assert {r["pod"] for r in records} == set(hosts)
    assert {r["node"] for r in records} == {f"rehearsal-node-{i}" for i in range(len(hosts))}
    assert all(r["phase"] == "training" and r["last"] >= r["start"] for r in records)
    for host in hosts:
        starts = sorted(r["start"] for r in records if r["pod"] == host)
        assert starts[0] < own_job.relaunch_time < starts[-1], (host, starts)
    assert not own_job.spend_stop
