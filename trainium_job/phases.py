"""Pretraining phases run one after another by the same pods: phase 1, then phase 2 from it.

BERT is pretrained in two phases (sequence length 128, then 512 from phase 1's weights); one
Volcano Job runs them in order (:func:`trainium_job.worker.worker_script`), so the nodes the
gang got stay with it and phase 2 starts as soon as phase 1 has ended. Each phase is a
:class:`~trainium_job.spec.BertJobSpec` of its own: its shards, its compile-cache set (its graphs
are new), its run directory. What the pods share is the launcher, and so the model.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import ConfigError
from .spec import BertJobSpec, context_key

#: Fields every phase takes from the first: what torchrun, the pods and the Volcano Job are.
SHARED_FIELDS = (
    "model",
    "nproc_per_node",
    "rdzv_backend",
    "max_restarts",
    "max_retry",
    "fabric_check",
    "fabric_check_min_busbw_gbps",
)
#: Most phases one job runs (the reference recipe has two).
MAX_PHASES = 2


@dataclass(frozen=True)
class TrainingPhases:
    """The phases of one job, in the order they run (checked when built).

    A later phase starts from weights (``init_from``) and never shares a run directory or a
    compile-cache set with another phase: a run directory holds one schedule, and the cache set's
    precompile marker would let the second phase skip compiling its own graphs.
    """

    #: One or :data:`MAX_PHASES` job specs.
    phases: tuple[BertJobSpec, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "phases", tuple(self.phases))
        if not 1 <= len(self.phases) <= MAX_PHASES or not all(
            isinstance(p, BertJobSpec) for p in self.phases
        ):
            raise ConfigError(
                "training_phases", len(self.phases), f"give 1 to {MAX_PHASES} BertJobSpec phases, in order"
            )
        first = self.phases[0]
        for later in self.phases[1:]:
            for name in SHARED_FIELDS:
                if getattr(later, name) != getattr(first, name):
                    raise ConfigError(
                        context_key(name),
                        getattr(later, name),
                        f"every phase runs in the same pods as phase 1, whose {name} is {getattr(first, name)!r}",
                    )
            if later.init_from is None:
                raise ConfigError(
                    context_key("init_from"),
                    None,
                    "a later phase starts from weights: give the previous run's",
                )
        for name in ("run_name", "cache_set"):
            values = [getattr(p, name) for p in self.phases]
            if len(set(values)) != len(values):
                raise ConfigError(
                    context_key(name), values[-1], "each phase needs its own: two phases would share it"
                )

    @property
    def first(self) -> BertJobSpec:
        """The phase that runs first: its launcher is the job's."""
        return self.phases[0]


def as_phases(spec: BertJobSpec | TrainingPhases) -> TrainingPhases:
    """``spec`` as phases: a single spec is one phase."""
    return spec if isinstance(spec, TrainingPhases) else TrainingPhases((spec,))
