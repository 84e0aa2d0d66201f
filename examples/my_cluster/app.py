"""BERT pretraining on Trainium in an app of your own, built from trainium_eks's public constructs.

Two stacks, as a platform team might write them:

* ``ResearchTrainium``: your account and VPC, your own ``aws_eks_v2`` cluster, and from the library
  the Trainium nodes, FSx for Lustre and its CSI volume, the add-ons (device plugins, Volcano,
  monitoring) and the BERT job, with the images built into your ECR repository.
* ``ResearchOnExisting``: the same job on a cluster that already exists, imported by attributes.

Synthesize with ``cdk synth`` (cdk.json) or ``python app.py`` after ``pip install trainium-eks``;
nothing here reads the library's repository.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_kms as kms
from aws_cdk.lambda_layer_kubectl_v35 import KubectlV35Layer
from constructs import Construct

from trainium_eks import (
    SYSTEM_NODE_LABEL,
    FsxCsiVolume,
    PlatformConfig,
    TrainingFileSystem,
    TrainingWorkload,
    TrainiumAddons,
    TrainiumNodegroup,
    TrainiumNodeOptions,
    WorkloadTarget,
    acknowledge_cluster_findings,
    acknowledge_findings,
    check_acknowledgements,
    instance_facts,
    nag_plugins,
)

ACCOUNT, REGION = "123456789012", "us-east-1"
#: The job's settings; the AZ IDs are those the nodes' subnet is in (Trainium is offered in some
#: AZs only: here use1-az6, which is us-east-1a in this account; `aws ec2 describe-availability-zones`).
SETTINGS = PlatformConfig(
    region=REGION,
    trainium_az_id="use1-az6",
    second_az_id="use1-az5",
    name_prefix="research",
    desired_nodes=2,
    max_nodes=2,
    # These clusters' Trainium nodes are a nodegroup (no Karpenter pools): the job must not wait
    # for nodes launched per job, the default with the platform (docs/library.md).
    trainium_capacity="nodegroup",
)


class ResearchTrainium(cdk.Stack):
    """A VPC and an EKS cluster of the team's own, with Trainium nodes, FSx and the BERT job."""

    def __init__(self, scope: Construct, id: str, *, env: cdk.Environment) -> None:
        super().__init__(scope, id, env=env)
        vpc = ec2.Vpc(self, "Vpc", availability_zones=["us-east-1a", "us-east-1b"], nat_gateways=1)
        vpc.add_flow_log("FlowLog")
        cluster = eks.Cluster(
            self,
            "Cluster",
            version=eks.KubernetesVersion.of("1.35"),
            vpc=vpc,
            # What the library's TrainiumEks cdk-nag pack asks of a cluster: a private endpoint,
            # every control-plane log, secrets encrypted with a key of the app's own.
            endpoint_access=eks.EndpointAccess.PRIVATE,
            cluster_logging=[
                eks.ClusterLoggingTypes.API,
                eks.ClusterLoggingTypes.AUDIT,
                eks.ClusterLoggingTypes.AUTHENTICATOR,
                eks.ClusterLoggingTypes.CONTROLLER_MANAGER,
                eks.ClusterLoggingTypes.SCHEDULER,
            ],
            secrets_encryption_key=kms.Key(self, "SecretsKey", enable_key_rotation=True),
            # Not EKS Auto Mode (aws-eks-v2's default): it runs a Karpenter of its own, and its nodes
            # carry no label the library's controllers select. No default capacity: its nodegroup
            # would have no labels and the AL2 AMI; the system nodes are the nodegroup below.
            default_capacity_type=eks.DefaultCapacityType.NODEGROUP,
            default_capacity=0,
            kubectl_provider_options=eks.KubectlProviderOptions(
                kubectl_layer=KubectlV35Layer(self, "Kubectl")
            ),
        )
        # Where the library's controllers run (Volcano, etcd, monitoring, the FSx CSI controller):
        # nodes labelled as TrainiumAddons' and FsxCsiVolume's system_node_selector says (by default
        # SYSTEM_NODE_LABEL, trainium-eks/pool=system; synth refuses when no nodegroup carries it).
        system_nodes = cluster.add_nodegroup_capacity(
            "SystemNodes",
            ami_type=eks.NodegroupAmiType.AL2023_X86_64_STANDARD,
            instance_types=[ec2.InstanceType("m7i.large")],
            min_size=2,
            desired_size=2,
            max_size=2,
            labels=dict(SYSTEM_NODE_LABEL),
        )
        # cdk-nag: the library acknowledges its own constructs' findings; aws-cdk-lib's parts of this
        # cluster (its role, the kubectl provider) with acknowledge_cluster_findings; and this app's
        # own, its system nodes' role, here, each with its reason (checked against the findings).
        acknowledge_cluster_findings(cluster)
        acknowledge_findings(
            self,
            tuple(
                (
                    "Cluster/NodegroupSystemNodes/NodeGroupRole",
                    f"AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/{policy}]",
                    "The managed nodegroup's node role: the AWS managed policies the EKS user guide "
                    "prescribes for nodes (kubelet, VPC CNI, image pulls).",
                )
                for policy in (
                    "AmazonEKSWorkerNodePolicy",
                    "AmazonEKS_CNI_Policy",
                    "AmazonEC2ContainerRegistryReadOnly",
                )
            ),
            check_at_synth=True,
        )
        trainium_subnet = vpc.private_subnets[0]  # us-east-1a: use1-az6
        nodes = TrainiumNodegroup(
            self,
            "Trainium",
            cluster=cluster,
            # Each node starts tainted until the workload's node health check (SETTINGS'
            # trainium_health_check, on by default) passes it; the device plugins tolerate the taint.
            options=TrainiumNodeOptions(
                facts=instance_facts("trn1.32xlarge"),
                subnet=trainium_subnet,
                name_prefix="research",
                health_check=True,
            ),
        )
        storage = TrainingFileSystem(
            self,
            "Lustre",
            vpc=vpc,
            subnet=trainium_subnet,
            client_security_group_ids=[cluster.cluster_security_group_id],
        )
        volume = FsxCsiVolume(self, "LustreVolume", cluster=cluster, file_system=storage)
        addons = TrainiumAddons(
            self,
            "Addons",
            cluster=cluster,
            trainium=nodes,
            max_nodes=2,
            system_nodegroup=system_nodes,
            name_prefix="research",
            health_check=True,
        )
        images = ecr.Repository(self, "Images", image_scan_on_push=True)
        target = WorkloadTarget(
            cluster=cluster,
            repository=images,
            namespace=volume.namespace,
            claim_name=volume.claim_name,
            queue_name=addons.queue_name,
            claim_dependencies=(volume.volume_manifest,),
            queue_dependencies=(addons.volcano.chart, addons.volcano.queue),
            monitoring=addons.monitoring is not None,
            monitoring_dependencies=(addons.monitoring.chart,) if addons.monitoring is not None else (),
            instance_type=nodes.facts.name,
            desired_nodes=2,
            max_nodes=2,
        )
        TrainingWorkload(self, "Bert", target=target, config=SETTINGS)


