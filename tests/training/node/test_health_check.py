"""The deep node health check: each check on Neuron's documented tool output and sysfs trees laid
out as the Linux RDMA core does; the Node actions against a stand-in Kubernetes API server,
checked with the Kubernetes schema; EC2 termination through botocore's Stubber; the CLI end to end."""

from __future__ import annotations

import argparse
import json
import os
import re
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from kubernetes import client

from tests.support import validate_k8s
from training.node import health_check, node_actions
from training.node.health_check import (
    EXPECTED_PRODUCT,
    ToolRun,
    Tools,
    check_collective,
    check_compute,
    check_devices,
    check_efa,
    run_core,
)
from trainium_eks.versions import DEFAULT_KUBERNETES_VERSION
from trainium_job.instances import INSTANCE_FACTS, instance_facts
from trainium_job.node_health import (
    EVENT_COMPONENT,
    FAILED_REASON,
    HEALTH_LABEL,
    NCCOM_DATATYPE,
    NCCOM_SIZE_BYTES,
    PENDING_TAINT,
    RECHECK_REASON,
    REPLACED_REASON,
    expectation,
    failed_taint,
)

RECORDED = Path(__file__).resolve().parent / "recorded" / "health"
TYPES = sorted(INSTANCE_FACTS)
#: A recorded nccom-test all-reduce per instance type (README.md in RECORDED says whose run each is).
NCCOM_PASS = {
    "trn1.2xlarge": "nccom_test.r2_allr.txt",
    "trn1.32xlarge": "nccom_test.r16_allr_show_algorithm.txt",
    "trn1n.32xlarge": "nccom_test.r16_allr_show_algorithm.txt",
    "trn2.48xlarge": "nccom_test.r64_N2_allr.txt",
}


def neuron_ls(instance_type: str) -> list[dict[str, Any]]:
    return list(json.loads((RECORDED / f"neuron_ls.{instance_type}.json").read_text()))


def recorded(name: str) -> str:
    return (RECORDED / name).read_text()


def fake_efa_port(
    root: Path, device: str, state: str = "4: ACTIVE", phys: str = "5: LinkUp", driver: str = "efa"
) -> None:
    """``<root>/<device>/ports/1/{state,phys_state,hw_counters/}`` and ``device/driver`` as the
    RDMA core and the PCI core lay them out (the driver link points at the driver's folder)."""
    port = root / device / "ports" / "1"
    (port / "hw_counters").mkdir(parents=True)
    (port / "hw_counters" / "tx_bytes").write_text("0\n")
    (port / "state").write_text(f"{state}\n")
    (port / "phys_state").write_text(f"{phys}\n")
    drivers = root.parent / "bus" / "pci" / "drivers" / driver
    drivers.mkdir(parents=True, exist_ok=True)
    (root / device / "device").mkdir()
    (root / device / "device" / "driver").symlink_to(drivers)


def efa_tree(root: Path, count: int) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        fake_efa_port(root, f"rdmap{16 + 16 * i}s27")
    return root


# --- devices -----------------------------------------------------------------------------------


@pytest.mark.parametrize("instance_type", TYPES)
def test_given_neuron_ls_of_a_healthy_node_then_devices_pass(instance_type):
    result = check_devices(
        ToolRun(0, recorded(f"neuron_ls.{instance_type}.json")), expectation(instance_type)
    )
    assert result.passed, result.line


def test_given_a_device_missing_then_devices_fail_naming_the_count():
    listed = neuron_ls("trn1.32xlarge")[:-1]
    result = check_devices(ToolRun(0, json.dumps(listed)), expectation("trn1.32xlarge"))
    assert not result.passed
    assert "found 15 Neuron devices, 30 NeuronCores" in result.line


def test_given_a_device_with_too_few_cores_then_devices_fail():
    listed = neuron_ls("trn2.48xlarge")
    listed[3]["nc_count"] = 3
    result = check_devices(ToolRun(0, json.dumps(listed)), expectation("trn2.48xlarge"))
    assert not result.passed and "16 Neuron devices, 63 NeuronCores" in result.found


def test_given_neuron_ls_fails_then_devices_fail_with_its_last_line():
    result = check_devices(ToolRun(1, "neuron-ls: driver not loaded\n"), expectation("trn1.2xlarge"))
    assert not result.passed and "driver not loaded" in result.found


#: A line a tool or the Neuron runtime beneath it may print on stderr of a healthy run.
STDERR_WARNING = "2026-Dec-03 06:30:00.0001 1234:1234 WARN  NRT:nrt_init  error log level set to 3"


