"""What a library user hands the constructs: one cluster type, VPC objects, the stack's region,
the nodes' AMI release and role, and errors that name the Python field they set (issue 36)."""

from __future__ import annotations

import inspect

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_eks_v2 as eks
from aws_cdk.assertions import Template

import trainium_eks
from tests.support import resources
from tests.trainium_eks.jobs.training_support import bare_cluster
from trainium_eks import (
    BertJobSpec,
    FsxCsiVolume,
    PlatformConfig,
    TrainingFileSystem,
    TrainingWorkload,
    TrainiumAddons,
    TrainiumCluster,
    TrainiumNodegroup,
    TrainiumNodeOptions,
    TrainiumPlatform,
    WorkloadTarget,
    instance_facts,
)
from trainium_eks.config import config_from_context
from trainium_eks.versions import default_neuron_ami_release
from trainium_job.errors import ConfigError
from trainium_job.naming import DEFAULT_NAME_PREFIX


def _wrapper() -> TrainiumCluster:
    stack = cdk.Stack(cdk.App(), "W", env=cdk.Environment(region="us-west-2"))
    vpc = ec2.Vpc(stack, "Vpc", max_azs=2, nat_gateways=1)
    return TrainiumCluster(stack, "Eks", vpc=vpc, subnets=vpc.private_subnets, kubernetes_version="1.36")


@pytest.fixture(scope="module")
def wrapper() -> TrainiumCluster:
    return _wrapper()


def test_given_the_cluster_wrapper_where_a_cluster_is_taken_then_the_error_names_the_fix(wrapper):
    # Given the TrainiumCluster wrapper passed where every construct takes an aws_eks_v2 cluster
    stack = cdk.Stack.of(wrapper)
    # When a nodegroup and a CSI volume are built on it
    for build in (
        lambda: TrainiumNodegroup(
            stack,
            "Trn",
            cluster=wrapper,  # type: ignore[arg-type]
            options=TrainiumNodeOptions(
                facts=instance_facts("trn1.32xlarge"), subnet=wrapper.cluster.vpc.private_subnets[0]
            ),
        ),
        lambda: FsxCsiVolume(
            stack,
            "Csi",
            cluster=wrapper,  # type: ignore[arg-type]
            file_system=TrainingFileSystem(
                stack,
                "Fsx",
                vpc=wrapper.cluster.vpc,
                subnet=wrapper.cluster.vpc.private_subnets[0],
                client_security_group_ids=[wrapper.cluster.cluster_security_group_id],
            ),
        ),
    ):
        # Then the error names the prop and the attribute to pass, not an AttributeError
        with pytest.raises(
            ConfigError,
            match=r"config 'cluster' = 'TrainiumCluster'.*cluster=<your TrainiumCluster>\.cluster",
        ):
            build()


def test_given_a_users_own_cluster_then_the_addons_go_on_it():
    # Given an eks.Cluster of the user's own (no TrainiumCluster) with the library's Trainium nodes
    cluster = bare_cluster()
    stack = cdk.Stack.of(cluster)
    nodes = TrainiumNodegroup(
        stack,
        "Trn",
        cluster=cluster,
        options=TrainiumNodeOptions(
            facts=instance_facts("trn1.32xlarge"), subnet=cluster.vpc.private_subnets[0]
        ),
    )
    # When the add-ons are put on it
    addons = TrainiumAddons(stack, "Addons", cluster=cluster, trainium=nodes, max_nodes=2)
    # Then the device plugins and Volcano are applied to that cluster
    charts = resources(Template.from_stack(stack).to_json(), "Custom::AWSCDK-EKS-HelmChart")
    names = {props["Properties"]["Release"] for props in charts.values()}
    assert {"neuron", "volcano"} <= {name.split("-")[0] for name in names}, names
    assert addons.queue_name


def test_given_a_vpc_id_string_where_a_vpc_is_taken_then_the_error_names_the_fix():
    stack = cdk.Stack(cdk.App(), "V")
    with pytest.raises(
        ConfigError, match=r"config 'vpc' = 'vpc-0abc' is invalid: give an ec2.IVpc, not its ID"
    ):
        TrainiumCluster(stack, "Eks", vpc="vpc-0abc", subnets=[], kubernetes_version="1.36")  # type: ignore[arg-type]


def test_given_an_instance_type_object_then_the_error_asks_for_its_name_without_a_repr():
    with pytest.raises(KeyError) as err:
        instance_facts(ec2.InstanceType("trn1.32xlarge"))  # type: ignore[arg-type]
    assert "give the instance type's name as a string (e.g. 'trn1.32xlarge'), not a InstanceType" in str(
        err.value
    )
    assert "object at 0x" not in str(err.value)


@pytest.mark.parametrize("owner", ["platform", "workload"])
def test_given_the_default_configuration_in_another_regions_stack_then_synth_refuses_it(owner):
    # Given the default configuration (us-west-2 and its AZ IDs) in a stack of us-east-1
    stack = cdk.Stack(cdk.App(), "East", env=cdk.Environment(region="us-east-1"))
    config = PlatformConfig()
    # When the platform (or the workload) is built there, then the region is refused at synth
    with pytest.raises(ConfigError, match=r"config 'region' = 'us-west-2' is invalid: .* stack of us-east-1"):
        if owner == "platform":
            TrainiumPlatform(stack, "P", config=config)
        else:
            cluster = eks.Cluster.from_cluster_attributes(stack, "C", cluster_name="c")
            target = WorkloadTarget(cluster=cluster, repository=ecr.Repository(stack, "R"))
            TrainingWorkload(stack, "W", target=target, config=config)


