"""The deep health check of a new Trainium node, before it takes work: run in the training image by
the ``node-health-check`` DaemonSet on every Trainium node not yet labelled
``trainium-eks/node-health``.

    python -m training.node.health_check --instance-type trn1.32xlarge [--node-name NAME]
        [--sysfs /host/sys/class/infiniband] [--replace | --no-replace] [--dry-run]
        [--verdict-deadline-s SECONDS] [--state-dir /run/node-health]

Four checks, in the order of ``CHECKS``; the first failure stops the rest (what the table
expects: :mod:`trainium_job.node_health`):

1. ``devices``: ``neuron-ls --json-output`` lists the instance's Neuron devices and NeuronCores.
2. ``efa``: the host's ``/sys/class/infiniband`` has the instance's EFA devices, every port ACTIVE
   and LinkUp.
3. ``compute``: every NeuronCore computes a fixed integer-valued matrix product, one short process
   per core (``NEURON_RT_VISIBLE_CORES=<core>``), compared exactly with the answer worked out here.
4. ``collective``: ``nccom-test`` all-reduce across all NeuronCores, with its correctness check,
   reaches the bus bandwidth floor.

Then it acts (``training.node.node_actions``): passed, the label ``passed`` and the pending taint
removed; failed, the label ``failed``, the failed check's taint, a Warning Event, and with
``--replace`` a second Event and the instance terminated. One line per check and a verdict line.

After acting it waits for SIGTERM instead of exiting: a DaemonSet pod's containers always restart
(``restartPolicy: Always`` is the only one a DaemonSet allows), so an exit would run the checks
again; the label just set makes the DaemonSet controller delete the pod, whose SIGTERM ends the wait
with exit code 0. ``--dry-run`` prints the verdict and exits, touching nothing.

The verdict has a bound, :func:`trainium_job.node_health.verdict_deadline_s` seconds from the first
start of the pod's check (each start is noted in ``--state-dir``, an emptyDir that outlives the
container's restarts). A node without a verdict by then fails the ``no-verdict`` check and is
treated as any failed node: a check still running is overtaken by a timer thread that acts in its
stead (the check hangs), and a start past the bound acts at once without checking (the check kept
crashing before a verdict, and the kubelet restarted it).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from trainium_job.entry_points import NODE_HEALTH
from trainium_job.node_health import (
    CHECKS,
    COMPUTE_PARALLEL,
    NCCOM_DATATYPE,
    NCCOM_SIZE_BYTES,
    NO_VERDICT,
    TOOL_TIMEOUT_S,
    NodeExpectation,
    expectation,
)

from .efa_counters import SYSFS_ROOT, devices

#: The compute check's operands: small integers, exact in bf16 (8 significant bits), which the
#: Neuron compiler casts matrix multiplications to by default (neuronx-cc ``--auto-cast matmult``
#: with ``--auto-cast-type bf16``); every product and sum is an integer far below 2^24, exact in
#: the fp32 accumulation and result. So a correct core gives exactly :data:`EXPECTED_PRODUCT`.
_N: Final = 8
A: Final = tuple(tuple((3 * i + 5 * k) % 17 - 8 for k in range(_N)) for i in range(_N))
B: Final = tuple(tuple((7 * k + 2 * j) % 13 - 6 for j in range(_N)) for k in range(_N))
EXPECTED_PRODUCT: Final = tuple(
    tuple(sum(A[i][k] * B[k][j] for k in range(_N)) for j in range(_N)) for i in range(_N)
)

#: Port states as the Linux RDMA core prints them: ``state`` "4: ACTIVE", ``phys_state`` "5: LinkUp";
#: readers take the leading number (linux-rdma/rdma-core libibumad/umad.c L191-L193 reads both with
#: ``sys_read_uint``; L327-L329: phys_state 5 is up, state 4 active; infiniband-diags/ibstat.c
#: L86-L103 names them). The efa driver reports its ports ACTIVE / LinkUp
#: (Linux drivers/infiniband/hw/efa/efa_verbs.c, ``efa_query_port``).
PORT_ACTIVE: Final = 4
PHYS_LINK_UP: Final = 5


@dataclass(frozen=True)
class CheckResult:
    """One check's outcome."""

    check: str
    passed: bool
    expected: str
    found: str

    @property
    def line(self) -> str:
        return (
            f"{self.check}: {'ok' if self.passed else 'FAILED'}: expected {self.expected}; found {self.found}"
        )

    @property
    def message(self) -> str:
        """The failure as the Event and the log say it."""
        return f"expected {self.expected}; found {self.found}"


