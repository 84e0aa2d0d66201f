"""A sequence shape that contradicts a dataset synth knows is refused, naming the key that set it.

``training.trainer.pretrain`` reads only shards whose ``input_ids`` width is its --seq_len and whose
``masked_lm_positions`` width is its --max_pred_len (training/trainer/data.py ``_check_datasets``); its
pre-flight stops every pod otherwise, after the image build and the deploy.
"""

from __future__ import annotations

import re

import pytest

from trainium_eks.config import config_from_context
from trainium_eks.jobs.dataset_staging import PUBLIC_BERT_SHAPE
from trainium_job.errors import ConfigError

PREPARED_512 = '{"max_seq_len": "512", "max_pred_len": "76"}'


def test_given_the_public_set_then_its_shape_is_128_tokens_and_20_predictions():
    assert PUBLIC_BERT_SHAPE == (128, 20)


@pytest.mark.parametrize(
    ("context", "field", "value", "fix"),
    [
        (
            {"training_script_args": '{"seq_len": "512"}'},
            "training_script_args",
            {"seq_len": "512"},
            r"^the public BERT shards \(s3://neuron-s3/\S+seqlen128\.tar\): 128 tokens and 20 predictions per "
            r"sample, but training\.trainer\.pretrain would read --seq_len 512 --max_pred_len 20 "
            r".*give seq_len 128 and max_pred_len 20$",
        ),
        (
            {"training_script_args": '{"max_pred_len": "30"}'},
            "training_script_args",
            {"max_pred_len": "30"},
            r"--max_pred_len 30",
        ),
        (
            {"preparation_enabled": "true", "training_phases": "1", "preparation_args": PREPARED_512},
            "preparation_args",
            {"max_seq_len": "512", "max_pred_len": "76"},
            r"^the set preparation_args prepare: 512 tokens and 76 predictions.*give training_script_args "
            r"seq_len 512 and max_pred_len 76$",
        ),
        (
            {
                "preparation_enabled": "true",
                "training_phases": "1",
                "preparation_args": PREPARED_512,
                "training_script_args": '{"seq_len": "512", "max_pred_len": "20"}',
            },
            "training_script_args",
            {"seq_len": "512", "max_pred_len": "20"},
            r"give seq_len 512 and max_pred_len 76$",
        ),
    ],
)
def test_given_a_shape_against_a_known_dataset_then_one_error_names_the_key(context, field, value, fix):
    with pytest.raises(ConfigError) as err:
        config_from_context(context)
    assert (err.value.field_name, err.value.value) == (field, value)
    assert re.search(fix, err.value.fix), err.value.fix
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "context",
    [
        {},
        {
            "preparation_enabled": "true",
            "training_phases": "1",
            "preparation_args": PREPARED_512,
            "training_script_args": '{"seq_len": "512", "max_pred_len": "76"}',
        },
        # A set synth cannot see into: the pods' pre-flight checks it.
        {"training_dataset_source": "s3://my-bucket/shards/", "training_script_args": '{"seq_len": "512"}'},
        {"training_dataset_source": "fsx:/dataset/seq512", "training_script_args": '{"seq_len": "512"}'},
    ],
)
def test_given_a_matching_or_unknown_shape_then_accepted(context):
    config_from_context(context)
