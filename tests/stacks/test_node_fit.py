"""Every pod the stacks put on a Trainium node fits there at once: the DaemonSets read from the
synthesized templates, the training gang's pod, and the dataset pods that share its nodes while
it waits for their marker (the staging pod, or the preparation pods spread over the nodes)."""

from __future__ import annotations

import pytest

from tests.support import k8s_manifests, synth_app, variants
from tests.trainium_eks.nodes.node_support import pod_spec_requests, template_daemons, workload_pods
from trainium_eks.addons.node_daemons import on_trainium, total
from trainium_eks.config import config_from_context
from trainium_job.allocatable import Resources, node_allocatable

VARIANTS = variants(
    "default",
    "all add-on options",
    "preparation on",
    "trn1n.32xlarge",
    "trn2.48xlarge",
    "trn1.2xlarge single node",
    "nodegroup",
)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_given_the_stacks_then_gang_dataset_pods_and_daemonsets_fit_one_node_together(variant):
    context = VARIANTS[variant]
    config = config_from_context(context)
    templates = list(synth_app(**context).values())
    node = node_allocatable(config.facts).allocatable
    daemons = total(template_daemons(templates, config.instance_type))
    pods = workload_pods(templates)

    training_spec, replicas = pods["training"]
    assert replicas == config.desired_nodes
    assert on_trainium(training_spec, config.instance_type)
    training = pod_spec_requests(training_spec)
    if config.preparation_enabled:
        spec, parallel = pods["dataset-preparation"]
        dataset = pod_spec_requests(spec).times(-(-parallel // config.desired_nodes))
    else:
        spec, _ = pods["dataset-staging"]
        dataset = pod_spec_requests(spec)
    # With Karpenter the staging pod has a node of its own (the "dataset" NodePool).
    staged_elsewhere = config.trainium_capacity == "karpenter" and not config.preparation_enabled
    assert on_trainium(spec, config.instance_type) is not staged_elsewhere
    if staged_elsewhere:
        dataset = Resources()

    together = daemons + training + dataset
    assert together.fits_in(node), f"{together.describe()} ({together.pods} pods) > {node.describe()}"
    # What is left is the stated margin, no more: the pod takes the rest of the node.
    assert node - together == Resources(500, 1024, node.pods - together.pods)


@pytest.mark.parametrize("variant", ["default", "all add-on options"])
def test_given_the_platforms_own_daemonsets_on_trainium_then_each_container_declares_cpu_and_memory(variant):
    context = VARIANTS[variant]
    instance_type = config_from_context(context).instance_type
    for template in synth_app(**context).values():
        for _, obj in k8s_manifests(template):
            spec = obj.get("spec", {}).get("template", {}).get("spec")
            if obj["kind"] == "DaemonSet" and on_trainium(spec, instance_type):
                for container in spec["containers"]:
                    requests = container.get("resources", {}).get("requests", {})
                    assert {"cpu", "memory"} <= requests.keys(), (obj["metadata"]["name"], container["name"])
