"""The consumer tables are facts with citations, written apart from the code they check."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.contracts import (
    charts,
    fsx_csi,
    libfabric,
    neuron,
    neuron_monitor,
    nodes,
    pod_security,
    resources,
    torch_elastic,
    volcano,
)
from tests.contracts.model import Contract, Entry

TABLES = [
    fsx_csi.DRIVER,
    fsx_csi.VOLUME_ATTRIBUTES,
    fsx_csi.MOUNT_OPTIONS,
    libfabric.CONTRACT,
    neuron.RUNTIME,
    neuron.CC_FLAGS,
    neuron.COMPILER,
    neuron.COLLECTIVES,
    torch_elastic.CONTRACT,
    torch_elastic.C10D_CONF,
    volcano.PLUGINS,
    volcano.SVC_ARGUMENTS,
    volcano.POLICY_EVENTS,
    volcano.POLICY_ACTIONS,
    volcano.QUEUE_SPEC,
    volcano.PLUGIN_ENV,
    pod_security.CONTRACT,
    nodes.WELL_KNOWN_LABELS,
    neuron_monitor.ERROR_TYPES,
    neuron_monitor.INSTANCE_LABELS,
    resources.CONTRACT,
    *charts.CHART_VALUES.values(),
]
#: The modules that hold facts (``emitted`` reads our output, ``check`` compares the two).
FACT_MODULES = sorted(
    p for p in Path(__file__).parent.glob("*.py") if not p.name.startswith("test_") and p.stem != "emitted"
)


@pytest.mark.parametrize("table", TABLES, ids=lambda t: t.consumer)
def test_given_a_table_then_it_names_its_consumer_version_and_a_citation_per_entry(table: Contract):
    assert table.consumer and table.version and table.entries
    for entry in table.entries:
        assert len(entry.use) > 10, entry.name
        assert len(entry.source) > 15, entry.name


@pytest.mark.parametrize("path", FACT_MODULES, ids=lambda p: p.name)
def test_given_a_fact_module_then_it_imports_nothing_of_the_product(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        modules = []
        if isinstance(node, ast.Import):
            modules = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            modules = [node.module or ""]
        assert not [
            m for m in modules if m.split(".")[0] in {"trainium_eks", "trainium_job", "training", "stacks"}
        ]


def test_given_an_entry_then_its_kind_is_checked():
    with pytest.raises(ValueError, match="kind"):
        Entry("x", "a use of x", "a citation of x", kind="dict")
    with pytest.raises(ValueError, match="twice"):
        Contract("c", "1", (Entry("x", "a use", "a source"), Entry("x", "a use", "a source")))
