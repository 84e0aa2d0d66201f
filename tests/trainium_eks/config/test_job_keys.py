"""Each job key declared once (``trainium_job.spec.job_key``) and each of its derived forms there:
the job-set flags, the rendered script arguments, the script's parser, the context keys and the
configuration page. A field added without a declaration, or a declared flag the script lacks or
the job does not render, fails here."""

from __future__ import annotations

import dataclasses
import re

import pytest

from trainium_eks.config import reference
from trainium_eks.config.context import CONTEXT_KEYS
from trainium_eks.config.job_checks import _script_flags
from trainium_job.errors import ConfigError
from trainium_job.job import script_args
from trainium_job.plan import TrainingPlan
from trainium_job.spec import (
    CONTEXT_FIELDS,
    FIXED_FLAGS,
    JOB_KEY,
    JOB_KEYS,
    JOB_SET_FLAGS,
    BertJobSpec,
    JobKey,
    context_key,
    flag_values,
    job_key,
)

#: The reference's 2 x trn1.32xlarge shape: 64 workers, 16 micro-batches.
PLAN = TrainingPlan(nodes=2, nproc_per_node=32, batch_size=16, global_batch=16384)
#: A spec that sets every flag the job renders (``--init_from``, ``--eval_dir`` and with it
#: ``--eval_every`` are left out when unset).
SPEC = BertJobSpec(init_from="/data/runs/bert-large-phase1", eval_dir="/data/datasets/x-heldout")


@pytest.mark.parametrize("field", dataclasses.fields(BertJobSpec), ids=lambda f: f.name)
def test_given_every_spec_field_then_it_carries_its_declaration(field):
    # When the field's metadata is read, then it holds the JobKey the derived forms are built from.
    assert isinstance(field.metadata.get(JOB_KEY), JobKey), f"declare {field.name} with job_key(...)"
    assert JOB_KEYS[field.name] is field.metadata[JOB_KEY]


def test_given_every_declared_flag_then_the_script_parser_has_it():
    # Given training.trainer.pretrain's parser (training/trainer/cli.py), when the declared and
    # the fixed flags are looked up, then each is one of its flags.
    flags = _script_flags()
    missing = [flag for flag in JOB_SET_FLAGS if flag not in flags]
    assert missing == []


def test_given_every_declared_flag_then_the_job_renders_it_with_the_declared_value():
    # When the job's script arguments are rendered, then each declared flag is there once, with
    # the value its declaration derives (the field's own, or e.g. the plan's accumulation).
    argv = script_args(SPEC, PLAN)
    rendered = {argv[i][2:]: argv[i + 1] for i in range(len(argv) - 1) if argv[i].startswith("--")}
    expected = {flag: str(value) for flag, value in flag_values(SPEC, PLAN).items()}
    assert {flag: rendered.get(flag) for flag in expected} == expected
    assert expected["grad_accum_usteps"] == "16" and expected["data_dir"] == SPEC.paths.data_dir


def test_given_the_rendered_command_then_it_sets_no_flag_without_a_declaration():
    # Given no script_args, when the job renders its arguments, then every flag it sets is a
    # declared one or one of the fixed few (metrics_port), so a flag cannot bypass the refusal.
    argv = script_args(SPEC, PLAN)
    flags = {arg[2:] for arg in argv if arg.startswith("--")}
    assert flags <= set(JOB_SET_FLAGS) and flags - set(FIXED_FLAGS) == set(flag_values(SPEC, PLAN))


def test_given_a_declared_flag_in_script_args_then_the_spec_names_the_key_that_sets_it():
    # When a user passes a flag the job renders itself, then the error says which key sets it.
    with pytest.raises(ConfigError, match="training_global_batch"):
        BertJobSpec(script_args={"grad_accum_usteps": "4"})  # type: ignore[arg-type]


def test_given_every_field_then_the_configuration_page_has_its_key():
    # When the configuration page's table is generated, then each field with a context key has
    # its row, typed as the context reader coerces it, and a field the workload derives names
    # the keys that set it, which have rows of their own.
    table = reference.render_table()
    keyed = [f.name for f in dataclasses.fields(BertJobSpec) if not JOB_KEYS[f.name].set_by]
    assert list(CONTEXT_FIELDS) == keyed
    for name, declared in JOB_KEYS.items():
        keys = re.findall(r"[a-z0-9]+_[a-z0-9_]+", declared.set_by) or [context_key(name)]
        for key in keys:
            assert f"`{key}`" in table, f"{name}: {key} is not on the configuration page"
            assert key in CONTEXT_KEYS
    for name in CONTEXT_FIELDS:
        row = next(line for line in table.splitlines() if line.startswith(f"| `{context_key(name)}`"))
        flag = JOB_KEYS[name].flag
        assert flag is None or f"`--{flag}`" in row


def test_given_a_flag_declared_for_a_route_without_one_then_the_declaration_is_refused():
    # A flag is what route "flag" renders; on a launcher route it would be rendered nowhere.
    with pytest.raises(ValueError, match="route 'flag' only"):
        job_key(3, "torchrun", flag="max_restarts")
    with pytest.raises(ValueError, match="route 'flag' only"):
        job_key(16, "flag")
