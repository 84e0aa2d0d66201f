"""The offline rehearsal: the training stack's synthesized pods run as local processes.

The story (``tests.rehearsal.scenario``) is played once; each test checks one thing the issue
asks of it, on files, exit codes and the stand-ins' records. What runs differently from a
cluster, and why: ``tests.rehearsal.substitutions``.
"""

from __future__ import annotations

import re

import pytest

from tests.rehearsal import standins
from tests.rehearsal.scenario import (
    CHECKPOINT_EVERY,
    HANG_FLOOR_S,
    HUNG_LOCAL_RANK,
    MAX_STEPS,
    NPROC_PER_NODE,
    REFUSED_DRIVER_AMI,
    SAME_FAILURE_S,
    SOURCE_ERROR,
    VICTIM,
    Observations,
    default_ami_tag,
    driver_version,
    image_packages,
    waits,
)
from training.dataprep.shard_format import verify_checksums
from training.node.driver_check import MISMATCH_EXIT_CODE, RUNTIME_PACKAGE
from training.trainer import checkpoint as ckpt
from trainium_eks.jobs.dataset_staging import PUBLIC_BERT_SHARDS
from trainium_job.exit_codes import DEADLINE_EXIT_CODE
from trainium_job.fabric_check_steps import EXIT_CODE as FABRIC_EXIT_CODE
from trainium_job.fabric_check_steps import NOT_MEASURED_EXIT_CODE as FABRIC_NOT_MEASURED
from trainium_job.hang import HANG_EXIT_CODE
from trainium_job.pod_program import loads
from trainium_job.telemetry import TRAINING_METRICS

#: The fabric check's lines (trainium_job/fabric_check_steps.py, training/node/fabric_check.py ``judge``).
FABRIC_START = "fabric check: all-reduce across 2 nodes, floor 0 GB/s"
FABRIC_PASSED = re.compile(
    r"fabric check passed on node (\S+) in (\d+) s: all-reduce bus bandwidth [\d.]+ GB/s \(floor 0\), "
    r"([\d.]+) GB over 1 EFA devices"
)
#: The first line of the training run on rank 0 (training.trainer.pretrain ``log_start``), not the
#: precompile's trial run (which trains 3 steps from 0).
TRAINING_START = re.compile(r"training\.trainer\.pretrain: device cpu, .* steps (\d+) -> 40 of 40")


#: The step watchdog's line (training/trainer/watchdog.py) before it ends a hung rank.
HANG_LINE = re.compile(
    r"hang: rank (\d+) waiting for (.+?) for ([\d.]+) s, bound ([\d.]+) s .*?last step done (\d+); "
    rf"exiting {HANG_EXIT_CODE} so the job restarts from the checkpoint of step (\d+)"
)


def step_of(checkpoint) -> int:
    return int(checkpoint.name.removeprefix("step_"))


def samples(body: str) -> dict[str, float]:
    """Name -> value of the unlabelled samples of a Prometheus text exposition."""
    found = {}
    for line in body.splitlines():
        if line and not line.startswith("#") and "{" not in line:
            name, value = line.split()
            found[name] = float(value)
    return found


def served(body: str) -> set[str]:
    """The names of every sample of a Prometheus text exposition, labelled or not."""
    return {line.split("{")[0].split()[0] for line in body.splitlines() if line and not line.startswith("#")}


def all_gang_logs(rehearsal: Observations) -> dict[str, str]:
    """Every log of a gang pod on good nodes: the first gang, the relaunch, the fallback's."""
    logs = {}
    for n, gang in enumerate([*rehearsal.gang_logs, rehearsal.fabric_fallback.logs]):
        logs.update({f"{n}:{host}": log for host, log in gang.items()})
    return logs


