"""The phase keys: ``training_phases``, ``phase2_*``, ``vocab_source``; what the default deploy runs.

Given context as a user types it, then the configuration's phases, its refusals (the key, the
value, what to do) and its review; and in the default synthesized training stack, one Volcano
Job whose pods run phase 1 and then phase 2, with a staging Job for each phase's shards.
"""

from __future__ import annotations

import pytest

from tests.trainium_eks.jobs.training_support import manifests_of, submitted_jobs
from trainium_eks.config import config_from_context
from trainium_eks.jobs.dataset_staging import (
    NEURON_PHASE1_CHECKPOINT,
    PUBLIC_BERT_SHARDS,
    PUBLIC_BERT_SHARDS_512,
    PUBLIC_BERT_VOCAB,
)
from trainium_eks.report.review import training_review
from trainium_job.dataset_runner import DatasetRun
from trainium_job.errors import ConfigError
from trainium_job.pod_program import loads


def test_given_defaults_then_both_phases_in_order_the_second_from_the_first_each_exported():
    config = config_from_context({})
    phase1, phase2 = config.phase_jobs
    assert (phase1.run_name, phase2.run_name) == ("bert-large-phase1", "bert-large-phase2")
    assert phase2.init_from == phase1.paths.output_dir and phase1.init_from is None
    assert phase1.vocab == "/data/datasets/bert-wikicorpus-seq128/vocab.txt"
    assert phase2.vocab == "/data/datasets/bert-wikicorpus-seq512/vocab.txt"
    assert (config.training_dataset_source, config.phase2_dataset_source) == (
        PUBLIC_BERT_SHARDS,
        PUBLIC_BERT_SHARDS_512,
    )
    assert config.vocab_source == PUBLIC_BERT_VOCAB
    # 32,768 / (2 x 64 workers) on the default 2 x trn1.32xlarge
    assert config.phase_plan(phase2).grad_accum_usteps == 256


def test_given_phase_keys_then_each_phase_takes_its_own_and_phase_2_alone_starts_from_the_import():
    config = config_from_context(
        {
            "training_phases": "2",
            "phase2_init_from": NEURON_PHASE1_CHECKPOINT,
            "phase2_max_steps": "1000",
            "phase2_script_args": '{"lr": "1e-4"}',
        }
    )
    (only,) = config.phase_jobs
    assert only.max_steps == 1000 and only.extra_args["lr"] == "1e-4" and only.extra_args["seq_len"] == 512
    assert only.init_from == "/data/checkpoints/dp_bert_large_hf_pretrain-ckpt_28125"
    (phase1,) = config_from_context({"training_phases": "1"}).phase_jobs
    assert phase1.run_name == "bert-large-phase1"
    unexported = config_from_context({"vocab_source": ""})
    assert all(job.vocab is None for job in unexported.phase_jobs)


@pytest.mark.parametrize(
    "context,key,fix",
    [
        ({"training_phases": "3"}, "training_phases", "choose one of both, 1, 2"),
        ({"training_phases": "2"}, "phase2_init_from", "phase 2 alone needs its start weights"),
        ({"phase2_init_from": "fsx:/runs/x"}, "phase2_init_from", "set training_phases=2"),
        (
            {"training_phases": "2", "phase2_init_from": "s3://bucket/model.bin"},
            "phase2_init_from",
            "ckpt_<step>.pt",
        ),
        ({"training_phases": "2", "phase2_init_from": "/runs/x"}, "phase2_init_from", "fsx:/path"),
        # phase 2 longer than the model's position embeddings (BERT-large: 512)
        ({"phase2_script_args": '{"seq_len": "1024"}'}, "phase2_script_args", "<= 512 (position embeddings)"),
        # a max_pred_len above what the public seq-512 shards hold (80)
        (
            {"phase2_script_args": '{"max_pred_len": "100"}'},
            "phase2_script_args",
            "give seq_len 512 and max_pred_len 80",
        ),
        ({"phase2_script_args": '{"lr_typo": "1"}'}, "phase2_script_args", "has no --lr_typo"),
        ({"phase2_global_batch": "1000"}, "phase2_global_batch", "batch_size x workers = 2 x 64"),
        ({"phase2_max_steps": "0"}, "phase2_max_steps", "at least 1"),
        ({"phase2_run_name": "bert-large-phase1"}, "phase2_run_name", "its own"),
        ({"phase2_model": "base"}, "phase2_model", "unknown configuration key"),
        ({"training_init_from": "/data/x"}, "training_init_from", "unknown configuration key"),
        ({"phase2_dataset_source": "gs://x/y.tar"}, "phase2_dataset_source", "s3://bucket/key.tar"),
        ({"vocab_source": "http://example.org/vocab.txt"}, "vocab_source", "https://host/path"),
        (
            {"preparation_enabled": "true"},
            "phase2_dataset_source",
            "made with Google's vocabulary, not preparation_vocab",
        ),
    ],
)
def test_given_bad_phase_values_then_refused_at_synth_naming_the_key_and_the_fix(context, key, fix):
    with pytest.raises(ConfigError) as err:
        config_from_context(context)
    assert err.value.field_name == key, str(err.value)
    assert fix in str(err.value) and "\n" not in str(err.value)