def test_given_an_imported_cluster_without_a_release_then_the_nodegroup_asks_for_one():
    stack = cdk.Stack(cdk.App(), "I", env=cdk.Environment(region="us-west-2"))
    vpc = ec2.Vpc(stack, "Vpc", max_azs=2, nat_gateways=1)
    cluster = eks.Cluster.from_cluster_attributes(
        stack, "C", cluster_name="c", vpc=vpc, cluster_security_group_id="sg-0123456789abcdef0"
    )
    facts = instance_facts("trn1.32xlarge")
    with pytest.raises(ConfigError, match=r"config 'release_version' = None .*give kubernetes_version"):
        TrainiumNodegroup(
            stack,
            "Trn",
            cluster=cluster,
            options=TrainiumNodeOptions(facts=facts, subnet=vpc.private_subnets[0]),
        )
    # Given its Kubernetes version instead, the tested release of that version is pinned
    nodes = TrainiumNodegroup(
        stack,
        "Trn2",
        cluster=cluster,
        options=TrainiumNodeOptions(facts=facts, subnet=vpc.private_subnets[0], kubernetes_version="1.35"),
    )
    assert nodes.release_version == default_neuron_ami_release("1.35")


def test_given_no_release_version_then_the_nodegroup_pins_the_tested_release_of_its_cluster():
    # Given a nodegroup on a Kubernetes 1.36 cluster of the user's, without release_version
    cluster = bare_cluster()
    stack = cdk.Stack.of(cluster)
    TrainiumNodegroup(
        stack,
        "Trn",
        cluster=cluster,
        options=TrainiumNodeOptions(
            facts=instance_facts("trn1.32xlarge"), subnet=cluster.vpc.private_subnets[0]
        ),
    )
    # Then EKS gets a ReleaseVersion (without one, EKS launches its newest AMI: its Neuron driver
    # may not run the image's runtime), the release the platform pins for 1.36
    (nodegroup,) = resources(Template.from_stack(stack).to_json(), "AWS::EKS::Nodegroup").values()
    assert nodegroup["Properties"]["ReleaseVersion"] == default_neuron_ami_release("1.36")


@pytest.mark.parametrize("capacity", ["nodegroup", "karpenter"])
def test_given_either_capacity_then_the_platform_names_the_node_role_the_nodes_use(capacity):
    stack = cdk.Stack(cdk.App(), "P", env=cdk.Environment(region="us-west-2"))
    platform = TrainiumPlatform(
        stack,
        "Default",
        config=config_from_context({"trainium_capacity": capacity, "training_enabled": "false"}),
    )
    role = platform.node_role
    if capacity == "nodegroup":
        nodegroup = platform.trainium.nodegroup.node.default_child
        assert isinstance(nodegroup, eks.CfnNodegroup)
        assert stack.resolve(nodegroup.node_role) == stack.resolve(role.role_arn)
    else:
        assert role is platform.trainium.node_role


def test_given_a_users_vpc_and_repository_then_the_platform_uses_them():
    stack = cdk.Stack(cdk.App(), "Mine", env=cdk.Environment(account="123456789012", region="us-west-2"))
    vpc = ec2.Vpc(stack, "MyVpc", max_azs=2, nat_gateways=1)
    repository = ecr.Repository(stack, "MyRepo")
    platform = TrainiumPlatform(
        stack,
        "Platform",
        config=config_from_context({"training_enabled": "false"}),
        vpc=vpc,
        repository=repository,
    )
    assert platform.network.vpc is vpc and platform.registry is None
    assert platform.workload_target.repository is repository
    template = Template.from_stack(stack).to_json()
    assert len(resources(template, "AWS::EC2::VPC")) == 1
    assert len(resources(template, "AWS::ECR::Repository")) == 1


def test_given_a_platform_target_then_the_workload_takes_the_nodes_from_it():
    # Given a platform of one trn1n.32xlarge node, and job settings that name no nodes
    stack = cdk.Stack(cdk.App(), "P", env=cdk.Environment(region="us-west-2"))
    nodes = {"instance_type": "trn1n.32xlarge", "min_nodes": "1", "desired_nodes": "1", "max_nodes": "1"}
    platform = TrainiumPlatform(
        stack, "Default", config=config_from_context({**nodes, "training_enabled": "false"})
    )
    # When the workload is built with the default settings
    workload = TrainingWorkload(stack, "Workload", target=platform.workload_target, config=PlatformConfig())
    # Then its job runs on the target's node (32 workers), not the config's 2 x trn1.32xlarge
    assert (workload.config.instance_type, workload.config.desired_nodes) == ("trn1n.32xlarge", 1)
    assert workload.job.plan.workers == 32


def test_given_a_job_spec_error_then_it_names_the_python_field_and_the_default_in_the_way():
    # The field a library user set, beside the context key an app user types
    with pytest.raises(ConfigError, match=r"config 'training_max_steps' \(BertJobSpec\.max_steps\) = 0"):
        BertJobSpec(max_steps=0)
    # A rule against a script default the user never set names that default and how to change it
    with pytest.raises(ConfigError) as err:
        PlatformConfig(training=BertJobSpec(max_steps=1000))
    assert "(BertJobSpec.max_steps) = 1000" in str(err.value)
    assert "the script's default --warmup_steps 2000: set it with training_script_args" in str(err.value)


def test_given_the_public_constructs_then_every_name_prefix_default_is_the_one_default():
    defaults = {
        name: inspect.signature(obj.__init__).parameters["name_prefix"].default
        for name in trainium_eks.__all__
        if inspect.isclass(obj := getattr(trainium_eks, name))
        and "name_prefix" in inspect.signature(obj.__init__).parameters
    }
    assert "TrainiumAddons" in defaults and "TrainiumNodeOptions" in defaults
    assert set(defaults.values()) == {DEFAULT_NAME_PREFIX}, defaults
