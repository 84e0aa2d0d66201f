"""What a library user hands the constructs: one cluster type, VPC objects, the stack's region,
the nodes' AMI release and role, and errors that name the Python field they set (issue 36)."""

from __future__ import annotations

import inspect
import subprocess
import sys

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_eks_v2 as eks
from aws_cdk.assertions import Annotations, Match, Template

import trainium_eks
from tests.support import REPO, resources
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
    TrainiumNodePool,
    TrainiumPlatform,
    WorkloadTarget,
    instance_facts,
)
from trainium_eks.config import config_from_context
from trainium_eks.versions import default_neuron_ami_release
from trainium_job.errors import ConfigError
from trainium_job.naming import DEFAULT_NAME_PREFIX
from trainium_job.scheduling import SYSTEM_NODE_LABEL


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
    # and its system nodes, labelled for the controllers
    cluster.add_nodegroup_capacity("System", labels=dict(SYSTEM_NODE_LABEL))
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


def _trn_options(cluster: eks.Cluster, **overrides: object) -> TrainiumNodeOptions:
    fields: dict[str, object] = {
        "facts": instance_facts("trn1.32xlarge"),
        "subnet": cluster.vpc.private_subnets[0],
    }
    fields.update(overrides)
    return TrainiumNodeOptions(**fields)  # type: ignore[arg-type]


def test_given_a_string_where_instance_facts_are_expected_then_the_error_names_the_field():
    cluster = bare_cluster()
    with pytest.raises(
        ConfigError,
        match=r"config 'TrainiumNodeOptions.facts' = 'trn1.32xlarge' is invalid: .*instance_facts",
    ):
        _trn_options(cluster, facts="trn1.32xlarge")
    with pytest.raises(ConfigError, match=r"'TrainiumNodeOptions.subnet' = 'subnet-0abc'.*not its ID"):
        _trn_options(cluster, subnet="subnet-0abc")


@pytest.mark.parametrize(
    "props,field",
    [
        ({"max_nodes": -3}, "max_nodes"),
        ({"idle_minutes": -1}, "idle_minutes"),
        ({"system_nodes": 0}, "system_nodes"),
    ],
)
def test_given_a_negative_count_for_the_node_pool_then_it_is_refused_by_name(props, field):
    # Before: max_nodes=-3 rendered the NodePool's limits as cpu "-384".
    cluster = bare_cluster()
    stack = cdk.Stack.of(cluster)
    with pytest.raises(ConfigError, match=rf"config '{field}' = "):
        TrainiumNodePool(
            stack, "Pool", cluster=cluster, options=_trn_options(cluster), az_id="usw2-az4", **props
        )


def test_given_a_negative_target_size_then_the_error_names_the_target_field():
    cluster = bare_cluster()
    stack = cdk.Stack.of(cluster)
    with pytest.raises(ConfigError, match=r"config 'WorkloadTarget.desired_nodes' = -1 is invalid"):
        WorkloadTarget(cluster=cluster, repository=ecr.Repository(stack, "Repo"), desired_nodes=-1)
    with pytest.raises(ConfigError, match=r"config 'max_nodes' = 0 is invalid"):
        TrainiumAddons(stack, "Addons", cluster=cluster, trainium=None, max_nodes=0)  # type: ignore[arg-type]


def test_given_the_pool_s_subnet_in_another_region_s_zone_then_az_id_is_refused():
    # The NodePool requires the AZ ID; a subnet elsewhere would launch no node. A zone name maps to
    # an ID per account, so only its region is checked at synth.
    cluster = bare_cluster()
    stack = cdk.Stack.of(cluster)
    subnet = ec2.Subnet(
        stack, "Own", vpc_id=cluster.vpc.vpc_id, cidr_block="10.9.0.0/24", availability_zone="us-west-2a"
    )
    with pytest.raises(ConfigError, match=r"config 'az_id' = 'use1-az6' is invalid: .* us-west-2a.*usw2-az"):
        TrainiumNodePool(
            stack, "Pool", cluster=cluster, options=_trn_options(cluster, subnet=subnet), az_id="use1-az6"
        )


