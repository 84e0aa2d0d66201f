"""Managed observability add-ons: pod identity and node monitoring agents; Container Insights optional."""

import json
import re
import subprocess

import aws_cdk as cdk
import pytest
from cdk_nag import AwsSolutionsChecks

from stacks import TrainiumPlatformStack
from tests.support import REPO, VENV_BIN, resources, synth_platform
from tests.trainium_eks.addons import ALL_OPTIONS, depends_on, nodegroup_id
from trainium_eks.compatibility import PINS
from trainium_eks.config import config_from_context

_EKSBUILD = r"^v\d+\.\d+\.\d+-eksbuild\.\d+$"


def _addons(template):
    return {
        r["Properties"]["AddonName"]: (k, r["Properties"])
        for k, r in resources(template, "AWS::EKS::Addon").items()
    }


def test_given_default_config_then_agents_are_installed_at_their_pinned_versions(platform_json):
    addons = _addons(platform_json)
    assert addons["eks-pod-identity-agent"][1]["AddonVersion"] == "v1.3.10-eksbuild.3"
    assert addons["eks-node-monitoring-agent"][1]["AddonVersion"] == "v1.6.6-eksbuild.1"
    for _, props in addons.values():
        assert props["PreserveOnDelete"] is False


def test_given_default_config_then_container_insights_is_off(platform_json):
    assert "amazon-cloudwatch-observability" not in _addons(platform_json)


def test_given_default_config_then_monitoring_waits_for_system_nodes_and_nodes_for_pod_identity(
    platform_json,
):
    system = nodegroup_id(platform_json, "system")
    addons = _addons(platform_json)
    assert system in depends_on(platform_json, addons["eks-node-monitoring-agent"][0])
    # The VPC CNI's credentials come through the agent: it is installed before any node.
    assert addons["eks-pod-identity-agent"][0] in depends_on(platform_json, system)


def test_given_every_managed_pin_then_versions_have_the_eksbuild_format():
    for key in (
        "pod-identity-agent",
        "node-monitoring-agent",
        "ebs-csi-driver",
        "cloudwatch-observability",
        "vpc-cni",
    ):
        assert re.match(_EKSBUILD, PINS[key].version), key


def test_given_container_insights_on_then_agent_gets_its_policy_through_pod_identity():
    template = synth_platform(**ALL_OPTIONS)
    addons = _addons(template)
    logical_id, props = addons["amazon-cloudwatch-observability"]
    assert props["AddonVersion"] == "v6.2.0-eksbuild.1"
    (association,) = props["PodIdentityAssociations"]
    assert association["ServiceAccount"] == "cloudwatch-agent"
    role = template["Resources"][association["RoleArn"]["Fn::GetAtt"][0]]["Properties"]
    assert role["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {
        "Service": "pods.eks.amazonaws.com"
    }
    (policy,) = role["ManagedPolicyArns"]
    assert policy["Fn::Join"][1][-1].endswith(":iam::aws:policy/CloudWatchAgentServerPolicy")
    assert addons["eks-pod-identity-agent"][0] in depends_on(template, logical_id)


def test_given_container_insights_on_then_launch_template_keeps_hop_limit_one():
    # The agent and Fluent Bit run in the host network namespace: no extra IMDS hop.
    template = synth_platform(**ALL_OPTIONS)
    for lt in resources(template, "AWS::EC2::LaunchTemplate").values():
        assert lt["Properties"]["LaunchTemplateData"]["MetadataOptions"]["HttpPutResponseHopLimit"] == 1


@pytest.fixture(scope="module")
def all_options_outdir(tmp_path_factory):
    """The app with every add-on option on, synthesized in-process with cdk-nag attached."""
    outdir = tmp_path_factory.mktemp("all-options")
    app = cdk.App(outdir=str(outdir))
    TrainiumPlatformStack(app, "TrainiumPlatform", config=config_from_context(ALL_OPTIONS))
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    app.synth()
    return outdir


def test_given_every_add_on_option_on_then_cdk_nag_reports_nothing_unacknowledged(all_options_outdir):
    (plugin,) = json.loads((all_options_outdir / "validation-report.json").read_text())["pluginReports"]
    assert plugin["violations"] == []
    assert plugin["conclusion"] == "success"


def test_given_every_add_on_option_on_then_cfn_lint_finds_nothing(all_options_outdir):
    proc = subprocess.run(
        [
            str(VENV_BIN / "cfn-lint"),
            "--format",
            "parseable",
            str(all_options_outdir / "TrainiumPlatform.template.json"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
