"""The two-phase job's real pod commands (``tests.rehearsal.two_phases``): phase 2 starts from
phase 1's final checkpoint, a redeploy after phase 1 does not rerun it, and each phase's export
is a model ``transformers`` loads; each phase's held-out set, made by its own Job from the
synthesized PG-19 URL (the web stand-in), is evaluated at the phase's end; pod 0 uploads each
model to the model bucket (the stand-in S3) at the URI the review and the stack outputs print,
where it loads again, its card holding the run's held-out accuracy, and the redeploy's upload of
phase 1's model sends nothing."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from huggingface_hub import ModelCard

from tests.rehearsal.cluster import namespaces_available, pod_network_available
from tests.rehearsal.manifests import heldouts, stagings, workload
from tests.rehearsal.s3_standin import BUCKET
from tests.rehearsal.substitutions import STACK_OUTPUT_STANDINS
from tests.rehearsal.two_phases import (
    EVAL_SAMPLES,
    PHASE1_STEPS,
    PHASE2_EVERY,
    PHASE2_PRED,
    PHASE2_SEQ_LEN,
    PHASE2_SOURCE,
    PHASE2_STEPS,
    RUN1,
    RUN2,
    Sources,
    TwoPhaseObservations,
    play,
    sources,
    two_phase_context,
    upload_summaries,
)
from tests.support import synth_training
from tests.training.trainer.test_model_card import section, table
from training.dataprep.shard_format import read_manifest
from training.trainer import checkpoint as ckpt
from training.trainer.export import load_model
from trainium_eks.config import config_from_context
from trainium_eks.jobs.heldout_staging import PG19_TEST_PARQUET, heldout_paths
from trainium_eks.report.review import model_review
from trainium_job.paths import JobPaths, model_key_prefix


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
        tmp_path_factory.mktemp("two-phases"),
        workload(template),
        stagings(template),
        heldouts(template),
        two_phase_sources,
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
    # The gang started on phase 1's shards, and phase 2's were staged while it trained phase 1.
    assert two_phases.phase1_staged <= two_phases.gang_started
    phase1_done = two_phases.local(two_phases.paths.complete_marker).stat().st_mtime
    assert two_phases.phase2_staged < phase1_done


@pytest.mark.after("redeploy")
@pytest.mark.parametrize("phase", [1, 2])
def test_given_each_phase_s_heldout_job_then_its_set_from_the_pinned_books_is_evaluated_at_the_phase_s_end(
    two_phases, two_phase_sources, phase
):
    paths = [two_phases.paths, two_phases.paths2][phase - 1]
    shape = [(128, 20), (PHASE2_SEQ_LEN, PHASE2_PRED)][phase - 1]
    held = heldout_paths(paths)
    # Given the phase's held-out Job, which waited for its phase's shards and made the set from
    # the books at the synthesized URL (the web stand-in's, fetched once per Job)
    assert two_phases.heldout_codes == [0, 0]
    log = two_phases.heldout_logs[phase - 1]
    assert f"phase {phase}'s shards: there ({paths.dataset_marker})" in log
    manifest = read_manifest(two_phases.local(held.data_dir))
    assert (manifest.seq_len, manifest.max_pred_len) == shape and manifest.samples >= EVAL_SAMPLES
    digest = hashlib.sha256(two_phase_sources.heldout.read_bytes()).hexdigest()
    assert manifest.settings["source"] == PG19_TEST_PARQUET and manifest.settings["source_sha256"] == digest
    gets = [r for r in two_phases.web_requests if r["status"] == 200]
    assert len(gets) == 2 and all(PG19_TEST_PARQUET == f"https://{r['url']}" for r in gets)
    # When the phase ran to its end, then rank 0 reported a held-out evaluation of that step
    # (the step log and the metrics file), over the samples asked for
    steps = PHASE1_STEPS if phase == 1 else PHASE2_STEPS
    last = two_phases.evaluations(paths)[-1]
    assert last["step"] == steps and last["eval_samples"] == EVAL_SAMPLES
    assert 0.0 <= last["eval_mlm_accuracy"] <= 1.0 and 0.0 <= last["eval_nsp_accuracy"] <= 1.0
    said = f"step {steps} | eval_samples {EVAL_SAMPLES} | eval_mlm_loss "
    lines = [line for launch in two_phases.gang_logs for log in launch.values() for line in log.splitlines()]
    assert any(
        said in line and f"eval_mlm_accuracy {last['eval_mlm_accuracy']:.4g}" in line for line in lines
    )
    done = json.loads(two_phases.local(paths.output_dir).joinpath("metrics.json").read_text())["eval"]
    assert done == {
        "step": steps,
        **{k.removeprefix("eval_"): v for k, v in last.items() if k.startswith("eval_")},
    }


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


def assert_loads_with_our_logits(seen: TwoPhaseObservations, paths: JobPaths, model_dir: Path) -> None:
    """``model_dir`` loads in transformers, with the tokenizer of the phase's vocabulary, and gives
    the logits of the phase's final checkpoint."""
    from transformers import AutoTokenizer, BertForPreTraining

    hf, info = BertForPreTraining.from_pretrained(model_dir, output_loading_info=True)
    assert {k: v for k, v in info.items() if v} == {}
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    assert tokenizer.vocab == {
        w: i
        for i, w in enumerate(seen.local(paths.data_dir).joinpath("vocab.txt").read_text().split("\n")[:-1])
    }
    # when both models see the same batch
    ours, _, _ = load_model(final_checkpoint(seen, paths.output_dir))
    batch = tokenizer(["the of and to in a is that", "for it as was with"], padding=True, return_tensors="pt")
    with torch.no_grad():
        a, b = hf.eval()(**batch), ours(**batch)
    # then their logits agree (float32 on the same CPU: the same weights give the same numbers)
    torch.testing.assert_close(a.prediction_logits, b.prediction_logits, rtol=0, atol=1e-5)
    torch.testing.assert_close(a.seq_relationship_logits, b.seq_relationship_logits, rtol=0, atol=1e-5)


