"""The held-out keys: ``heldout_enabled``, ``training_eval_every`` and ``phase2_eval_every``.

Given context as a user types it, then each phase's ``--eval_dir`` and ``--eval_every`` as the job
renders them, the defaults derived from the schedule, and the refusals (the key, the value, the fix).
"""

from __future__ import annotations

import pytest

from trainium_eks.config import config_from_context
from trainium_job.errors import ConfigError
from trainium_job.job import script_args
from trainium_job.spec import BertJobSpec, default_eval_every


def rendered(config, index: int) -> dict[str, str]:
    """The ``training.trainer.pretrain`` flags phase ``index`` is run with (its pods' argv)."""
    job = config.phase_jobs[index]
    argv = script_args(job, config.phase_plan(job))
    return {argv[i][2:]: argv[i + 1] for i in range(len(argv) - 1) if argv[i].startswith("--")}


def test_given_defaults_then_each_phase_evaluates_its_own_held_out_set_about_20_times_at_checkpoints():
    config = config_from_context({})
    phase1, phase2 = rendered(config, 0), rendered(config, 1)
    assert phase1["eval_dir"] == "/data/datasets/bert-wikicorpus-seq128-heldout"
    assert phase2["eval_dir"] == "/data/datasets/bert-wikicorpus-seq512-heldout"
    # 28,125 / 20 = 1,406 -> 1,400 (a multiple of checkpoint_every 200); 1,563 / 20 = 78 -> 200
    assert (phase1["eval_every"], phase2["eval_every"]) == ("1400", "200")
    # The trainer's own --eval_samples (10,000, MLPerf's count): not rendered, the default stands
    assert "eval_samples" not in phase1


@pytest.mark.parametrize(
    ("max_steps", "checkpoint_every", "expected"),
    [(28125, 200, 1400), (1563, 200, 200), (100, 200, 200), (100000, 1000, 5000), (20000, 300, 900)],
)
def test_given_a_schedule_then_the_default_interval_is_a_twentieth_at_a_checkpoint_step(
    max_steps, checkpoint_every, expected
):
    assert default_eval_every(max_steps, checkpoint_every) == expected


def test_given_the_keys_then_each_phase_takes_its_own_interval_and_phase_2_does_not_inherit_phase_1s():
    config = config_from_context({"training_eval_every": "500", "phase2_eval_every": "100"})
    assert (rendered(config, 0)["eval_every"], rendered(config, 1)["eval_every"]) == ("500", "100")
    # Phase 1's interval is of its own schedule: the reference phase 2 derives its own
    assert rendered(config_from_context({"training_eval_every": "500"}), 1)["eval_every"] == "200"


def test_given_heldout_off_or_no_vocabulary_then_no_held_out_set_and_no_evaluation_flags():
    for context in ({"heldout_enabled": "false"}, {"vocab_source": ""}):
        config = config_from_context(context)
        for index in range(2):
            flags = rendered(config, index)
            assert "eval_dir" not in flags and "eval_every" not in flags, context


def test_given_own_corpus_then_the_held_out_set_uses_the_preparation_vocabulary():
    config = config_from_context({"preparation_enabled": "true", "training_phases": "1"})
    (job,) = config.phase_jobs
    assert job.vocab == "/data/dataset/vocab.txt" and job.eval_dir == f"{job.paths.data_dir}-heldout"


@pytest.mark.parametrize(
    ("context", "key", "fix"),
    [
        (
            {"training_eval_every": "0"},
            "training_eval_every",
            "of at least 1 (to evaluate after the last step",
        ),
        ({"training_eval_every": "-5"}, "training_eval_every", "of at least 1"),
        ({"phase2_eval_every": "0"}, "phase2_eval_every", "of at least 1"),
        ({"training_eval_every": "often"}, "training_eval_every", "must be a whole number"),
        ({"heldout_enabled": "maybe"}, "heldout_enabled", "must be true or false"),
        ({"training_script_args": '{"eval_dir": "/data/x"}'}, "training_script_args", "use heldout_enabled"),
        ({"training_script_args": '{"eval_every": "5"}'}, "training_script_args", "use training_eval_every"),
        ({"phase2_script_args": '{"eval_every": "5"}'}, "phase2_script_args", "use training_eval_every"),
        (
            {"training_script_args": '{"eval_samples": "512"}'},
            "training_script_args",
            "reads whole batches of 1,024 samples (micro-batch 16 x 64 workers): give eval_samples 1024",
        ),
        (
            {"phase2_script_args": '{"eval_samples": "100"}'},
            "phase2_script_args",
            "an evaluation of phase 2 reads whole batches of 128 samples",
        ),
    ],
)
def test_given_a_bad_held_out_key_then_refused_naming_it(context, key, fix):
    with pytest.raises(ConfigError) as caught:
        config_from_context(context)
    assert caught.value.field_name == key
    assert fix in str(caught.value)


def test_given_a_library_spec_then_the_same_checks_name_the_field():
    with pytest.raises(ConfigError, match="training_eval_every"):
        BertJobSpec(eval_every=0)
    with pytest.raises(ConfigError, match="training_eval_dir.*under /data/"):
        BertJobSpec(eval_dir="/tmp/heldout")
    # A schedule shorter than a checkpoint interval: evaluated after its last step only
    assert BertJobSpec(eval_dir="/data/x", max_steps=40).evaluation_interval == 200
