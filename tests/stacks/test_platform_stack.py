"""Gates on the whole default app: cdk-nag, cfn-lint, security invariants, determinism, review."""

import json
import subprocess

import pytest

from tests.support import PLATFORM_STACK, REPO, VENV_BIN, resources, run_cdk_synth
from trainium_eks.nag import ACKNOWLEDGEMENT_TABLES


def test_given_default_app_then_cdk_nag_reports_no_unacknowledged_findings(default_synth):
    report = json.loads((default_synth.outdir / "validation-report.json").read_text())
    (plugin,) = report["pluginReports"]
    assert plugin["pluginName"] == "AwsSolutions"
    assert plugin["violations"] == []
    assert plugin["conclusion"] == "success"


@pytest.mark.parametrize("entries", list(ACKNOWLEDGEMENT_TABLES.values()), ids=list(ACKNOWLEDGEMENT_TABLES))
def test_given_acknowledgements_then_each_has_a_reason_and_targets_one_finding(entries):
    assert len({(path, finding) for path, finding, _ in entries}) == len(entries)
    for path, finding, reason in entries:
        assert finding.startswith("AwsSolutions-") and path and len(reason) > 40, (path, finding)


def test_given_synthesized_templates_then_cfn_lint_finds_nothing(default_synth):
    templates = sorted(str(p) for p in default_synth.outdir.glob("*.template.json"))
    proc = subprocess.run(
        [str(VENV_BIN / "cfn-lint"), "--format", "parseable", *templates],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_given_default_app_then_no_security_group_is_open_to_the_internet(default_synth):
    for template in default_synth.templates.values():
        text = json.dumps(template)
        for sg in resources(template, "AWS::EC2::SecurityGroup").values():
            for rule in sg["Properties"].get("SecurityGroupIngress", []):
                assert rule.get("CidrIp") != "0.0.0.0/0" and rule.get("CidrIpv6") != "::/0", rule
        for rule in resources(template, "AWS::EC2::SecurityGroupIngress").values():
            assert "CidrIp" not in rule["Properties"] and "CidrIpv6" not in rule["Properties"], rule
        assert '"PublicAccessCidrs": ["0.0.0.0/0"]' not in text


def test_given_default_app_then_every_launch_template_requires_imdsv2(default_synth):
    templates = resources(default_synth.templates[PLATFORM_STACK], "AWS::EC2::LaunchTemplate")
    assert templates
    for lt in templates.values():
        assert lt["Properties"]["LaunchTemplateData"]["MetadataOptions"]["HttpTokens"] == "required"


def test_given_default_app_then_the_review_is_printed(default_synth):
    assert "2 x trn1.32xlarge" in default_synth.stderr
    assert "NeuronCores:  64" in default_synth.stderr
    assert "$43.00/h on demand" in default_synth.stderr
    # Node 24 runs the CLI and jsii: no end-of-life banner.
    assert "end-of-life" not in default_synth.stderr + default_synth.stdout


def test_given_same_config_when_synthesized_twice_then_templates_are_byte_identical(default_synth, tmp_path):
    again = run_cdk_synth(tmp_path / "again")
    assert again.returncode == 0, again.stderr[-3000:]
    names = sorted(p.name for p in default_synth.outdir.glob("*.template.json"))
    assert names == sorted(p.name for p in again.outdir.glob("*.template.json"))
    for name in names:
        assert (default_synth.outdir / name).read_bytes() == (again.outdir / name).read_bytes(), name
