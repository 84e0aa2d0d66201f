"""training_* configuration: defaults, errors, the review lines."""

from __future__ import annotations

import pytest

from training.trainer.cli import build_parser
from trainium_eks.config import PlatformConfig, config_from_context
from trainium_eks.report.review import training_review
from trainium_job.errors import ConfigError
from trainium_job.job import script_args


@pytest.mark.parametrize(
    "context,field",
    [
        ({"training_nproc_per_node": "33"}, "training_nproc_per_node"),
        ({"training_global_batch": "1000"}, "training_global_batch"),
        ({"training_cache_set": "c" * 64}, "training_cache_set"),
        ({"training_rdzv_backend": "etcd", "etcd_enabled": "false"}, "training_rdzv_backend"),
        ({"training_rdzv_backend": "zookeeper"}, "training_rdzv_backend"),
        ({"training_dataset_source": "http://example.com/x.tar"}, "training_dataset_source"),
        ({"training_model": "huge"}, "training_model"),
    ],
)
def test_given_bad_training_context_then_config_error(context, field):
    with pytest.raises(ConfigError) as err:
        config_from_context(context)
    assert err.value.field_name == field


def test_given_more_nodes_than_max_then_error_from_platform_checks():
    with pytest.raises(ConfigError):
        config_from_context({"desired_nodes": "3"})


def test_given_defaults_then_review_shows_workers_batch_time_and_cost():
    lines = "\n".join(training_review(PlatformConfig()))
    assert "64 workers (2 x 32)" in lines and "accumulation 16 = global batch 16,384" in lines
    assert "28,125 steps = 460,800,000 sequences" in lines
    assert "7,653 seq/s (published 3,826.6 seq/s/node): 16.7 h, $719 on demand" in lines
    assert "6,450 seq/s (walkthrough's 2-node EKS run): 19.8 h, $853 on demand" in lines


@pytest.mark.parametrize(
    "context,field,fix",
    [
        # The keys the user typed, not the construct's property names.
        ({"training_max_steps": "0"}, "training_max_steps", "at least 1"),
        ({"training_checkpoint_every": "0"}, "training_checkpoint_every", "at least 1"),
        ({"training_max_retry": "101"}, "training_max_retry", "0 to 100"),
        (
            {"desired_nodes": "3", "max_nodes": "4", "min_nodes": "2", "training_global_batch": "16384"},
            "training_global_batch",
            "",
        ),
        # training_script_args against training/trainer/cli.py's own parser (names, types, choices, rules).
        (
            {"training_script_args": '{"warmup_step": "10"}'},
            "training_script_args",
            "did you mean 'warmup_steps'?",
        ),
        ({"training_script_args": '{"warmup": "10"}'}, "training_script_args", "has no --warmup"),
        ({"training_script_args": '{"lr": "fast"}'}, "training_script_args", "invalid float value"),
        ({"training_script_args": '{"warmup_steps": "1.5"}'}, "training_script_args", "invalid int value"),
        ({"training_script_args": '{"optimizer": "sgd"}'}, "training_script_args", "invalid choice"),
        (
            {"training_script_args": '{"warmup_steps": "30000"}'},
            "training_script_args",
            "--warmup_steps must be between 0 and --max_steps",
        ),
        ({"training_script_args": '{"fp32_master_weights": "yes"}'}, "training_script_args", "is a switch"),
        # Flags the job sets itself: the error names the key that sets them.
        ({"training_script_args": '{"max_steps": "10"}'}, "training_script_args", "use training_max_steps"),
        ({"training_script_args": '{"data_dir": "/x"}'}, "training_script_args", "use training_dataset_name"),
        (
            {"training_script_args": '{"precompile": true}'},
            "training_script_args",
            "set by the precompile pass",
        ),
        # The job's own flags against the script's rules: the key that sets the flag.
        (
            {"training_max_steps": "400"},
            "training_max_steps",
            "--warmup_steps must be between 0 and --max_steps",
        ),
    ],
)
def test_given_bad_training_value_then_error_names_the_key_the_user_typed(context, field, fix):
    with pytest.raises(ConfigError) as err:
        config_from_context(context)
    assert err.value.field_name == field
    assert fix in str(err.value) and "\n" not in str(err.value)


def test_given_valid_script_args_with_a_switch_then_accepted_and_rendered_as_bare_flag():
    config = config_from_context(
        {"training_script_args": '{"lr": "6e-3", "optimizer": "lamb", "fp32_master_weights": "true"}'}
    )
    assert config.training.extra_args == {"lr": "6e-3", "optimizer": "lamb", "fp32_master_weights": True}
    # rendered: the switch bare (no value after it), the others as flag and value
    argv = script_args(config.training, config.training_plan)
    at = argv.index("--fp32_master_weights")
    assert at == len(argv) - 1 or argv[at + 1].startswith("--")
    assert argv[argv.index("--lr") + 1] == "6e-3" and argv[argv.index("--optimizer") + 1] == "lamb"
    # and the trainer's own parser reads them so
    parsed = build_parser().parse_args(argv)
    assert (parsed.fp32_master_weights, parsed.lr, parsed.optimizer) == (True, 6e-3, "lamb")


@pytest.mark.parametrize(
    "context,warning",
    [
        (
            {
                "training_checkpoint_every": "500",
                "training_max_steps": "400",
                "training_script_args": '{"warmup_steps": "40"}',
            },
            "no checkpoint before the end",
        ),
        (
            {
                "training_checkpoint_every": "400",
                "training_max_steps": "400",
                "training_script_args": '{"warmup_steps": "40"}',
            },
            "no checkpoint before the end",
        ),
        ({"training_script_args": '{"steps_this_run": "50"}'}, "ends before its first checkpoint"),
        ({"max_nodes": "5"}, "more than twice the job's 2 nodes"),
        # torchrun (torch 2.9.0) SIGKILLs its workers 30 s after SIGTERM; an fp32 state needs ~32 s.
        (
            {"training_script_args": '{"fp32_master_weights": "true"}'},
            "more than the 30 s torchrun gives its workers before SIGKILL: a stop (drain, eviction, "
            "preemption) resumes from the last periodic checkpoint instead; fsx_throughput_per_tib=250",
        ),
        ({"training_script_args": '{"precision": "fp32"}'}, "BERT-large fp32 state takes 32 s"),
    ],
)
def test_given_legal_but_likely_wrong_values_then_review_warns(context, warning):
    from trainium_eks.report.review import platform_review

    review = platform_review(config_from_context(context))
    assert any(line.startswith("warning: ") and warning in line for line in review.splitlines())


@pytest.mark.parametrize(
    "context",
    [
        {"training_script_args": '{"fp32_master_weights": "true"}', "fsx_throughput_per_tib": "250"},
        {
            "training_script_args": '{"fp32_master_weights": "true"}',
            "training_model": "base",
            "training_cache_set": "bert-base-seq128",
        },
    ],
)
def test_given_an_fp32_state_that_fits_or_a_smaller_model_then_no_stop_warning(context):
    from trainium_eks.report.review import platform_review

    assert "torchrun gives its workers" not in platform_review(config_from_context(context))


def test_given_defaults_then_review_has_no_warning():
    from trainium_eks.report.review import platform_review

    assert "warning:" not in platform_review(PlatformConfig())
