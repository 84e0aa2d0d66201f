"""The controllers' nodes on a cluster of the app's own: the selector, the synth check, Auto Mode."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from trainium_eks.cluster.system_nodes import (
    auto_mode,
    check_node_selector,
    cluster_capacity,
    refuse_auto_mode,
    require_system_capacity,
)
from trainium_eks.versions import KUBERNETES_RELEASES
from trainium_job.errors import ConfigError
from trainium_job.scheduling import SYSTEM_NODE_LABEL

#: The example's choice: managed nodegroups, no default capacity (not Auto Mode).
NODEGROUPS = {"default_capacity_type": eks.DefaultCapacityType.NODEGROUP, "default_capacity": 0}


def _cluster(props: dict[str, object] = NODEGROUPS) -> tuple[cdk.App, eks.Cluster]:
    app = cdk.App()
    stack = cdk.Stack(app, "Own", env=cdk.Environment(region="us-west-2"))
    release = KUBERNETES_RELEASES["1.35"]
    cluster = eks.Cluster(
        stack,
        "Cluster",
        version=release.eks_version,
        kubectl_provider_options=eks.KubectlProviderOptions(kubectl_layer=release.kubectl_layer(stack, "L")),
        **props,  # type: ignore[arg-type]
    )
    return app, cluster


def _checked(app: cdk.App, cluster: eks.Cluster, selector: dict[str, str] | None = None) -> None:
    scope = Construct(cdk.Stack.of(cluster), "Controllers")
    require_system_capacity(scope, cluster, selector or dict(SYSTEM_NODE_LABEL), owner="TrainiumAddons")


def _synth_error(app: cdk.App) -> BaseException:
    with pytest.raises(RuntimeError) as err:
        app.synth()
    return err.value


def test_given_an_unlabelled_nodegroup_then_synth_refuses_with_the_field_value_and_fix():
    # Given the user's own cluster whose only nodegroup carries no label the controllers select
    app, cluster = _cluster()
    cluster.add_nodegroup_capacity("Nodes", ami_type=eks.NodegroupAmiType.AL2023_X86_64_STANDARD)
    _checked(app, cluster)
    # When synthesized, then one line names the selector, what it needs and how to fix it
    err = _synth_error(app)
    message = str(err).splitlines()[0]
    assert message.startswith(
        "config 'system_node_selector' = {'trainium-eks/pool': 'system'} is invalid: no untainted nodegroup"
    )
    assert "labels={'trainium-eks/pool': 'system'}" in message and "Helm gives up (10 min)" in message
    assert isinstance(err.__context__, ConfigError)


def test_given_a_labelled_nodegroup_declared_after_the_controllers_then_synth_accepts():
    app, cluster = _cluster()
    _checked(app, cluster)
    cluster.add_nodegroup_capacity("System", labels=dict(SYSTEM_NODE_LABEL))
    app.synth()


def test_given_the_labelled_nodegroup_is_tainted_then_it_does_not_count():
    app, cluster = _cluster()
    cluster.add_nodegroup_capacity(
        "System",
        labels=dict(SYSTEM_NODE_LABEL),
        taints=[eks.TaintSpec(key="dedicated", value="x", effect=eks.TaintEffect.NO_SCHEDULE)],
    )
    _checked(app, cluster)
    assert "no untainted nodegroup" in str(_synth_error(app))


def test_given_a_selector_of_labels_eks_puts_on_every_node_then_the_default_nodegroup_matches():
    # eks.amazonaws.com/nodegroup and kubernetes.io/os: set on a managed nodegroup's nodes by EKS
    # and the kubelet (EKS user guide, "Managed node groups"; Kubernetes well-known labels).
    app, cluster = _cluster()
    cluster.add_nodegroup_capacity("Named", nodegroup_name="controllers")
    _checked(app, cluster, {"eks.amazonaws.com/nodegroup": "controllers", "kubernetes.io/os": "linux"})
    app.synth()
    (capacity,) = cluster_capacity(cluster) or []
    assert capacity.labels["eks.amazonaws.com/capacityType"] == "ON_DEMAND"


def test_given_an_imported_cluster_then_nothing_is_checked():
    app, own = _cluster()
    stack = cdk.Stack.of(own)
    imported = eks.Cluster.from_cluster_attributes(stack, "Imported", cluster_name="x")
    assert cluster_capacity(imported) is None
    _checked(app, imported)  # type: ignore[arg-type]
    app.synth()


def test_given_aws_eks_v2_defaults_then_auto_mode_is_seen_and_a_second_karpenter_refused():
    # aws-cdk-lib 2.275 aws-eks-v2 cluster.ts isValidAutoModeConfig: Auto Mode when
    # defaultCapacityType is unset (or AUTOMODE).
    _, auto = _cluster({})
    _, managed = _cluster()
    assert auto_mode(auto) and not auto_mode(managed)
    with pytest.raises(ConfigError, match=r"config 'cluster' = .*Auto Mode.*two would launch nodes"):
        refuse_auto_mode(auto, owner="TrainiumNodePool")
    refuse_auto_mode(managed, owner="TrainiumNodePool")


@pytest.mark.parametrize(
    "selector,problem",
    [
        ({}, "as a mapping"),
        ("trainium-eks/pool=system", "as a mapping"),
        ({"pool": 1}, "strings"),
        ({"bad key!": "x"}, "is not a Kubernetes label"),
        ({"pool": "-x"}, "is not a Kubernetes label"),
    ],
)
def test_given_a_malformed_selector_then_the_error_names_the_field(selector, problem):
    with pytest.raises(ConfigError, match=rf"config 'system_node_selector' = .*{problem}"):
        check_node_selector(selector)


def test_given_ec2_default_capacity_then_it_counts_with_the_labels_every_linux_node_has():
    _, cluster = _cluster(
        {
            "default_capacity_type": eks.DefaultCapacityType.EC2,
            "default_capacity": 1,
            "default_capacity_instance": ec2.InstanceType("m7i.large"),
        }
    )
    (capacity,) = cluster_capacity(cluster) or []
    assert capacity.takes({"kubernetes.io/os": "linux"}) and not capacity.takes(dict(SYSTEM_NODE_LABEL))
