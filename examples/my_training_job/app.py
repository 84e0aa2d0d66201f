"""Your own training program on Trainium, in an app of your own built from trainium_eks.

One stack: the library's platform (VPC, EKS, Karpenter's Trainium pool, FSx, Volcano, monitoring)
and, on it, your job: the script in ``job/`` built in the region into the platform's repository
(no Docker where you deploy), run by 2 x trn1.32xlarge as the library runs BERT: gang-scheduled,
checked, checkpointing into its run directory on FSx, bounded in time and in spend.

Synthesize with ``cdk synth`` (cdk.json) or ``python app.py`` after ``pip install trainium-eks``;
nothing here reads the library's repository.
"""

from __future__ import annotations

from pathlib import Path

import aws_cdk as cdk
from constructs import Construct

from trainium_eks import (
    JobImage,
    PlatformConfig,
    ProgramJobSpec,
    TrainingCommand,
    TrainiumPlatform,
    TrainiumTrainingJob,
    check_acknowledgements,
    instance_facts,
    nag_plugins,
)

HERE = Path(__file__).resolve().parent
#: The platform's settings: its defaults (us-west-2, 2 x trn1.32xlarge launched per job), no BERT.
SETTINGS = PlatformConfig(name_prefix="toy", training_enabled=False)
#: Your job: the script your image holds and its arguments, and where its run directory is
#: (ProgramJobSpec's defaults for the rest: a worker per NeuronCore, the fabric check, 3 restarts).
SPEC = ProgramJobSpec(
    command=TrainingCommand(script="/app/train.py", args=("--steps", "2000")),
    run_name="toy-regression",
)


class ToyTraining(cdk.Stack):
    """The platform, and a job of your own program on it (``spec``: default :data:`SPEC`)."""

    def __init__(self, scope: Construct, id: str, *, spec: ProgramJobSpec = SPEC) -> None:
        super().__init__(scope, id, env=cdk.Environment(region=SETTINGS.region))
        platform = TrainiumPlatform(self, "Platform", config=SETTINGS)
        target = platform.workload_target
        image = JobImage.from_directory(
            self, "JobImage", directory=HERE / "job", repository=target.repository
        )
        self.job = TrainiumTrainingJob(
            self,
            "Job",
            cluster=target.cluster,
            facts=instance_facts(SETTINGS.instance_type),
            nodes=SETTINGS.desired_nodes,
            max_nodes=SETTINGS.max_nodes,
            spec=spec,
            image=image,
            claim_name=target.claim_name,
            repository=target.repository,
            namespace=target.namespace,
            queue=target.queue_name,
            # Karpenter launches the nodes for the job: a gang not complete after this is aborted.
            gang_wait_minutes=SETTINGS.trainium_gang_wait_minutes,
            budget_usd=100,
            depends_on=[*target.queue_dependencies, *target.claim_dependencies],
        )


def main(outdir: str | None = None, *, spec: ProgramJobSpec = SPEC) -> cdk.App:
    """Synthesize the app into ``outdir`` (default the CDK's ``cdk.out``), its job ``spec``."""
    app = cdk.App(outdir=outdir)
    ToyTraining(app, "ToyTraining", spec=spec)
    # cdk-nag gates the synth: AwsSolutions and the library's TrainiumEks pack. A finding nobody
    # acknowledged fails app.synth(), and each acknowledgement must match a finding of the report
    # (the library's constructs acknowledge their own, each with its reason).
    cdk.Validations.of(app).add_plugins(*nag_plugins(app))
    assembly = app.synth()
    check_acknowledgements(app, assembly.directory)
    return app


if __name__ == "__main__":
    import sys

    main(sys.argv[1] if len(sys.argv) > 1 else None)
