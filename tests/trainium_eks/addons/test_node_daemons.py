"""The DaemonSet registry: its chart merge rules, and that it is what the stacks deploy."""

from __future__ import annotations

import pytest

from tests.support import synth_app, variants
from tests.trainium_eks.nodes.node_support import template_daemons
from trainium_eks.addons.efa import efa_chart_values
from trainium_eks.addons.node_daemons import (
    CHART_FACTS,
    chart_daemons,
    manifest_daemons,
    merge_values,
    tolerates_trainium_taint,
    total,
)
from trainium_eks.addons.registry import trainium_node_daemons
from trainium_eks.config import config_from_context
from trainium_job.allocatable import DEFAULT_NODE_DAEMONS, Resources
from trainium_job.instances import INSTANCE_FACTS, instance_facts

TRN1 = "trn1.32xlarge"


def test_given_helm_values_then_maps_merge_and_our_lists_and_scalars_replace_and_null_deletes():
    defaults = {"a": {"b": 1, "c": [1, 2]}, "d": 1}
    assert merge_values(defaults, {"a": {"c": [3]}, "e": 2}) == {"a": {"b": 1, "c": [3]}, "d": 1, "e": 2}
    assert merge_values(defaults, {"a": {}, "d": None}) == {"a": {"b": 1, "c": [1, 2]}}
    assert defaults == {"a": {"b": 1, "c": [1, 2]}, "d": 1}


def test_given_values_that_set_resources_then_ours_win_over_the_chart_defaults():
    values = {
        **efa_chart_values(instance_facts(TRN1)),
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
    }
    (efa,) = chart_daemons("aws-efa-k8s-device-plugin", "v0.5.30", values, TRN1)
    assert efa.requests == Resources(1000, 1024, 1)
    (default,) = chart_daemons(
        "aws-efa-k8s-device-plugin", "v0.5.30", efa_chart_values(instance_facts(TRN1)), TRN1
    )
    assert default.requests == Resources(10, 20, 1)  # aws/eks-charts values.yaml: 10m / 20Mi


def test_given_an_fsx_chart_sidecar_without_resources_then_the_template_falls_back_to_the_node_plugins():
    # node-daemonset.yaml: `default .Values.node.resources .Values.sidecars.<name>.resources`;
    # a null in our values deletes the sidecar's default (Helm's merge).
    values = {"sidecars": {"livenessProbe": {"resources": None}, "nodeDriverRegistrar": {"resources": None}}}
    (node,) = chart_daemons("aws-fsx-csi-driver", "1.16.0", values, TRN1)
    assert node.requests == Resources(30, 120, 1)
    (default,) = chart_daemons("aws-fsx-csi-driver", "1.16.0", {}, TRN1)
    assert default.requests == Resources(30, 104, 1)


def test_given_neuron_chart_switches_then_only_enabled_daemonsets_on_trainium_count():
    ours = {
        "devicePlugin": {"nodeSelector": {"trainium-eks/pool": "trainium"}},
        "npd": {"enabled": False},
    }
    assert [d.name for d in chart_daemons("neuron-helm-chart", "1.10.0", ours, TRN1)] == [
        "neuron-device-plugin"
    ]
    # The chart's own default turns the node-problem-detector on (npd.enabled: true).
    with_npd = chart_daemons(
        "neuron-helm-chart", "1.10.0", {"npd": {"nodeRecovery": {"enabled": True}}}, TRN1
    )
    assert {d.name: d.requests for d in with_npd}["neuron-problem-detector"] == Resources(20, 230, 1)
    # A node selector of another pool keeps it off the Trainium nodes.
    elsewhere = {"devicePlugin": {"nodeSelector": {"trainium-eks/pool": "system"}}, "npd": {"enabled": False}}
    assert chart_daemons("neuron-helm-chart", "1.10.0", elsewhere, TRN1) == []


