"""What a training pod's exit code says, and what the Volcano Job does about it: one table.

The pod program (:mod:`trainium_job.pod_program`) ends with one of these codes; the Volcano Job's
policies (:func:`trainium_job.pod.job_policies`) and the restart ledger's causes
(:func:`trainium_job.restarts.cause_of`) are derived from this table, so a code means one thing
everywhere. Standard library only.

Volcano takes a pod's exit code from its first container status when the pod turns ``Failed``,
and applies the first job policy whose ``exitCode`` equals it; a policy names one code, never 0,
and no code twice (volcano-sh/volcano v1.15.0 pkg/controllers/job/job_controller_handler.go
L269-281, job_controller_util.go L182-284, pkg/webhooks/admission/jobs/validate/util.go
L62-123). ``AbortJob`` deletes the job's other pods and creates none until a ``ResumeJob``
(pkg/controllers/job/state/running.go L47-51, aborted.go L29-39): with Karpenter the nodes are
then empty and released. A code without a policy meets ``PodFailed``: ``RestartJob``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from .fabric_check_steps import EXIT_CODE as FABRIC_EXIT_CODE
from .fabric_check_steps import NOT_MEASURED_EXIT_CODE as FABRIC_NOT_MEASURED_EXIT_CODE
from .hang import HANG_EXIT_CODE

#: Exit code of a wait that ran out, or of an input that will never come (its producer gave up):
#: EX_NOINPUT of sysexits(3), "an input file did not exist or was not readable". Restarting the
#: gang would wait for the same input again on paid nodes, so the job is aborted.
DEADLINE_EXIT_CODE: Final = 66
#: Exit code of a job stopped at its spend ceiling (``training_budget_usd``), after its checkpoint
#: and the export of the phase in flight: EX_NOPERM of sysexits(3), "did not have sufficient
#: permission": the job may not spend more. Aborted, not restarted: raise the ceiling to go on.
BUDGET_EXIT_CODE: Final = 77
#: The node's Neuron driver does not run the image's runtime (``training.node.driver_check``):
#: EX_CONFIG of sysexits(3), a configuration error.
DRIVER_EXIT_CODE: Final = 78
#: 128 + SIGTERM: the pod was stopped (deleted, drained, evicted, or its gang restarted).
SIGTERM_EXIT_CODE: Final = 143
#: The pod's own programs failed in a way the table does not name (Python's uncaught exception,
#: torchrun's failure summary).
FAILURE_EXIT_CODE: Final = 1

Action = Literal["AbortJob", "RestartJob"]


@dataclass(frozen=True)
class ExitCode:
    """One code: its ledger cause and the Volcano Job's action for a pod that ends with it."""

    code: int
    cause: str
    action: Action
    meaning: str


#: Every code the pod program ends with but 0, most telling cause first within a restart.
EXIT_CODES: Final = (
    ExitCode(HANG_EXIT_CODE, "hang", "RestartJob", "a worker's step waited past the watchdog's bound"),
    ExitCode(
        FABRIC_EXIT_CODE, "fabric", "AbortJob", "the fabric check failed: a restart meets the same fabric"
    ),
    ExitCode(
        FABRIC_NOT_MEASURED_EXIT_CODE,
        "fabric",
        "RestartJob",
        "the fabric check's measurement broke off (a pod of the gang stopped)",
    ),
    ExitCode(
        DRIVER_EXIT_CODE, "driver", "RestartJob", "the node's Neuron driver does not run the image's runtime"
    ),
    ExitCode(
        DEADLINE_EXIT_CODE,
        "data",
        "AbortJob",
        "a wait passed its deadline, or its input will never come: the nodes are released",
    ),
    ExitCode(
        BUDGET_EXIT_CODE,
        "budget",
        "AbortJob",
        "the spend ceiling was reached: checkpointed, the model of the phase in flight exported",
    ),
    ExitCode(SIGTERM_EXIT_CODE, "preemption", "RestartJob", "the pod was stopped (SIGTERM)"),
)
#: Code -> its row.
BY_CODE: Final = {row.code: row for row in EXIT_CODES}


def cause_of(exit_code: int) -> str:
    """The restart ledger's cause of a pod that ended with ``exit_code`` (``failure`` when the
    table does not name it)."""
    row = BY_CODE.get(exit_code)
    return row.cause if row is not None else "failure"


def aborting_codes() -> tuple[int, ...]:
    """The codes whose pods abort the Volcano Job (each gets a job policy of its own)."""
    return tuple(row.code for row in EXIT_CODES if row.action == "AbortJob")
