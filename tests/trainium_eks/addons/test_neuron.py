"""Neuron Helm chart: pinned OCI chart, device plugin on Trainium nodes only, options off by default."""

from tests.support import synth_platform
from tests.trainium_eks.addons import ALL_OPTIONS, chart, depends_on, nodegroup_id
from trainium_eks.addons.neuron import neuron_chart_values

NEURON_TOLERATION = {"key": "aws.amazon.com/neuron", "operator": "Exists", "effect": "NoSchedule"}
HEALTH_PENDING_TOLERATION = {
    "key": "trainium-eks/node-health",
    "operator": "Equal",
    "value": "pending",
    "effect": "NoSchedule",
}


def test_given_default_config_then_the_pinned_oci_chart_is_installed_in_kube_system(platform_json):
    _, props = chart(platform_json, "neuron")
    assert props["Repository"] == "oci://public.ecr.aws/neuron/neuron-helm-chart"
    # The kubectl handler pulls `Repository` and unpacks it under the chart's name.
    assert props["Chart"] == "neuron-helm-chart"
    assert props["Version"] == "1.10.0"
    assert props["Namespace"] == "kube-system"


def test_given_default_config_then_device_plugin_runs_only_on_tainted_trainium_nodes(platform_json):
    values = chart(platform_json, "neuron")[1]["Values"]
    assert values["devicePlugin"]["enabled"] is True
    assert values["devicePlugin"]["nodeSelector"] == {"trainium-eks/pool": "trainium"}
    # And the node health check's pending taint: the check requests the devices it allocates.
    assert values["devicePlugin"]["tolerations"] == [NEURON_TOLERATION, HEALTH_PENDING_TOLERATION]
    assert values["draDriver"] == {"enabled": False}


def test_given_default_config_then_scheduler_extension_and_npd_are_off(platform_json):
    values = chart(platform_json, "neuron")[1]["Values"]
    assert values["scheduler"]["enabled"] is False
    assert values["npd"]["enabled"] is False
    assert values["npd"]["nodeRecovery"] == {"enabled": False}


def test_given_the_nodegroup_mode_then_chart_waits_for_the_trainium_nodegroup(nodegroup_platform_json):
    logical_id, _ = chart(nodegroup_platform_json, "neuron")
    assert nodegroup_id(nodegroup_platform_json, "trainium") in depends_on(
        nodegroup_platform_json, logical_id
    )


def test_given_options_on_then_extension_runs_on_system_nodes_and_npd_on_trainium_nodes():
    values = chart(synth_platform(**ALL_OPTIONS), "neuron")[1]["Values"]
    assert values["scheduler"]["enabled"] is True
    assert values["scheduler"]["nodeSelector"] == {"trainium-eks/pool": "system"}
    assert values["scheduler"]["customScheduler"]["nodeSelector"] == {"trainium-eks/pool": "system"}
    npd = values["npd"]
    assert npd["enabled"] is True
    assert npd["namespaceOverride"] == "kube-system"
    assert npd["nodeSelector"] == {"trainium-eks/pool": "trainium"}
    assert npd["tolerations"] == [NEURON_TOLERATION]
    # Monitor only: node replacement is the nodegroup auto-repair's job.
    assert npd["nodeRecovery"] == {"enabled": False}


def test_given_values_then_each_call_returns_fresh_objects():
    first = neuron_chart_values(scheduler_extension=False, node_problem_detector=False)
    first["devicePlugin"]["tolerations"][0]["key"] = "mutated"
    second = neuron_chart_values(scheduler_extension=False, node_problem_detector=False)
    assert second["devicePlugin"]["tolerations"] == [NEURON_TOLERATION]