def test_given_a_chart_version_without_facts_then_the_registry_refuses_it():
    with pytest.raises(KeyError, match="CHART_FACTS"):
        chart_daemons("aws-efa-k8s-device-plugin", "v9.9.9", {}, TRN1)
    with pytest.raises(KeyError, match="colocation"):
        chart_daemons("volcano", "1.15.1", {"custom": {"colocation_enable": True}}, TRN1)


def test_given_tolerations_then_the_trainium_taint_is_matched_as_kubernetes_does():
    assert tolerates_trainium_taint([{"operator": "Exists"}])
    assert tolerates_trainium_taint(
        [{"key": "aws.amazon.com/neuron", "operator": "Exists", "effect": "NoSchedule"}]
    )
    assert tolerates_trainium_taint([{"key": "aws.amazon.com/neuron", "value": "true"}])
    assert not tolerates_trainium_taint([{"key": "aws.amazon.com/neuron", "value": "false"}])
    assert not tolerates_trainium_taint([{"operator": "Exists", "effect": "NoExecute"}])
    assert not tolerates_trainium_taint([{"key": "CriticalAddonsOnly", "operator": "Exists"}])
    assert not tolerates_trainium_taint(None)


def test_given_an_own_daemonset_manifest_then_its_declared_requests_count_if_it_runs_on_trainium():
    def daemonset(tolerations, node_selector):
        return {
            "kind": "DaemonSet",
            "metadata": {"name": "x", "namespace": "monitoring"},
            "spec": {
                "template": {
                    "spec": {
                        "nodeSelector": node_selector,
                        "tolerations": tolerations,
                        "initContainers": [{"resources": {"requests": {"cpu": "500m", "memory": "10Mi"}}}],
                        "containers": [
                            {"resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}},
                            {"resources": {"requests": {"cpu": "50m", "memory": "32Mi"}}},
                        ],
                    }
                }
            },
        }

    (found,) = manifest_daemons([daemonset([{"operator": "Exists"}], {"kubernetes.io/os": "linux"})], TRN1)
    assert found.name == "monitoring/x" and found.requests == Resources(500, 96, 1)  # init CPU wins
    assert manifest_daemons([daemonset([], {})], TRN1) == []
    assert (
        manifest_daemons(
            [daemonset([{"operator": "Exists"}], {"node.kubernetes.io/instance-type": "x"})], TRN1
        )
        == []
    )


def test_given_default_settings_then_default_node_daemons_is_the_registrys_figure():
    # trainium_job.allocatable.DEFAULT_NODE_DAEMONS (used by TorchX and the bare job construct)
    # is the most the default platform puts on a Trainium node of any type.
    totals = [total(trainium_node_daemons(facts=f, region="us-west-2")) for f in INSTANCE_FACTS.values()]
    assert DEFAULT_NODE_DAEMONS == max(totals, key=lambda r: (r.millicpu, r.memory_mib, r.pods))
    assert all(t.fits_in(DEFAULT_NODE_DAEMONS) for t in totals)


def test_given_every_chart_fact_then_it_names_versions_and_a_source():
    for facts in CHART_FACTS:
        assert facts.versions and facts.source and facts.daemonsets


VARIANTS = variants(
    "default",
    "nodegroup",
    "all add-on options",
    "etcd off",
    "trn1n.32xlarge",
    "trn2.48xlarge",
    "trn1.2xlarge single node",
)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_given_the_synthesized_stacks_then_the_registry_lists_every_daemonset_on_the_trainium_nodes(variant):
    context = VARIANTS[variant]
    config = config_from_context(context)
    stacks = synth_app(**context)
    found = sorted((d.name, d.requests) for d in template_daemons(stacks.values(), config.instance_type))
    registered = sorted(
        (d.name, d.requests)
        for d in trainium_node_daemons(
            facts=config.facts,
            region=config.region,
            neuron_node_problem_detector=config.neuron_node_problem_detector,
            container_insights=config.container_insights,
            etcd_enabled=config.etcd_enabled,
        )
    )
    assert found == registered
