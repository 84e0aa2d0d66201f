"""The held-out staging Jobs as the default training stack applies them, and what the training
pods are told of their sets (``--eval_dir``, ``--eval_every``; no wait).

The Job's command is the one ``tests/training/dataprep/test_heldout.py`` runs end to end; here is
what the template holds: one Job per phase on the dataset node, after the phase's shards, retried
and marked like the staging Job.
"""

from __future__ import annotations

import pytest
from aws_cdk.assertions import Match, Template

from tests.support import MANIFEST, k8s_manifests, submitted_jobs, synth_training, validate_k8s
from trainium_eks.config import config_from_context
from trainium_eks.jobs.dataset_staging import STAGING_RESOURCES
from trainium_eks.jobs.heldout_staging import (
    PG19_TEST_PARQUET,
    HeldOutStaging,
    check_heldout,
    heldout_job,
    heldout_run,
)
from trainium_job.dataset_runner import MODULE as RUNNER
from trainium_job.dataset_runner import DatasetRun
from trainium_job.errors import ConfigError
from trainium_job.paths import job_paths
from trainium_job.pod_program.description import loads
from trainium_job.scheduling import DATASET_NODE_LABEL, TRAINIUM_NODE_LABEL

PHASES = {
    # data dir, shape, the staging Job whose marker it waits for (its construct's ID)
    "HeldOutStaging": ("/data/datasets/bert-wikicorpus-seq128", ("128", "20"), "DatasetStaging"),
    "Phase2HeldOutStaging": ("/data/datasets/bert-wikicorpus-seq512", ("512", "80"), "Phase2DatasetStaging"),
}


def heldout_jobs(template: dict) -> dict[str, dict]:
    """Logical ID -> the held-out staging Job it applies."""
    return {
        logical_id: obj
        for logical_id, obj in k8s_manifests(template)
        if obj["kind"] == "Job"
        and obj["metadata"].get("labels", {}).get("app.kubernetes.io/name") == "heldout-staging"
    }


def flags(command: list[str]) -> dict[str, str]:
    return {command[i][2:]: command[i + 1] for i in range(len(command) - 1) if command[i].startswith("--")}


def test_given_the_default_app_then_each_phase_has_a_held_out_staging_job_after_its_shards(training_json):
    jobs = heldout_jobs(training_json)
    assert sorted(logical_id.split("Job")[0] for logical_id in jobs) == sorted(PHASES)
    for logical_id, job in jobs.items():
        data_dir, (tokens, predictions), staging_id = PHASES[logical_id.split("Job")[0]]
        validate_k8s(job, "1.36")
        assert job["metadata"]["name"].startswith("heldout-")
        pod = job["spec"]["template"]["spec"]
        # On the dataset node Karpenter launches (the default capacity), as the staging Job
        assert pod["nodeSelector"] == dict(DATASET_NODE_LABEL)
        (container,) = pod["containers"]
        assert container["resources"] == STAGING_RESOURCES
        assert container["command"][:3] == ["python", "-m", RUNNER]
        run = DatasetRun.loads(container["command"][3])
        # The pod's program runs the held-out tool on the phase's shards, their vocabulary and shape
        assert run.command[:3] == ("python", "-m", "training.dataprep.heldout")
        assert flags(list(run.command)) == {
            "source": PG19_TEST_PARQUET,
            "data_dir": data_dir,
            "vocab": f"{data_dir}/vocab.txt",
            "output_dir": f"{data_dir}-heldout",
            "marker": f"{data_dir}-heldout/.staged",
            "max_seq_len": tokens,
            "max_pred_len": predictions,
            "samples": "10000",
            "num_workers": "2",
        }
        assert run.failed == f"{data_dir}-heldout.staging-failed" and run.attempts == 3
        # It waits for the phase's shards (their staging Job's marker, written after the vocab.txt)
        (wait,) = run.waits
        assert (wait.ready, wait.failed) == (f"{data_dir}/.staged", f"{data_dir}.staging-failed")
        assert wait.failed_by.startswith("stage-dataset-")
        # And is applied after that staging Job (so after the service account the staging needs)
        depends = training_json["Resources"][logical_id]["DependsOn"]
        assert any(d.startswith(f"{staging_id}Job") for d in depends)
    # The phase-2 set's wait covers phase 1's staging, then phase 2's
    deadlines = {
        k.split("Job")[0]: DatasetRun.loads(j["spec"]["template"]["spec"]["containers"][0]["command"][3])
        .waits[0]
        .deadline_s
        for k, j in jobs.items()
    }
    assert deadlines["Phase2HeldOutStaging"] == 2 * deadlines["HeldOutStaging"]


