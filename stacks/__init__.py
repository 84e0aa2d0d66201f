"""Stacks of the default app: each only composes constructs from ``trainium_eks``."""

from .platform_stack import TrainiumPlatformStack
from .training_stack import TrainingStack

__all__ = ["TrainingStack", "TrainiumPlatformStack"]
