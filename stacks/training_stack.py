"""The training stack: the library's :class:`TrainingWorkload` on a platform's cluster."""

from __future__ import annotations

from typing import Any

from aws_cdk import Environment, Stack, Tags
from constructs import Construct

from trainium_eks import PlatformConfig, TrainingWorkload, TrainiumPlatform, training_stack_name


class TrainingStack(Stack):
    """Images, dataset staging or preparation, the BERT job, TensorBoard and the outputs, on
    ``platform``'s cluster (read from its stack outputs: see ``TrainiumPlatform.workload_target_in``).

    Deployed and destroyed on its own (``cdk deploy <prefix>-training --exclusively``): it holds
    no data, only Kubernetes objects and the image copies; the platform keeps FSx and ECR. The
    workload construct's ID is ``Default`` so its logical IDs are the ones it had inside the
    platform stack.

    Attributes:
        workload: the :class:`TrainingWorkload`.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        platform: TrainiumPlatform,
        config: PlatformConfig,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            scope,
            id,
            env=Environment(region=config.region),
            stack_name=training_stack_name(config.name_prefix),
            description=f"BERT-{config.training.model} pretraining on Trainium "
            f"({config.instance_type} x {config.desired_nodes})",
            **kwargs,
        )
        target = platform.workload_target_in(self)
        self.workload = TrainingWorkload(self, "Default", target=target, config=config)
        for key, value in sorted(config.tags.items()):
            Tags.of(self).add(key, value)
