"""training_* configuration: defaults, errors, the review lines."""

from __future__ import annotations

import pytest

from trainium_eks.config import ConfigError, PlatformConfig, config_from_context
from trainium_eks.training_config import training_review


@pytest.mark.parametrize("context,field", [
    ({"training_nproc_per_node": "33"}, "training_nproc_per_node"),
    ({"training_global_batch": "1000"}, "training_global_batch"),
    ({"training_cache_set": "c" * 64}, "training_cache_set"),
    ({"training_rdzv_backend": "etcd", "etcd_enabled": "false"}, "training_rdzv_backend"),
    ({"training_rdzv_backend": "zookeeper"}, "training_rdzv_backend"),
    ({"training_dataset_source": "http://example.com/x.tar"}, "training_dataset_source"),
    ({"training_model": "huge"}, "training_model"),
])
def test_given_bad_training_context_then_config_error(context, field):
    with pytest.raises(ConfigError) as err:
        config_from_context(context)
    assert err.value.field_name == field


def test_given_more_nodes_than_max_then_error_from_platform_checks():
    with pytest.raises(ConfigError):
        config_from_context({"desired_nodes": "3"})


def test_given_defaults_then_review_shows_workers_batch_time_and_cost():
    lines = "\n".join(training_review(PlatformConfig()))
    assert "64 workers (2 x 32)" in lines and "accumulation 16 = global batch 16,384" in lines
    assert "28,125 steps = 460,800,000 sequences" in lines
    assert "7,653 seq/s (published 3,826.6 seq/s/node): 16.7 h, $719 on demand" in lines
    assert "6,450 seq/s (walkthrough's 2-node EKS run): 19.8 h, $853 on demand" in lines
