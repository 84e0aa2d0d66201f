"""The shell script every training container runs: wait for the data, precompile once, check the
fabric, train."""

from __future__ import annotations

import shlex

from .entry_points import DRIVER_CHECK
from .fabric_check import FabricCheck, check_lines
from .launch import (
    DEFAULT_PRECOMPILE_STEPS,
    LaunchSpec,
    c10d_host_lines,
    precompile_args,
    render,
    torchrun_args,
    without_conf,
)
from .paths import JobPaths
from .pid1 import STOP_ON_SIGTERM, background

#: The restart ledger's module (:mod:`trainium_job.restarts`), by name: importing it here would
#: load it with the package, and ``python -m`` warns about a module loaded before it runs.
LEDGER_MODULE = "trainium_job.restarts"
#: Seconds the ledger's line may take (timeout(1)): within the pod's grace after torchrun's own
#: stop window (``stop_budget.AGENT_EXIT_MARGIN_S``, tested), so a stopped pod still writes it.
LEDGER_TIMEOUT_S = 10


def record_on_exit(paths: JobPaths) -> str:
    """Shell line: on a non-zero exit (the SIGTERM trap's 143 included) append the pod's line to the
    run's restart ledger (``python -m trainium_job.restarts end``, which names the cause from the
    exit code); whatever happens to it, the script's exit code stays its own, and it gets
    :data:`LEDGER_TIMEOUT_S` (a hung FSx mount must not keep the pod from ending)."""
    record = (
        f"timeout {LEDGER_TIMEOUT_S} python -m {LEDGER_MODULE} end --run-dir {shlex.quote(paths.output_dir)}"
    )
    action = f'rc=$?; if [ "$rc" != 0 ]; then {record} --exit-code "$rc" || true; fi'
    return f"trap {shlex.quote(action)} EXIT"


def worker_script(
    spec: LaunchSpec,
    paths: JobPaths,
    *,
    precompile_steps: int = DEFAULT_PRECOMPILE_STEPS,
    fabric_check: FabricCheck | None = None,
) -> str:
    """The shell script each training container runs.

    With the c10d rendezvous, the script first decides whether this pod's torchrun hosts the
    store (:func:`~trainium_job.launch.c10d_host_lines`).

    0. Check the node's Neuron driver against the image's runtime (``training.node.driver_check``):
       a known-bad pair stops the pod with one line before anything else.
    1. Wait for the dataset marker (the staging job may still be downloading).
    2. If this cache set has no precompile marker: ``neuron_parallel_compile`` the same torchrun
       command for a few steps (all nodes together), then write the marker. A re-deploy or a
       restart finds the marker and goes straight to training; a failed precompile leaves no
       marker, so the next attempt compiles again (reusing what the cache already holds).
    3. With ``fabric_check`` (multi-node jobs): the collective test of
       :mod:`trainium_job.fabric_check`; a failed check ends the script with its exit code.
    4. ``torchrun``: training resumes from the newest checkpoint in ``output_dir``.

    On any non-zero exit the script appends one line to the run's restart ledger
    (:mod:`trainium_job.restarts`: the cause, the node, the newest checkpoint), and turns the hang
    markers a step watchdog left into lines of their own.

    The script stays the container's PID 1 and runs each step in the background
    (:mod:`trainium_job.pid1`): a SIGTERM (the pod deleted, drained, evicted, or the gang
    restarted by Volcano) is passed on to the step in flight, and once it has ended the pod exits
    143. So a pod that waits or precompiles stops at once, not at SIGKILL; one that trains stops
    after torchrun's graceful stop, with 143 where torchrun alone exits 1 (its agent re-raises
    the signal as an exception). Otherwise the exit code is torchrun's.
    """
    marker = shlex.quote(paths.dataset_marker)
    cache_marker = shlex.quote(paths.cache_marker)
    host_lines = c10d_host_lines(spec)
    spec = without_conf(spec)
    lines = [
        "set -euo pipefail",
        STOP_ON_SIGTERM,
        record_on_exit(paths),
        *host_lines,
        background(f"python -m {DRIVER_CHECK}"),
        f"until [ -f {marker} ]; do echo 'waiting for the dataset ({paths.dataset_marker})'; "
        f"{background('sleep 30')}; done",
        f"mkdir -p {shlex.quote(paths.cache_dir)} {shlex.quote(paths.output_dir)}",
        f"if [ ! -f {cache_marker} ]; then",
        "  echo 'precompiling into an empty cache set'",
        f"  {background(render(precompile_args(spec, precompile_steps)))}",
        f"  touch {cache_marker}",
        "fi",
        *(check_lines(spec, fabric_check) if fabric_check is not None else []),
        background(render(torchrun_args(spec))),
    ]
    return "\n".join(lines) + "\n"


def container_command(
    spec: LaunchSpec,
    paths: JobPaths,
    *,
    precompile_steps: int = DEFAULT_PRECOMPILE_STEPS,
    fabric_check: FabricCheck | None = None,
) -> list[str]:
    """``bash -c <worker_script>``: the container command of every training pod."""
    return [
        "bash",
        "-c",
        worker_script(spec, paths, precompile_steps=precompile_steps, fabric_check=fabric_check),
    ]
