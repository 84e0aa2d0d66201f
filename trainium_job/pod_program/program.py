"""The program every training container runs: one code path for one phase or several.

In order (:meth:`Program.steps`):

1. The node's Neuron driver against the image's runtime (``training.node.driver_check``): a
   known-bad pair ends the pod at once with its code.
2. For each phase: a phase whose run holds the trainer's ``COMPLETE`` marker is not run again
   (a redeploy after phase 1 goes on with phase 2); else
   a. each wait (its shard set, its start), bounded: at a deadline, or when the producer gave
      up, the pod ends with ``DEADLINE_EXIT_CODE`` and the Job is aborted, its nodes released;
   b. the precompile, once per cache set (its marker written after a trial run that ended 0),
      bounded;
   c. the fabric check, once, before the first phase that trains;
   d. training, the phase's command (torchrun), with the spend counted meanwhile;
   e. a phase that ends without ``COMPLETE`` (``--steps_this_run`` short of ``--max_steps``)
      ends the pod with 0: the next phase waits for a later start;
   f. the exporting pod (Volcano task index ``Export.task_index``) exports the finished run as a
      Hugging Face folder, then uploads it to the model bucket (``Export.upload``), in the
      background while the next phase runs (that pod hosts the next phase's c10d store, which the
      other pods' agents give up on after 60 s); the pod waits for its exports at the end, and a
      failed export fails it, so Volcano starts it again. A failed upload does not (the model is
      on FSx, and a restart of the gang would not mend the bucket's permissions): its line says
      so, and the next start of the job uploads again (the upload skips what is there).
3. On a SIGTERM the children in flight get it (:mod:`.children`) and the pod ends 143 once they
   have ended; at the spend ceiling the program stops training as a SIGTERM does (the trainer
   checkpoints), the exporting pod exports the phase in flight, and every pod ends with
   ``BUDGET_EXIT_CODE`` once that export is done: the Job is aborted, its nodes released.
4. On a non-zero end, one line in the restart ledger of the phase in flight
   (:mod:`trainium_job.restarts`), within :data:`LEDGER_TIMEOUT_S`.

Every decision is a method of its own that needs no cluster (tests/trainium_job/pod_program).
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from .. import restarts, waits
from ..exit_codes import BUDGET_EXIT_CODE, DEADLINE_EXIT_CODE, SIGTERM_EXIT_CODE
from ..launch import RDZV_CONF_ENV
from .children import TICK_S, Children
from .description import Export, JobDescription, Phase, Rendezvous, Upload
from .metrics import ProgramMetrics
from .spend import phase_node_hours, record_path, request_stop, spend, stop_requested, write_record

#: Seconds the restart ledger's line may take (a hung FSx mount must not keep the pod from ending):
#: the children are killed this long before the pod's grace period ends.
LEDGER_TIMEOUT_S: Final = 10
#: Volcano's env plugin gives each pod its task index in this variable (volcano-sh/volcano
#: pkg/controllers/job/plugins/env: ``VC_TASK_INDEX``).
TASK_INDEX_ENV: Final = "VC_TASK_INDEX"
#: The file of a finished export: the folder is renamed into place whole (training.trainer.export).
EXPORTED_FILE: Final = "config.json"
#: Beside the run: the model in ``model_dir`` was exported at a stop, from a run short of its
#: ``--max_steps``; the run's final export replaces it.
STOPPED_EXPORT: Final = "model.stopped-export"


@dataclass
class Pod:
    """Who this pod is: its host name (the c10d decision), its node (the ledger, the spend), its
    Volcano task index (who exports), and its environment."""

    hostname: str
    node: str
    task_index: int | None
    env: dict[str, str]

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> Pod:
        environ = dict(os.environ if environ is None else environ)
        hostname = environ.get("HOSTNAME") or socket.gethostname()
        index = environ.get(TASK_INDEX_ENV, "")
        return cls(
            hostname=hostname,
            node=environ.get("NODE_NAME") or hostname,
            task_index=int(index) if index.isdigit() else None,
            env=environ,
        )


class Program:
    """The steps of one pod of a job (see the module docstring)."""

    def __init__(
        self,
        description: JobDescription,
        pod: Pod,
        *,
        children: Children | None = None,
        say: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.job = description
        self.pod = pod
        # A tick at least as often as the spend is looked at: a stop lands within one look.
        tick = min(TICK_S, description.budget.check_every_s) if description.budget else TICK_S
        self.children = children or Children(
            kill_after_s=max(1, description.grace_s - LEDGER_TIMEOUT_S), tick_s=tick
        )
        self.say = say or (lambda line: print(line, flush=True))
        self.clock = clock
        self.started = clock()
        self.run_dir = description.phases[0].run_dir  # the ledger's: the phase in flight
        #: The exports in flight: each phase's thread and, once it ended, its code.
        self.exports: list[tuple[Phase, threading.Thread, list[int]]] = []
        #: The spend ceiling's stop marker, once this pod saw it (:mod:`.spend`).
        self.budget_stop: dict[str, object] | None = None
        self.metrics = ProgramMetrics(
            start=self.started, budget_usd=description.budget.usd if description.budget else None
        )
        self._record: Path | None = None
        self._record_start = self.started
        self._phase = description.phases[0].name
        self._last_look = float("-inf")

    # --- the whole run ------------------------------------------------------------------------
    def run(self) -> int:
        """The steps, then the ledger's line on a non-zero end; the pod's exit code."""
        try:
            code = self.steps()
        except KeyboardInterrupt:  # SIGINT, as a person at a terminal stops a test run
            code = SIGTERM_EXIT_CODE
        if self.children.stopping and code != 0:
            code = SIGTERM_EXIT_CODE if self.budget_stop is None else code
        self.children.kill_all()
        self.look_at_spend(force=True)
        if code != 0 and self.job.ledger:
            self.record_end(code)
        return code

    def steps(self) -> int:
        self.enter(self.job.phases[0])
        self.look_at_spend(force=True)
        if self.at_ceiling():
            return BUDGET_EXIT_CODE
        if self.job.driver_check is not None:
            ended = self.children.run(self.job.driver_check, self.library_env(self.pod.env))
            if ended.code != 0:
                return ended.code
        fabric_checked = False
        for phase in self.job.phases:
            self.run_dir = phase.run_dir
            self.enter(phase)
            if Path(phase.complete_marker).exists():
                self.say(f"{phase.name}: {phase.run_dir} is complete, not run again")
                self.start_export(phase)
                continue
            code = self.prepare(phase)
            if code is None and not fabric_checked and self.job.fabric_check is not None:
                code, fabric_checked = self.fabric_check(), True
            if code is not None:
                return code
            code = self.train(phase)
            if code is not None:
                return code
        return self.finish_exports()

    # --- one phase -----------------------------------------------------------------------------
    def enter(self, phase: Phase) -> None:
        """The pod's time from now on counts for ``phase`` (a spend record of its own)."""
        if self._record is not None:
            self.look_at_spend(force=True)  # the last phase's record, up to now
        self._phase, self._record_start = phase.name, self.clock()
        budget = self.job.budget
        if budget is not None:
            self._record = record_path(
                budget, node=self.pod.node, pod=self.pod.hostname, start=self._record_start
            )

    def phase_env(self, phase: Phase) -> dict[str, str]:
        """The phase's commands' environment: the pod's, the phase's, the rendezvous decision."""
        return {**self.pod.env, **dict(phase.env), **rendezvous_env(self.job.rendezvous, self.pod.hostname)}

    def library_env(self, env: Mapping[str, str]) -> dict[str, str]:
        """``env`` for the library's own programs: with the runtime first on PYTHONPATH when the
        image does not hold them (the job's own commands never see it: its ``training`` package
        could shadow the user's)."""
        runtime = self.job.runtime
        if runtime is None:
            return dict(env)
        path = env.get("PYTHONPATH")
        return {**env, "PYTHONPATH": runtime if not path else f"{runtime}:{path}"}

    def prepare(self, phase: Phase) -> int | None:
        """The phase's waits and precompile; an exit code when the pod must end, else None."""
        self.metrics.set("trainium_job_start_bound_seconds", self.job.bound_s(phase))
        self.metrics.at("waiting")
        for wait in phase.waits:
            result = waits.wait_for(wait, stopped=self.children.pause, say=self.say)
            if result.outcome == "stopped":
                return SIGTERM_EXIT_CODE
            if result.outcome != "ready":
                self.say(f"{phase.name}: {result.line}: ending the job to release its nodes")
                return self.end_after_exports(DEADLINE_EXIT_CODE)
            self.say(result.line)
        for directory in phase.make_dirs:
            Path(directory).mkdir(parents=True, exist_ok=True)
        pre = phase.precompile
        if pre is None or Path(pre.marker).exists():
            return None
        self.metrics.at("precompile")
        self.say(f"{phase.name}: precompiling into an empty cache set")
        ended = self.children.run(pre.argv, self.phase_env(phase), deadline_s=pre.deadline_s)
        if ended.timed_out:
            self.say(
                f"{phase.name}: the precompile ran past its {pre.deadline_s} s ({pre.why}): ending the job"
            )
            return DEADLINE_EXIT_CODE
        if ended.code != 0:
            return ended.code
        Path(pre.marker).touch()
        return None

    def fabric_check(self) -> int | None:
        """Measure (its failure is the verdict's to report), then judge: the verdict's code, or None."""
        check = self.job.fabric_check
        assert check is not None
        self.metrics.at("fabric_check")
        if check.title:
            self.say(check.title)
        Path(check.result_file).unlink(missing_ok=True)
        start = time.monotonic()
        env = self.library_env(self.phase_env(self.job.phases[0]))
        measured = self.children.run(check.measure, env)
        if measured.stopped:
            return SIGTERM_EXIT_CODE
        seconds = int(time.monotonic() - start)
        verdict = self.children.run([*check.verdict, "--seconds", str(seconds)], env)
        return verdict.code or None

    def train(self, phase: Phase) -> int | None:
        """Training, the spend looked at meanwhile; an exit code when the pod must end, else None."""
        self.metrics.at("training")
        self.metrics.set("trainium_job_not_training_since_timestamp_seconds", None)
        ended = self.children.run(phase.train, self.phase_env(phase), tick=self.look_at_spend)
        self.metrics.set("trainium_job_not_training_since_timestamp_seconds", self.clock())
        self.look_at_spend()  # its workers may have ended at another pod's stop before this pod saw it
        if self.budget_stop is not None:
            return self.stop_at_budget(phase)
        if ended.code != 0:
            return ended.code
        if not Path(phase.complete_marker).exists():
            self.say(f"{phase.name} ended before its --max_steps: the phases after it wait for a later start")
            return self.finish_exports() or 0
        self.start_export(phase)
        return None

    # --- exports -------------------------------------------------------------------------------
    def exports_here(self, export: Export | None) -> bool:
        return export is not None and self.pod.task_index == export.task_index

    def start_export(self, phase: Phase) -> None:
        """The finished phase's export, then its upload, in the background, on the exporting pod;
        no export when it is there (an export made at a stop, before the run was complete, is
        replaced), and no upload when the description has none."""
        export = phase.export
        if export is None or not self.exports_here(export) or not Path(phase.complete_marker).exists():
            return
        at_stop = Path(phase.run_dir) / STOPPED_EXPORT
        exported = (Path(export.model_dir) / EXPORTED_FILE).exists() and not at_stop.exists()
        if exported and export.upload is None:
            return
        result: list[int] = []

        def export_then_upload() -> None:
            result.append(self.export_then_upload(phase, export, exported=exported))

        thread = threading.Thread(target=export_then_upload, name=f"export {phase.name}", daemon=True)
        self.exports.append((phase, thread, result))
        thread.start()

    def export_then_upload(self, phase: Phase, export: Export, *, exported: bool) -> int:
        """The export unless ``exported``, then the upload; the export's code (an upload's failure
        is said, not returned: see the module docstring)."""
        if not exported:
            self.say(f"{phase.name}: exporting the model to {export.model_dir}")
            ended = self.children.run(self.export_argv(phase, export), self.pod.env)
            if ended.code != 0:
                return ended.code
            (Path(phase.run_dir) / STOPPED_EXPORT).unlink(missing_ok=True)
        if export.upload is not None:
            self.upload(phase, export.model_dir, export.upload)
        return 0

    def upload(self, phase: Phase, model_dir: str, upload: Upload) -> None:
        """Copy ``model_dir`` to the model bucket the pod's environment names, and say how it went."""
        bucket = self.pod.env.get(upload.bucket_env, "")
        if not bucket:
            self.say(
                f"{phase.name}: the model stays on FSx at {model_dir}: no model bucket ({upload.bucket_env} unset)"
            )
            return
        uri = f"s3://{bucket}/{upload.prefix}"
        self.say(f"{phase.name}: uploading the model to {uri}")
        ended = self.children.run([*upload.argv, model_dir, uri], self.pod.env)
        if ended.code != 0:
            self.say(
                f"{phase.name}: the upload to {uri} failed ({ended.code}); the model is on FSx at "
                f"{model_dir}, and the next start of the job uploads it again"
            )

    def export_argv(self, phase: Phase, export: Export) -> list[str]:
        """The export's command, with the phase's node-hours as the pods counted them (its model
        card says them), when the job counts its spend."""
        budget = self.job.budget
        if budget is None:
            return list(export.argv)
        self.look_at_spend(force=True)
        try:
            hours = phase_node_hours(budget, phase.name)
        except OSError:
            return list(export.argv)
        return [*export.argv, "--node_hours", f"{hours:.2f}"]

    def finish_exports(self) -> int:
        """Wait for every export started; 1 (Volcano starts the pod again) if one failed."""
        failed = False
        for phase, thread, result in self.exports:
            self.metrics.at("exporting")
            thread.join()
            code = result[0] if result else 1
            if code != 0:
                self.say(f"{phase.name}: the export failed ({code})")
                failed = True
        self.exports = []
        return 1 if failed else 0

    def end_after_exports(self, code: int) -> int:
        """``code``, once the exports in flight are done (an abort would delete the pod mid-export)."""
        return self.finish_exports() or code

    # --- the spend ceiling ---------------------------------------------------------------------
    def look_at_spend(self, *, force: bool = False) -> None:
        """At every tick: the stop marker another pod may have written; every ``check_every_s``:
        this pod's record, the job's spend, and the stop at the ceiling."""
        budget = self.job.budget
        if budget is None or self._record is None:
            return
        now = self.clock()
        try:
            if self.budget_stop is None and not force:
                marker = stop_requested(budget)
                if marker is not None:
                    return self._stop_training(marker)
            if not force and now - self._last_look < budget.check_every_s:
                return None
            self._last_look = now
            write_record(
                self._record,
                node=self.pod.node,
                pod=self.pod.hostname,
                phase=self._phase,
                start=self._record_start,
                last=now,
            )
            spent = spend(budget)
        except OSError as e:
            self.say(f"spend: not counted this time: {e}")
            return None
        self.metrics.set("trainium_job_spend_usd", round(spent.usd, 2))
        if spent.usd >= budget.usd and self.budget_stop is None and not force:
            self.say(
                f"spend ${spent.usd:,.2f} reached the ceiling of ${budget.usd:,.2f} "
                f"({spent.node_seconds / 3600:,.1f} node-hours, {spent.nodes} nodes): stopping at a checkpoint"
            )
            self._stop_training(request_stop(budget, spent, by=self.pod.hostname))
        return None

    def at_ceiling(self) -> bool:
        """At the start: whether the job is already at its ceiling (a redeploy that did not raise
        it), so that no node time goes to a run that would stop at its first look."""
        budget = self.job.budget
        if budget is None:
            return False
        spent = spend(budget)
        if stop_requested(budget) is None and spent.usd < budget.usd:
            return False
        self.say(
            f"spend ${spent.usd:,.2f} is at the ceiling of ${budget.usd:,.2f}: not starting; raise "
            "training_budget_usd and redeploy to go on"
        )
        return True

    def _stop_training(self, marker: dict[str, object]) -> None:
        """Training ends as at a SIGTERM (the trainer checkpoints); the pod goes on to the export."""
        self.budget_stop = marker
        self.children.interrupt()

    def stop_at_budget(self, phase: Phase) -> int:
        """After training stopped at the ceiling: export the phase in flight (the exporting pod),
        or wait for that export (the others), then end with ``BUDGET_EXIT_CODE``."""
        assert self.budget_stop is not None
        self.metrics.at("stopping")
        export = phase.export
        if export is not None:
            # Named after the ceiling, which every pod of the job reads from its description (two
            # pods that reach it together may each write the stop marker).
            assert self.job.budget is not None
            done = Path(phase.run_dir) / f"model.stop-at-{self.job.budget.usd:g}-usd.exported"
            if self.exports_here(export):
                self.finish_exports()
                (Path(phase.run_dir) / STOPPED_EXPORT).touch()
                self.say(f"{phase.name}: exporting the model of the stopped run to {export.model_dir}")
                if self.children.run(self.export_argv(phase, export), self.pod.env).code == 0:
                    # The upload before the mark: the other pods end once it is there, and their
                    # end aborts the Job, this pod with it.
                    if export.upload is not None:
                        self.upload(phase, export.model_dir, export.upload)
                    done.touch()
            else:
                wait = waits.Wait(
                    what=f"{phase.name}'s export at the ceiling",
                    ready=str(done),
                    deadline_s=export.deadline_s,
                    poll_s=5,
                )
                self.say(waits.wait_for(wait, stopped=self.children.pause, say=self.say).line)
        self.say(
            f"{phase.name}: stopped at the spend ceiling; raise training_budget_usd and redeploy to go on"
        )
        return BUDGET_EXIT_CODE

    # --- the ledger ----------------------------------------------------------------------------
    def record_end(self, code: int) -> None:
        """The restart ledger's line of this end, given :data:`LEDGER_TIMEOUT_S` (a thread: a
        write that hangs on FSx is left behind)."""
        writer = threading.Thread(
            target=_record_end, args=(Path(self.run_dir), code, self.say), name="ledger", daemon=True
        )
        writer.start()
        writer.join(LEDGER_TIMEOUT_S)
        if writer.is_alive():
            self.say(f"restart ledger: not written within {LEDGER_TIMEOUT_S} s")


def rendezvous_env(rendezvous: Rendezvous | None, hostname: str) -> dict[str, str]:
    """torchrun's ``--rdzv_conf`` in :data:`~trainium_job.launch.RDZV_CONF_ENV`: ``is_host=1`` on
    the pod whose host name's first label is the store's host, 0 on the others, then the conf."""
    if rendezvous is None:
        return {}
    is_host = int(hostname.split(".", 1)[0] == rendezvous.host)
    return {RDZV_CONF_ENV: ",".join([f"is_host={is_host}", *(f"{k}={v}" for k, v in rendezvous.conf)])}


def _record_end(run_dir: Path, code: int, say: Callable[[str], None]) -> None:
    try:
        restarts.record_end(run_dir, code)
    except OSError as e:
        say(f"restart ledger: not written: {e}")


def install(program: Program) -> None:
    """The SIGTERM handler of the container's PID 1: pass the stop on to the children."""
    signal.signal(signal.SIGTERM, program.children.stop)