@dataclass(frozen=True)
class ToolRun:
    """A tool's exit status, its standard output (what the checks parse) and its standard error
    (only ever quoted: a tool or the Neuron runtime under it may log a warning there, which must
    not break the parse of a healthy node's answer)."""

    returncode: int
    output: str
    errors: str = ""

    @property
    def last_line(self) -> str:
        """What to quote when the run failed: the last line of stderr, else of stdout."""
        for text in (self.errors, self.output):
            lines = text.strip().splitlines()
            if lines:
                return lines[-1]
        return ""


def run_tool(
    argv: Sequence[str], env: dict[str, str] | None = None, timeout_s: float = TOOL_TIMEOUT_S
) -> ToolRun:
    """Run ``argv``, its stdout and stderr kept apart; a missing program or a timeout is a failed
    run, not an exception."""
    try:
        done = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout_s, env=env, check=False
        )
    except FileNotFoundError:
        return ToolRun(127, "", f"{argv[0]}: not found")
    except subprocess.TimeoutExpired:
        return ToolRun(124, "", f"{argv[0]}: no answer in {timeout_s:.0f} s")
    return ToolRun(done.returncode, done.stdout, done.stderr)


# --- devices -----------------------------------------------------------------------------------


def check_devices(neuron_ls: ToolRun, expect: NodeExpectation) -> CheckResult:
    """Devices and NeuronCores in ``neuron-ls --json-output``: a list with one object per device,
    its NeuronCores in ``nc_count`` (aws-neuron-sdk tools/neuron-sys-tools/neuron-ls.rst L213-L282)."""
    wanted = f"{expect.neuron_devices} Neuron devices, {expect.neuron_cores} NeuronCores"
    try:
        if neuron_ls.returncode != 0:
            raise ValueError(f"exit {neuron_ls.returncode}")
        listed = json.loads(neuron_ls.output)
        count = len(listed)
        cores = sum(int(device["nc_count"]) for device in listed)
    except (ValueError, TypeError, KeyError) as err:
        return CheckResult("devices", False, wanted, f"neuron-ls failed ({err}): {neuron_ls.last_line[:200]}")
    found = f"{count} Neuron devices, {cores} NeuronCores"
    ok = count >= expect.neuron_devices and cores >= expect.neuron_cores
    return CheckResult("devices", ok, wanted, found)


# --- compute -----------------------------------------------------------------------------------

#: Python run in each core's process: the product on the XLA device when torch_xla is there (the
#: Neuron device in the training image), else on the CPU, printed as JSON.
_CORE_PROGRAM: Final = "from training.node.health_check import core_main; core_main()"


def core_main() -> None:
    """One core's computation (this process sees one NeuronCore): print the product as JSON."""
    import torch

    try:
        import torch_xla

        device = torch_xla.device()
    except ImportError:  # no XLA here (the CPU tests): the same comparison on the CPU
        device = torch.device("cpu")
    a = torch.tensor(A, dtype=torch.float32, device=device)
    b = torch.tensor(B, dtype=torch.float32, device=device)
    print(json.dumps((a @ b).cpu().tolist()))


