"""Constructs for distributed training on AWS Trainium with Amazon EKS.

The public API is what this module re-exports; submodules are implementation detail.
"""

from trainium_job.errors import ConfigError
from trainium_job.instances import INSTANCE_FACTS, InstanceFacts, instance_facts
from trainium_job.naming import DEFAULT_NAME_PREFIX, platform_stack_name, repository_name, training_stack_name
from trainium_job.paths import model_key_prefix
from trainium_job.plan import TrainingPlan, plan_training
from trainium_job.program_job import JOB_ENV, ProgramJobSpec, TrainingCommand
from trainium_job.scheduling import NEURON_TAINT, SYSTEM_NODE_LABEL, TRAINING_NAMESPACE, TRAINIUM_NODE_LABEL
from trainium_job.spec import BertJobSpec

from .addons.monitoring import PlatformMonitoring
from .addons.node_daemons import NodeDaemon
from .addons.registry import trainium_node_daemons
from .addons.trainium_addons import TrainiumAddons
from .cluster.eks_cluster import TrainiumCluster
from .compatibility import KUBERNETES_COMPATIBILITY
from .config import PlatformConfig, config_from_context
from .images.directory_image import DirectoryImage
from .images.repository import TrainingImageRepository
from .images.training_image import ToolsImage, TrainingImages
from .jobs.dataset_preparation import DatasetPreparation
from .jobs.dataset_staging import PUBLIC_BERT_SHAPE, PUBLIC_BERT_SHARDS, DatasetStaging
from .jobs.node_fit import NodeFit, node_fit
from .jobs.tensorboard import TensorBoard
from .jobs.training_job import BertPretrainingJob
from .jobs.trainium_training_job import JobImage, TrainiumTrainingJob
from .monitoring import AmpRemoteWrite, FsxCapacityAlarm, TrainingExporters
from .monitoring.options import MonitoringOptions
from .nag import (
    PlatformChecks,
    StaleAcknowledgement,
    acknowledge_cluster_findings,
    acknowledge_findings,
    check_acknowledgements,
    nag_plugins,
)
from .network.vpc import TrainiumNetwork
from .nodes.karpenter import KarpenterController
from .nodes.launch_template import TrainiumLaunchTemplate, efa_network_interfaces
from .nodes.node_options import TrainiumNodeOptions
from .nodes.node_pool import TRAINIUM_CAPACITY_MODES, TrainiumNodePool
from .nodes.nodegroup import TrainiumNodegroup
from .platform import TrainiumPlatform
from .report.review import platform_review
from .storage.fsx import DATASET_PATH, OUTPUT_PATH, TrainingFileSystem
from .storage.fsx_csi import CLAIM_NAME, FsxCsiVolume
from .storage.model_bucket import ModelBucket, grant_model_write
from .versions import (
    DEFAULT_KUBERNETES_VERSION,
    KUBERNETES_RELEASES,
    NEURON_AMI_RELEASES,
    KubernetesRelease,
    NeuronAmiRelease,
)
from .workload import TrainingWorkload, WorkloadTarget

__all__ = [
    "JOB_ENV",
    "DirectoryImage",
    "JobImage",
    "ProgramJobSpec",
    "ToolsImage",
    "TrainingCommand",
    "TrainiumTrainingJob",
    "acknowledge_cluster_findings",
    "acknowledge_findings",
    "check_acknowledgements",
    "AmpRemoteWrite",
    "BertJobSpec",
    "BertPretrainingJob",
    "CLAIM_NAME",
    "config_from_context",
    "ConfigError",
    "DATASET_PATH",
    "DatasetPreparation",
    "DatasetStaging",
    "DEFAULT_KUBERNETES_VERSION",
    "DEFAULT_NAME_PREFIX",
    "efa_network_interfaces",
    "grant_model_write",
    "FsxCapacityAlarm",
    "FsxCsiVolume",
    "INSTANCE_FACTS",
    "instance_facts",
    "InstanceFacts",
    "KarpenterController",
    "KUBERNETES_COMPATIBILITY",
    "KUBERNETES_RELEASES",
    "KubernetesRelease",
    "model_key_prefix",
    "ModelBucket",
    "MonitoringOptions",
    "NEURON_AMI_RELEASES",
    "NEURON_TAINT",
    "NeuronAmiRelease",
    "nag_plugins",
    "node_fit",
    "NodeDaemon",
    "NodeFit",
    "OUTPUT_PATH",
    "plan_training",
    "platform_review",
    "platform_stack_name",
    "PlatformChecks",
    "PlatformConfig",
    "PlatformMonitoring",
    "PUBLIC_BERT_SHAPE",
    "PUBLIC_BERT_SHARDS",
    "repository_name",
    "StaleAcknowledgement",
    "SYSTEM_NODE_LABEL",
    "TensorBoard",
    "TRAINING_NAMESPACE",
    "training_stack_name",
    "TrainingExporters",
    "TrainingFileSystem",
    "TrainingImageRepository",
    "TrainingImages",
    "TrainingPlan",
    "TrainingWorkload",
    "TRAINIUM_CAPACITY_MODES",
    "trainium_node_daemons",
    "TRAINIUM_NODE_LABEL",
    "TrainiumAddons",
    "TrainiumCluster",
    "TrainiumLaunchTemplate",
    "TrainiumNetwork",
    "TrainiumNodegroup",
    "TrainiumNodeOptions",
    "TrainiumNodePool",
    "TrainiumPlatform",
    "WorkloadTarget",
]
