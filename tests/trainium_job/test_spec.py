"""The job spec: defaults written once, checked in one place, errors naming the context key."""

from __future__ import annotations

import dataclasses

import pytest

from trainium_job.errors import ConfigError
from trainium_job.instances import instance_facts
from trainium_job.plan import plan_training
from trainium_job.spec import SPEC_FIELDS, BertJobSpec


def test_given_defaults_then_reference_recipe_and_hashable():
    spec = BertJobSpec()
    assert (spec.model, spec.batch_size, spec.global_batch, spec.max_steps) == ("large", 16, 16384, 28125)
    assert (spec.checkpoint_every, spec.max_restarts, spec.max_retry, spec.rdzv_backend) == (
        200,
        3,
        3,
        "c10d",
    )
    assert spec.paths.data_dir == "/data/datasets/bert-wikicorpus-seq128"
    assert spec.paths.cache_dir == "/data/neuron-cache/bert-large-seq128"
    assert spec.paths.output_dir == "/data/runs/bert-large-phase1"
    assert hash(spec) == hash(BertJobSpec()) and spec == BertJobSpec()
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.model = "base"  # type: ignore[misc]


def test_given_script_args_as_mapping_then_stored_sorted_and_equal_to_pairs():
    spec = BertJobSpec(script_args={"lr": "4e-4", "fp32_master_weights": True})  # type: ignore[arg-type]
    assert spec.script_args == (("fp32_master_weights", True), ("lr", "4e-4"))
    assert spec == BertJobSpec(script_args=(("lr", "4e-4"), ("fp32_master_weights", True)))
    assert spec.extra_args == {"fp32_master_weights": True, "lr": "4e-4"}


@pytest.mark.parametrize(
    "changes,key,fix",
    [
        ({"model": "huge"}, "training_model", "choose one of large, base, tiny"),
        ({"batch_size": 0}, "training_batch_size", "at least 1"),
        ({"global_batch": "16384"}, "training_global_batch", "whole number"),
        ({"max_steps": True}, "training_max_steps", "whole number"),
        ({"checkpoint_every": 0}, "training_checkpoint_every", "at least 1"),
        ({"nproc_per_node": -1}, "training_nproc_per_node", "0 or more"),
        ({"max_restarts": 101}, "training_max_restarts", "use 0 to 100"),
        ({"max_retry": -1}, "training_max_retry", "use 0 to 100"),
        ({"rdzv_backend": "zookeeper"}, "training_rdzv_backend", "choose one of c10d, etcd, etcd-v2"),
        ({"cache_set": "Upper"}, "training_cache_set", "DNS-1123 label"),
        ({"run_name": "r" * 64}, "training_run_name", "at most 63"),
        ({"script_args": {"max_steps": "10"}}, "training_script_args", "use training_max_steps"),
        ({"script_args": {"lr": [1]}}, "training_script_args", "string values"),
    ],
)
def test_given_bad_field_then_one_line_error_names_the_context_key(changes, key, fix):
    with pytest.raises(ConfigError) as err:
        BertJobSpec(**changes)
    assert err.value.field_name == key
    assert fix in str(err.value) and "\n" not in str(err.value)


def test_given_every_field_then_its_context_key_is_training_prefixed():
    assert SPEC_FIELDS[:4] == ("model", "batch_size", "global_batch", "max_steps")
    assert len(SPEC_FIELDS) == 19 and SPEC_FIELDS[-3:] == ("init_from", "vocab", "eval_dir")


def test_given_same_inputs_when_planned_twice_then_computed_once():
    facts = instance_facts("trn1.32xlarge")
    plan_training.cache_clear()
    first = plan_training(BertJobSpec(), facts=facts, nodes=2, max_nodes=2)
    again = plan_training(BertJobSpec(), facts=facts, nodes=2, max_nodes=2)
    assert first is again and plan_training.cache_info().misses == 1
    assert (first.workers, first.grad_accum_usteps) == (64, 16)


@pytest.mark.parametrize(
    "spec,nodes,max_nodes,key",
    [
        (BertJobSpec(nproc_per_node=33), 2, 2, "training_nproc_per_node"),
        (BertJobSpec(global_batch=16000), 2, 2, "training_global_batch"),
        (BertJobSpec(), 3, 2, "desired_nodes"),
    ],
)
def test_given_shape_that_does_not_fit_then_error_names_the_key(spec, nodes, max_nodes, key):
    with pytest.raises(ConfigError) as err:
        plan_training(spec, facts=instance_facts("trn1.32xlarge"), nodes=nodes, max_nodes=max_nodes)
    assert err.value.field_name == key


def test_given_no_max_steps_then_the_job_and_the_script_default_to_the_one_phase1_figure():
    from training.trainer.cli import build_parser
    from trainium_job.spec import PHASE1_MAX_STEPS

    script = build_parser().parse_args(["--data_dir", "/d", "--output_dir", "/o"])
    assert BertJobSpec().max_steps == script.max_steps == PHASE1_MAX_STEPS == 28125