@pytest.mark.after("redeploy")
@pytest.mark.parametrize("phase", [1, 2])
def test_given_each_phase_ended_then_its_export_loads_in_transformers_with_our_logits(two_phases, phase):
    paths = two_phases.paths if phase == 1 else two_phases.paths2
    # given the export of the phase's final checkpoint, written by pod 0 only
    assert_loads_with_our_logits(two_phases, paths, two_phases.local(paths.model_dir))
    # and only pod 0 exported it, once
    line = f"phase {phase}: exporting the model to {paths.model_dir}"
    exports = [
        h for launch in two_phases.gang_logs for h, log in launch.items() for _ in re.findall(line, log)
    ]
    assert len(exports) == 1 and exports[0].endswith("-worker-0"), exports


# --- the model bucket: pod 0 uploads each phase's model (tests.rehearsal.two_phases ModelBucket) --


def resolved(value: Any, outputs: dict[str, str]) -> str:
    """A stack output's value (a string, or a ``Fn::Join`` of strings and other stacks' outputs)
    with each ``Fn::GetStackOutput`` replaced by ``outputs``' value for its output name."""
    if isinstance(value, str):
        return value
    if "Fn::GetStackOutput" in value:
        return outputs[value["Fn::GetStackOutput"]["OutputName"]]
    separator, parts = value["Fn::Join"]
    return str(separator).join(resolved(part, outputs) for part in parts)


def model_outputs(template: dict[str, Any], suffix: str) -> list[str]:
    """The values of the training stack's ``Model<n><suffix>`` outputs (``Uri``, ``Fetch``), by n,
    the model bucket being the stand-in S3's (tests.rehearsal.substitutions STACK_OUTPUT_STANDINS)."""
    found = {}
    for name, output in template["Outputs"].items():
        matched = re.search(rf"Model(\d+){suffix}[0-9A-F]{{8}}$", name)
        if matched:
            found[int(matched.group(1))] = resolved(output["Value"], STACK_OUTPUT_STANDINS)
    return [found[n] for n in sorted(found)]


def pod0(logs: dict[str, str]) -> str:
    (log,) = (log for host, log in logs.items() if host.endswith("-worker-0"))
    return log


