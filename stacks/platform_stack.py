"""The platform stack: the library's :class:`TrainiumPlatform`, tagged, with stable exports."""

from __future__ import annotations

from typing import Any

from aws_cdk import Environment, Stack, Tags
from constructs import Construct

from trainium_eks import PlatformConfig, TrainiumPlatform, platform_stack_name

from .legacy_ids import keep_self_rule_ids


class TrainiumPlatformStack(Stack):
    """Network, cluster, nodegroups, storage, registry and add-ons: everything but the workload.

        The stack pins only its region: with no account it asks AWS nothing at synth, and the AZs come
        from the configuration as AZ IDs. The platform construct's ID is ``Default`` so the logical
        IDs of its resources are the ones the stack had when it composed them itself; the construct ID
    of the stack is its name (what the CLI selects), and the few logical IDs that would follow it
    keep their former ones (:mod:`stacks.legacy_ids`).

        Attributes:
            platform: the :class:`TrainiumPlatform`.
    """

    def __init__(self, scope: Construct, id: str, *, config: PlatformConfig, **kwargs: Any) -> None:
        super().__init__(
            scope,
            id,
            env=Environment(region=config.region),
            stack_name=platform_stack_name(config.name_prefix),
            description=f"Trainium EKS platform ({config.instance_type} x {config.desired_nodes})",
            **kwargs,
        )
        self.platform = TrainiumPlatform(self, "Default", config=config)
        keep_self_rule_ids(self)
        for key, value in sorted(config.tags.items()):
            Tags.of(self).add(key, value)
