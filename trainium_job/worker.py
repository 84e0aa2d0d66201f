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