def run_core(core: int) -> list[list[float]] | str:
    """The product computed on NeuronCore ``core``, or what went wrong."""
    env = {**os.environ, "NEURON_RT_VISIBLE_CORES": str(core)}
    done = run_tool([sys.executable, "-c", _CORE_PROGRAM], env=env)
    if done.returncode != 0:
        return f"exit {done.returncode}: {done.last_line[:200]}"
    for line in reversed(done.output.strip().splitlines()):  # the runtime may log around the answer
        if line.startswith("[["):
            try:
                return [[float(v) for v in row] for row in json.loads(line)]
            except (ValueError, TypeError):
                break
    return "no result printed"


def check_compute(
    expect: NodeExpectation,
    run: Callable[[int], list[list[float]] | str] = run_core,
    parallel: int = COMPUTE_PARALLEL,
) -> CheckResult:
    """Every NeuronCore's product compared exactly with :data:`EXPECTED_PRODUCT`; ``run`` computes
    one core's."""
    cores = range(expect.neuron_cores)
    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        answers = list(pool.map(run, cores))
    wrong = []
    for core, answer in zip(cores, answers, strict=True):
        if isinstance(answer, str):
            wrong.append(f"core {core}: {answer}")
        elif [list(row) for row in answer] != [list(row) for row in EXPECTED_PRODUCT]:
            bad = sum(
                a != e
                for row, erow in zip(answer, EXPECTED_PRODUCT, strict=False)
                for a, e in zip(row, erow, strict=False)
            )
            wrong.append(f"core {core}: wrong product ({bad or 'shape'} of {_N * _N} elements differ)")
    found = f"{len(cores) - len(wrong)} of {len(cores)} right" + (
        f" ({'; '.join(wrong[:4])})" if wrong else ""
    )
    return CheckResult(
        "compute", not wrong, f"the exact {_N}x{_N} product on all {len(cores)} NeuronCores", found
    )


# --- collective --------------------------------------------------------------------------------


def nccom_test_argv(expect: NodeExpectation) -> list[str]:
    """All-reduce (``allr``) across every NeuronCore at :data:`NCCOM_SIZE_BYTES`, with the
    correctness check on random data (nccom-test.rst at v2.29.1 L142-L156 ``-r``, L172-L178 ``-b``/``-e``,
    L249-L256 ``-d`` and ``--check``, L389-L391 ``--non-interactive``)."""
    size = f"{NCCOM_SIZE_BYTES // 2**20}MB"  # the tool's units are binary (32M prints 33554432)
    return [
        "nccom-test", "allr", "-r", str(expect.neuron_cores), "-b", size, "-e", size,
        "-d", NCCOM_DATATYPE, "--check", "random", "--non-interactive",
    ]  # fmt: skip


_FAILURE = re.compile(r"fail|error", re.IGNORECASE)


def parse_busbw(output: str, size: int = NCCOM_SIZE_BYTES) -> float | None:
    """The ``busbw(GB/s)`` of the row for ``size`` bytes in nccom-test's table, or None. Columns are
    found by the header's names: options add some (``--show-algorithm``, ``--stats``; nccom-test.rst
    L43-L66)."""
    columns: list[str] = []
    for line in output.splitlines():
        fields = line.split()
        if fields[:1] == ["size(B)"]:
            columns = fields
        elif columns and len(fields) == len(columns) and fields[0] == str(size) and "busbw(GB/s)" in columns:
            try:
                return float(fields[columns.index("busbw(GB/s)")])
            except ValueError:
                return None
    return None