@pytest.mark.after("fabric_fallback")
def test_given_nodes_of_the_platforms_default_ami_then_every_gang_pod_first_says_the_driver_pair_is_supported(
    rehearsal: Observations,
):
    runtime = image_packages()[RUNTIME_PACKAGE]
    driver = driver_version(default_ami_tag()).strip()
    logs = all_gang_logs(rehearsal)
    assert len(logs) == 6
    for log in logs.values():
        assert log.split("\n", 1)[0] == f"Neuron driver {driver} and runtime {runtime}: a supported pair", log
    queries = [c["argv"] for c in rehearsal.calls if c["tool"] == "dpkg-query"]
    assert queries and all(q == ["-W", "-f", "${Version}", RUNTIME_PACKAGE] for q in queries)


@pytest.mark.after("train_until_stopped")
def test_given_nodes_whose_driver_the_runtime_refuses_then_each_pod_stops_with_one_line_before_the_dataset_wait(
    rehearsal: Observations, variant
):
    refused = rehearsal.refused_driver
    driver = driver_version(REFUSED_DRIVER_AMI).strip()
    assert sorted(refused.codes) == sorted(rehearsal.gang_logs[0]) and len(refused.codes) == variant.replicas
    for host, code in refused.codes.items():
        assert code == MISMATCH_EXIT_CODE and refused.ended_by[host] == "itself"
        (line,) = refused.logs[host].splitlines()  # one line: no dataset wait, nothing else
        assert line.startswith(
            f"error: the node's Neuron driver {driver} does not run the image's Neuron runtime"
        )
    # The Job has no policy for this exit code: Volcano restarts the gang (maxRetry times), and
    # each attempt stops again within seconds.
    assert refused.action == "RestartJob" and refused.seconds < 60


@pytest.mark.after("stop_while_waiting")
def test_given_a_gang_pod_deleted_while_it_waits_for_the_dataset_then_it_ends_at_once_with_143(
    rehearsal: Observations,
):
    stop = rehearsal.waiting_stop
    assert stop is not None and stop.code == 143 and stop.seconds < 10, stop


@pytest.mark.after("failed_staging")
def test_given_a_staging_that_gives_up_then_the_gang_waiting_for_it_and_the_submitter_end_at_once_with_its_reason(
    rehearsal: Observations, variant
):
    # The staging tried its attempts, then wrote its failed marker naming its Job and the reason.
    assert rehearsal.failed_staging_code == DEADLINE_EXIT_CODE, rehearsal.failed_staging_log
    reason = f"attempt 3 of 3 exited 1: dataset_source {PUBLIC_BERT_SHARDS}: {SOURCE_ERROR}"
    assert f"gave up after 3 attempts: {reason}" in rehearsal.failed_staging_log
    assert variant.staging.job_name is not None
    ended = rehearsal.failed_staging
    assert len(ended.codes) == variant.replicas
    for host, code in ended.codes.items():
        # Each gang pod ended by itself with the abort code, saying why in one line, long before its
        # deadline: the Job is aborted and Karpenter releases the nodes.
        assert code == DEADLINE_EXIT_CODE and ended.ended_by[host] == "itself", ended.logs[host]
        last = ended.logs[host].rstrip("\n").rsplit("\n", 1)[-1]
        assert f"{variant.staging.job_name} gave up: {reason}" in last
        assert last.endswith("ending the job to release its nodes")
    assert ended.action == "AbortJob" and variant.action_for_failure(DEADLINE_EXIT_CODE) == "AbortJob"
    assert ended.started + ended.seconds - rehearsal.failed_marker_time < SAME_FAILURE_S
    # The submitter ended the same way: no Volcano Job, so no Trainium node was ever asked for
    # (the scene fails if the stand-in API server holds one).
    assert rehearsal.failed_submitter_code == DEADLINE_EXIT_CODE, rehearsal.failed_submitter_log
    assert "not submitting the training job: no Trainium node is asked for" in rehearsal.failed_submitter_log
    aws = [c for c in rehearsal.calls if c["tool"] == "aws" and c["time"] < rehearsal.failed_marker_time]
    assert len(aws) == 3


