"""DatasetPreparation: the Indexed Job, its configuration keys, and its command run for real.

The Job's own container command (from the synthesized object) is run as local processes with
``JOB_COMPLETION_INDEX`` set as Kubernetes sets it, ``/data`` (the FSx mount) being a temporary
directory; the set it publishes must equal the single-machine tool's, byte for byte.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import Stack

from tests.support import PREPARATION_ON, k8s_manifests, synth_training, validate_k8s
from tests.trainium_eks.jobs.training_support import bare_cluster
from training.dataprep.prepare_data import build_parser
from training.dataprep.synthetic import build_vocab, write_corpus
from trainium_eks.config import config_from_context
from trainium_eks.jobs.dataset_preparation import SETTING_FLAGS, DatasetPreparation
from trainium_job.errors import ConfigError
from trainium_job.paths import job_paths
from trainium_job.submission import Submission

REPO = Path(__file__).resolve().parents[3]
PATHS = job_paths(dataset_name="own-corpus", cache_set="c", run_name="r")
ARGS = {
    "dupe_factor": "2",
    "seed": "5",
    "chunk_mb": "0.02",
    "samples_per_shard": "250",
    "whole_word_mask": "true",
}


def preparation(**overrides: Any) -> DatasetPreparation:
    cluster = bare_cluster()
    props: dict[str, Any] = dict(
        cluster=cluster,
        namespace="training",
        image="registry/training:abc",
        image_key="abc",
        paths=PATHS,
        claim_name="fsx-claim",
        service_account="bert-trainer",
        corpus="fsx:/dataset/corpus",
        vocab="fsx:/dataset/vocab.txt",
        pods=3,
        cpus_per_pod=1,
        args=ARGS,
    )
    props.update(overrides)
    return DatasetPreparation(Stack.of(cluster), "Prep", **props)


def test_given_the_setting_flags_then_each_is_a_prepare_data_flag_of_the_right_kind():
    actions = build_parser()._option_string_actions
    for flag, takes_value in SETTING_FLAGS.items():
        assert f"--{flag}" in actions, flag
        assert (actions[f"--{flag}"].nargs != 0) == takes_value, flag


def test_given_a_preparation_then_the_job_is_an_indexed_job_valid_for_kubernetes_1_36():
    prep = preparation()
    job = prep.job
    validate_k8s(job, "1.36")
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 3, 3)
    assert spec["maxFailedIndexes"] == 0 and spec["backoffLimitPerIndex"] == 2
    assert spec["podFailurePolicy"]["rules"][0]["onExitCodes"]["values"] == [2]  # usage errors: no retry
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never" and pod["automountServiceAccountToken"] is False
    assert pod["topologySpreadConstraints"][0]["labelSelector"]["matchLabels"] == {
        "batch.kubernetes.io/job-name": prep.job_name
    }
    (container,) = pod["containers"]
    assert container["command"][:3] == ["python", "-m", "training.dataprep.prepare_indexed"]
    assert (
        container["resources"]["requests"]
        == container["resources"]["limits"]
        == {"cpu": "1", "memory": "2Gi"}
    )
    # Hardened like the staging pod: no capabilities, read-only root with a scratch /tmp.
    sc = container["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["allowPrivilegeEscalation"] is False
    assert (
        sc["readOnlyRootFilesystem"] is True
        and {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    )
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert prep.job_name.startswith("prepare-dataset-")
    assert preparation(pods=2).job_name != prep.job_name  # a changed spec is a new Job


def test_given_the_jobs_own_command_run_as_local_pods_then_the_set_equals_the_single_machine_one(tmp_path):
    root = tmp_path / "fsx"
    (root / "dataset" / "corpus").mkdir(parents=True)
    text = write_corpus(root / "dataset" / "corpus" / "part-0.txt", n_docs=120, seed=8)
    write_corpus(root / "dataset" / "corpus" / "part-1.txt", n_docs=60, seed=9)
    build_vocab([text], root / "dataset" / "vocab.txt", vocab_size=400)
    command = [
        part.replace("/data/", f"{root}/")
        for part in preparation().job["spec"]["template"]["spec"]["containers"][0]["command"]
    ]
    assert command[0] == "python"  # the image's; here the test environment's
    pods = [
        subprocess.Popen(
            [sys.executable, *command[1:]],
            cwd=REPO,
            env={**os.environ, "JOB_COMPLETION_INDEX": str(i)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(3)
    ]
    outputs = [pod.communicate(timeout=300) for pod in pods]
    assert [pod.returncode for pod in pods] == [0, 0, 0], [err for _, err in outputs]
    data_dir = Path(PATHS.data_dir.replace("/data/", f"{root}/"))
    assert Path(PATHS.dataset_marker.replace("/data/", f"{root}/")).read_text().endswith(" shards\n")
    flags = [f"--{k}" if v == "true" else f"--{k}={v}" for k, v in ARGS.items()]
    single = subprocess.run(
        [
            sys.executable,
            "-m",
            "training.dataprep.prepare_data",
            "--input",
            str(root / "dataset" / "corpus"),
            "--vocab",
            str(root / "dataset" / "vocab.txt"),
            "--output_dir",
            str(tmp_path / "single"),
            "--num_workers",
            "1",
            "--no_progress",
            *flags,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert single.returncode == 0, single.stderr
    names = sorted(p.name for p in (tmp_path / "single").iterdir())
    assert sorted(p.name for p in data_dir.iterdir() if p.name != ".staged") == names
    assert len(names) >= 4  # manifest.json and several shards
    for name in names:
        assert (data_dir / name).read_bytes() == (tmp_path / "single" / name).read_bytes(), name


@pytest.mark.parametrize(
    "context, field, fix",
    [
        # On the Trainium nodegroup: all pods at once on desired_nodes nodes, beside the DaemonSets.
        (
            {
                "trainium_capacity": "nodegroup",
                "preparation_enabled": "true",
                "training_phases": "1",
                "preparation_pods": "40",
            },
            "preparation_pods",
            r"put 20 on some of the 2 trn1\.32xlarge node\(s\).*all pods must run at once",
        ),
        (
            {
                "trainium_capacity": "nodegroup",
                "preparation_enabled": "true",
                "training_phases": "1",
                "preparation_pods": "8",
                "preparation_cpus_per_pod": "32",
            },
            "preparation_pods",
            r"put 4 on some of the 2 trn1\.32xlarge node\(s\)",
        ),
        # With Karpenter (the default): under the preparation NodePool's limit, 2 pods of 16 CPUs
        # per m7i.12xlarge, 4 nodes of 48 vCPUs at most.
        (
            {"preparation_enabled": "true", "training_phases": "1", "preparation_pods": "9"},
            "preparation_pods",
            r"9 pods x 16 CPUs take 5 preparation nodes \(2 per m7i\.12xlarge\), 240 vCPUs, over the "
            r"preparation NodePool's limit of 192.*give at most 8 pods of 16 CPUs",
        ),
        (
            {"preparation_enabled": "true", "training_phases": "1", "preparation_cpus_per_pod": "47"},
            "preparation_cpus_per_pod",
            r"does not fit on the largest preparation node, a m7i\.12xlarge .*give at most 46 .*PREPARATION_NODES",
        ),
        ({"preparation_cpus_per_pod": "0"}, "preparation_cpus_per_pod", r"at least 1"),
        ({"preparation_corpus": "s3://bucket/corpus"}, "preparation_corpus", r"fsx:/dataset/corpus"),
        ({"preparation_vocab": "fsx:/../etc/passwd"}, "preparation_vocab", r"no '\.\.'"),
        (
            {"preparation_args": '{"dupe": "5"}'},
            "preparation_args",
            r"not a setting of training\.dataprep\.prepare_data",
        ),
        (
            {"preparation_args": '{"seed": "1; rm -rf /"}'},
            "preparation_args",
            r"plain number, name or file pattern",
        ),
        # Values are parsed and checked by the tool's own parser and checks (training.dataprep.prep_settings).
        (
            {"preparation_args": '{"dupe_factor": "many"}'},
            "preparation_args",
            r"training\.dataprep\.prepare_data refuses it: argument --dupe_factor: invalid int value: 'many'",
        ),
        (
            {"preparation_args": '{"max_seq_len": "128", "max_pred_len": "126"}'},
            "preparation_args",
            r"--max_pred_len 126: must be between 1 and --max_seq_len - 3 = 125",
        ),
        (
            {"preparation_args": '{"num_shards": "2", "samples_per_shard": "9"}'},
            "preparation_args",
            r"not allowed with argument --num_shards",
        ),
        ({"preparation_args": '{"encoding": "utf-16"}'}, "preparation_args", r"not ASCII-compatible"),
        ({"preparation_args": '{"whole_word_mask": "yes"}'}, "preparation_args", r"a switch"),
        ({"preparation_enabled": "maybe"}, "preparation_enabled", r"true or false"),
        (
            {"preparation_enabled": "true", "training_enabled": "false"},
            "preparation_enabled",
            r"training_enabled=true",
        ),
    ],
)
def test_given_a_bad_preparation_key_then_one_error_names_it(context, field, fix):
    with pytest.raises(ConfigError) as err:
        config_from_context(context)
    assert err.value.field_name == field and re.search(fix, err.value.fix), str(err.value)


@pytest.mark.parametrize(
    ("capacity", "pods", "cpus"),
    [("karpenter", "8", "16"), ("karpenter", "1", "46"), ("nodegroup", "8", "31")],
)
def test_given_the_largest_preparation_that_fits_then_it_is_accepted(capacity, pods, cpus):
    # One more pod or CPU is refused (the cases above; 8 x 32 on the nodegroup: 4 x 32 CPUs and the
    # DaemonSets are more than a trn1.32xlarge's 127.61 allocatable vCPUs).
    config_from_context(
        {
            "trainium_capacity": capacity,
            "preparation_enabled": "true",
            "training_phases": "1",
            "preparation_pods": pods,
            "preparation_cpus_per_pod": cpus,
        }
    )


def test_given_preparation_enabled_then_the_synth_review_says_where_the_dataset_comes_from_and_on_what():
    from trainium_eks.report.review import training_review

    assert not any("prepared from" in line for line in training_review(config_from_context({})))
    prepared = {"preparation_enabled": "true", "training_phases": "1", "preparation_pods": "6"}
    lines = training_review(config_from_context(prepared))
    head = (
        "  dataset:      prepared from fsx:/dataset/corpus by 6 pods x 16 CPUs into "
        "/data/datasets/bert-wikicorpus-seq128"
    )
    # 3 nodes of 2 pods each at m7i.12xlarge's $2.4192/h; the pool's limit 4 of them
    assert lines[lines.index(head) + 1] == (
        "                on CPU nodes Karpenter launches for them, not on Trainium: at most 3 x m7i.12xlarge "
        "(up to 2 pods each), $7.26/h while they run; the pool's limit 192 vCPUs of m7i ($9.68/h)"
    )
    lines = training_review(config_from_context({**prepared, "trainium_capacity": "nodegroup"}))
    assert lines[lines.index(head) + 1] == (
        "                on the Trainium nodes (3 pods per node), before the training job is submitted"
    )


@pytest.mark.parametrize("capacity", ["karpenter", "nodegroup"])
def test_given_a_capacity_mode_then_the_preparation_pods_run_on_its_cpu_nodes_or_spread_on_trainium(capacity):
    # With Karpenter on the preparation NodePool's nodes, packed (a preferred spread would make
    # Karpenter launch a node per pod); on the nodegroup spread over the Trainium nodes.
    template = synth_training(**({**PREPARATION_ON, "trainium_capacity": capacity}))
    (prep,) = [
        o
        for _, o in k8s_manifests(template)
        if o["kind"] == "Job" and o["metadata"]["name"].startswith("prepare-")
    ]
    pod = prep["spec"]["template"]["spec"]
    if capacity == "karpenter":
        assert pod["nodeSelector"] == {"trainium-eks/pool": "preparation"}
        assert pod["tolerations"] == [
            {"key": "trainium-eks/dataset", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
        ]
        assert "topologySpreadConstraints" not in pod
    else:
        assert pod["nodeSelector"] == {"trainium-eks/pool": "trainium"}
        assert pod["topologySpreadConstraints"][0]["topologyKey"] == "kubernetes.io/hostname"


def test_given_the_construct_on_preparation_nodes_then_its_size_is_checked_against_that_pool():
    prep = preparation(on_preparation_nodes=True)
    assert prep.job["spec"]["template"]["spec"]["nodeSelector"] == {"trainium-eks/pool": "preparation"}
    with pytest.raises(ConfigError) as err:
        preparation(on_preparation_nodes=True, pods=9, cpus_per_pod=16)
    assert err.value.field_name == "pods" and "preparation NodePool's limit" in err.value.fix


def test_given_preparation_enabled_then_it_replaces_staging_and_the_job_is_submitted_after_it():
    template = synth_training(**PREPARATION_ON)
    jobs = {
        obj["metadata"]["name"].split("-")[0]: (logical_id, obj)
        for logical_id, obj in k8s_manifests(template)
        if obj["kind"] == "Job"
    }
    # No staging Job; the held-out set's Job waits for the prepared shards (test_heldout_staging.py)
    assert set(jobs) == {"prepare", "submit", "heldout"}
    _, prep = jobs["prepare"]
    validate_k8s(prep, "1.36")
    command = prep["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--marker") + 1] == "/data/datasets/bert-wikicorpus-seq128/.staged"
    assert command[command.index("--output_dir") + 1] == "/data/datasets/bert-wikicorpus-seq128"
    assert command[command.index("--input") + 1] == "/data/dataset/corpus"
    assert command[-2:] == ["--dupe_factor", "10"]
    # The training job is submitted once the prepared shards' marker is there (no staging Job writes
    # a failed marker for them: the wait ends at its deadline).
    _, submitter = jobs["submit"]
    submission = Submission.loads(submitter["spec"]["template"]["spec"]["containers"][0]["command"][3])
    (wait,) = submission.waits
    assert wait.ready == "/data/datasets/bert-wikicorpus-seq128/.staged" and wait.failed is None


def test_given_preparation_args_then_they_are_parsed_by_prepare_datas_own_parser():
    from training.dataprep.prepare_data import build_parser
    from trainium_eks.jobs.dataset_preparation import parse_settings

    flags, parsed = parse_settings({"dupe_factor": "7", "whole_word_mask": "true", "input_pattern": "*.md"})
    assert flags == ["--dupe_factor", "7", "--input_pattern", "*.md", "--whole_word_mask"]
    own = build_parser().parse_args(
        ["--input", "corpus", "--vocab", "vocab.txt", "--output_dir", "out", *flags]
    )
    assert vars(parsed) == vars(own)
    assert parsed.dupe_factor == 7 and parsed.whole_word_mask is True
