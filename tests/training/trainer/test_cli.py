"""The pretraining command line loads without torch (the CDK app checks script args with it)."""

import dataclasses
import subprocess
import sys

import pytest

from training.trainer.cli import build_parser, check_args, parse_args
from trainium_job.spec import MODELS


def test_given_the_cli_module_when_imported_then_no_heavy_framework_is_loaded():
    code = (
        "import sys, training.trainer.cli; "
        "print(sorted(m for m in ('torch', 'transformers', 'torch_xla') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.strip() == "[]"


def test_given_the_parser_when_built_then_it_is_the_one_pretrain_uses():
    from training.trainer import pretrain

    assert pretrain.parse_args is parse_args
    flags = {opt for action in build_parser()._actions for opt in action.option_strings}
    assert {"--data_dir", "--grad_accum_usteps", "--resume_ckpt", "--precompile"} <= flags


def test_given_a_command_line_then_the_flat_flags_are_argparses_with_the_follow_on_defaults():
    argv = ["--data_dir", "d", "--output_dir", "/o", "--lr", "1e-3", "--max_steps", "5000"]
    parsed = vars(build_parser().parse_args(argv))

    flags = parse_args(argv).flags()

    # What a checkpoint records of its run (state.pt "args"): every flag, defaults resolved.
    assert flags == parsed | {
        "steps_this_run": 5000,
        "tensorboard_dir": "/o/tensorboard",
        "metrics_file": "/o/metrics.json",
        "step_log": "/o/train_log.jsonl",
    }


def test_given_the_parser_then_every_flag_has_help_and_the_model_list_is_the_jobs():
    actions = build_parser()._actions

    assert [a.dest for a in actions if not a.help] == []
    assert next(a for a in actions if a.dest == "model").choices == MODELS


def test_given_parsed_args_then_the_groups_are_frozen():
    args = parse_args(["--data_dir", "d"])

    with pytest.raises(dataclasses.FrozenInstanceError):
        args.optim.lr = 1.0  # type: ignore[misc]


def test_given_a_rule_between_flags_broken_then_check_args_calls_the_parsers_error():
    parser = build_parser()
    messages = []
    parser.error = messages.append  # type: ignore[method-assign]

    check_args(parser, parser.parse_args(["--data_dir", "d", "--warmup_steps", "9", "--max_steps", "5"]))

    assert messages == ["--warmup_steps must be between 0 and --max_steps"]
