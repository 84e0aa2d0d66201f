"""The rule pack for aws_eks_v2 clusters, and acknowledgements that must match a finding."""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_eks_v2 as eks
from aws_cdk.lambda_layer_kubectl_v36 import KubectlV36Layer
from constructs import IConstruct

from stacks import TrainiumPlatformStack
from tests.trainium_eks.jobs.training_support import bare_cluster
from trainium_eks import TrainingWorkload, TrainiumPlatform, WorkloadTarget
from trainium_eks.config import config_from_context
from trainium_eks.nag import (
    _ARN,
    CONTAINER_INSIGHTS_ACKNOWLEDGEMENTS,
    EBS_CSI_ACKNOWLEDGEMENTS,
    EKS_CLUSTER_ACKNOWLEDGEMENTS,
    FSX_CSI_ACKNOWLEDGEMENTS,
    IMAGE_BUILD_ACKNOWLEDGEMENTS,
    IMAGE_HARDENING_ACKNOWLEDGEMENTS,
    KARPENTER_ACKNOWLEDGEMENTS,
    NODE_REPLACEMENT_ACKNOWLEDGEMENTS,
    NODE_ROLE_ACKNOWLEDGEMENTS,
    TRAINIUM_CLUSTER_ACKNOWLEDGEMENTS,
    VALIDATION_REPORT,
    PlatformChecks,
    StaleAcknowledgement,
    acknowledge_findings,
    check_acknowledgements,
    eks_cluster_problems,
    findings,
    nag_plugins,
    report_findings,
    resolve_finding,
)


def _bare_cluster(**kwargs) -> cdk.App:
    app = cdk.App()
    stack = cdk.Stack(app, "S", env=cdk.Environment(region="us-west-2"))
    vpc = ec2.Vpc(stack, "Vpc", max_azs=2, nat_gateways=1)
    eks.Cluster(
        stack,
        "Cluster",
        version=eks.KubernetesVersion.of("1.36"),
        vpc=vpc,
        default_capacity=0,
        default_capacity_type=eks.DefaultCapacityType.NODEGROUP,
        kubectl_provider_options=eks.KubectlProviderOptions(kubectl_layer=KubectlV36Layer(stack, "L")),
        **kwargs,
    )
    return app


def test_given_aws_eks_v2_cluster_with_defaults_then_pack_reports_endpoint_logs_and_secrets():
    report = PlatformChecks().validate_scope(_bare_cluster())
    assert not report.success
    assert sorted(v.rule_name for v in report.violations) == [
        "TrainiumEks-EKS1",
        "TrainiumEks-EKS2",
        "TrainiumEks-EKS3",
    ]
    assert all(v.violating_resources[0].construct_path == "S/Cluster/Resource" for v in report.violations)


def test_given_public_endpoint_open_to_all_and_two_log_types_then_pack_names_what_is_missing():
    app = _bare_cluster(
        endpoint_access=eks.EndpointAccess.PUBLIC_AND_PRIVATE.only_from("0.0.0.0/0"),
        cluster_logging=[eks.ClusterLoggingTypes.API, eks.ClusterLoggingTypes.AUDIT],
    )
    descriptions = {v.rule_name: v.description for v in PlatformChecks().validate_scope(app).violations}
    assert "0.0.0.0/0" in descriptions["TrainiumEks-EKS1"]
    assert "authenticator, controllerManager, scheduler" in descriptions["TrainiumEks-EKS2"]


