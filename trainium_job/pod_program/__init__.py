"""The training pods' program: one entry point, run by every training container, that reads the
job's rendered description and runs it.

``python -m trainium_job.pod_program '<description JSON>'``: the description
(:mod:`.description`) says what to wait for and how long, what to precompile, the fabric check,
each phase's training command, the export and the spend ceiling; the program
(:mod:`.program`) runs them in order, bounds every wait, forwards the pod's SIGTERM to its
children within the grace period, counts the job's spend (:mod:`.spend`) and serves its own
metrics (:mod:`.metrics`). The CDK job and the TorchX component render the description
(:func:`trainium_job.worker.job_description`). Standard library only.
"""

from .description import (
    MODULE,
    VERSION,
    Budget,
    DescriptionError,
    Export,
    FabricCheck,
    JobDescription,
    Phase,
    Precompile,
    Rendezvous,
    Upload,
    dumps,
    loads,
)

__all__ = [
    "MODULE",
    "VERSION",
    "Budget",
    "DescriptionError",
    "Export",
    "FabricCheck",
    "JobDescription",
    "Phase",
    "Precompile",
    "Rendezvous",
    "Upload",
    "dumps",
    "loads",
]
