"""The node health check's names and expectations, against Neuron's documented tool output and the
Kubernetes Node schema."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.support import validate_k8s
from trainium_eks.versions import DEFAULT_KUBERNETES_VERSION
from trainium_job.instances import INSTANCE_FACTS
from trainium_job.node_health import (
    CHECKS,
    EXPECTATIONS,
    FABRIC,
    FAILED_TAINT_KEY,
    HEALTH_LABEL,
    HEALTH_TAINT_KEYS,
    MARGIN,
    NCCOM_SIZE_BYTES,
    PENDING_TAINT,
    failed_taint,
)

RECORDED = Path(__file__).resolve().parents[1] / "training" / "node" / "recorded" / "health"


def _busbw_at_32mib(name: str) -> float:
    """The busbw column of the 32 MiB row of a recorded nccom-test sample (read here, not by the check)."""
    lines = (RECORDED / name).read_text().splitlines()
    header = next(line.split() for line in lines if line.split()[:1] == ["size(B)"])
    row = next(line.split() for line in lines if line.split()[:1] == [str(NCCOM_SIZE_BYTES)])
    return float(row[header.index("busbw(GB/s)")])


def test_given_every_supported_instance_type_then_it_has_an_expectation():
    assert set(EXPECTATIONS) == set(INSTANCE_FACTS)


@pytest.mark.parametrize("instance_type", sorted(INSTANCE_FACTS))
def test_given_neuron_ls_of_an_instance_type_then_the_expected_counts_are_what_it_lists(instance_type):
    listed = json.loads((RECORDED / f"neuron_ls.{instance_type}.json").read_text())
    expect = EXPECTATIONS[instance_type]
    assert (expect.neuron_devices, expect.neuron_cores) == (len(listed), sum(d["nc_count"] for d in listed))


def test_given_efa_counts_then_they_are_the_neuron_docs_ones():
    # setup-trn1-multi-node-execution.rst L15: "trn1.32xlarge has 8 EFA devices, trn1n.32xlarge has 16".
    assert EXPECTATIONS["trn1.32xlarge"].efa_devices == 8
    assert EXPECTATIONS["trn1n.32xlarge"].efa_devices == 16
    assert EXPECTATIONS["trn1.2xlarge"].efa_devices == 0


def test_given_the_two_rank_doc_run_then_the_trn1_2xlarge_floor_is_its_margin():
    measured = _busbw_at_32mib("nccom_test.r2_allr.txt")
    assert EXPECTATIONS["trn1.2xlarge"].min_busbw_gbps == pytest.approx(measured * MARGIN)


@pytest.mark.parametrize("instance_type", ["trn1.32xlarge", "trn1n.32xlarge", "trn2.48xlarge"])
def test_given_no_doc_run_of_all_cores_then_the_floor_is_the_margin_of_the_lowest_32mib_all_reduce(
    instance_type,
):
    lowest = min(
        _busbw_at_32mib("nccom_test.r16_allr_show_algorithm.txt"),
        _busbw_at_32mib("nccom_test.r64_N2_allr.txt"),
    )
    expect = EXPECTATIONS[instance_type]
    assert expect.min_busbw_gbps == pytest.approx(lowest * MARGIN)
    assert "no" in expect.busbw_basis and str(expect.neuron_cores) in expect.busbw_basis


def test_given_a_failed_check_then_its_taint_names_it_and_an_unknown_one_is_refused():
    assert [failed_taint(c)["value"] for c in (*CHECKS, FABRIC)] == [*CHECKS, FABRIC]
    assert PENDING_TAINT["key"] == HEALTH_LABEL and failed_taint("efa")["key"] == FAILED_TAINT_KEY
    assert {PENDING_TAINT["key"], FAILED_TAINT_KEY} == set(HEALTH_TAINT_KEYS)
    with pytest.raises(ValueError, match="unknown check"):
        failed_taint("disk")


def test_given_the_health_taints_and_label_then_a_node_carrying_them_is_valid():
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "ip-10-0-1-2.ec2.internal", "labels": {HEALTH_LABEL: "failed"}},
        "spec": {"taints": [PENDING_TAINT, failed_taint("collective")]},
    }
    validate_k8s(node, DEFAULT_KUBERNETES_VERSION)
    # A label value is a qualified name's value: 63 characters at most, alphanumeric ends.
    assert all(
        re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", c) for c in (*CHECKS, FABRIC, "passed", "failed")
    )