@pytest.mark.after("submit_after_staging")
def test_given_the_submitter_then_it_waits_for_the_marker_and_only_then_creates_the_volcano_job_it_owns(
    rehearsal: Observations, variant
):
    assert rehearsal.polls_before_staging >= 2, rehearsal.submitter_log
    # Nothing of the job on FSx before staging: no cache set, no run directory, no shards.
    assert not [f for f in rehearsal.files_before_staging if f.startswith(("runs", "neuron-cache"))]
    assert not [f for f in rehearsal.files_before_staging if f.endswith(".hdf5")]
    assert not [r for r in rehearsal.requests_before_marker if r["method"] == "POST"]
    (name, created) = next(iter(rehearsal.submitted.items()))
    assert name == variant.job_name and rehearsal.submit_time > rehearsal.marker_time
    # What it created is the ConfigMap's Volcano Job, owned by the submitter's own batch Job.
    (owner,) = created["metadata"].pop("ownerReferences")
    assert variant.submitter is not None
    assert (
        owner
        == {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": variant.submitter.job_name,
            "uid": owner["uid"],
        }
        and owner["uid"]
    )
    for key in ("uid", "resourceVersion"):
        created["metadata"].pop(key)
    assert created == variant.job
    assert rehearsal.submitter_code == 0 and f"training job {name}: submitted" in rehearsal.submitter_log
    # The gang (Volcano's pods of that Job) precompiled and trained only after the marker.
    after_marker = [c for c in rehearsal.calls if c["tool"] == "neuron_parallel_compile"]
    assert after_marker and all(c["time"] > rehearsal.submit_time for c in after_marker)
    assert min(r["time"] for r in rehearsal.records()) > rehearsal.marker_time


@pytest.mark.after("submit_after_staging")
def test_given_the_staging_command_then_it_publishes_the_streamed_shards_with_a_manifest_and_the_marker(
    rehearsal: Observations,
):
    assert rehearsal.staging_code == 0, rehearsal.staging_log
    data = rehearsal.local(rehearsal.paths.data_dir)
    manifest = verify_checksums(data)
    assert len(manifest.shards) == 4
    assert rehearsal.local(rehearsal.paths.dataset_marker).is_file()
    (download,) = [
        c for c in rehearsal.calls if c["tool"] == "aws" and c["time"] > rehearsal.failed_marker_time
    ]
    assert download["argv"][:2] == ["s3", "cp"] and PUBLIC_BERT_SHARDS in download["argv"]


@pytest.mark.after("train_until_stopped")
def test_given_an_empty_cache_set_then_precompile_runs_once_across_the_gang_into_that_set_and_marks_it(
    rehearsal: Observations, variant
):
    compiles = [c for c in rehearsal.calls if c["tool"] == "neuron_parallel_compile"]
    assert sorted(c["host"] for c in compiles) == sorted(rehearsal.gang_logs[0])  # once per pod
    assert len({tuple(c["argv"]) for c in compiles}) == 1  # one trial run of the whole gang
    # The compiler's cache (NEURON_CC_FLAGS, the phase's in the description) and the program's
    # marker name the same cache set.
    flags = dict(loads(variant.worker.command[3]).phases[0].env)["NEURON_CC_FLAGS"]
    assert f"--cache_dir={rehearsal.paths.cache_dir}" in flags.split()
    cache = rehearsal.local(rehearsal.paths.cache_dir)
    assert (cache / standins.COMPILED).is_file()
    assert rehearsal.local(rehearsal.paths.cache_marker).is_file()
    # The trial run left nothing a real run would log or resume from: steps are logged once.
    assert rehearsal.steps_at_stop == list(range(1, len(rehearsal.steps_at_stop) + 1))


