"""Another CDK app that uses the construct library: a cluster of its own, and the workload on a
cluster the user already has. ``python external_app.py OUTDIR`` synthesizes both stacks into OUTDIR
and prints where ``trainium_eks`` was imported from (the installed copy, in ``make test-package``).
"""

import sys

import aws_cdk as cdk
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_eks_v2 as eks

import trainium_eks
from trainium_eks import (
    NeuronNodegroup,
    PlatformConfig,
    TrainingWorkload,
    TrainiumCluster,
    TrainiumNetwork,
    WorkloadTarget,
    instance_facts,
)


def main(outdir: str) -> None:
    app = cdk.App(outdir=outdir)
    stack = cdk.Stack(app, "External", env=cdk.Environment(region="us-east-1"))
    net = TrainiumNetwork(stack, "Net", az_ids=("use1-az6", "use1-az5"))
    cluster = TrainiumCluster(
        stack, "Eks", vpc=net.vpc, subnets=net.private_subnets, kubernetes_version="1.35"
    )
    NeuronNodegroup(
        stack,
        "Trn",
        cluster=cluster.cluster,
        facts=instance_facts("trn1n.32xlarge"),
        subnet=net.trainium_subnet,
        min_size=1,
        desired_size=1,
        max_size=4,
    )

    # The workload on a cluster the user already has: imported with its kubectl provider, with
    # the user's FSx claim, Volcano queue and ECR repository.
    mine = cdk.Stack(app, "OnExisting", env=cdk.Environment(region="us-east-1"))
    kubectl = eks.KubectlProvider.from_kubectl_provider_attributes(
        mine, "Kubectl", service_token="arn:aws:lambda:us-east-1:123456789012:function:research-kubectl"
    )
    existing = eks.Cluster.from_cluster_attributes(
        mine, "Cluster", cluster_name="research", kubectl_provider=kubectl
    )
    target = WorkloadTarget(
        cluster=existing,
        repository=ecr.Repository.from_repository_name(mine, "Repo", "research/bert"),
        namespace="ml",
        claim_name="lustre",
        queue_name="research",
    )
    settings = PlatformConfig(
        region="us-east-1",
        trainium_az_id="use1-az6",
        second_az_id="use1-az5",
        instance_type="trn1n.32xlarge",
        min_nodes=1,
        desired_nodes=1,
        max_nodes=4,
        name_prefix="research",
    )
    TrainingWorkload(mine, "Bert", target=target, config=settings)
    app.synth()
    print(trainium_eks.__file__)


if __name__ == "__main__":
    main(sys.argv[1])