def test_given_a_subnet_declaring_its_az_id_then_another_az_id_is_refused():
    cluster = bare_cluster()
    stack = cdk.Stack.of(cluster)
    subnet = ec2.Subnet(
        stack, "Own", vpc_id=cluster.vpc.vpc_id, cidr_block="10.9.0.0/24", availability_zone="us-west-2a"
    )
    cfn = subnet.node.default_child
    assert isinstance(cfn, ec2.CfnSubnet)
    cfn.availability_zone = None
    cfn.availability_zone_id = "usw2-az1"
    with pytest.raises(ConfigError, match=r"'az_id' = 'usw2-az4' is invalid: .* is in usw2-az1"):
        TrainiumNodePool(
            stack, "Pool", cluster=cluster, options=_trn_options(cluster, subnet=subnet), az_id="usw2-az4"
        )


def test_given_a_region_without_trainium_then_config_and_constructs_refuse_it():
    with pytest.raises(
        ConfigError, match=r"config 'region' = 'eu-west-3' is invalid: no Trainium instance type"
    ):
        PlatformConfig(region="eu-west-3", trainium_az_id="euw3-az1", second_az_id="euw3-az2")
    stack = cdk.Stack(cdk.App(), "Paris", env=cdk.Environment(region="eu-west-3"))
    vpc = ec2.Vpc(stack, "Vpc", max_azs=2)
    cluster = eks.Cluster(
        stack,
        "C",
        version=eks.KubernetesVersion.of("1.35"),
        vpc=vpc,
        default_capacity=0,
        default_capacity_type=eks.DefaultCapacityType.NODEGROUP,
        kubectl_provider_options=eks.KubectlProviderOptions(
            kubectl_layer=trainium_eks.KUBERNETES_RELEASES["1.35"].kubectl_layer(stack, "L")
        ),
    )
    with pytest.raises(ConfigError, match=r"config 'region' = 'eu-west-3' is invalid: trn1.32xlarge nodes"):
        TrainiumNodegroup(stack, "Trn", cluster=cluster, options=_trn_options(cluster))


def test_given_health_check_nodes_without_a_node_health_check_then_synth_warns():
    # Given Trainium nodes that start with the pending taint and no workload to lift it
    cluster = bare_cluster()
    stack = cdk.Stack.of(cluster)
    TrainiumNodegroup(stack, "Trn", cluster=cluster, options=_trn_options(cluster, health_check=True))
    # When synthesized, then the nodegroup carries a warning that names the taint and the fix
    warnings = Annotations.from_stack(stack).find_warning("/T/Trn", Match.string_like_regexp("pending"))
    assert len(warnings) == 1
    assert "no NodeHealthCheck is in this app" in str(warnings[0].entry.data)


def test_given_the_target_s_cluster_then_mypy_strict_takes_it_where_aws_cdk_takes_an_icluster(tmp_path):
    # Given a user's eks.Cluster in a WorkloadTarget, and the target's cluster handed to aws-cdk-lib
    snippet = tmp_path / "user_app.py"
    snippet.write_text(
        "from aws_cdk import aws_ecr as ecr\n"
        "from aws_cdk import aws_eks_v2 as eks\n"
        "from constructs import Construct\n\n"
        "from trainium_eks import WorkloadTarget\n\n\n"
        "def apply(scope: Construct, cluster: eks.Cluster, repository: ecr.IRepository) -> None:\n"
        "    target = WorkloadTarget(cluster=cluster, repository=repository)\n"
        "    eks.KubernetesManifest(scope, 'Extra', cluster=target.cluster, manifest=[])\n"
    )
    # When mypy --strict checks it against the library, then it passes without a cast
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--follow-imports=silent",
            "--no-incremental",
            str(snippet),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout
