"""The worker container of a Volcano Job rendered by :func:`trainium_job.job.render_job`, for the
tests that read one value of it (its script, its environment, its resources)."""

from __future__ import annotations

from typing import Any

from trainium_job.gang import Gang
from trainium_job.instances import instance_facts
from trainium_job.job import render_job
from trainium_job.phases import TrainingPhases
from trainium_job.plan import plan_training
from trainium_job.spec import BertJobSpec


def rendered_job(
    spec: BertJobSpec | TrainingPhases | None = None, *, instance_type: str = "trn1.32xlarge", nodes: int = 2
) -> dict[str, Any]:
    """The Volcano Job of one phase, or of ``TrainingPhases``, rendered with placeholder names."""
    spec = spec or BertJobSpec()
    first = spec.first if isinstance(spec, TrainingPhases) else spec
    facts = instance_facts(instance_type)
    gang = Gang(
        facts=facts,
        nodes=nodes,
        image="img",
        image_key="img",
        name_prefix="trn-bert",
        namespace="training",
        queue="training",
        claim_name="fsx-claim",
    )
    return render_job(
        spec, plan=plan_training(first, facts=facts, nodes=nodes, max_nodes=nodes), gang=gang
    ).manifest


def worker_container(
    spec: BertJobSpec | TrainingPhases | None = None, *, instance_type: str = "trn1.32xlarge", nodes: int = 2
) -> dict[str, Any]:
    """The one container of the Job's worker task (of one phase, or of ``TrainingPhases``),
    rendered with placeholder names."""
    manifest = rendered_job(spec, instance_type=instance_type, nodes=nodes)
    (container,) = manifest["spec"]["tasks"][0]["template"]["spec"]["containers"]
    return dict(container)
