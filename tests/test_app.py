"""The app entry point: bad configuration stops synth with one clear line and writes nothing."""

import pytest

from tests.support import run_app, run_cdk_synth


@pytest.mark.parametrize("context,expected", [
    ({"instance_type": "trn1.2xlarge"}, "config 'max_nodes' = 2 is invalid: trn1.2xlarge has no EFA"),
    ({"trainium_az_id": "us-west-2a"}, "config 'trainium_az_id' = 'us-west-2a' is invalid: this is an AZ name"),
])
def test_given_bad_context_when_app_runs_then_one_line_error_and_no_assembly(context, expected, tmp_path):
    proc = run_app(context, tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: {expected}" or proc.stderr.strip().startswith(f"error: {expected}")
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "Traceback" not in proc.stderr and "jsii" not in proc.stderr
    assert not list(tmp_path.iterdir())


def test_given_bad_value_on_cdk_command_line_then_cli_shows_the_line_without_a_stack_trace(tmp_path):
    synth = run_cdk_synth(tmp_path / "out", {"kubernetes_version": "1.20"})
    assert synth.returncode != 0
    assert "error: config 'kubernetes_version' = '1.20' is invalid: supported: 1.34, 1.35, 1.36" in synth.stderr
    assert "Traceback" not in synth.stderr and "JavaScriptError" not in synth.stderr
    assert not list((tmp_path / "out").glob("*.template.json"))
