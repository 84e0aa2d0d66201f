"""The two-phase job's real pod commands (``tests.rehearsal.two_phases``): phase 2 starts from
phase 1's final checkpoint, a redeploy after phase 1 does not rerun it, and each phase's export
is a model ``transformers`` loads."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import torch

from tests.rehearsal.cluster import namespaces_available, pod_network_available
from tests.rehearsal.manifests import stagings, workload
from tests.rehearsal.two_phases import (
    PHASE1_STEPS,
    PHASE2_EVERY,
    PHASE2_SEQ_LEN,
    PHASE2_SOURCE,
    PHASE2_STEPS,
    Sources,
    TwoPhaseObservations,
    play,
    sources,
    two_phase_context,
)
from tests.support import synth_training
from training.trainer import checkpoint as ckpt
from training.trainer.export import load_model


@pytest.fixture(scope="session")
def two_phase_sources(tmp_path_factory: pytest.TempPathFactory) -> Sources:
    return sources(tmp_path_factory.mktemp("two-phase-sources"), {**os.environ, "OMP_NUM_THREADS": "1"})


@pytest.fixture(scope="session")
def two_phases(tmp_path_factory: pytest.TempPathFactory, two_phase_sources: Sources) -> TwoPhaseObservations:
    """The scene, played once; its pods are gone when it returns or fails."""
    why = namespaces_available() or pod_network_available()
    if why is not None:
        pytest.skip(f"the rehearsal's pods {why}")
    template = synth_training(**two_phase_context(two_phase_sources.vocab_size))
    return play(
        tmp_path_factory.mktemp("two-phases"), workload(template), stagings(template), two_phase_sources
    )


def logs(seen: TwoPhaseObservations, launch: int) -> str:
    """Every gang pod's log of one launch (0: the first gang, 1: the redeployed one)."""
    return "\n".join(seen.gang_logs[launch].values())


def final_checkpoint(seen: TwoPhaseObservations, run_dir: str) -> Path:
    found = ckpt.newest_complete(ckpt.checkpoint_root(seen.local(run_dir)))
    assert found is not None, f"no complete checkpoint in {run_dir}"
    return found


@pytest.mark.after("start")
def test_given_both_phases_then_each_dataset_is_staged_by_its_own_job_with_the_vocabulary(two_phases):
    assert two_phases.staging_codes == [0, 0]
    for paths in (two_phases.paths, two_phases.paths2):
        assert two_phases.local(paths.dataset_marker).read_text().strip() == "4 shards"
        vocab = two_phases.local(paths.data_dir) / "vocab.txt"
        assert {"[CLS]", "[MASK]"} <= set(vocab.read_text().split("\n"))


@pytest.mark.after("start")
def test_given_both_stagings_started_together_then_phase_2_s_waits_for_phase_1_s_shards_before_its_own(
    two_phases,
):
    # Phase 2's staging never shares the file system's throughput with phase 1's: it said it
    # waited for phase 1's shards, and downloaded its own only once they were there.
    phase2_log = two_phases.staging_logs[1]
    assert (
        f"the shards of {two_phases.paths.data_dir}: there ({two_phases.paths.dataset_marker})" in phase2_log
    )
    phase2_downloads = [c for c in two_phases.calls if c["tool"] == "aws" and PHASE2_SOURCE in c["argv"]]
    assert phase2_downloads and min(c["time"] for c in phase2_downloads) > two_phases.phase1_staged
    # The gang started on phase 1's shards while phase 2's were still being staged.
    assert two_phases.phase1_staged <= two_phases.gang_started < two_phases.phase2_staged


@pytest.mark.after("phase2_checkpointed")
def test_given_phase1_done_then_phase2_starts_from_its_final_checkpoint(two_phases):
    # given phase 1 trained to its end
    complete = json.loads(two_phases.local(two_phases.paths.complete_marker).read_text())
    assert complete["step"] == complete["max_steps"] == PHASE1_STEPS
    final1 = final_checkpoint(two_phases, two_phases.paths.output_dir)
    assert final1.name == ckpt.step_dir_name(PHASE1_STEPS)
    # then phase 2's checkpoints name that checkpoint, its step and its digest as their source
    source = ckpt.verify(final_checkpoint(two_phases, two_phases.paths2.output_dir))["init_from"]
    assert source["step"] == PHASE1_STEPS
    assert Path(source["checkpoint"]).name == final1.name
    assert source["run"] == two_phases.paths.output_dir
    assert source[f"state_{ckpt.DIGEST}"] == ckpt.verify(final1)["files"][ckpt.STATE_FILE][ckpt.DIGEST]
    # and phase 2 trains at its own sequence length from step 1, with its own compile cache
    first = two_phases.records(two_phases.paths2)[0]
    assert first["step"] == 1
    assert (
        ckpt.verify(final_checkpoint(two_phases, two_phases.paths2.output_dir))["args"]["seq_len"]
        == PHASE2_SEQ_LEN
    )
    for paths in (two_phases.paths, two_phases.paths2):
        assert two_phases.local(paths.cache_marker).exists()
    assert two_phases.paths.cache_dir != two_phases.paths2.cache_dir
    assert "phase 2: precompiling into an empty cache set" in logs(two_phases, 0)


@pytest.mark.after("redeploy")
def test_given_a_redeploy_after_phase1_then_phase1_is_not_run_again(two_phases):
    again = logs(two_phases, 1)
    assert f"phase 1: {two_phases.paths.output_dir} is complete, not run again" in again
    assert "phase 1: precompiling" not in again
    assert "waiting for the dataset" not in again.split("phase 2")[0]
    # phase 1's step log gained nothing after the redeploy
    phase1 = two_phases.records()
    assert [r["step"] for r in phase1] == list(range(1, PHASE1_STEPS + 1))
    assert all(r["time"] < two_phases.redeploy_time for r in phase1)


@pytest.mark.after("redeploy")
def test_given_a_redeploy_in_phase2_then_it_resumes_its_own_checkpoint_and_ends(two_phases):
    assert two_phases.redeploy_codes == dict.fromkeys(two_phases.redeploy_codes, 0)
    assert two_phases.newest_after_stop is not None
    resumed_from = int(two_phases.newest_after_stop.name.removeprefix("step_"))
    # (the first checkpoint on schedule, or the one the SIGTERM's graceful stop wrote after it)
    assert PHASE2_EVERY <= resumed_from < PHASE2_STEPS
    after = [r["step"] for r in two_phases.records(two_phases.paths2) if r["time"] > two_phases.redeploy_time]
    assert after == list(range(resumed_from + 1, PHASE2_STEPS + 1))
    complete = json.loads(two_phases.local(two_phases.paths2.complete_marker).read_text())
    assert complete["step"] == PHASE2_STEPS
    # each pod checks the fabric once per start, before the first phase it trains
    for log in two_phases.gang_logs[1].values():
        assert log.count("fabric check: all-reduce across 2 nodes") == 1


@pytest.mark.after("redeploy")
@pytest.mark.parametrize("phase", [1, 2])
def test_given_each_phase_ended_then_its_export_loads_in_transformers_with_our_logits(two_phases, phase):
    from transformers import AutoTokenizer, BertForPreTraining

    paths = two_phases.paths if phase == 1 else two_phases.paths2
    model_dir = two_phases.local(paths.model_dir)
    # given the export of the phase's final checkpoint, written by pod 0 only
    hf, info = BertForPreTraining.from_pretrained(model_dir, output_loading_info=True)
    assert {k: v for k, v in info.items() if v} == {}
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    assert tokenizer.vocab == {
        w: i
        for i, w in enumerate(
            two_phases.local(paths.data_dir).joinpath("vocab.txt").read_text().split("\n")[:-1]
        )
    }
    # when both models see the same batch
    ours, _, _ = load_model(final_checkpoint(two_phases, paths.output_dir))
    batch = tokenizer(["the of and to in a is that", "for it as was with"], padding=True, return_tensors="pt")
    with torch.no_grad():
        a, b = hf.eval()(**batch), ours(**batch)
    # then their logits agree (float32 on the same CPU: the same weights give the same numbers)
    torch.testing.assert_close(a.prediction_logits, b.prediction_logits, rtol=0, atol=1e-5)
    torch.testing.assert_close(a.seq_relationship_logits, b.seq_relationship_logits, rtol=0, atol=1e-5)
    # and only pod 0 exported it, once
    line = f"phase {phase}: exporting the model to {paths.model_dir}"
    exports = [
        h for launch in two_phases.gang_logs for h, log in launch.items() for _ in re.findall(line, log)
    ]
    assert len(exports) == 1 and exports[0].endswith("-worker-0"), exports
