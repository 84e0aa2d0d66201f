"""The small shard set of the training tests, for the local-Prometheus run."""

from tests.training.conftest import shards

__all__ = ["shards"]
