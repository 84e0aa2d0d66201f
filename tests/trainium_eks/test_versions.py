"""Every Helm chart pin carries the evidence that it exists: its chart index entry."""

from __future__ import annotations

import re

import pytest

from trainium_eks.compatibility import PINS
from trainium_eks.versions import AddonPin, ChartEvidence

_SHA256 = re.compile(r"^(sha256:)?[0-9a-f]{64}$")
#: ``<owner>/<repo>@<commit>:<path>``: the copy of an index that was read.
_INDEX_COPY = re.compile(r"^[\w.-]+/[\w.-]+@[0-9a-f]{7,40}:\S+")


def evidence_problems(key: str, pin: AddonPin) -> list[str]:
    """What is missing from a chart pin's evidence (nothing for a pin that is not a chart)."""
    if pin.repository is None:
        return []
    evidence = pin.evidence
    if evidence is None:
        return [f"{key}: chart {pin.name} {pin.version} has no index entry as evidence"]
    problems = []
    if evidence.version != pin.version:
        problems.append(f"{key}: evidence is for {evidence.version}, the pin is {pin.version}")
    if not evidence.created.startswith("20"):
        problems.append(f"{key}: no created date")
    if evidence.digest is not None and not _SHA256.match(evidence.digest):
        problems.append(f"{key}: digest {evidence.digest!r} is not a SHA-256")
    oci = pin.repository.startswith("oci://")
    # An OCI chart's evidence: its manifest digest, or (no registry is reachable here to read one)
    # the chart's source at the release's commit.
    if oci and evidence.digest is None and not _INDEX_COPY.match(evidence.index):
        problems.append(f"{key}: an OCI chart's evidence is its manifest digest or its source at a commit")
    if not oci and not _INDEX_COPY.match(evidence.index):
        problems.append(f"{key}: index {evidence.index!r} does not name repository@commit:path")
    return problems


@pytest.mark.parametrize("key", sorted(k for k, p in PINS.items() if p.repository is not None))
def test_given_a_chart_pin_then_its_index_entry_is_recorded(key):
    assert evidence_problems(key, PINS[key]) == []


def test_given_a_chart_pin_without_evidence_or_for_another_version_then_the_check_fails():
    bare = AddonPin("volcano", "1.15.2", "https://volcano-sh.github.io/helm-charts")
    assert evidence_problems("volcano", bare) == [
        "volcano: chart volcano 1.15.2 has no index entry as evidence"
    ]
    other = AddonPin(bare.name, bare.version, bare.repository, PINS["volcano"].evidence)
    assert evidence_problems("volcano", other) == ["volcano: evidence is for 1.15.0, the pin is 1.15.2"]


def test_given_the_charts_then_each_pin_is_the_one_its_index_confirms():
    # The newest chart each stored index confirms (research on the indexes, 2026).
    assert {k: PINS[k].version for k in ("efa", "volcano", "fsx-csi-driver", "neuron")} == {
        "efa": "v0.5.30",
        "volcano": "1.15.0",
        "fsx-csi-driver": "1.17.0",
        "neuron": "1.10.0",
    }


def test_given_the_fsx_chart_then_its_index_says_which_driver_it_ships():
    evidence = PINS["fsx-csi-driver"].evidence
    assert isinstance(evidence, ChartEvidence) and evidence.app_version == "1.9.0"
