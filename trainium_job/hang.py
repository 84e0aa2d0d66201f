"""What a training process does when it stops making progress: the step watchdog's exit code and
the phases it reports. Standard library only (the CDK app and the images share it).

``training.trainer.watchdog`` ends a worker whose optimizer step has waited longer than its bound
with :data:`HANG_EXIT_CODE`. torchrun then restarts the worker group, if it has restarts left
(``--max_restarts``), and the new workers resume from the newest verified checkpoint; once it has
none left it exits 1 itself, whatever its workers' codes (its ``@record`` entry point re-raises
``ChildFailedError``: torch/distributed/elastic/multiprocessing/errors/__init__.py ``record``,
L365-378 at v2.9.0), so the pod fails with 1 and the Volcano Job's ``PodFailed`` policy
restarts the gang (``trainium_job.pod.RESTART_POLICIES``). The code names the cause in torchrun's
failure summary (``exitcode  : 86``) and in the worker's log line; since no exit code that
reaches the pod carries it, the watchdog also leaves a marker that the run's restart ledger
records as a ``hang`` (``trainium_job.restarts``).
"""

from __future__ import annotations

from typing import Final

#: Exit code of a worker ended by the step watchdog. 86 means nothing to the other programs of a
#: training pod: pretrain exits 0, 2 or 143 (``training.trainer.stop``); Python 1 (an uncaught
#: exception), 2 (a usage error) or 120 (stdout could not be flushed at exit); torchrun 1; bash 126
#: and 127; timeout(1) 124 and 125; a process killed by signal n 128 + n (129-192, SIGKILL 137);
#: sysexits(3) spans 64-78, where the fabric check has 69 and 75 (``trainium_job.fabric_check_steps``)
#: and the driver check 78 (``training.node.driver_check``). Volcano refuses a policy on exit code
#: 0 only, so any of these could carry a policy of its own.
HANG_EXIT_CODE: Final = 86

#: Where a training process is, as the watchdog sees it (the ``bert_train_phase`` metric):
#: ``warmup``: the first optimizer steps of the process (graph compilation on XLA), no bound;
#: ``step``: the steady state, bounded; ``evaluation``: a held-out evaluation (``--eval_dir``; on
#: XLA its first one compiles its graphs), no bound; ``checkpoint``: a checkpoint being written, no
#: bound; ``hung``: the watchdog is ending the process.
PHASES: Final = ("warmup", "step", "evaluation", "checkpoint", "hung")
