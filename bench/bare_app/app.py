"""The yardstick of the synth benchmark: a bare aws-eks-v2 app, what any EKS app synthesizes.

A VPC, a cluster with its kubectl layer, one managed nodegroup and one Helm chart, with the CDK
and the layer the platform pins (requirements.txt). ``bench.bench_synth`` times its ``cdk synth``
against the platform's. Nothing else reads it.
"""

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk.lambda_layer_kubectl_v36 import KubectlV36Layer

app = cdk.App()
stack = cdk.Stack(app, "bare-eks")
vpc = ec2.Vpc(stack, "Vpc", max_azs=2, nat_gateways=1)
cluster = eks.Cluster(
    stack,
    "Cluster",
    version=eks.KubernetesVersion.of("1.36"),
    vpc=vpc,
    default_capacity_type=eks.DefaultCapacityType.NODEGROUP,
    default_capacity=0,
    kubectl_provider_options=eks.KubectlProviderOptions(kubectl_layer=KubectlV36Layer(stack, "KubectlLayer")),
)
cluster.add_nodegroup_capacity("System", instance_types=[ec2.InstanceType("m6i.xlarge")], desired_size=2)
cluster.add_helm_chart(
    "Chart",
    chart="metrics-server",
    repository="https://kubernetes-sigs.github.io/metrics-server/",
    version="3.12.2",
)
app.synth()