def test_given_a_warning_on_neuron_ls_stderr_then_devices_parse_stdout_alone_and_pass(tmp_path, monkeypatch):
    listed = tmp_path / "neuron_ls.json"
    listed.write_text(recorded("neuron_ls.trn1.32xlarge.json"))
    stand_in_tool(tmp_path / "bin", "neuron-ls", listed, stderr=STDERR_WARNING)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    run = Tools().neuron_ls()
    assert STDERR_WARNING in run.errors  # the stand-in did write it, where the tool would
    result = check_devices(run, expectation("trn1.32xlarge"))
    assert result.passed, result.line


def test_given_neuron_ls_fails_with_its_reason_on_stderr_then_devices_fail_quoting_it(tmp_path, monkeypatch):
    empty = tmp_path / "empty"
    empty.write_text("")
    stand_in_tool(
        tmp_path / "bin", "neuron-ls", empty, exit_code=1, stderr="neuron-ls: no neuron device found"
    )
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    result = check_devices(Tools().neuron_ls(), expectation("trn1.2xlarge"))
    assert not result.passed and "no neuron device found" in result.found


def test_given_a_runtime_warning_naming_an_error_on_nccom_tests_stderr_then_a_good_all_reduce_passes():
    run = ToolRun(0, recorded("nccom_test.r2_allr.txt"), STDERR_WARNING)
    result = check_collective(run, expectation("trn1.2xlarge"))
    assert result.passed, result.line


# --- compute -----------------------------------------------------------------------------------


def test_given_each_core_computes_then_the_answers_are_compared_exactly_on_the_cpu_stand_in():
    assert run_core(0) == [[float(v) for v in row] for row in EXPECTED_PRODUCT]
    result = check_compute(expectation("trn1.2xlarge"))
    assert result.passed, result.line


def test_given_one_core_answers_wrong_then_compute_fails_naming_the_core():
    right = [[float(v) for v in row] for row in EXPECTED_PRODUCT]

    def run(core: int) -> list[list[float]] | str:
        if core == 5:
            wrong = [row[:] for row in right]
            wrong[2][3] += 0.5  # one element off by a bf16-rounding-sized error
            return wrong
        return right

    result = check_compute(expectation("trn1.32xlarge"), run=run)
    assert not result.passed
    assert "31 of 32 right" in result.found and "core 5: wrong product (1 of 64" in result.found


def test_given_a_core_process_fails_then_compute_fails_with_its_error():
    result = check_compute(
        expectation("trn1.2xlarge"), run=lambda core: "exit 1: nrt_init failed" if core else run_core(0)
    )
    assert not result.passed and "core 1: exit 1: nrt_init failed" in result.found


# --- collective --------------------------------------------------------------------------------


@pytest.mark.parametrize("instance_type", TYPES)
def test_given_a_documented_all_reduce_then_collective_passes(instance_type):
    result = check_collective(ToolRun(0, recorded(NCCOM_PASS[instance_type])), expectation(instance_type))
    assert result.passed, result.line


def test_given_bus_bandwidth_below_the_floor_then_collective_fails():
    expect = expectation("trn1.2xlarge")
    slow = f"{expect.min_busbw_gbps / 2:.2f}"
    output = recorded("nccom_test.r2_allr.txt").replace("40.69", slow)
    result = check_collective(ToolRun(0, output), expect)
    assert not result.passed and f"found {slow} GB/s" in result.line


def test_given_nccom_test_reports_errors_then_collective_fails_with_its_line():
    result = check_collective(ToolRun(1, recorded("nccom_test.failed.txt")), expectation("trn1.32xlarge"))
    assert not result.passed and "1 errors found - test failed" in result.found


def test_given_a_failed_correctness_check_exit_then_collective_fails_even_with_a_fast_table():
    result = check_collective(ToolRun(1, recorded("nccom_test.r2_allr.txt")), expectation("trn1.2xlarge"))
    assert not result.passed and "exit 1" in result.found


def test_given_no_row_of_the_checked_size_then_collective_fails():
    output = recorded("nccom_test.r2_allr.txt").replace("33554432", "16777216", 1)
    result = check_collective(ToolRun(0, output), expectation("trn1.2xlarge"))
    assert not result.passed and "no 33554432-byte result" in result.found


def test_given_an_instance_type_then_nccom_test_runs_an_all_reduce_across_all_its_cores_with_check():
    argv = health_check.nccom_test_argv(expectation("trn2.48xlarge"))
    assert argv[:4] == ["nccom-test", "allr", "-r", "64"] and "--check" in argv


