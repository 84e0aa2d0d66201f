"""The training job's submission: what must be there before its gang may ask for Trainium nodes.

The CDK job does not apply its Volcano Job; it applies a small batch Job on the system nodes (the
submitter, ``training.launch.submit``) that waits, bounded, for the job's inputs (the first
phase's shard set staged and verified; for phase 2 alone, its imported start too), checks the
spend against the ceiling, and only then creates the Volcano Job, owned by itself: the gang's
pods, and with them the Trainium nodes Karpenter launches for them, exist only once the data is
there. Deleting the submitter (a changed job, ``cdk destroy``) deletes the Volcano Job with it
(Kubernetes garbage collection of dependents, background by default).

Why not what Volcano has (volcano-sh/volcano v1.15.0): a task's ``dependsOn`` waits for the
other task's pods to run, not to finish (docs/design/task-launch-order-within-job.md); JobFlow,
whose controller the pinned chart runs, starts a step once its targets are Completed, but every
step is a Volcano Job made from a JobTemplate (pkg/controllers/jobflow/jobflow_controller_action.go
L76-140, L254-279: the batch Job that stages and the Indexed Job that prepares a shard set cannot
be steps), and a step that ends Aborted leaves the flow neither failed nor done (L150-158,
state/running.go L25-37). Scheduling gates hold pods without a node, but the job controller
copies them into every pod it recreates (job_controller_util.go L46-60): each restart of the gang
would wait for a controller of our own to lift them, and gated pods count as pending for the
gang's own timeout.

This module is the submitter's input, rendered at synth as JSON (standard library only).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Final

from .naming import spec_digest
from .pod_program.description import Budget
from .waits import Wait

#: The format of :class:`Submission`'s JSON.
VERSION: Final = 1
#: Where the submitter finds the Volcano Job it creates: a ConfigMap's key, mounted as a file.
MANIFEST_KEY: Final = "job.json"
MANIFEST_DIR: Final = "/run/trainium-job"
#: The labels the batch Job controller puts on its pods, which the downward API passes to the
#: submitter so that the Volcano Job it creates names its owner (Kubernetes docs, "Well-Known
#: Labels, Annotations and Taints": ``batch.kubernetes.io/controller-uid`` and ``job-name``, set
#: on Jobs and their pods from Kubernetes 1.27).
JOB_UID_LABEL: Final = "batch.kubernetes.io/controller-uid"
JOB_NAME_LABEL: Final = "batch.kubernetes.io/job-name"
JOB_UID_ENV: Final = "SUBMITTER_JOB_UID"
JOB_NAME_ENV: Final = "SUBMITTER_JOB_NAME"
#: The Volcano Job's annotation naming the submitter that creates it (:func:`submission_key`).
SUBMISSION_ANNOTATION: Final = "trainium-eks/submission"


def submission_key(waits: tuple[Wait, ...], image_key: str) -> str:
    """What a job's submitter is, as a key the job's name hashes (the job carries it as
    :data:`SUBMISSION_ANNOTATION`): its waits and its image (``image_key``: the tools image's tag).

    A batch Job's pod template cannot change, so a changed submitter is a new Job; and the
    Volcano Job is owned by its submitter, so the old submitter's deletion takes its Volcano Job
    with it. The job's name must then change too, or the new submitter would find the old job
    (409) and see it deleted."""
    return spec_digest({"waits": [dataclasses.asdict(w) for w in waits], "image": image_key})


@dataclass(frozen=True)
class Submission:
    """What the submitter does: wait for ``waits``, check ``budget``, create the Volcano Job in
    ``manifest_file`` in ``namespace``, owned by its own Job."""

    namespace: str
    manifest_file: str
    waits: tuple[Wait, ...] = ()
    budget: Budget | None = None
    version: int = VERSION

    def dumps(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True, separators=(",", ":"))

    @classmethod
    def loads(cls, text: str) -> Submission:
        raw: dict[str, Any] = json.loads(text)
        if raw.get("version") != VERSION:
            raise ValueError(
                f"submission version {raw.get('version')!r}: this submitter runs version {VERSION} "
                "(the image is older or newer than the job: rebuild and redeploy both)"
            )
        budget = raw.get("budget")
        return cls(
            namespace=str(raw["namespace"]),
            manifest_file=str(raw["manifest_file"]),
            waits=tuple(Wait(**w) for w in raw.get("waits", ())),
            budget=Budget(**budget) if budget is not None else None,
        )

    @property
    def bound_s(self) -> int:
        """Seconds the submitter may wait in all."""
        return sum(w.deadline_s for w in self.waits)