@pytest.mark.parametrize(
    "props,expected",
    [
        ({"resourcesVpcConfig": {"endpointPublicAccess": False}}, {"EKS2", "EKS3"}),
        (
            {
                "resourcesVpcConfig": {"endpointPublicAccess": True, "publicAccessCidrs": ["203.0.113.7/32"]},
                "logging": {
                    "clusterLogging": {
                        "enabledTypes": [
                            {"type": t}
                            for t in ("api", "audit", "authenticator", "controllerManager", "scheduler")
                        ]
                    }
                },
                "encryptionConfig": [{"resources": ["secrets"], "provider": {"keyArn": "arn:aws:kms:x"}}],
            },
            set(),
        ),
        (
            {
                "resourcesVpcConfig": {
                    "endpointPublicAccess": True,
                    "publicAccessCidrs": ["10.0.0.0/8", "0.0.0.0/0"],
                },
                "encryptionConfig": [{"resources": ["secrets"]}],
            },
            {"EKS1", "EKS2", "EKS3"},
        ),
    ],
)
def test_given_cluster_properties_then_problems_are_the_rules_broken(props, expected):
    assert set(eks_cluster_problems(props)) == expected


@pytest.fixture(scope="module")
def public_platform():
    app = cdk.App()
    return TrainiumPlatformStack(
        app,
        "P",
        config=config_from_context({"endpoint_public_cidrs": "203.0.113.7/32", "training_enabled": "false"}),
    )


def test_given_platform_with_public_endpoint_then_pack_finds_nothing(public_platform):
    report = PlatformChecks().validate_scope(public_platform)
    assert report.success, [v.description for v in report.violations]


def test_given_acknowledgement_that_matches_no_finding_then_stale_error_names_it(public_platform):
    entry = ("Cluster/Cluster/Role", "AwsSolutions-IAM5[Resource::*]", "x" * 50)
    with pytest.raises(
        StaleAcknowledgement, match=r"AwsSolutions-IAM5\[Resource::\*\] on P/Default/Cluster/Cluster/Role"
    ):
        acknowledge_findings(public_platform.platform, (entry,))


#: Each owner's table and the construct class that applies it to itself.
OWNERS = {
    "TrainiumCluster": TRAINIUM_CLUSTER_ACKNOWLEDGEMENTS,
    "TrainiumNodegroup / TrainiumNodePool": NODE_ROLE_ACKNOWLEDGEMENTS,
    "KarpenterController": KARPENTER_ACKNOWLEDGEMENTS,
    "FsxCsiVolume": FSX_CSI_ACKNOWLEDGEMENTS,
    "EbsCsiDriver": EBS_CSI_ACKNOWLEDGEMENTS,
    "ObservabilityAddons": CONTAINER_INSIGHTS_ACKNOWLEDGEMENTS,
    "NodeReplacementRole": NODE_REPLACEMENT_ACKNOWLEDGEMENTS,
    "eks.Cluster": EKS_CLUSTER_ACKNOWLEDGEMENTS,
}


@pytest.mark.parametrize("capacity", ["nodegroup", "karpenter"])
def test_given_the_platform_with_every_option_then_its_constructs_leave_no_finding_unacknowledged(
    tmp_path, capacity
):
    # Given the platform with every option whose resources have findings (both capacity modes)
    app = cdk.App(outdir=str(tmp_path))
    TrainiumPlatformStack(
        app,
        "P2",
        config=config_from_context(
            {"training_enabled": "false", "trainium_capacity": capacity, "container_insights": "true"}
        ),
    )
    cdk.Validations.of(app).add_plugins(*nag_plugins(app))
    # When synthesized with cdk-nag (a finding nobody acknowledged fails app.synth()), then every
    # acknowledgement its constructs made on themselves matched a finding
    check_acknowledgements(app, app.synth().directory)
    report = json.loads((tmp_path / VALIDATION_REPORT).read_text())
    acknowledged = {
        v["ruleName"] for plugin in report["pluginReports"] for v in plugin["suppressedViolations"]
    }
    assert ("AwsSolutions-SQS3" in acknowledged) == (capacity == "karpenter")
    assert all(not plugin["violations"] for plugin in report["pluginReports"])


def _workload_on_a_bare_cluster() -> TrainingWorkload:
    cluster = bare_cluster()
    stack = cdk.Stack.of(cluster)
    target = WorkloadTarget(cluster=cluster, repository=ecr.Repository(stack, "Repo"))
    return TrainingWorkload(stack, "Workload", target=target, config=config_from_context({}))


