"""The fabric check's floor is bounded by what the nodes' network can carry (at synth, one line)."""

from __future__ import annotations

import pytest

from trainium_job.errors import ConfigError
from trainium_job.fabric_check_steps import busbw_ceiling_gbps
from trainium_job.instances import INSTANCE_FACTS, instance_facts
from trainium_job.plan import plan_training
from trainium_job.spec import BertJobSpec


def test_given_trn1_32xlarge_pairs_then_the_ceiling_is_the_line_rate_times_the_hierarchical_factor():
    # 800 Gbps = 100e9 B/s = 93.13 GiB/s; x N(n-1)/(n(N-1)) = 2 x 63/64 on 2 nodes of 32 workers.
    assert busbw_ceiling_gbps(network_gbps=800, nodes=2, workers=64) == pytest.approx(183.35, abs=0.01)
    # On many nodes it approaches the line rate.
    assert busbw_ceiling_gbps(network_gbps=800, nodes=64, workers=2048) == pytest.approx(94.6, abs=0.1)
    with pytest.raises(ValueError):
        busbw_ceiling_gbps(network_gbps=800, nodes=1, workers=32)


@pytest.mark.parametrize("name", [n for n, f in INSTANCE_FACTS.items() if f.multi_node])
def test_given_a_floor_above_the_ceiling_then_one_error_names_the_key_and_the_bound(name):
    facts = instance_facts(name)
    ceiling = busbw_ceiling_gbps(network_gbps=facts.network_gbps, nodes=2, workers=2 * facts.neuron_cores)
    spec = BertJobSpec(fabric_check_min_busbw_gbps=int(ceiling) + 1, global_batch=16 * 2 * facts.neuron_cores)
    with pytest.raises(ConfigError) as err:
        plan_training(spec, facts=facts, nodes=2, max_nodes=2)
    assert err.value.field_name == "training_fabric_check_min_busbw_gbps"
    assert f"at most {int(ceiling)}" in err.value.fix and "\n" not in str(err.value)
    # at the bound it plans, and the default floor does too
    plan_training(spec.replace(fabric_check_min_busbw_gbps=int(ceiling)), facts=facts, nodes=2, max_nodes=2)


def test_given_the_check_off_or_one_node_then_the_floor_is_not_bounded():
    facts = instance_facts("trn1.32xlarge")
    high = BertJobSpec(fabric_check_min_busbw_gbps=100000, fabric_check=False)
    plan_training(high, facts=facts, nodes=2, max_nodes=2)
    plan_training(high.replace(fabric_check=True, global_batch=16 * 32), facts=facts, nodes=1, max_nodes=1)