def model_files(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


@pytest.mark.after("redeploy")
def test_given_both_phases_ended_then_each_model_is_in_the_bucket_at_the_uri_the_review_and_outputs_print(
    two_phases, two_phase_sources
):
    context = two_phase_context(two_phase_sources.vocab_size)
    runs = (two_phases.paths, two_phases.paths2)
    # Given the URIs the review and the stack outputs print, the model bucket being the stand-in's
    uris = [f"s3://{BUCKET}/{model_key_prefix(paths.run_name)}/" for paths in runs]
    review = "\n".join(model_review(config_from_context(context))).replace("<bucket>", BUCKET)
    assert f"SHA-256 checked: {', '.join(uris)}" in review
    template = synth_training(**context)
    assert model_outputs(template, "Uri") == uris
    # Then pod 0 uploaded each phase's export there, and said how to fetch it as the outputs do
    for n, (uri, fetch) in enumerate(zip(uris, model_outputs(template, "Fetch"), strict=True), start=1):
        log = pod0(two_phases.gang_logs[-1])
        assert f"phase {n}: uploading the model to {uri.rstrip('/')}\n" in log
        (summary,) = upload_summaries(log, runs[n - 1].run_name)
        assert f"fetch: {fetch.replace(' && ', ' ; load: ')}" in summary
    # And the bucket holds exactly the export's files under each URI, each with the SHA-256 S3
    # checked (one PutObject: the whole file's, base64) and the file's own as metadata, one version
    expected = {
        f"{model_key_prefix(paths.run_name)}/{name}": content
        for paths in runs
        for name, content in model_files(two_phases.local(paths.model_dir)).items()
    }
    assert sorted(two_phases.bucket.after) == sorted(expected)
    for key, content in expected.items():
        held, digest = two_phases.bucket.after[key], hashlib.sha256(content)
        assert held["checksum_sha256"] == base64.b64encode(digest.digest()).decode(), key
        assert held["metadata"] == {"sha256": digest.hexdigest()}, key
        assert (held["size"], held["versions"]) == (len(content), 1), key


@pytest.mark.after("redeploy")
@pytest.mark.parametrize("phase", [1, 2])
def test_given_each_model_fetched_from_the_bucket_then_it_loads_and_its_card_has_the_runs_accuracy(
    two_phases, phase
):
    lineage = [two_phases.paths, two_phases.paths2][:phase]
    paths = lineage[-1]
    fetched = two_phases.bucket.fetched[paths.run_name]
    # Given the folder the printed `aws s3 cp --recursive` fetches: the export, byte for byte
    assert model_files(fetched) == model_files(two_phases.local(paths.model_dir))
    # Then it loads in transformers and gives the logits of the phase's final checkpoint
    assert_loads_with_our_logits(two_phases, paths, fetched)
    # And its model card's accuracy figures are those of the runs' metrics.json, phase by phase:
    # each file the summary of its run's last step (training.trainer.model_card run_metrics)
    card = ModelCard.load(fetched / "README.md")
    metrics = [
        json.loads(two_phases.local(p.output_dir).joinpath("metrics.json").read_text()) for p in lineage
    ]
    for m, p in zip(metrics, lineage, strict=True):
        assert m["end_step"] == int(final_checkpoint(two_phases, p.output_dir).name.removeprefix("step_"))
    rows = {row[0]: row for row in table(section(card.text, "Evaluation"))}
    for n, m in enumerate(metrics, start=1):
        row, done = rows[f"phase {n}"], m["eval"]  # each phase evaluated at its end (above)
        assert row[1] == str(done["step"]) == str(m["end_step"])
        assert row[5:7] == [f"{done['mlm_accuracy']:.4f}", f"{done['nsp_accuracy']:.4f}"]
    last = metrics[-1]["eval"]
    results = {r.metric_name: r.metric_value for r in card.data.eval_results}
    assert results == {
        "masked-LM accuracy": last["mlm_accuracy"],
        "next-sentence accuracy": last["nsp_accuracy"],
    }


@pytest.mark.after("redeploy")
def test_given_a_redeploy_after_phase1_s_upload_then_its_upload_again_sends_nothing(two_phases):
    files1 = len(model_files(two_phases.local(two_phases.paths.model_dir)))
    files2 = len(model_files(two_phases.local(two_phases.paths2.model_dir)))
    first, again = (pod0(logs) for logs in two_phases.gang_logs)
    # Given phase 1's model uploaded by the first gang, before it was deleted
    (sent,) = upload_summaries(first, RUN1)
    assert (
        f"{files1} files verified (SHA-256 and size): {files1} uploaded (" in sent and ", 0 skipped" in sent
    )
    assert upload_summaries(first, RUN2) == []
    # When the redeployed gang, which does not train phase 1 again, uploads it again
    (skipped,) = upload_summaries(again, RUN1)
    # Then every file is skipped (same size and SHA-256 in the bucket), and phase 2's is sent once
    assert f"{files1} files verified (SHA-256 and size): 0 uploaded (0.0 MB), {files1} skipped" in skipped
    (sent2,) = upload_summaries(again, RUN2)
    assert f": {files2} uploaded (" in sent2 and ", 0 skipped" in sent2
    # And the bucket's phase 1 objects are as they were before the redeploy: one version each
    prefix = f"{model_key_prefix(RUN1)}/"
    before = two_phases.bucket.before_redeploy
    assert before and all(key.startswith(prefix) and held["versions"] == 1 for key, held in before.items())
    assert {k: v for k, v in two_phases.bucket.after.items() if k.startswith(prefix)} == before
    # And only pod 0 uploads
    others = [log for logs in two_phases.gang_logs for host, log in logs.items() if not host.endswith("-0")]
    assert others and not any("uploading the model" in log for log in others)