def test_given_image_build_acknowledgements_then_each_matches_a_finding_before_it_is_applied(monkeypatch):
    import trainium_eks.images.training_image as training_image

    owners: list[IConstruct] = []
    # Built without acknowledgements: every image-build entry must name something cdk-nag reports.
    monkeypatch.setattr(training_image, "acknowledge_image_builds", owners.append)
    workload = _workload_on_a_bare_cluster()
    # The stack's first image (the workload's TrainingImages) holds the hardening, once per stack.
    assert [owner.node.path for owner in owners] == ["T/Workload/TrainingImages"]
    found = findings(cdk.Stack.of(workload))
    for root, entries in (
        (owners[0], IMAGE_HARDENING_ACKNOWLEDGEMENTS),
        (cdk.Stack.of(workload), IMAGE_BUILD_ACKNOWLEDGEMENTS),
    ):
        for path, finding, _ in entries:
            resolved = resolve_finding(root, finding)  # as acknowledge_findings resolves it
            base = f"{root.node.path}/{path}"
            assert any(rule == resolved and where.startswith(base) for where, rule in found), (base, resolved)


def test_given_acknowledgements_split_by_owner_then_each_names_only_its_owners_constructs():
    # Each table's paths are under its owner: no entry reaches up into a composition (a path of
    # the platform or the workload), so an app that composes the pieces gets the same entries.
    assert {path.split("/")[0] for path, _, _ in IMAGE_HARDENING_ACKNOWLEDGEMENTS} == {
        "BuildBoundary",
        "BuildResponderRole",
    }
    platform_children = {"Cluster", "Network", "Trainium", "TrainiumPool", "StorageVolume", "Addons"}
    for owner, entries in OWNERS.items():
        assert not {path.split("/")[0] for path, _, _ in entries} & platform_children - {"Cluster"}, owner
    assert [path for path, _, _ in EKS_CLUSTER_ACKNOWLEDGEMENTS if path.startswith("Cluster/")] == []


def test_given_a_workload_acknowledgement_that_matches_no_finding_then_stale_error_names_it():
    workload = _workload_on_a_bare_cluster()
    entry = ("TensorBoard", "AwsSolutions-IAM5[Resource::*]", "x" * 50)
    with pytest.raises(StaleAcknowledgement, match=r"IAM5\[Resource::\*\] on T/Workload/TensorBoard matches"):
        acknowledge_findings(workload, (entry,))


#: The stack environments a user's app may give: the project's own (region only), a named account
#: (most production stacks), and none at all (environment-agnostic).
ENVIRONMENTS = {
    "region only": cdk.Environment(region="us-west-2"),
    "explicit account": cdk.Environment(account="123456789012", region="us-west-2"),
    "environment-agnostic": None,
}


@pytest.mark.parametrize(
    ("environment", "capacity"),
    [
        ("explicit account", "nodegroup"),
        ("explicit account", "karpenter"),
        ("environment-agnostic", "nodegroup"),
    ],
)
def test_given_stack_environment_then_platform_acknowledgements_resolve_to_its_findings(
    environment, capacity
):
    # Given a user's stack with a named account (or none), the platform and the workload in it
    stack = cdk.Stack(cdk.App(), "Mine", env=ENVIRONMENTS[environment])
    config = config_from_context({"trainium_capacity": capacity})
    # When both are built and every acknowledgement is checked against cdk-nag's findings,
    platform = TrainiumPlatform(stack, "Platform", config=config)
    TrainingWorkload(stack, "Workload", target=platform.workload_target, config=config)
    check_acknowledgements(stack)
    # Then no acknowledgement went stale, and the account in ARN findings is the stack's
    entry = f"AwsSolutions-IAM5[Resource::{_ARN.format(service='ec2')}:instance/*]"
    account = "123456789012" if environment == "explicit account" else "<AWS::AccountId>"
    region = "<AWS::Region>" if environment == "environment-agnostic" else "us-west-2"
    assert resolve_finding(platform, entry).endswith(f":ec2:{region}:{account}:instance/*]")