def test_given_the_default_app_then_the_pods_evaluate_the_held_out_sets_and_never_wait_for_them(
    training_json,
):
    (volcano,) = submitted_jobs(training_json)
    (container,) = volcano["spec"]["tasks"][0]["template"]["spec"]["containers"]
    described = loads(container["command"][-1])
    intervals = []
    for phase, data_dir in zip(described.phases, (PHASES[k][0] for k in PHASES), strict=True):
        train = flags(list(phase.train))
        assert train["eval_dir"] == f"{data_dir}-heldout"
        intervals.append(train["eval_every"])
        assert all("-heldout" not in wait.ready for wait in phase.waits)
    assert intervals == ["1400", "200"]


def test_given_heldout_off_then_no_job_and_no_evaluation():
    template = synth_training(heldout_enabled="false")
    assert heldout_jobs(template) == {}
    (volcano,) = submitted_jobs(template)
    described = loads(volcano["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["command"][-1])
    assert all("--eval_dir" not in phase.train for phase in described.phases)


def test_given_a_nodegroup_then_the_pod_goes_on_a_trainium_node_with_the_staging_pods_requests():
    paths = job_paths(dataset_name="wiki", cache_set="c", run_name="r")
    run = heldout_run(source=PG19_TEST_PARQUET, paths=paths, vocab="/data/v.txt", shape=(128, 20), samples=10)
    job = heldout_job(
        name="heldout-x",
        namespace="training",
        image="i",
        run=run,
        claim_name="fsx-claim",
        service_account="sa",
        on_dataset_node=False,
    )
    pod = job["spec"]["template"]["spec"]
    # The node fit reserves the staging pod's requests on every Trainium node (trainium_eks.jobs.node_fit)
    assert pod["nodeSelector"] == dict(TRAINIUM_NODE_LABEL)
    assert pod["containers"][0]["resources"] == STAGING_RESOURCES


@pytest.mark.parametrize(
    ("props", "field"),
    [
        ({"source": "http://example.org/x.parquet"}, "HeldOutStaging.source"),
        ({"vocab": "/tmp/vocab.txt"}, "HeldOutStaging.vocab"),
        ({"vocab": "/data/../etc/vocab.txt"}, "HeldOutStaging.vocab"),
        ({"shape": (128, 126)}, "HeldOutStaging.shape"),
        ({"samples": 0}, "HeldOutStaging.samples"),
    ],
)
def test_given_bad_props_then_refused_naming_the_prop(props, field):
    given = {
        "source": PG19_TEST_PARQUET,
        "vocab": "/data/v.txt",
        "shape": (128, 20),
        "samples": 10000,
        **props,
    }
    with pytest.raises(ConfigError) as caught:
        check_heldout(**given)
    assert caught.value.field_name == field


def test_given_a_library_app_then_the_construct_applies_one_job_on_its_cluster():
    from tests.trainium_eks.jobs.training_support import bare_cluster

    cluster = bare_cluster()
    config = config_from_context({})
    phase = config.phase_jobs[0]
    HeldOutStaging(
        cluster.stack,
        "HeldOut",
        cluster=cluster,
        namespace="training",
        image="123456789012.dkr.ecr.us-west-2.amazonaws.com/trn/training:t",
        image_key="t",
        paths=phase.paths,
        claim_name="fsx-claim",
        service_account="training",
        vocab=phase.vocab,
        shape=(128, 20),
        samples=10000,
    )
    Template.from_stack(cluster.stack).resource_count_is(MANIFEST, 1)
    Template.from_stack(cluster.stack).has_resource_properties(
        MANIFEST, {"Manifest": Match.string_like_regexp("heldout-")}
    )
