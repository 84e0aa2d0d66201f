"""The shell script every training container runs: wait for the data, precompile once, check the
fabric, train."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from .entry_points import DRIVER_CHECK, EXPORT
from .fabric_check_steps import FabricCheck, check_lines
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


#: The shell variable that names the run directory of the phase in flight (the ledger's).
RUN_DIR_VAR = "run_dir"
#: The shell function of the fabric check in a script of several phases.
FABRIC_CHECK_FUNCTION = "check_fabric"
#: The shell variable listing the exports in flight (``<phase>:<pid>``).
EXPORTS_VAR = "exports"
#: Volcano's env plugin gives each pod its task index in this variable (volcano-sh/volcano
#: pkg/controllers/job/plugins/env: ``VC_TASK_INDEX``): the pod of index 0 exports the model.
TASK_INDEX_ENV = "VC_TASK_INDEX"


@dataclass(frozen=True)
class PhaseRun:
    """One pretraining phase as the worker script runs it: torchrun's spec, where the phase's
    files live, and the vocabulary its export reads (None: no export)."""

    launch: LaunchSpec
    paths: JobPaths
    vocab: str | None = None


def record_on_exit(paths: JobPaths | None) -> str:
    """Shell line: on a non-zero exit (the SIGTERM trap's 143 included) append the pod's line to the
    run's restart ledger (``python -m trainium_job.restarts end``, which names the cause from the
    exit code); whatever happens to it, the script's exit code stays its own, and it gets
    :data:`LEDGER_TIMEOUT_S` (a hung FSx mount must not keep the pod from ending). ``paths``
    None: the run directory is the one :data:`RUN_DIR_VAR` names when the trap runs (the phase in
    flight)."""
    run_dir = shlex.quote(paths.output_dir) if paths is not None else f'"${RUN_DIR_VAR}"'
    record = f"timeout {LEDGER_TIMEOUT_S} python -m {LEDGER_MODULE} end --run-dir {run_dir}"
    action = f'rc=$?; if [ "$rc" != 0 ]; then {record} --exit-code "$rc" || true; fi'
    return f"trap {shlex.quote(action)} EXIT"


def worker_script(
    spec: LaunchSpec,
    paths: JobPaths,
    *,
    precompile_steps: int = DEFAULT_PRECOMPILE_STEPS,
    fabric_check: FabricCheck | None = None,
    phases: Sequence[PhaseRun] = (),
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
       :mod:`trainium_job.fabric_check_steps`; a failed check ends the script with its exit code.
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

    ``phases``: more than one phase, or one whose model is exported: see :func:`phases_script`
    (``spec`` and ``paths`` are then the first phase's, for the c10d decision).
    """
    if len(phases) > 1 or any(phase.vocab for phase in phases):
        return phases_script(spec, phases, precompile_steps=precompile_steps, fabric_check=fabric_check)
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


def phases_script(
    spec: LaunchSpec,
    phases: Sequence[PhaseRun],
    *,
    precompile_steps: int = DEFAULT_PRECOMPILE_STEPS,
    fabric_check: FabricCheck | None = None,
) -> str:
    """The worker script of a job of several phases (or one exported): the steps of
    :func:`worker_script` for each phase in turn, in the same pods, and per phase:

    - a phase whose run holds the trainer's ``COMPLETE`` marker (it reached ``--max_steps``) is
      skipped without starting torchrun: a redeploy or a restart after phase 1 goes on with
      phase 2 and never trains phase 1 again;
    - its own compile cache (``NEURON_CC_FLAGS`` set for it) and precompile marker, its own
      dataset marker; the fabric check once, before the first phase that trains;
    - a phase that ends without ``COMPLETE`` (``--steps_this_run`` short of ``--max_steps``)
      ends the script with 0: the next phase waits for a later start;
    - with a vocabulary, the pod of Volcano task index 0 exports the finished run as a Hugging
      Face folder (``training.trainer.export`` into ``JobPaths.model_dir``) once, in the
      background while the next phase runs (:func:`export_lines`); the script waits for the
      exports at its end, and a failed one fails the pod, so Volcano starts it again (the
      finished phases skipped, the export retried).
    """
    host_lines = c10d_host_lines(spec)
    lines = [
        "set -euo pipefail",
        STOP_ON_SIGTERM,
        f"{RUN_DIR_VAR}={shlex.quote(phases[0].paths.output_dir)}",
        record_on_exit(None),
        *host_lines,
        background(f"python -m {DRIVER_CHECK}"),
        f"{EXPORTS_VAR}=",
    ]
    if fabric_check is not None:
        # Once per pod, before the first phase that trains: a function the phases call.
        check = check_lines(without_conf(phases[0].launch), fabric_check)
        lines += ["fabric_checked=0", f"{FABRIC_CHECK_FUNCTION}() {{", *(f"  {line}" for line in check), "}"]
    for number, phase in enumerate(phases, start=1):
        last = number == len(phases)
        lines += phase_lines(
            number, phase, last=last, precompile_steps=precompile_steps, fabric_check=fabric_check
        )
    return "\n".join([*lines, *wait_for_exports()]) + "\n"


