"""The synth review's ``held-out:`` lines: each phase's set and when it is read, MLPerf's target
beside phase 2's end (measured on a set of MLPerf's own), where the books come from, and the
lines of a run without one."""

from __future__ import annotations

from trainium_eks.config import config_from_context
from trainium_eks.jobs.heldout_staging import PG19_TEST_PARQUET
from trainium_eks.report.review import heldout_review, training_review


def test_given_defaults_then_each_phase_names_its_set_and_phase_2_shows_mlperfs_target():
    lines = heldout_review(config_from_context({}))
    assert lines[0] == (
        "  held-out:     phase 1: /data/datasets/bert-wikicorpus-seq128-heldout, 10,000 samples of seq 128 per "
        "evaluation, every 1,400 steps and after step 28,125"
    )
    assert lines[1] == (
        "                phase 2: /data/datasets/bert-wikicorpus-seq512-heldout, 10,000 samples of seq 512 per "
        "evaluation, every 200 steps and after step 1,563"
    )
    # mlcommons/training language_model/tensorflow/bert/README.md "Stopping criteria": >= 0.720,
    # on the 10,000 samples of its own evaluation set
    assert lines[2] == (
        "                reference for phase 2's end: 0.720 masked-LM accuracy, MLPerf Training's BERT-large "
        "target, measured on MLPerf's own 10,000-sample set (not this one)"
    )
    assert "on the dataset node" in lines[3] and lines[3].endswith(PG19_TEST_PARQUET)
    assert "not the public shards' Wikipedia; the Encyclopaedia Britannica's volumes left out" in lines[3]
    assert lines[4] == (
        "                the pods never wait for it: a phase evaluates from the first evaluation step that finds it"
    )
    # Between the staging and the start lines of the training review
    review = training_review(config_from_context({}))
    assert review.index(lines[0]) == review.index(next(x for x in review if x.startswith("  start:"))) - len(
        lines
    )


def test_given_phase_1_only_then_no_mlperf_line_and_the_given_interval():
    lines = heldout_review(config_from_context({"training_phases": "1", "training_eval_every": "500"}))
    assert lines[0].endswith("every 500 steps and after step 28,125")
    assert not any("MLPerf" in line for line in lines)


def test_given_own_shards_then_the_overlap_is_not_claimed():
    lines = heldout_review(
        config_from_context({"training_phases": "1", "training_dataset_source": "s3://mine/set.tar"})
    )
    assert "your shards must hold none of these books: the overlap is not checked" in lines[-2]
    nodegroup = heldout_review(config_from_context({"trainium_capacity": "nodegroup"}))
    assert "made on a Trainium node" in nodegroup[-2]


def test_given_heldout_off_or_no_vocabulary_then_one_line_says_so():
    assert heldout_review(config_from_context({"heldout_enabled": "false"})) == [
        "  held-out:     off (heldout_enabled=false): no evaluation, the runs report no quality"
    ]
    assert heldout_review(config_from_context({"vocab_source": ""})) == [
        "  held-out:     none: no vocabulary to make it with (vocab_source is empty); set vocab_source"
    ]
