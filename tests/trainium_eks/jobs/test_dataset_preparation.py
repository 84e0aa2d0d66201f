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
        (
            {"preparation_enabled": "true", "training_phases": "1", "preparation_pods": "40"},
            "preparation_pods",
            r"all pods must run at once",
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


def test_given_preparation_enabled_then_the_synth_review_says_where_the_dataset_comes_from():
    from trainium_eks.report.review import training_review

    assert not any("prepared from" in line for line in training_review(config_from_context({})))
    lines = training_review(
        config_from_context({"preparation_enabled": "true", "training_phases": "1", "preparation_pods": "6"})
    )
    assert (
        "  dataset:      prepared from fsx:/dataset/corpus by 6 pods x 16 CPUs into "
        "/data/datasets/bert-wikicorpus-seq128"
    ) in lines


def test_given_preparation_enabled_then_it_replaces_staging_and_the_job_is_submitted_after_it():
    template = synth_training(**PREPARATION_ON)
    jobs = {
        obj["metadata"]["name"].split("-")[0]: (logical_id, obj)
        for logical_id, obj in k8s_manifests(template)
        if obj["kind"] == "Job"
    }
    assert set(jobs) == {"prepare", "submit"}  # no staging Job
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
