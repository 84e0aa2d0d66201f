"""The trainer's mark of a finished run: what lets the job's worker script skip a done phase."""

from __future__ import annotations

import json

from tests.training.trainer.test_pretrain import run
from training.trainer import checkpoint as ckpt
from trainium_job.paths import COMPLETE_MARKER, job_paths


def test_given_a_run_short_of_max_steps_then_no_marker_and_at_max_steps_the_final_checkpoint_named(
    shards, tmp_path
):
    # Given: a run stopped by --steps_this_run before its --max_steps
    out = tmp_path / "run"
    run(shards, out, "--steps_this_run", "4")
    assert not (out / COMPLETE_MARKER).exists()
    # When: the same run resumed to its end
    run(shards, out)
    # Then: the marker names the step, the schedule and the final (verified) checkpoint
    record = json.loads((out / COMPLETE_MARKER).read_text())
    final = ckpt.newest_complete(out / "checkpoints")
    assert record == {"step": 8, "max_steps": 8, "checkpoint": str(final)}
    assert final.name == ckpt.step_dir_name(8)
    ckpt.verify(final)


def test_given_the_job_layout_then_the_marker_is_where_the_worker_script_looks():
    paths = job_paths(dataset_name="d", cache_set="c", run_name="bert-large-phase1")
    assert paths.complete_marker == f"/data/runs/bert-large-phase1/{COMPLETE_MARKER}"
    assert paths.model_dir == "/data/runs/bert-large-phase1/model"