# nccom-test's options as its guide documents them (aws-neuron-sdk v2.29.1,
# tools/neuron-sys-tools/nccom-test.rst): the operation, ``allr`` an all-reduce (L143-L153);
# ``-r, --nworkers`` (L154-L156); ``-b, --minbytes`` / ``-e, --maxbytes``, 32M by default
# (L172-L178), a size in bytes or with a unit, "``-f 2048`` can be written as ``-f 2kb`` or
# ``-f 1048576`` can be written as ``-f 1MB``" (L192-L193: binary units; ``--maxbytes 1gb`` ends
# at 1073741824, L545-L556); ``-d, --datatype`` and
# its types (L249-L253); ``-c, --check`` with ``random`` (the default) or ``all_ones`` (L254-L258);
# ``--non-interactive``, a switch (L389-L391).
NCCOM_OPERATIONS = ("all_reduce", "allr", "all_gather", "allg", "reduce_scatter", "redsct", "sendrecv")
NCCOM_TYPES = ("uint8", "int8", "uint16", "int16", "fp16", "bf16", "uint32", "int32", "fp32")
SIZE_UNITS = {"": 1, "kb": 2**10, "m": 2**20, "mb": 2**20, "gb": 2**30}


def nccom_size(text: str) -> int:
    number, unit = re.fullmatch(r"(\d+)([a-zA-Z]*)", text).groups()  # type: ignore[union-attr]
    return int(number) * SIZE_UNITS[unit.lower()]


def nccom_test_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nccom-test", allow_abbrev=False, exit_on_error=False)
    parser.add_argument("operation", choices=NCCOM_OPERATIONS)
    parser.add_argument("-r", "--nworkers", type=int, required=True)
    parser.add_argument("-b", "--minbytes", type=nccom_size, default=nccom_size("32M"))
    parser.add_argument("-e", "--maxbytes", type=nccom_size, default=nccom_size("32M"))
    parser.add_argument("-d", "--datatype", choices=NCCOM_TYPES, default="uint8")
    parser.add_argument("-c", "--check", nargs="?", const="random", choices=("random", "all_ones"))
    parser.add_argument("--non-interactive", action="store_true")
    return parser


def test_given_the_documented_size_units_then_the_parser_of_the_test_reads_them_as_the_guide_does():
    # The guide's own examples: 32M is printed 33554432 (L29-L32), 2kb is 2048 and 1MB 1048576
    assert [nccom_size(s) for s in ("32M", "2kb", "1MB", "1048576")] == [33554432, 2048, 1048576, 1048576]


@pytest.mark.parametrize("instance_type", TYPES)
def test_given_nccom_tests_documented_options_then_the_argv_is_one_checked_all_reduce_of_the_size(
    instance_type,
):
    # Given the argv the check runs, read as nccom-test documents its options
    expect = expectation(instance_type)
    argv = health_check.nccom_test_argv(expect)
    assert argv[0] == "nccom-test"
    args = nccom_test_parser().parse_args(argv[1:])  # an unknown option or value raises here
    # Then it is an all-reduce across every NeuronCore of exactly the checked size, on fp32 data,
    # with the random-data correctness check and no progress animation in the pod's log
    assert args.operation in ("allr", "all_reduce") and args.nworkers == expect.neuron_cores
    assert args.minbytes == args.maxbytes == NCCOM_SIZE_BYTES == 33554432
    assert (args.datatype, args.check, args.non_interactive) == (NCCOM_DATATYPE, "random", True)


def test_given_a_failed_all_reduce_then_the_result_line_names_the_check_what_it_wanted_and_the_failure():
    expect = expectation("trn1.2xlarge")
    wanted = "expected all-reduce across 2 NeuronCores correct, bus bandwidth >= 20.34 GB/s"
    failed = check_collective(ToolRun(1, recorded("nccom_test.failed.txt")), expect)
    assert failed.line == (
        f"collective: FAILED: {wanted}; found nccom-test failed (exit 1): 33554432    Failure running "
        "neuron-bench - log file /tmp/nccom_test_log_7pqpdfjf.log; 1 errors found - test failed"
    )
    output = recorded("nccom_test.r2_allr.txt").replace("33554432", "16777216", 1)
    missing = check_collective(ToolRun(0, output), expect)
    assert (
        missing.line == f"collective: FAILED: {wanted}; found no 33554432-byte result in nccom-test's output"
    )
    # A failed exit without a failure line quotes the last line of stderr (ToolRun.last_line)
    crashed = check_collective(ToolRun(134, "", "nrt_init failed\nAborted (core dumped)\n"), expect)
    assert crashed.found == "nccom-test failed (exit 134): Aborted (core dumped)"


def test_given_a_passed_all_reduce_then_the_result_line_names_what_it_wanted_and_the_bandwidth():
    expect = expectation("trn1.2xlarge")
    result = check_collective(ToolRun(0, recorded("nccom_test.r2_allr.txt")), expect)
    assert result.line == (
        "collective: ok: expected all-reduce across 2 NeuronCores correct, bus bandwidth >= 20.34 GB/s; "
        f"found 40.69 GB/s ({expect.busbw_basis})"
    )


def test_given_three_failure_lines_then_the_first_two_are_quoted():
    output = (
        "rank 0: check failed\nrank 1: check failed\nrank 2: check failed\n3 errors found - test failed\n"
    )
    result = check_collective(ToolRun(1, output), expectation("trn1.2xlarge"))
    assert result.found == "nccom-test failed (exit 1): rank 0: check failed; rank 1: check failed"


