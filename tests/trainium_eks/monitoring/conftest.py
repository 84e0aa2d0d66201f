"""The small shard set of the training tests and its held-out set, for the local-Prometheus run."""

from tests.training.conftest import held_out, shards

__all__ = ["held_out", "shards"]
