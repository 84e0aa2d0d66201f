"""The pretraining command line loads without torch (the CDK app checks script args with it)."""

import subprocess
import sys

from training.cli import build_parser, parse_args


def test_given_the_cli_module_when_imported_then_no_heavy_framework_is_loaded():
    code = (
        "import sys, training.cli; "
        "print(sorted(m for m in ('torch', 'transformers', 'torch_xla') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.strip() == "[]"


def test_given_the_parser_when_built_then_it_is_the_one_pretrain_uses():
    from training import pretrain

    assert pretrain.parse_args is parse_args
    flags = {opt for action in build_parser()._actions for opt in action.option_strings}
    assert {"--data_dir", "--grad_accum_usteps", "--resume_ckpt", "--precompile"} <= flags
