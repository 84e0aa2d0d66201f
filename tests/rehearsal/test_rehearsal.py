"""The offline rehearsal: the training stack's synthesized pods run as local processes.

The story (``tests.rehearsal.scenario``) is played once; each test checks one thing the issue
asks of it, on files, exit codes and the stand-ins' records. What runs differently from a
cluster, and why: ``tests.rehearsal.substitutions``.
"""

from __future__ import annotations

import re

from tests.rehearsal import standins
from tests.rehearsal.scenario import CHECKPOINT_EVERY, MAX_STEPS, NPROC_PER_NODE, VICTIM, Observations
from training import checkpoint as ckpt
from training.shard_format import verify_checksums
from trainium_eks.dataset_staging import PUBLIC_BERT_SHARDS


def step_of(checkpoint) -> int:
    return int(checkpoint.name.removeprefix("step_"))


def test_given_a_gang_pod_deleted_while_it_waits_for_the_dataset_then_it_ends_at_once_with_143(
    rehearsal: Observations,
):
    stop = rehearsal.waiting_stop
    assert stop is not None and stop.code == 143 and stop.seconds < 10, stop


def test_given_the_gang_started_before_staging_then_every_pod_waits_for_the_marker_and_nothing_runs(
    rehearsal: Observations, variant
):
    first = rehearsal.gang_logs[0]
    assert len(first) == variant.replicas
    for host, log in first.items():
        assert rehearsal.polls_before_staging[host] >= 2
        waiting = log.split("\n", 1)[0]  # the first thing a pod says names the marker it waits for
        assert rehearsal.paths.dataset_marker in waiting, log[:2000]
    assert rehearsal.files_before_staging == []  # no cache set, no run directory, no data yet
    after_marker = [c for c in rehearsal.calls if c["tool"] == "neuron_parallel_compile"]
    assert after_marker and all(c["time"] > rehearsal.marker_time for c in after_marker)
    assert min(r["time"] for r in rehearsal.records()) > rehearsal.marker_time


def test_given_the_staging_command_then_it_publishes_the_streamed_shards_with_a_manifest_and_the_marker(
    rehearsal: Observations,
):
    assert rehearsal.staging_code == 0, rehearsal.staging_log
    data = rehearsal.local(rehearsal.paths.data_dir)
    manifest = verify_checksums(data)
    assert len(manifest.shards) == 4
    assert rehearsal.local(rehearsal.paths.dataset_marker).is_file()
    (download,) = [c for c in rehearsal.calls if c["tool"] == "aws"]
    assert download["argv"][:2] == ["s3", "cp"] and PUBLIC_BERT_SHARDS in download["argv"]


def test_given_an_empty_cache_set_then_precompile_runs_once_across_the_gang_into_that_set_and_marks_it(
    rehearsal: Observations, variant
):
    compiles = [c for c in rehearsal.calls if c["tool"] == "neuron_parallel_compile"]
    assert sorted(c["host"] for c in compiles) == sorted(rehearsal.gang_logs[0])  # once per pod
    assert len({tuple(c["argv"]) for c in compiles}) == 1  # one trial run of the whole gang
    # The compiler's cache (NEURON_CC_FLAGS) and the script's marker name the same cache set.
    flags = variant.worker.env["NEURON_CC_FLAGS"]
    assert f"--cache_dir={rehearsal.paths.cache_dir}" in flags.split()
    cache = rehearsal.local(rehearsal.paths.cache_dir)
    assert (cache / standins.COMPILED).is_file()
    assert rehearsal.local(rehearsal.paths.cache_marker).is_file()
    # The trial run left nothing a real run would log or resume from: steps are logged once.
    assert rehearsal.steps_at_stop == list(range(1, len(rehearsal.steps_at_stop) + 1))


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
    assert variant.policies["PodFailed"] == "RestartJob"
    assert {rehearsal.stops[h].ended_by for h in hosts if h != hosts[VICTIM]} == {"RestartJob"}
    newest = rehearsal.newest_after_stop
    assert newest is not None
    last_done = max(rehearsal.steps_at_stop)
    assert last_done < MAX_STEPS and last_done - step_of(newest) <= 1
    # Every rank of the gang stopped after the same step, the one the checkpoint holds.
    stopped = re.findall(r"stopped by SIGTERM after step (\d+)", "".join(rehearsal.gang_logs[0].values()))
    assert len(stopped) == variant.replicas * NPROC_PER_NODE and set(stopped) == {str(step_of(newest))}
    assert CHECKPOINT_EVERY > 1  # so the stop's own checkpoint, not a periodic one, may be the one


def test_given_the_gang_started_again_then_it_resumes_from_the_newest_checkpoint_without_precompiling(
    rehearsal: Observations,
):
    assert set(rehearsal.relaunch_codes.values()) == {0}, rehearsal.relaunch_codes
    later = [c for c in rehearsal.calls if c["time"] > rehearsal.relaunch_time]
    assert not [c for c in later if c["tool"] in ("neuron_parallel_compile", "sleep")]  # marker, cache found
    newest = rehearsal.newest_after_stop
    assert newest is not None
    rerun = [r for r in rehearsal.records() if r["time"] > rehearsal.relaunch_time]
    assert rerun[0]["step"] == step_of(newest) + 1 and rerun[-1]["step"] == MAX_STEPS
    rank0 = next(iter(rehearsal.gang_logs[1].values()))
    assert newest.name in rank0  # it says which checkpoint it resumed from


def test_given_the_staging_command_again_then_it_leaves_the_published_set_alone(rehearsal: Observations):
    assert rehearsal.restage_code == 0, rehearsal.restage_log
    assert len([c for c in rehearsal.calls if c["tool"] == "aws"]) == 1  # downloaded once
    assert rehearsal.local(rehearsal.paths.dataset_marker).stat().st_mtime == rehearsal.marker_time


def test_given_the_tensorboard_command_then_it_serves_the_runs_loss_once_per_step(rehearsal: Observations):
    tb = rehearsal.tensorboard
    run_dir = rehearsal.paths.output_dir.rsplit("/", 1)[1]
    (run,) = [r for r in tb["runs"] if r.split("/")[0] == run_dir]
    assert "train/loss" in tb["tags"][run]
    # Both attempts' events, the interrupted one cut at the resume step (purge_step).
    assert tb["loss_steps"] == list(range(1, MAX_STEPS + 1))
    assert tb["code"] != 137  # it stopped on SIGTERM