def test_given_bus_bandwidth_exactly_the_floor_then_collective_passes():
    # "reaches the floor": the floor itself passes (repr: the shortest text that reads back as it)
    expect = expectation("trn1.2xlarge")
    output = recorded("nccom_test.r2_allr.txt").replace(
        "40.69          40.69", f"40.69    {expect.min_busbw_gbps!r}"
    )
    result = check_collective(ToolRun(0, output), expect)
    assert result.passed and result.found.startswith(f"{expect.min_busbw_gbps:.2f} GB/s"), result.line


# --- efa ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("instance_type", TYPES)
def test_given_every_efa_device_up_then_efa_passes(tmp_path, instance_type):
    expect = expectation(instance_type)
    result = check_efa(efa_tree(tmp_path / "infiniband", expect.efa_devices), expect)
    assert result.passed, result.line


def test_given_one_efa_device_fewer_then_efa_fails(tmp_path):
    result = check_efa(efa_tree(tmp_path / "infiniband", 7), expectation("trn1.32xlarge"))
    assert not result.passed and result.found == "7 EFA devices"


def test_given_an_rdma_device_of_another_driver_then_it_is_not_counted(tmp_path):
    root = efa_tree(tmp_path / "infiniband", 7)
    fake_efa_port(root, "mlx5_0", driver="mlx5_core")
    assert not check_efa(root, expectation("trn1.32xlarge")).passed


def test_given_an_efa_port_down_then_efa_fails_naming_it(tmp_path):
    root = efa_tree(tmp_path / "infiniband", 7)
    fake_efa_port(root, "rdmap999s27", state="1: DOWN", phys="3: Disabled")
    result = check_efa(root, expectation("trn1.32xlarge"))
    assert not result.passed and "rdmap999s27 port 1 state 1 phys_state 3" in result.found


# Each half of the port's state alone: the logical state (``state``) and the physical link
# (``phys_state``) are separate sysfs files, each "<number>: <name>" (Linux
# drivers/infiniband/core/sysfs.c: ``state_show`` 1 DOWN ... 4 ACTIVE; ``phys_state_show`` through
# ``phys_state_to_str``, 2 Polling, 3 Disabled, 5 LinkUp). A port may be ACTIVE while its link
# retrains, or have a link the subnet has not activated.
@pytest.mark.parametrize(
    ("state", "phys", "shown"),
    [("4: ACTIVE", "2: Polling", "state 4 phys_state 2"), ("1: DOWN", "5: LinkUp", "state 1 phys_state 5")],
    ids=["active-without-link", "link-up-not-active"],
)
def test_given_an_efa_port_with_only_one_of_its_states_up_then_efa_fails_naming_it(
    tmp_path, state, phys, shown
):
    root = efa_tree(tmp_path / "infiniband", 7)
    fake_efa_port(root, "rdmap999s27", state=state, phys=phys)
    result = check_efa(root, expectation("trn1.32xlarge"))
    assert not result.passed and f"rdmap999s27 port 1 {shown}" in result.found


def test_given_an_rdma_device_of_another_driver_listed_first_then_the_efa_devices_after_it_count(tmp_path):
    # mlx5_0 sorts before rdmap*: the devices after a skipped one are still looked at
    root = efa_tree(tmp_path / "infiniband", 8)
    fake_efa_port(root, "mlx5_0", driver="mlx5_core")
    assert health_check.efa_devices(root)[0] != "mlx5_0"
    result = check_efa(root, expectation("trn1.32xlarge"))
    assert result.passed and result.found == "8 EFA devices", result.line


def test_given_five_efa_ports_down_then_the_first_four_are_named(tmp_path):
    root = efa_tree(tmp_path / "infiniband", 3)
    for i in range(5):
        fake_efa_port(root, f"rdmap9{i}s27", state="1: DOWN", phys="3: Disabled")
    result = check_efa(root, expectation("trn1.32xlarge"))
    down = [f"rdmap9{i}s27 port 1 state 1 phys_state 3" for i in range(4)]
    assert result.found == f"8 EFA devices, ports not up: {'; '.join(down)}"


def test_given_a_failed_efa_check_then_the_result_line_names_the_check_what_it_wanted_and_found(tmp_path):
    result = check_efa(efa_tree(tmp_path / "infiniband", 7), expectation("trn1.32xlarge"))
    assert (
        result.line
        == "efa: FAILED: expected 8 EFA devices, every port ACTIVE and LinkUp; found 7 EFA devices"
    )


# --- the Kubernetes and EC2 actions ------------------------------------------------------------

PROVIDER_ID = "aws:///us-west-2d/i-0123456789abcdef0"
OTHER_TAINT = {"key": "aws.amazon.com/neuron", "value": "true", "effect": "NoSchedule"}


