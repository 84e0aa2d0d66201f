"""The Trainium launch template's user data as nodeadm reads it: one NodeConfig part that turns on
parallel image pull on an AMI whose nodeadm has the gate, for an instance large enough to use it."""

from __future__ import annotations

import base64
import email

import pytest
import yaml

from tests.contracts import nodeadm
from tests.support import k8s_manifests, resources, synth_platform
from trainium_eks.nodes.launch_template import node_user_data
from trainium_eks.nodes.node_pool import NODE_POOL_NAME
from trainium_eks.versions import default_neuron_ami_release
from trainium_job.instances import instance_facts


def _node_configs(user_data: str) -> list[dict]:
    message = email.message_from_string(user_data)
    assert message.is_multipart()
    return [
        yaml.safe_load(part.get_payload())
        for part in message.get_payload()
        if part.get_content_type() == nodeadm.CONTENT_TYPE
    ]


def _trainium_user_data(template: dict) -> list[str]:
    return [
        base64.b64decode(r["Properties"]["LaunchTemplateData"]["UserData"]).decode()
        for r in resources(template, "AWS::EC2::LaunchTemplate").values()
        if "NetworkInterfaces" in r["Properties"]["LaunchTemplateData"]
        and "UserData" in r["Properties"]["LaunchTemplateData"]
    ]


def _node_class_user_data(template: dict) -> list[str]:
    """The user data of Karpenter's Trainium EC2NodeClass (it hands it to nodeadm as written)."""
    return [
        o["spec"]["userData"]
        for _, o in k8s_manifests(template)
        if o["kind"] == "EC2NodeClass" and o["metadata"]["name"] == NODE_POOL_NAME and "userData" in o["spec"]
    ]


@pytest.mark.parametrize("mode", ["default", "nodegroup"])
def test_given_either_capacity_mode_then_nodeadm_reads_one_nodeconfig_with_fast_image_pull(
    mode, platform_json, nodegroup_platform_json
):
    # The default's Trainium nodes are Karpenter's (its EC2NodeClass); the nodegroup's launch template.
    if mode == "default":
        (user_data,) = _node_class_user_data(platform_json)
    else:
        (user_data,) = _trainium_user_data(nodegroup_platform_json)
    (config,) = _node_configs(user_data)
    assert (config["apiVersion"], config["kind"]) == (nodeadm.API_VERSION, nodeadm.KIND)
    assert set(config["spec"]["featureGates"]) <= set(nodeadm.FEATURE_GATES)
    assert config["spec"]["featureGates"] == {"FastImagePull": True}


def test_given_the_pinned_ami_and_instance_then_the_gate_exists_and_applies():
    release = default_neuron_ami_release("1.35")  # e.g. 1.35.6-20260625
    assert release.rsplit("-", 1)[1] >= nodeadm.FAST_IMAGE_PULL_SINCE
    facts = instance_facts("trn1.32xlarge")
    assert (
        facts.vcpus >= nodeadm.FAST_IMAGE_PULL_MIN_VCPUS
        and facts.memory_gib >= nodeadm.FAST_IMAGE_PULL_MIN_MEMORY_GIB
    )


def test_given_fast_image_pull_off_then_the_template_has_no_user_data():
    assert node_user_data(fast_image_pull=False) is None
    off = synth_platform(fast_image_pull="false")
    assert _node_class_user_data(off) == []
    assert _trainium_user_data(synth_platform(trainium_capacity="nodegroup", fast_image_pull="false")) == []
