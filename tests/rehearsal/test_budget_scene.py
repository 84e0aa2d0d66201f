"""The spend ceiling on the job's real pod commands (``tests.rehearsal.budget_scene``): at the
ceiling the gang stops at a checkpoint, the model of the stopped run is exported and the job is
aborted; with the ceiling raised and redeployed it resumes from that checkpoint to its end."""

from __future__ import annotations

import os
import re

import pytest
from transformers import BertForPreTraining

from tests.rehearsal.budget_scene import (
    CEILING_USD,
    MAX_STEPS,
    RAISED_USD,
    BudgetObservations,
    budget_context,
    play,
)
from tests.rehearsal.cluster import namespaces_available, pod_network_available
from tests.rehearsal.manifests import workload
from tests.rehearsal.two_phases import Sources, sources
from tests.support import synth_training
from training.trainer import checkpoint as ckpt
from trainium_job.exit_codes import BUDGET_EXIT_CODE


@pytest.fixture(scope="session")
def budget_sources(tmp_path_factory: pytest.TempPathFactory) -> Sources:
    return sources(tmp_path_factory.mktemp("budget-sources"), {**os.environ, "OMP_NUM_THREADS": "1"})


@pytest.fixture(scope="session")
def budget_scene(tmp_path_factory: pytest.TempPathFactory, budget_sources: Sources) -> BudgetObservations:
    """The scene, played once; its pods are gone when it returns or fails."""
    why = namespaces_available() or pod_network_available()
    if why is not None:
        pytest.skip(f"the rehearsal's pods {why}")
    small = workload(synth_training(**budget_context(budget_sources.vocab_size, CEILING_USD)))
    raised = workload(synth_training(**budget_context(budget_sources.vocab_size, RAISED_USD)))
    return play(tmp_path_factory.mktemp("budget"), small, raised, budget_sources)


def step_of(checkpoint) -> int:
    return int(checkpoint.name.removeprefix("step_"))


@pytest.mark.after("stopped_at_ceiling")
def test_given_a_tiny_ceiling_then_the_gang_stops_at_a_checkpoint_exports_the_stopped_run_and_the_job_aborts(
    budget_scene: BudgetObservations,
):
    stopped = budget_scene.stopped
    assert len(stopped.codes) == 2
    for host, code in stopped.codes.items():
        assert code == BUDGET_EXIT_CODE and stopped.ended_by[host] == "itself", stopped.logs[host]
        assert (
            "stopped at the spend ceiling; raise training_budget_usd and redeploy to go on"
            in stopped.logs[host]
        )
    assert stopped.action == "AbortJob"  # the Job ends; Karpenter releases its nodes
    assert budget_scene.stop_marker["ceiling_usd"] == CEILING_USD
    assert budget_scene.stop_marker["spent_usd"] >= CEILING_USD
    logs = "\n".join(stopped.logs.values())
    assert re.search(rf"spend \$[\d,.]+ reached the ceiling of \${CEILING_USD}\.00", logs), logs[-3000:]
    # Every rank stopped after the same step, the one the checkpoint holds, short of the end.
    checkpoint = budget_scene.checkpoint_at_stop
    assert checkpoint is not None and 1 <= step_of(checkpoint) < MAX_STEPS
    stops = set(re.findall(r"stopped by SIGTERM after step (\d+)", logs))
    assert stops == {str(step_of(checkpoint))}
    assert not budget_scene.complete_at_stop
    # Pod 0 exported the stopped run; its card says where it stopped.
    assert budget_scene.exported_at_stop and budget_scene.stopped_export_marked
    assert f"stopped at step {step_of(checkpoint)} of {MAX_STEPS}" in budget_scene.card_at_stop


@pytest.mark.after("raised_ceiling")
def test_given_the_ceiling_raised_and_redeployed_then_the_job_resumes_from_the_stop_and_exports_the_final_model(
    budget_scene: BudgetObservations,
):
    assert set(budget_scene.resumed_codes.values()) == {0}, budget_scene.resumed_codes
    checkpoint = budget_scene.checkpoint_at_stop
    assert checkpoint is not None
    resumed = [r for r in budget_scene.records() if r["time"] > budget_scene.resume_time]
    assert resumed[0]["step"] == step_of(checkpoint) + 1 and resumed[-1]["step"] == MAX_STEPS
    assert budget_scene.local(budget_scene.paths.complete_marker).exists()
    # The final export replaced the stopped run's: the card no longer says it stopped.
    run = budget_scene.local(budget_scene.paths.output_dir)
    assert not (run / "model.stopped-export").exists()
    model = budget_scene.local(budget_scene.paths.model_dir)
    assert "stopped at step" not in (model / "README.md").read_text()
    BertForPreTraining.from_pretrained(model)  # what a user loads
    final = ckpt.newest_complete(ckpt.checkpoint_root(run))
    assert final is not None and step_of(final) == MAX_STEPS