def test_given_defaults_then_the_review_shows_each_phase_s_steps_time_cost_and_where_the_model_lands():
    lines = "\n".join(training_review(config_from_context({"fsx_s3_export_uri": "s3://my-models/bert"})))
    assert "phase 1, then phase 2 from its final checkpoint (training_phases=both)" in lines
    assert "phase 1:      seq 128, micro-batch 16 x accumulation 16 = global batch 16,384" in lines
    assert "phase 2:      seq 512 from phase 1's final checkpoint, micro-batch 2 x accumulation 256" in lines
    assert "1,563 steps = 51,216,384 sequences" in lines
    # 51,216,384 sequences at 7,653 x 128 / 512 seq/s = 7.4 h x 2 nodes x $21.50/h = $320
    assert "1,913 seq/s (published 3,826.6 seq/s/node, at its tokens/s for 512 tokens" in lines
    assert "7.4 h, $320 on demand" in lines
    assert "/data/runs/bert-large-phase1/model, /data/runs/bert-large-phase2/model" in lines
    assert (
        "also exported by FSx to s3://my-models/bert/bert-large-phase1/model/, s3://my-models/bert/bert-large-phase2/model/"
        in lines
    )
    alone = "\n".join(training_review(config_from_context({"training_phases": "1", "vocab_source": ""})))
    assert "phase 2" not in alone and "not exported (vocab_source is empty)" in alone


def test_given_the_default_training_stack_then_one_job_runs_both_phases_and_each_has_a_staging_job(
    training_json,
):
    manifests = manifests_of(training_json)
    (job,) = submitted_jobs(training_json)
    (container,) = job["spec"]["tasks"][0]["template"]["spec"]["containers"]
    phases = loads(container["command"][-1]).phases
    trainings = [" ".join(phase.train) for phase in phases]
    assert all("-m training.trainer.pretrain" in t for t in trainings) and len(trainings) == 2
    assert [
        "--output_dir /data/runs/bert-large-phase1" in trainings[0],
        "--output_dir /data/runs/bert-large-phase2" in trainings[1],
    ] == [True, True]
    assert "--init_from /data/runs/bert-large-phase1 " in trainings[1] and "--seq_len 512" in trainings[1]
    assert [
        phase.export is not None and "training.trainer.export" in phase.export.argv for phase in phases
    ] == [
        True,
        True,
    ]
    stagings = [
        m
        for m in manifests
        if m["kind"] == "Job" and m["metadata"]["labels"].get("app.kubernetes.io/name") == "dataset-staging"
    ]
    staged = sorted(
        next(
            line
            for line in DatasetRun.loads(m["spec"]["template"]["spec"]["containers"][0]["command"][-1])
            .command[-1]
            .splitlines()
            if "aws s3 cp" in line
        )
        for m in stagings
    )
    assert [PUBLIC_BERT_SHARDS in line or PUBLIC_BERT_SHARDS_512 in line for line in staged] == [True, True]
