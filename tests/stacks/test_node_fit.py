"""Every pod the stacks put on a Trainium node fits there at once: the DaemonSets read from the
synthesized templates, the training gang's pod, and the dataset pods beside it.

The training job is submitted once its first phase's shards are there
(trainium_eks/jobs/job_submission.py), so the first phase's staging or preparation pods have ended
when the gang comes. With Karpenter every dataset pod runs on CPU nodes of its own; on the
Trainium nodegroup phase 2's staging pod, created at deploy, waits on a Trainium node through the
first phase's dataset and phase 1's training (``training_phases=both``): the one dataset pod
beside the gang, and beside the first phase's dataset pods before it. A held-out staging pod comes
after its phase's shards, during training: on the nodegroup it takes that same room."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from tests.support import k8s_manifests, synth_app, variants
from tests.trainium_eks.nodes.node_support import pod_spec_requests, template_daemons, workload_pods
from trainium_eks.addons.node_daemons import on_trainium, total
from trainium_eks.config import config_from_context
from trainium_job.allocatable import NODE_MARGIN, Resources, node_allocatable

VARIANTS = variants(
    "default",
    "all add-on options",
    "preparation on",
    "trn1n.32xlarge",
    "trn2.48xlarge",
    "trn1.2xlarge single node",
    "nodegroup",
    "nodegroup preparation on",
)


def _phase2_staging(config: Any, pods: Mapping[str, tuple[Mapping[str, Any], int]]) -> Resources:
    """The requests of the dataset pod that runs on a Trainium node beside the gang: on the
    nodegroup, phase 2's staging pod (both phases) or a held-out staging pod (any the template
    has); the staging Jobs' pods ask the same."""
    later = config.training_phases == "both" or "heldout-staging" in pods
    if config.trainium_capacity != "nodegroup" or not later:
        return Resources()
    spec, _ = pods["dataset-staging" if "dataset-staging" in pods else "heldout-staging"]
    assert on_trainium(spec, config.instance_type)
    return pod_spec_requests(spec)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_given_the_stacks_then_the_gang_the_dataset_pods_beside_it_and_daemonsets_fit_one_node_together(
    variant,
):
    context = VARIANTS[variant]
    config = config_from_context(context)
    templates = list(synth_app(**context).values())
    node = node_allocatable(config.facts).allocatable
    daemons = total(template_daemons(templates, config.instance_type))
    pods = workload_pods(templates)

    training_spec, replicas = pods["training"]
    assert replicas == config.desired_nodes
    assert on_trainium(training_spec, config.instance_type)
    # The first phase's dataset pods: on the Trainium nodes only with the nodegroup.
    spec, _ = pods["dataset-preparation" if config.preparation_enabled else "dataset-staging"]
    assert on_trainium(spec, config.instance_type) is (config.trainium_capacity == "nodegroup")

    # A held-out staging pod comes after its phase's shards, during training: on the nodegroup it
    # takes the room phase 2's staging pod had (or waits for it), so it must fit in it.
    if "heldout-staging" in pods:
        held_spec, _ = pods["heldout-staging"]
        on_node = config.trainium_capacity == "nodegroup"
        assert on_trainium(held_spec, config.instance_type) is on_node
        assert not on_node or pod_spec_requests(held_spec).fits_in(_phase2_staging(config, pods))

    together = daemons + pod_spec_requests(training_spec) + _phase2_staging(config, pods)
    assert together.fits_in(node), f"{together.describe()} ({together.pods} pods) > {node.describe()}"
    # What is left is the stated margin, no more: the pod takes the rest of the node, and leaves
    # room for exactly what shares it.
    assert node - together == Resources(
        NODE_MARGIN.millicpu, NODE_MARGIN.memory_mib, node.pods - together.pods
    )


@pytest.mark.parametrize("variant", ["nodegroup", "nodegroup preparation on"])
def test_given_the_nodegroup_then_the_first_phases_dataset_pods_fit_a_node_before_the_gang(variant):
    # Given the first phase's dataset pods on the Trainium nodes, spread evenly (the preparation's
    # maxSkew 1), and phase 2's staging pod waiting there
    context = VARIANTS[variant]
    config = config_from_context(context)
    templates = list(synth_app(**context).values())
    node = node_allocatable(config.facts).allocatable
    daemons = total(template_daemons(templates, config.instance_type))
    pods = workload_pods(templates)
    spec, parallel = pods["dataset-preparation" if config.preparation_enabled else "dataset-staging"]
    first = pod_spec_requests(spec).times(-(-parallel // config.desired_nodes))
    # Then they fit with the DaemonSets and the margin: all of them run at once
    together = daemons + first + _phase2_staging(config, pods) + NODE_MARGIN
    assert together.fits_in(node), f"{together.describe()} ({together.pods} pods) > {node.describe()}"


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
