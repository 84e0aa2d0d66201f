"""Stacks of the default app: each only composes constructs from ``trainium_eks``."""

from .platform_stack import TrainiumPlatformStack

__all__ = ["TrainiumPlatformStack"]