@pytest.mark.after("relaunch")
def test_given_the_training_command_then_it_trains_on_cpu_across_the_gang_and_checkpoints(
    rehearsal: Observations, variant
):
    out = rehearsal.local(rehearsal.paths.output_dir)
    metrics = (out / "metrics.json").read_text()
    assert '"device": "cpu"' in metrics and f'"world_size": {variant.replicas * NPROC_PER_NODE}' in metrics
    newest = ckpt.newest_complete(ckpt.checkpoint_root(out))
    assert newest is not None and step_of(newest) == MAX_STEPS
    assert ckpt.verify(newest)["world_size"] == variant.replicas * NPROC_PER_NODE
    losses = [r["loss"] for r in rehearsal.records()]
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5  # it learns


@pytest.mark.after("train_until_stopped")
def test_given_sigterm_to_one_pod_then_the_gang_ends_in_its_grace_period_with_at_most_one_step_lost(
    rehearsal: Observations, variant
):
    hosts = list(rehearsal.gang_logs[0])
    victim = rehearsal.stops[hosts[VICTIM]]
    assert victim.ended_by == "SIGTERM"
    for host in hosts:
        stop = rehearsal.stops[host]
        # Stopped by its SIGTERM (so Volcano's PodFailed policy restarts the job), not SIGKILLed.
        assert stop.code == 143 and stop.seconds < stop.grace_period_s, (host, stop)
    # The other pod does not end by itself: its torchrun restarts the worker group and waits
    # for the lost node in a new rendezvous; the Job's PodFailed -> RestartJob policy ends it.
    assert variant.action_for_failure(143) == "RestartJob"
    assert {rehearsal.stops[h].ended_by for h in hosts if h != hosts[VICTIM]} == {"RestartJob"}
    newest = rehearsal.newest_after_stop
    assert newest is not None
    last_done = max(rehearsal.steps_at_stop)
    assert last_done < MAX_STEPS and last_done - step_of(newest) <= 1
    # Every rank of the gang stopped after the same step, the one the checkpoint holds.
    stopped = re.findall(r"stopped by SIGTERM after step (\d+)", "".join(rehearsal.gang_logs[0].values()))
    assert len(stopped) == variant.replicas * NPROC_PER_NODE and set(stopped) == {str(step_of(newest))}
    assert CHECKPOINT_EVERY > 1  # so the stop's own checkpoint, not a periodic one, may be the one


@pytest.mark.after("relaunch")
def test_given_the_gang_started_again_then_it_resumes_from_the_newest_checkpoint_without_precompiling(
    rehearsal: Observations,
):
    assert set(rehearsal.relaunch_codes.values()) == {0}, rehearsal.relaunch_codes
    later = [c for c in rehearsal.calls if c["time"] > rehearsal.relaunch_time]
    assert not [c for c in later if c["tool"] == "neuron_parallel_compile"]  # the cache set's marker found
    assert not any(waits(log) for log in rehearsal.gang_logs[1].values())  # the dataset is there
    newest = rehearsal.newest_after_stop
    assert newest is not None
    rerun = [r for r in rehearsal.records() if r["time"] > rehearsal.relaunch_time]
    assert rerun[0]["step"] == step_of(newest) + 1 and rerun[-1]["step"] == MAX_STEPS
    rank0 = next(iter(rehearsal.gang_logs[1].values()))
    assert newest.name in rank0  # it says which checkpoint it resumed from


