"""Trainium nodes: the launch template, the fixed nodegroup or the Karpenter node pool (with its
controller), the deep node health check, and how long a gang may wait for its nodes."""

from .node_options import TrainiumNodeOptions

__all__ = ["TrainiumNodeOptions"]