class ResearchOnExisting(cdk.Stack):
    """The BERT job on a cluster that exists already, with its FSx claim, queue and repository."""

    def __init__(self, scope: Construct, id: str, *, env: cdk.Environment) -> None:
        super().__init__(scope, id, env=env)
        kubectl = eks.KubectlProvider.from_kubectl_provider_attributes(
            self, "Kubectl", service_token=f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:research-kubectl"
        )
        cluster = eks.Cluster.from_cluster_attributes(
            self, "Cluster", cluster_name="research", kubectl_provider=kubectl
        )
        target = WorkloadTarget(
            cluster=cluster,
            repository=ecr.Repository.from_repository_name(self, "Images", "research/bert"),
            namespace="ml",
            claim_name="lustre",
            queue_name="research",
            instance_type="trn1n.32xlarge",
            desired_nodes=1,
            max_nodes=4,
        )
        TrainingWorkload(self, "Bert", target=target, config=SETTINGS)


def main(outdir: str | None = None) -> cdk.App:
    app = cdk.App(outdir=outdir)
    env = cdk.Environment(account=ACCOUNT, region=REGION)
    ResearchTrainium(app, "ResearchTrainium", env=env)
    ResearchOnExisting(app, "ResearchOnExisting", env=env)
    # cdk-nag gates the synth: AwsSolutions and the library's TrainiumEks pack. A finding nobody
    # acknowledged fails app.synth() (aws-cdk-lib's validation), and then each acknowledgement must
    # still match a finding of the report (the library's and this app's alike).
    cdk.Validations.of(app).add_plugins(*nag_plugins(app))
    assembly = app.synth()
    check_acknowledgements(app, assembly.directory)
    return app


if __name__ == "__main__":
    import sys

    main(sys.argv[1] if len(sys.argv) > 1 else None)