def check_collective(nccom_test: ToolRun, expect: NodeExpectation) -> CheckResult:
    """nccom-test's all-reduce: it succeeded (exit 0, no failure line on stdout, such as a failed
    ``--check`` or "N errors found - test failed", nccom-test.rst at v2.29.1 L529-L536) and its bus bandwidth
    reaches the floor. Its stderr is quoted when it failed, never searched: a runtime warning
    there mentioning an error is no failed all-reduce."""
    wanted = (
        f"all-reduce across {expect.neuron_cores} NeuronCores correct, "
        f"bus bandwidth >= {expect.min_busbw_gbps:.2f} GB/s"
    )
    failures = [line.strip() for line in nccom_test.output.splitlines() if _FAILURE.search(line)]
    busbw = parse_busbw(nccom_test.output)
    if nccom_test.returncode != 0 or failures:
        detail = "; ".join(failures[:2]) or nccom_test.last_line
        return CheckResult(
            "collective", False, wanted, f"nccom-test failed (exit {nccom_test.returncode}): {detail[:300]}"
        )
    if busbw is None:
        return CheckResult(
            "collective", False, wanted, f"no {NCCOM_SIZE_BYTES}-byte result in nccom-test's output"
        )
    return CheckResult(
        "collective", busbw >= expect.min_busbw_gbps, wanted, f"{busbw:.2f} GB/s ({expect.busbw_basis})"
    )


# --- efa ---------------------------------------------------------------------------------------


def efa_devices(root: Path) -> list[str]:
    """RDMA devices under ``root`` that are EFA's: those with EFA port counters (as the exporter and
    the fabric check find them, :func:`training.node.efa_counters.devices`), less any whose PCI
    driver (``<device>/device/driver``, a link to the driver's folder) is another one's."""
    found = []
    for name in devices(root):
        driver = root / name / "device" / "driver"
        if driver.exists() and driver.resolve().name != "efa":
            continue
        found.append(name)
    return found


def _leading_number(path: Path) -> int | None:
    try:
        return int(path.read_text().split(":", 1)[0].strip())
    except (OSError, ValueError):
        return None


def check_efa(root: Path, expect: NodeExpectation) -> CheckResult:
    """The EFA devices in the host's ``/sys/class/infiniband`` (``root``) and their ports' states."""
    wanted = f"{expect.efa_devices} EFA devices, every port ACTIVE and LinkUp"
    names = efa_devices(root)
    down = []
    for name in names:
        for port in sorted((root / name / "ports").iterdir()):
            state, phys = _leading_number(port / "state"), _leading_number(port / "phys_state")
            if state != PORT_ACTIVE or phys != PHYS_LINK_UP:
                down.append(f"{name} port {port.name} state {state} phys_state {phys}")
    found = f"{len(names)} EFA devices" + (f", ports not up: {'; '.join(down[:4])}" if down else "")
    return CheckResult("efa", len(names) >= expect.efa_devices and not down, wanted, found)


# --- the program -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tools:
    """How the checks reach the node (tests replace them)."""

    neuron_ls: Callable[[], ToolRun] = lambda: run_tool(["neuron-ls", "--json-output"])
    nccom_test: Callable[[NodeExpectation], ToolRun] = lambda expect: run_tool(nccom_test_argv(expect))
    core: Callable[[int], list[list[float]] | str] = run_core


def run_checks(
    expect: NodeExpectation, sysfs: Path, tools: Tools = Tools(), log: Callable[[str], None] = print
) -> list[CheckResult]:
    """The checks in the order of :data:`CHECKS`, logging each; stops after the first failure."""
    steps: dict[str, Callable[[], CheckResult]] = {
        "devices": lambda: check_devices(tools.neuron_ls(), expect),
        "efa": lambda: check_efa(sysfs, expect),
        "compute": lambda: check_compute(expect, tools.core),
        "collective": lambda: check_collective(tools.nccom_test(expect), expect),
    }
    results = []
    for check in CHECKS:
        result = steps[check]()
        log(result.line)
        results.append(result)
        if not result.passed:
            break
    return results


#: Set by SIGTERM or SIGINT: the pod was deleted.
_REMOVED = threading.Event()