def phase_lines(
    number: int,
    phase: PhaseRun,
    *,
    last: bool,
    precompile_steps: int,
    fabric_check: FabricCheck | None,
) -> list[str]:
    """The shell lines of one phase of :func:`phases_script`."""
    paths, spec = phase.paths, without_conf(phase.launch)
    q = shlex.quote
    complete = q(paths.complete_marker)
    lines = [
        f"{RUN_DIR_VAR}={q(paths.output_dir)}",
        f"export NEURON_CC_FLAGS={q('--cache_dir=' + paths.cache_dir)}",
        f"if [ -f {complete} ]; then echo 'phase {number}: {paths.output_dir} is complete, not run again'; else",
        f"  until [ -f {q(paths.dataset_marker)} ]; do echo 'waiting for the dataset ({paths.dataset_marker})'; "
        f"{background('sleep 30')}; done",
        f"  mkdir -p {q(paths.cache_dir)} {q(paths.output_dir)}",
        f"  if [ ! -f {q(paths.cache_marker)} ]; then",
        f"    echo 'phase {number}: precompiling into an empty cache set'",
        f"    {background(render(precompile_args(spec, precompile_steps)))}",
        f"    touch {q(paths.cache_marker)}",
        "  fi",
        *(
            [f'  if [ "$fabric_checked" = 0 ]; then {FABRIC_CHECK_FUNCTION}; fabric_checked=1; fi']
            if fabric_check is not None
            else []
        ),
        f"  {background(render(torchrun_args(spec)))}",
        "fi",
    ]
    if phase.vocab:
        lines += export_lines(number, phase)
    if not last:
        lines += [
            f"if [ ! -f {complete} ]; then",
            f"  echo 'phase {number} ended before its --max_steps: phase {number + 1} waits for it'",
            *(f"  {line}" for line in wait_for_exports()),
            "  exit 0",
            "fi",
        ]
    return lines


def export_lines(number: int, phase: PhaseRun) -> list[str]:
    """The finished phase's Hugging Face export, started in the background on the pod of task
    index 0, once: only of a run that reached its ``--max_steps`` (a model half-way through its
    schedule is not the product). In the background because that pod hosts the next phase's
    c10d store: the other pods' agents give up on it after ``read_timeout`` (60 s by default,
    torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py), less than an export of
    BERT-large takes. :func:`wait_for_exports` collects it."""
    paths, q = phase.paths, shlex.quote
    export = render(
        [
            "python",
            "-m",
            EXPORT,
            paths.output_dir,
            paths.model_dir,
            "--vocab",
            str(phase.vocab),
            "--data_dir",
            paths.data_dir,
        ]
    )
    return [
        f'if [ "${{{TASK_INDEX_ENV}:-}}" = 0 ] && [ -f {q(paths.complete_marker)} ] '
        f"&& [ ! -f {q(paths.model_dir + '/config.json')} ]; then",
        f"  echo 'phase {number}: exporting the model to {paths.model_dir}'",
        f'  {export} & {EXPORTS_VAR}="${EXPORTS_VAR} {number}:$!"',
        "fi",
    ]


def wait_for_exports() -> list[str]:
    """Shell lines: wait for every export started, naming each that failed; then fail the pod if
    any did, so Volcano starts it again (the finished phases are skipped, the export retried)."""
    return [
        "export_failed=0",
        f"for pending in ${EXPORTS_VAR}; do",
        '  if ! wait "${pending#*:}"; then echo "phase ${pending%%:*}: the export failed" >&2; export_failed=1; fi',
        "done",
        f"{EXPORTS_VAR}=",
        'if [ "$export_failed" != 0 ]; then exit 1; fi',
    ]


def container_command(
    spec: LaunchSpec,
    paths: JobPaths,
    *,
    precompile_steps: int = DEFAULT_PRECOMPILE_STEPS,
    fabric_check: FabricCheck | None = None,
    phases: Sequence[PhaseRun] = (),
) -> list[str]:
    """``bash -c <worker_script>``: the container command of every training pod."""
    return [
        "bash",
        "-c",
        worker_script(
            spec, paths, precompile_steps=precompile_steps, fabric_check=fabric_check, phases=phases
        ),
    ]