def test_given_workload_in_a_stack_with_an_account_then_its_acknowledgements_match():
    # Given the workload alone on a cluster of the user's, in a stack with a named account
    cluster = bare_cluster(account="123456789012")
    stack = cdk.Stack.of(cluster)
    target = WorkloadTarget(cluster=cluster, repository=ecr.Repository(stack, "Repo"))
    # When it is built and checked, then every acknowledgement matched a finding (no StaleAcknowledgement)
    workload = TrainingWorkload(stack, "Workload", target=target, config=config_from_context({}))
    check_acknowledgements(stack)
    assert workload.node.find_child("TrainingImages")


_STALE = ("Cluster/Cluster/Role", "AwsSolutions-IAM5[Resource::*]", "x" * 50)


def test_given_an_acknowledgement_checked_at_synth_then_it_is_not_checked_when_made():
    # Given the platform, whose constructs defer their check to synth
    app = cdk.App()
    stack = TrainiumPlatformStack(app, "D", config=config_from_context({"training_enabled": "false"}))
    # When a stale entry is deferred as well, then making it raises nothing
    acknowledge_findings(stack.platform, (_STALE,), check_at_synth=True)
    # and the one pass over the app names it
    with pytest.raises(StaleAcknowledgement, match=r"IAM5\[Resource::\*\] on D/Default/Cluster/Cluster/Role"):
        check_acknowledgements(app)


def test_given_platform_acknowledgements_then_the_synth_pass_finds_each_of_them(public_platform):
    # Given the platform's own (deferred) acknowledgements, when the app's one pass checks them,
    # then none is stale
    check_acknowledgements(public_platform)


def _synthesized_with_nag_plugins(tmp_path, *entries) -> tuple[cdk.App, str]:
    """A platform-only app with the library's nag plugins, ``entries`` deferred beside the
    platform's own; (the app, its assembly directory) after ``app.synth()``."""
    app = cdk.App(outdir=str(tmp_path))
    stack = TrainiumPlatformStack(app, "N", config=config_from_context({"training_enabled": "false"}))
    acknowledge_findings(stack.platform, entries, check_at_synth=True)
    cdk.Validations.of(app).add_plugins(*nag_plugins(app))
    return app, app.synth().directory


def test_given_the_synthesized_report_then_its_findings_are_the_packs_in_process(tmp_path, monkeypatch):
    # Given an app synthesized with the library's plugins, whose validation report aws-cdk-lib
    # wrote (its format: aws-cdk-lib core/lib/validation/private/report.ts, formatJson)
    app, assembly = _synthesized_with_nag_plugins(tmp_path)
    # When the report's findings are read, then they are those the packs find in process
    reported = report_findings(json.loads((tmp_path / VALIDATION_REPORT).read_text()))
    assert reported == findings(app)
    assert any(rule.startswith("AwsSolutions-IAM4") for _, rule in reported)
    # and the platform's acknowledgements are settled from the report alone (no pack runs again)
    monkeypatch.setattr("trainium_eks.nag.findings", lambda scope: pytest.fail("the packs ran again"))
    check_acknowledgements(app, assembly)


def test_given_nag_plugins_and_a_stale_acknowledgement_then_the_check_after_synth_names_it(tmp_path):
    # Given an app with the library's cdk-nag plugins and a stale entry deferred to synth
    app, assembly = _synthesized_with_nag_plugins(tmp_path, _STALE)
    # When its acknowledgements are checked against the synthesized report, then the stale one is named
    with pytest.raises(StaleAcknowledgement, match=r"IAM5\[Resource::\*\] on N/Default/Cluster/Cluster/Role"):
        check_acknowledgements(app, assembly)


def test_given_nag_plugins_then_they_are_the_two_packs():
    # Given the library's plugins, then they are the packs themselves, so the validation report
    # and the acknowledgement ids ("AwsSolutions::...") are the packs' own
    aws, platform = nag_plugins(cdk.App())
    assert (aws.name, platform.name) == ("AwsSolutions", "TrainiumEks")
    assert isinstance(platform, PlatformChecks)
