"""The CDK library loads none of the training stack's heavy packages: a pip-installed
trainium-eks (which depends on aws-cdk-lib and friends only) synthesizes without them, although
it parses ``preparation_args`` and ``training_script_args`` with the tools' own parsers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("numpy", "h5py", "tokenizers", "flash_tokenizer", "torch", "tqdm", "transformers")


def test_given_a_fresh_interpreter_when_the_library_and_its_config_checks_load_then_no_heavy_package_does():
    code = (
        "import json, sys\n"
        "import trainium_eks\n"
        "from trainium_eks.config import config_from_context\n"
        "config_from_context({'preparation_enabled': 'true', 'training_phases': '1',\n"
        "                     'preparation_args': '{\"dupe_factor\": \"2\"}'})\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True, text=True, timeout=300
    ).stdout
    loaded = json.loads(out.splitlines()[-1])
    assert [m for m in HEAVY if m in loaded] == []