def watch_for_removal() -> None:
    """From now on SIGTERM and SIGINT only note the pod's deletion. Installed before the checks:
    the label the check sets makes the DaemonSet controller delete the pod at once, while the
    Events and the instance's termination are still to come; a PID 1 with no handler ignores
    SIGTERM, so the pod would sit out its grace period and end killed (found by the offline
    rehearsal). The actions finish first, then :func:`wait_for_removal` returns at once."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: _REMOVED.set())


def wait_for_removal() -> None:
    """Block until SIGTERM or SIGINT (the pod's deletion), at once if it came already."""
    while not _REMOVED.wait(3600):
        pass


def _flush_print(line: str) -> None:
    print(line, flush=True)


# --- the bound on the verdict ------------------------------------------------------------------

#: Where the check notes each start of its container: an emptyDir of its pod, which a
#: container's crash or OOM kill leaves in place ("A container crashing does not remove a Pod
#: from a node. The data in an emptyDir volume is safe across container crashes.", Kubernetes
#: docs, concepts/storage/volumes, emptyDir), so the bound runs from the pod's first start
#: whatever number of restarts came between.
STATE_DIR: Final = Path("/run/node-health")
STARTS_FILE: Final = "starts"


def record_start(state_dir: Path, now: float) -> list[float]:
    """Note ``now`` as a start of the check; every start of this pod's check so far, oldest
    first. Without a record to keep (no such folder: a run by hand) this start is the first."""
    path = state_dir / STARTS_FILE
    try:
        with path.open("a") as record:
            record.write(f"{now:.3f}\n")
        starts = [float(x) for x in path.read_text().split()]
    except (OSError, ValueError) as err:
        print(f"no record of earlier starts ({err}): the verdict's bound runs from now", file=sys.stderr)
        return [now]
    return starts or [now]


def no_verdict(deadline_s: float, elapsed_s: float, starts: int, where: str) -> CheckResult:
    """The failure of a node whose checks gave no verdict within ``deadline_s``."""
    return CheckResult(
        NO_VERDICT,
        False,
        f"a verdict within {deadline_s:.0f} s of the check's first start",
        f"none after {elapsed_s:.0f} s and {starts} start{'s' if starts != 1 else ''} of the check ({where})",
    )


def main(
    argv: Sequence[str] | None = None,
    *,
    tools: Tools = Tools(),
    actions: Any = None,
    wait: Callable[[], None] = wait_for_removal,
    exit_process: Callable[[int], None] = os._exit,
) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        expect = expectation(args.instance_type)
    except KeyError as err:
        parser.error(str(err.args[0]))
    if not args.dry_run and not args.node_name:
        parser.error("--node-name (or NODE_NAME) is required unless --dry-run")
    node = args.node_name or "this node"
    if args.dry_run:
        _verdict_line(node, expect, run_checks(expect, args.sysfs, tools, _flush_print), args.replace)
        return 0
    if wait is wait_for_removal:
        watch_for_removal()
    if actions is None:
        from . import node_actions as actions

    def act(failed: CheckResult | None) -> None:
        if failed is None:
            actions.mark_passed(args.node_name)
        else:
            actions.mark_failed(args.node_name, failed.check, failed.message, replace=args.replace)
        _flush_print("acted on the verdict; waiting for the DaemonSet to remove this pod")

    deadline_s = args.verdict_deadline_s if args.verdict_deadline_s is not None else expect.verdict_deadline_s
    now = time.time()
    starts = record_start(args.state_dir, now)
    left = starts[0] + deadline_s - now
    if left <= 0:  # the checks kept ending before a verdict: this start gives the verdict
        late = no_verdict(deadline_s, now - starts[0], len(starts), "no check run at this start")
        _report(node, expect, [late], args.replace)
        act(late)
        wait()
        return 0

    return _race_the_deadline(
        node=node, expect=expect, sysfs=args.sysfs, tools=tools, replace=args.replace, act=act,
        wait=wait, exit_process=exit_process, deadline_s=deadline_s, starts=starts, left=left,
    )  # fmt: skip


def _race_the_deadline(
    *,
    node: str,
    expect: NodeExpectation,
    sysfs: Path,
    tools: Tools,
    replace: bool,
    act: Callable[[CheckResult | None], None],
    wait: Callable[[], None],
    exit_process: Callable[[int], None],
    deadline_s: float,
    starts: list[float],
    left: float,
) -> int:
    """Run the checks with ``left`` seconds to the verdict's deadline, and act on the verdict."""
    # The verdict goes to whoever claims it first: the checks, or the deadline while they still
    # run (a check waiting on something no timeout bounds). Every wait of the checks is a system
    # call or a child process, which lets this thread run.
    claim = threading.Lock()
    overtaken = threading.Event()
    done: list[str] = []

    def on_deadline() -> None:
        if not claim.acquire(blocking=False):
            return
        overtaken.set()
        running = next((c for c in CHECKS if c not in done), CHECKS[-1])
        overdue = no_verdict(
            deadline_s, time.time() - starts[0], len(starts), f"the {running} check had not ended"
        )
        try:
            _report(node, expect, [overdue], replace)
            act(overdue)
        except Exception as err:  # noqa: BLE001 - the container's restart gives the verdict again
            print(f"acting on the missing verdict failed: {err!r}", file=sys.stderr, flush=True)
            exit_process(1)
            return
        wait()
        exit_process(0)  # the checks' thread may never return

    timer = threading.Timer(left, on_deadline)
    timer.daemon = True
    timer.start()

    def log(line: str) -> None:
        if overtaken.is_set():  # a check that answers after the verdict: nothing more to run
            raise _Overtaken
        done.append(line.split(":", 1)[0])
        _flush_print(line)

    try:
        results = run_checks(expect, sysfs, tools, log)
    except _Overtaken:
        results = []
    if not claim.acquire(blocking=False):  # the deadline gave the verdict already
        timer.join()
        return 0
    timer.cancel()
    failed = _report(node, expect, results, replace)
    act(failed)
    wait()
    return 0


def _parser() -> argparse.ArgumentParser:
    """The check's command line."""
    parser = argparse.ArgumentParser(prog=f"python -m {NODE_HEALTH}", description=__doc__.split("\n")[0])
    parser.add_argument("--instance-type", required=True, help="the node's EC2 instance type")
    parser.add_argument(
        "--node-name", default=os.environ.get("NODE_NAME"), help="the Node (default: $NODE_NAME)"
    )
    parser.add_argument("--sysfs", type=Path, default=SYSFS_ROOT, help="the host's /sys/class/infiniband")
    parser.add_argument(
        "--replace", action=argparse.BooleanOptionalAction, default=False,
        help="terminate a failed node's instance so a fresh one replaces it",
    )  # fmt: skip
    parser.add_argument("--dry-run", action="store_true", help="print the verdict; change nothing")
    parser.add_argument(
        "--verdict-deadline-s", type=float, default=None,
        help="seconds from the check's first start after which a node without a verdict fails "
        "the no-verdict check (default: the sum of the checks' timeouts for the instance type)",
    )  # fmt: skip
    parser.add_argument(
        "--state-dir", type=Path, default=STATE_DIR,
        help="where the check notes its starts (an emptyDir: it outlives a container's restart)",
    )  # fmt: skip
    return parser


class _Overtaken(Exception):
    """The deadline gave the verdict while a check ran."""


def _report(
    node: str, expect: NodeExpectation, results: list[CheckResult], replace: bool
) -> CheckResult | None:
    """Print the verdict line of ``results`` (the no-verdict failure's own line first); the
    failed check's result, or None."""
    failed = next((r for r in results if not r.passed), None)
    if failed is not None and failed.check == NO_VERDICT:
        _flush_print(failed.line)
    _verdict_line(node, expect, results, replace)
    return failed


def _verdict_line(node: str, expect: NodeExpectation, results: list[CheckResult], replace: bool) -> None:
    failed = next((r for r in results if not r.passed), None)
    if failed is None:
        _flush_print(f"verdict: {node} ({expect.instance_type}) passed all {len(results)} checks")
    else:
        then = "; replacing it" if replace else ""
        _flush_print(f"verdict: {node} ({expect.instance_type}) failed the {failed.check} check{then}")


if __name__ == "__main__":
    sys.exit(main())