@pytest.mark.after("relaunch")
def test_given_a_worker_stopped_for_good_then_the_other_ranks_end_themselves_and_the_gang_resumes_by_itself(
    rehearsal: Observations,
):
    # The stop that counted landed in an optimizer step (a checkpoint save has no bound).
    assert rehearsal.hang_phases[-1] == "step", rehearsal.hang_phases
    # No pod failed: torchrun restarted the worker group in place, no Volcano policy was needed.
    assert set(rehearsal.relaunch_codes.values()) == {0}, rehearsal.relaunch_codes
    logs = "".join(rehearsal.gang_logs[1].values())
    hangs = HANG_LINE.findall(logs)
    stopped = VICTIM * NPROC_PER_NODE + HUNG_LOCAL_RANK
    # The first watchdog to fire ends its rank; the others' collectives then fail on the closed
    # connection (or their torchrun restarts them) before their own bounds run out.
    assert hangs and stopped not in {int(h[0]) for h in hangs}, logs[-3000:]
    for _rank, what, waited, bound, _step, _ckpt in hangs:
        assert float(bound) >= HANG_FLOOR_S and float(waited) >= float(bound)
        assert re.search(r"all-reduce|broadcast|reduce", what), what
    (checkpoint,) = {int(h[5]) for h in hangs}
    lost = rehearsal.steps_before_hang - checkpoint
    assert 0 <= lost <= CHECKPOINT_EVERY
    # The gang went back to that checkpoint by itself, soon after the bound, and ran to the end:
    # the steps its restarted workers logged (torchrun's restart count went up; a step can still
    # end just after the stop, when the stopped worker had done its part of it: it is lost too).
    records = rehearsal.records()
    restart = max(r["restart"] for r in records if r["time"] <= rehearsal.hang_time)
    after = [r for r in records if r["time"] > rehearsal.hang_time and r["restart"] > restart]
    assert after[0]["step"] == checkpoint + 1 and after[-1]["step"] == MAX_STEPS
    assert after[0]["time"] - rehearsal.hang_time < HANG_FLOOR_S + 120
    # The run's ledger counted it: the first gang's stop, then this hang.
    assert re.search(r"restarts: 2 \(hang 1, preemption 1\); lost \d+ (s|min) ", logs), logs[-3000:]


@pytest.mark.after("relaunch")
def test_given_the_gang_after_precompile_then_each_pod_checks_the_fabric_and_passes_naming_its_node_before_training(
    rehearsal: Observations,
):
    for gang in rehearsal.gang_logs:  # the first start and the relaunch
        for host, log in gang.items():
            lines = log.splitlines()
            assert lines.count(FABRIC_START) == 1, log
            (passed,) = [(n, m) for n, line in enumerate(lines) if (m := FABRIC_PASSED.search(line))]
            at, match = passed
            node, seconds, gigabytes = match.group(1), int(match.group(2)), float(match.group(3))
            assert node == rehearsal.gang_nodes[host]
            assert lines.index(FABRIC_START) < at and seconds < 120 and gigabytes > 0
            assert not any(TRAINING_START.search(line) for line in lines[:at])
    rank0 = next(iter(rehearsal.gang_logs[0].values())).splitlines()
    starts = [n for n, line in enumerate(rank0) if TRAINING_START.search(line)]
    assert len(starts) == 1 and any(FABRIC_PASSED.search(line) for line in rank0[: starts[0]])
    assert "phase 1: precompiling into an empty cache set" in rank0[: rank0.index(FABRIC_START)]


@pytest.mark.after("train_until_stopped")
def test_given_training_then_each_pods_metrics_port_serves_the_runs_series_and_they_move(
    rehearsal: Observations, variant
):
    rank0, other = list(rehearsal.gang_logs[0])
    first, later = (samples(body) for body in rehearsal.metrics[rank0])
    assert first["bert_train_max_steps"] == MAX_STEPS and first["bert_train_step"] >= 1
    assert later["bert_train_step"] > first["bert_train_step"]
    assert later["bert_train_last_step_timestamp_seconds"] > first["bert_train_last_step_timestamp_seconds"]
    rank0_only = {name for name, (_, only) in TRAINING_METRICS.items() if only} - {"bert_train_mfu_ratio"}
    # Loss, learning rate, seq/s, the restart ledger's totals (labelled by cause)...: MFU only
    # where the peak is known.
    assert rank0_only <= served(rehearsal.metrics[rank0][-1])
    assert "bert_train_mfu_ratio" not in later  # CPU: no device peak
    # A first attempt: every cause's series exists, at 0.
    restarts = {
        line for line in rehearsal.metrics[rank0][-1].splitlines() if "bert_train_restarts_total{" in line
    }
    assert restarts and all(line.endswith(" 0.0") for line in restarts), restarts
    # Every node's LOCAL_RANK 0 serves the progress series (its own port, in its own pod).
    for body in rehearsal.metrics[other]:
        assert samples(body)["bert_train_max_steps"] == MAX_STEPS and not rank0_only & served(body)