def node_object(name: str = "ip-10-0-1-2.us-west-2.compute.internal") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": "0f8e6e1c-5a7e-4c59-9d3b-2f8c1f1d6a11",
            "resourceVersion": "100",
            "labels": {"node.kubernetes.io/instance-type": "trn1.32xlarge"},
        },
        "spec": {"providerID": PROVIDER_ID, "taints": [OTHER_TAINT, PENDING_TAINT]},
    }


class StandInApi:
    """A minimal API server: one Node (GET, strategic-merge PATCH with resourceVersion), Events
    (POST); every request recorded. ``conflicts`` PATCHes are answered 409 after a concurrent
    change (a taint another controller adds)."""

    def __init__(self, node: dict[str, Any], conflicts: int = 0) -> None:
        self.node = node
        self.conflicts = conflicts
        self.requests: list[tuple[str, str, dict[str, str], Any]] = []
        self.events: list[dict[str, Any]] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _reply(self, code: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> Any:
                length = int(self.headers.get("Content-Length") or 0)
                return json.loads(self.rfile.read(length)) if length else None

            def do_GET(self) -> None:
                api.requests.append(("GET", self.path, dict(self.headers), None))
                self._reply(200, api.node)

            def do_PATCH(self) -> None:
                body = self._body()
                api.requests.append(("PATCH", self.path, dict(self.headers), body))
                if api.conflicts:
                    api.conflicts -= 1
                    api.node["spec"]["taints"].append(
                        {"key": "example.com/maintenance", "effect": "NoSchedule"}
                    )
                    api.node["metadata"]["resourceVersion"] = str(
                        int(api.node["metadata"]["resourceVersion"]) + 1
                    )
                if body["metadata"]["resourceVersion"] != api.node["metadata"]["resourceVersion"]:
                    self._reply(
                        409,
                        {
                            "kind": "Status",
                            "apiVersion": "v1",
                            "status": "Failure",
                            "reason": "Conflict",
                            "code": 409,
                        },
                    )
                    return
                api.node = apply_patch(api.node, body)
                self._reply(200, api.node)

            def do_POST(self) -> None:
                body = self._body()
                api.requests.append(("POST", self.path, dict(self.headers), body))
                api.events.append(body)
                self._reply(201, body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def core(self) -> client.CoreV1Api:
        configuration = client.Configuration(host=f"http://127.0.0.1:{self.server.server_port}")
        return client.CoreV1Api(client.ApiClient(configuration))


def apply_patch(node: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """A strategic-merge patch of labels (a map: merged, a null value deletes its key) and taints (no
    patch strategy: replaced)."""
    out = json.loads(json.dumps(node))
    labels = {**out["metadata"].get("labels", {}), **patch["metadata"].get("labels", {})}
    out["metadata"]["labels"] = {k: v for k, v in labels.items() if v is not None}
    if "taints" in patch.get("spec", {}):
        out["spec"]["taints"] = patch["spec"]["taints"]
    out["metadata"]["resourceVersion"] = str(int(out["metadata"]["resourceVersion"]) + 1)
    return out


@pytest.fixture
def api() -> Iterator[StandInApi]:
    server = StandInApi(node_object())
    yield server
    server.server.shutdown()


def test_given_a_pass_then_the_node_is_labelled_passed_and_only_the_pending_taint_goes(api):
    node_actions.mark_passed(api.node["metadata"]["name"], core=api.core())
    [patch] = [r for r in api.requests if r[0] == "PATCH"]
    assert patch[2]["Content-Type"] == "application/strategic-merge-patch+json"
    assert patch[3]["metadata"]["resourceVersion"] == "100"
    assert api.node["metadata"]["labels"][HEALTH_LABEL] == "passed"
    assert api.node["spec"]["taints"] == [OTHER_TAINT]
    validate_k8s(api.node, DEFAULT_KUBERNETES_VERSION)
    assert api.events == []


def test_given_a_recheck_request_then_the_label_goes_the_pending_taint_returns_and_an_event_says_why(api):
    name = api.node["metadata"]["name"]
    node_actions.mark_passed(name, core=api.core())
    node_actions.request_recheck(name, "fabric check: 2 nodes below the floor", core=api.core())
    assert HEALTH_LABEL not in api.node["metadata"]["labels"]  # the check's DaemonSet selects it again
    assert api.node["spec"]["taints"] == [OTHER_TAINT, PENDING_TAINT]
    validate_k8s(api.node, DEFAULT_KUBERNETES_VERSION)
    [event] = api.events
    validate_k8s(event, DEFAULT_KUBERNETES_VERSION)
    assert (event["reason"], event["type"]) == (RECHECK_REASON, "Warning")
    assert event["involvedObject"]["name"] == name


def test_given_a_concurrent_change_then_the_patch_is_retried_and_keeps_it(api):
    api.conflicts = 1
    node_actions.mark_failed(
        api.node["metadata"]["name"], "efa", "expected 8 EFA devices; found 7", replace=False, core=api.core()
    )
    patches = [r for r in api.requests if r[0] == "PATCH"]
    assert [p[3]["metadata"]["resourceVersion"] for p in patches] == ["100", "101"]
    keys = [t["key"] for t in api.node["spec"]["taints"]]
    assert keys == ["aws.amazon.com/neuron", "example.com/maintenance", failed_taint("efa")["key"]]
    assert api.node["spec"]["taints"][-1] == failed_taint("efa")
    validate_k8s(api.node, DEFAULT_KUBERNETES_VERSION)


def test_given_a_failure_then_the_node_is_labelled_tainted_and_an_event_names_the_check(api):
    name = api.node["metadata"]["name"]
    node_actions.mark_failed(
        name, "collective", "expected >= 11.35 GB/s; found 3.10 GB/s", replace=False, core=api.core()
    )
    assert api.node["metadata"]["labels"][HEALTH_LABEL] == "failed"
    assert api.node["spec"]["taints"] == [OTHER_TAINT, failed_taint("collective")]
    validate_k8s(api.node, DEFAULT_KUBERNETES_VERSION)
    [post] = [r for r in api.requests if r[0] == "POST"]
    assert post[1] == "/api/v1/namespaces/default/events"
    [event] = api.events
    validate_k8s(event, DEFAULT_KUBERNETES_VERSION)
    assert event["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Node",
        "name": name,
        "uid": node_object()["metadata"]["uid"],
    }
    assert (event["reason"], event["type"], event["source"]["component"]) == (
        FAILED_REASON,
        "Warning",
        EVENT_COMPONENT,
    )
    assert event["message"].startswith("collective: expected >= 11.35 GB/s")


def test_given_replacement_then_a_second_event_and_the_instance_is_terminated(api):
    ec2 = boto3.client(
        "ec2", region_name="us-west-2", aws_access_key_id="stand-in", aws_secret_access_key="stand-in"
    )
    regions = []
    with Stubber(ec2) as stub:
        stub.add_response(
            "terminate_instances",
            {
                "TerminatingInstances": [
                    {
                        "InstanceId": "i-0123456789abcdef0",
                        "CurrentState": {"Code": 32, "Name": "shutting-down"},
                    }
                ]
            },
            {"InstanceIds": ["i-0123456789abcdef0"]},
        )
        node_actions.mark_failed(
            api.node["metadata"]["name"], "devices", "expected 16; found 15", replace=True, core=api.core(),
            ec2_client=lambda region: regions.append(region) or ec2,
        )  # fmt: skip
        stub.assert_no_pending_responses()
    assert regions == ["us-west-2"]
    assert [e["reason"] for e in api.events] == [FAILED_REASON, REPLACED_REASON]
    for event in api.events:
        validate_k8s(event, DEFAULT_KUBERNETES_VERSION)


def test_given_provider_ids_then_the_region_and_instance_are_read_and_others_refused():
    assert node_actions.instance_of(PROVIDER_ID) == ("us-west-2", "i-0123456789abcdef0")
    assert node_actions.instance_of("aws:///us-gov-west-1a/i-0abc") == ("us-gov-west-1", "i-0abc")
    with pytest.raises(ValueError, match="not an AWS EC2 provider ID"):
        node_actions.instance_of("kind://docker/kind/kind-worker")


# --- the CLI -----------------------------------------------------------------------------------


def stand_in_tool(bin_dir: Path, name: str, output_file: Path, exit_code: int = 0, stderr: str = "") -> None:
    """A program named ``name`` on PATH that prints a recorded output (and ``stderr`` there)."""
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / name
    warn = f"echo '{stderr}' >&2\n" if stderr else ""
    script.write_text(f"#!/bin/sh\n{warn}cat '{output_file}'\nexit {exit_code}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


def test_given_a_healthy_node_then_the_cli_dry_run_passes_every_check(tmp_path, monkeypatch, capsys):
    stand_in_tool(tmp_path / "bin", "neuron-ls", RECORDED / "neuron_ls.trn1.2xlarge.json")
    stand_in_tool(tmp_path / "bin", "nccom-test", RECORDED / "nccom_test.r2_allr.txt")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    sysfs = efa_tree(tmp_path / "infiniband", 0)
    code = health_check.main(["--instance-type", "trn1.2xlarge", "--sysfs", str(sysfs), "--dry-run"])
    lines = capsys.readouterr().out.splitlines()
    assert code == 0
    assert [line.split(":")[0] for line in lines] == ["devices", "efa", "compute", "collective", "verdict"]
    assert lines[-1] == "verdict: this node (trn1.2xlarge) passed all 4 checks"


def test_given_a_missing_device_then_the_cli_stops_at_devices_and_reports_it(tmp_path, monkeypatch, capsys):
    listed = tmp_path / "neuron_ls.json"
    listed.write_text(json.dumps(neuron_ls("trn1.32xlarge")[:15]))
    stand_in_tool(tmp_path / "bin", "neuron-ls", listed)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    code = health_check.main(
        ["--instance-type", "trn1.32xlarge", "--node-name", "n1", "--sysfs", str(tmp_path), "--dry-run"]
    )
    lines = capsys.readouterr().out.splitlines()
    assert code == 0 and len(lines) == 2
    assert lines[0].startswith("devices: FAILED: expected 16 Neuron devices")
    assert lines[1] == "verdict: n1 (trn1.32xlarge) failed the devices check"


class RecordingActions:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def mark_passed(self, node: str) -> None:
        self.calls.append(("passed", node))

    def mark_failed(self, node: str, check: str, message: str, *, replace: bool) -> None:
        self.calls.append(("failed", node, check, message, replace))


def test_given_a_failure_then_the_cli_acts_with_replacement_and_then_waits(tmp_path, monkeypatch):
    monkeypatch.setenv("NODE_NAME", "n2")
    actions, waited = RecordingActions(), []
    tools = Tools(
        neuron_ls=lambda: ToolRun(0, recorded("neuron_ls.trn1n.32xlarge.json")),
        nccom_test=lambda expect: ToolRun(1, recorded("nccom_test.failed.txt")),
        core=lambda core: [[float(v) for v in row] for row in EXPECTED_PRODUCT],
    )
    sysfs = efa_tree(tmp_path / "infiniband", instance_facts("trn1n.32xlarge").efa_interfaces)
    code = health_check.main(
        ["--instance-type", "trn1n.32xlarge", "--sysfs", str(sysfs), "--replace"],
        tools=tools,
        actions=actions,
        wait=lambda: waited.append(1),
    )
    assert code == 0 and waited == [1]
    [(verdict, node, check, message, replace)] = actions.calls
    assert (verdict, node, check, replace) == ("failed", "n2", "collective", True)
    assert "test failed" in message


def test_given_no_node_name_then_the_cli_refuses_to_act(monkeypatch):
    monkeypatch.delenv("NODE_NAME", raising=False)
    with pytest.raises(SystemExit) as exit_:
        health_check.main(["--instance-type", "trn1.2xlarge"])
    assert exit_.value.code == 2


#: A check process whose pod is deleted while it acts: the SIGTERM comes as the label lands, before
#: the Events and the termination (the DaemonSet controller reacts to the label).
_DELETED_WHILE_ACTING = """
import os, signal, sys
from training.node import health_check
from training.node.health_check import EXPECTED_PRODUCT, ToolRun, Tools
from tests.training.node.test_health_check import recorded

class Actions:
    def mark_failed(self, node, check, message, *, replace):
        os.kill(os.getpid(), signal.SIGTERM)  # the deletion, while the actions run
        print("events and termination done", flush=True)

tools = Tools(
    neuron_ls=lambda: ToolRun(0, recorded("neuron_ls.trn1n.32xlarge.json")),
    nccom_test=lambda expect: ToolRun(1, recorded("nccom_test.failed.txt")),
    core=lambda core: [[float(v) for v in row] for row in EXPECTED_PRODUCT],
)
sys.exit(health_check.main(["--instance-type", "trn1n.32xlarge", "--node-name", "n2"], tools=tools, actions=Actions()))
"""


def test_given_the_pod_deleted_while_it_acts_then_the_actions_finish_and_it_exits_0_at_once():
    done = subprocess.run(
        [sys.executable, "-c", _DELETED_WHILE_ACTING],
        cwd=Path(__file__).resolve().parents[3],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[-2:] == [
        "events and termination done",
        "acted on the verdict; waiting for the DaemonSet to remove this pod",
    ]


# --- the bound on the verdict ------------------------------------------------------------------


def healthy_tools(instance_type: str = "trn1.2xlarge") -> Tools:
    return Tools(
        neuron_ls=lambda: ToolRun(0, recorded(f"neuron_ls.{instance_type}.json")),
        nccom_test=lambda expect: ToolRun(0, recorded(NCCOM_PASS[instance_type])),
        core=lambda core: [[float(v) for v in row] for row in EXPECTED_PRODUCT],
    )


def test_given_a_check_that_hangs_past_the_deadline_then_the_node_fails_no_verdict_and_is_replaced(
    tmp_path, capsys
):
    released = threading.Event()

    def hung_neuron_ls() -> ToolRun:
        # A tool that answers only after the pod is gone: a healthy answer, which must no longer count.
        released.wait(30)
        return ToolRun(0, recorded("neuron_ls.trn1.2xlarge.json"))

    actions, exits = RecordingActions(), []
    code = health_check.main(
        [
            "--instance-type", "trn1.2xlarge", "--node-name", "n3", "--sysfs", str(efa_tree(tmp_path / "ib", 0)),
            "--replace", "--verdict-deadline-s", "1", "--state-dir", str(tmp_path),
        ],
        tools=Tools(neuron_ls=hung_neuron_ls),
        actions=actions,
        wait=released.set,  # the pod's deletion once the verdict's label lands
        exit_process=exits.append,
    )  # fmt: skip
    assert code == 0 and exits == [0]
    [(verdict, node, check, message, replace)] = actions.calls
    assert (verdict, node, check, replace) == ("failed", "n3", "no-verdict", True)
    assert message.startswith("expected a verdict within 1 s of the check's first start; found none after")
    assert "1 start of the check (the devices check had not ended)" in message
    # Nothing the released check does after the verdict is run or logged.
    assert capsys.readouterr().out.splitlines() == [
        f"no-verdict: FAILED: {message}",
        "verdict: n3 (trn1.2xlarge) failed the no-verdict check; replacing it",
        "acted on the verdict; waiting for the DaemonSet to remove this pod",
    ]


def test_given_a_start_past_the_deadline_after_earlier_starts_then_it_fails_no_verdict_without_checking(
    tmp_path,
):
    # The pod's earlier containers started an hour ago and ended before a verdict (a crash loop).
    hour_ago = time.time() - 3600
    (tmp_path / health_check.STARTS_FILE).write_text(f"{hour_ago:.3f}\n{hour_ago + 600:.3f}\n")

    def never(*_: Any) -> Any:
        raise AssertionError("a check ran past the deadline")

    actions, waited = RecordingActions(), []
    code = health_check.main(
        ["--instance-type", "trn1.2xlarge", "--node-name", "n4", "--state-dir", str(tmp_path), "--replace"],
        tools=Tools(neuron_ls=never, nccom_test=never, core=never),
        actions=actions,
        wait=lambda: waited.append(1),
    )
    assert code == 0 and waited == [1]
    [(verdict, node, check, message, replace)] = actions.calls
    assert (verdict, node, check, replace) == ("failed", "n4", "no-verdict", True)
    assert "within 1860 s" in message and "3 starts of the check (no check run at this start)" in message


def test_given_a_verdict_before_the_deadline_then_the_deadline_never_acts(tmp_path):
    actions, exits = RecordingActions(), []
    code = health_check.main(
        [
            "--instance-type", "trn1.2xlarge", "--node-name", "n5", "--sysfs", str(efa_tree(tmp_path / "ib", 0)),
            "--verdict-deadline-s", "1", "--state-dir", str(tmp_path),
        ],
        tools=healthy_tools(),
        actions=actions,
        wait=lambda: time.sleep(1.5),  # the pod lives past the deadline
        exit_process=exits.append,
    )  # fmt: skip
    assert code == 0 and exits == []
    assert actions.calls == [("passed", "n5")]


def test_given_restarts_then_each_start_is_noted_and_the_first_one_kept(tmp_path):
    assert health_check.record_start(tmp_path, 100.0) == [100.0]
    assert health_check.record_start(tmp_path, 160.5) == [100.0, 160.5]
    # Without its emptyDir (a run by hand) the bound runs from this start.
    assert health_check.record_start(tmp_path / "absent", 200.0) == [200.0]


def test_given_the_checks_own_timeouts_then_the_deadline_is_their_sum_at_the_longest():
    """The timeouts are what each check's tool runs get (``run_tool``'s default, the compute
    check's pool); the sum is worked out here from the instance types' NeuronCores as AWS lists
    them (trn1.2xlarge 2, trn1.32xlarge 32, trn2.48xlarge 64 at LNC=2)."""
    assert health_check.run_tool.__defaults__[-1] == 600
    assert check_compute.__defaults__[-1] == 8
    # devices 600 + compute (cores / 8 waves, rounded up) x 600 + collective 600 + 60 s slack
    assert expectation("trn1.2xlarge").verdict_deadline_s == 600 + 1 * 600 + 600 + 60
    assert expectation("trn1.32xlarge").verdict_deadline_s == 600 + 4 * 600 + 600 + 60
    assert expectation("trn2.48xlarge").verdict_deadline_s == 600 + 8 * 600 + 600 + 60


def test_given_an_unreadable_start_record_then_stderr_says_the_bound_runs_from_now(tmp_path, capsys):
    (tmp_path / health_check.STARTS_FILE).write_text("not a time\n")
    assert health_check.record_start(tmp_path, 300.0) == [300.0]
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == (
        "no record of earlier starts (could not convert string to float: 'not'): the verdict's bound "
        "runs from now\n"
    )


def test_given_no_instance_type_then_the_cli_exits_2_naming_the_missing_option(capsys):
    with pytest.raises(SystemExit) as e:
        health_check.main([])
    assert e.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "python -m training.node.health_check: error: the following arguments are required: --instance-type"
    )
