"""Resource names a pod may request and a Volcano Queue may bound: Kubernetes' own and the
extended resources the device plugins advertise."""

from __future__ import annotations

from tests.contracts.model import Contract, Entry

_CORE = "kubernetes.io, 'Resource Management for Pods and Containers' (resource types)"

CONTRACT = Contract(
    consumer="kube-scheduler / kubelet (node allocatable)",
    version="Kubernetes 1.34-1.36; Neuron device plugin 2.32.0.0; EFA device plugin v0.5.20",
    entries=(
        Entry("cpu", "CPU, in cores or millicores", _CORE),
        Entry("memory", "memory, in bytes", _CORE),
        Entry("ephemeral-storage", "local ephemeral storage", _CORE),
        Entry(
            "hugepages-2Mi",
            "pre-allocated 2 MiB huge pages (request = limit)",
            "kubernetes.io, 'Manage HugePages' (hugepages-<size>)",
        ),
        Entry(
            "aws.amazon.com/neuron",
            "whole Neuron devices (Trainium chips), advertised by the Neuron device plugin",
            "Amazon EKS User Guide, 'Manage Neuron devices on Amazon EKS' (aws.amazon.com/neuron and "
            "aws.amazon.com/neuroncore as integer counts); neuron-helm-chart 1.10.0 device plugin",
        ),
        Entry(
            "aws.amazon.com/neuroncore",
            "NeuronCores, advertised by the Neuron device plugin",
            "Amazon EKS User Guide, 'Manage Neuron devices on Amazon EKS'",
        ),
        Entry(
            "vpc.amazonaws.com/efa",
            "EFA interfaces, advertised by the EFA device plugin",
            "Amazon EKS User Guide, 'Run machine learning training on Amazon EKS with Elastic Fabric "
            "Adapter' (vpc.amazonaws.com/efa)",
        ),
        Entry(
            "aws.amazon.com/neurondevice",
            "the former name of aws.amazon.com/neuron: no current device plugin advertises it",
            "Amazon EKS User Guide, 'Manage Neuron devices on Amazon EKS'",
            read=False,
        ),
    ),
)