@pytest.mark.after("fabric_fallback")
def test_given_efa_counters_that_stand_still_then_every_pod_exits_69_with_one_line_naming_its_node_and_the_job_aborts(
    rehearsal: Observations, variant
):
    fallback = rehearsal.fabric_fallback
    assert len(fallback.codes) == variant.replicas
    for host, code in fallback.codes.items():
        assert code == FABRIC_EXIT_CODE and fallback.ended_by[host] == "itself", (host, fallback.logs[host])
        failed = [line for line in fallback.logs[host].splitlines() if "fabric check FAILED" in line]
        assert len(failed) == 1 and fallback.logs[host].rstrip("\n").endswith(failed[0])  # its last word
        assert re.fullmatch(
            rf"fabric check FAILED on node {fallback.nodes[host]} after \d+ s: 0 bytes crossed EFA during an "
            r"all-reduce that moves at least [\d,]+ between nodes: the collectives are not on EFA \(TCP fallback\?\)",
            failed[0],
        ), failed[0]
        assert not TRAINING_START.search(fallback.logs[host])
    assert not [r for r in rehearsal.records() if r["time"] > fallback.started]  # no training step
    # The synthesized Job aborts on that exit code (a restart would meet the same fabric).
    assert fallback.action == "AbortJob"


@pytest.mark.after("restage")
def test_given_the_staging_command_again_then_it_leaves_the_published_set_alone(rehearsal: Observations):
    assert rehearsal.restage_code == 0, rehearsal.restage_log
    later = [c for c in rehearsal.calls if c["tool"] == "aws" and c["time"] > rehearsal.failed_marker_time]
    assert len(later) == 1  # downloaded once
    assert rehearsal.local(rehearsal.paths.dataset_marker).stat().st_mtime == rehearsal.marker_time


@pytest.mark.after("tensorboard")
def test_given_the_tensorboard_command_then_it_serves_the_runs_loss_once_per_step(rehearsal: Observations):
    tb = rehearsal.tensorboard
    run_dir = rehearsal.paths.output_dir.rsplit("/", 1)[1]
    (run,) = [r for r in tb["runs"] if r.split("/")[0] == run_dir]
    assert "train/loss" in tb["tags"][run]
    # Both attempts' events, the interrupted one cut at the resume step (purge_step).
    assert tb["loss_steps"] == list(range(1, MAX_STEPS + 1))
    assert tb["code"] != 137  # it stopped on SIGTERM


@pytest.mark.after("stop_in_fabric_check")
def test_given_a_pod_deleted_during_the_fabric_check_then_the_other_restarts_the_job_rather_than_abort_it(
    rehearsal: Observations, variant
):
    stopped = rehearsal.stopped_in_check
    assert len(stopped.codes) == variant.replicas
    (victim,) = [host for host, by in stopped.ended_by.items() if by == "SIGTERM"]
    assert stopped.codes[victim] == 143, stopped.logs[victim]
    for host, code in stopped.codes.items():
        if host == victim:
            continue
        # The all-reduce broke off under it: no verdict on the fabric, one line, the Job restarts.
        assert code == FABRIC_NOT_MEASURED, (host, stopped.logs[host])
        failed = [line for line in stopped.logs[host].splitlines() if "fabric check FAILED" in line]
        assert len(failed) == 1 and "could not measure" in failed[0], stopped.logs[host]
    assert stopped.action == "RestartJob"
    # Whichever failure Volcano sees first, none of them aborts the job.
    assert set(stopped.actions.values()) == {"RestartJob"}
    assert not [r for r in rehearsal.records() if r["time"] > stopped.started]  # no training step
