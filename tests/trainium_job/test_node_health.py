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
    HEALTH_LABEL,
    MARGIN,
    NCCOM_SIZE_BYTES,
    NO_VERDICT,
    PENDING_TAINT,
    failed_taint,
)

RECORDED = Path(__file__).resolve().parents[1] / "training" / "node" / "recorded" / "health"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "healing.md"


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


def _kubectl_taint(text: str) -> dict[str, str]:
    """A taint as ``kubectl taint`` writes it, ``KEY[=VALUE]:EFFECT`` (kubectl reference,
    kubectl taint: "The taint key and value ... the effect must be NoSchedule, PreferNoSchedule or
    NoExecute"), as a core/v1 Taint."""
    key_value, effect = text.rsplit(":", 1)
    key, _, value = key_value.partition("=")
    return {"key": key, "value": value, "effect": effect}


def test_given_the_healing_page_then_the_taints_and_checks_it_tells_people_to_use_are_the_codes():
    """docs/healing.md is what an operator types from (``kubectl taint``, ``kubectl get nodes -L``)
    and what the alert runbook points to: its names, read from the page, are the expected ones."""
    page = DOCS.read_text()
    # "kubectl taint node <node> trainium-eks/node-health=pending:NoSchedule": a node checked again.
    [pending] = re.findall(r"kubectl taint node <node> (\S+)", page)
    assert _kubectl_taint(pending) == PENDING_TAINT
    # "tainted `trainium-eks/node-health-failed=<check>:NoSchedule`", its value each check's name.
    [failed] = re.findall(r"tainted `([^`]+=<check>:NoSchedule)`", page)
    numbered = re.findall(r"^\d\. `([a-z-]+)`:", page, flags=re.MULTILINE)
    assert numbered == list(CHECKS)  # the page lists them in the order they run
    others = re.findall(r"`trainium-eks/node-health-failed=([a-z-]+)`", page)
    assert sorted(set(others)) == sorted({FABRIC, NO_VERDICT})
    for check in (*numbered, *others):
        assert failed_taint(check) == _kubectl_taint(failed.replace("<check>", check))
    # "labelled `trainium-eks/node-health=passed`": what the training pods' gate selects.
    assert re.search(rf"labelled `{re.escape(HEALTH_LABEL)}=passed`", page)
    with pytest.raises(ValueError, match="unknown check"):
        failed_taint("disk")


def test_given_the_healing_pages_table_of_bounds_then_each_row_is_its_sum_and_the_codes_bound():
    """Each row of the page's table: the instance types, their NeuronCores, and the sum of the
    checks' timeouts (600 s per tool run; one compute wave per 8 cores); the page is what an
    operator waits out before a silent node is replaced."""
    page = DOCS.read_text()
    rows = re.findall(
        r"^\| ([a-z0-9., ]+) \| (\d+) \| 600 \+ (\d+) x 600 \+ 600 \+ 60 = ([\d,]+) s",
        page,
        flags=re.MULTILINE,
    )
    assert {t for names, *_ in rows for t in names.split(", ")} == set(INSTANCE_FACTS)
    for names, cores, waves, total in rows:
        assert int(waves) == -(-int(cores) // 8)
        assert int(total.replace(",", "")) == 600 + int(waves) * 600 + 600 + 60
        for name in names.split(", "):
            assert EXPECTATIONS[name].neuron_cores == int(cores)
            assert EXPECTATIONS[name].verdict_deadline_s == int(total.replace(",", ""))


def test_given_the_health_taints_and_label_then_a_node_carrying_them_is_valid():
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "ip-10-0-1-2.ec2.internal", "labels": {HEALTH_LABEL: "failed"}},
        "spec": {"taints": [PENDING_TAINT, failed_taint("collective")]},
    }
    validate_k8s(node, DEFAULT_KUBERNETES_VERSION)
    # A label value is a qualified name's value: 63 characters at most, alphanumeric ends.
    values = (*CHECKS, FABRIC, NO_VERDICT, "passed", "failed")
    assert all(re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", c) for c in values)
