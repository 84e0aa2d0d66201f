"""The script of a two-phase job, run by bash with stand-ins: the phases in order, a finished one
skipped, each with its own cache and dataset, the model exported once by the pod of index 0.

The script is the one :func:`trainium_job.job.render_job` puts in the pod for the reference
phases (``phase2_spec``), with ``/data`` moved under a temporary directory. The stand-ins:
``torchrun`` records its ``--output_dir`` / ``--init_from`` / ``--seq_len`` and, as the trainer
does at its ``--max_steps`` (training.trainer.pretrain ``mark_complete``), writes the run's
``COMPLETE`` unless ``SHORT`` names that run; ``neuron_parallel_compile`` records the cache its
environment names; ``python`` answers the driver and fabric checks and records an export (failing
it with ``EXPORT_RC``); the restart ledger's module runs for real.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.trainium_job.rendered import worker_container
from trainium_job.errors import ConfigError
from trainium_job.phases import TrainingPhases
from trainium_job.spec import BertJobSpec, phase2_spec

REPO = Path(__file__).resolve().parents[2]
PHASE1 = BertJobSpec(vocab="/data/datasets/bert-wikicorpus-seq128/vocab.txt")
PHASE2 = phase2_spec(PHASE1, vocab="/data/datasets/bert-wikicorpus-seq512/vocab.txt")
PYTHON = """#!/bin/sh
if [ "$1" = -m ]; then
  case "$2" in
    training.node.driver_check) exit 0 ;;
    training.node.fabric_check) echo "$HOSTNAME" >> {root}/fabric_checks; exit 0 ;;
    training.trainer.export) echo "export $HOSTNAME $3 -> $4 vocab $6" >> {root}/events
      sleep "${{EXPORT_S:-0}}"; [ "${{EXPORT_RC:-0}}" = 0 ] || exit "$EXPORT_RC"
      mkdir -p "$4"; touch "$4/config.json"; echo "exported $3" >> {root}/events; exit 0 ;;
  esac
fi
exec {python} "$@"
"""
TORCHRUN = """#!/bin/bash
case "$*" in *fabric_check*) exit 0 ;; esac
args=" $* "
out=${{args#* --output_dir }}; out=${{out%% *}}
init=none; case "$args" in *" --init_from "*) init=${{args#* --init_from }}; init=${{init%% *}} ;; esac
seq=128; case "$args" in *" --seq_len "*) seq=${{args#* --seq_len }}; seq=${{seq%% *}} ;; esac
echo "train $HOSTNAME $out from $init seq $seq" >> {root}/events
if [ "${{SHORT:-}}" != "$(basename "$out")" ]; then echo '{{"step": 1}}' > "$out/COMPLETE"; fi
exit "${{TRAIN_RC:-0}}"
"""
COMPILER = """#!/bin/sh
echo "precompile $HOSTNAME $NEURON_CC_FLAGS" >> {root}/events
"""


def rendered_script(phases: TrainingPhases | BertJobSpec, nodes: int = 2) -> str:
    return str(worker_container(phases, nodes=nodes)["command"][2])


@pytest.fixture()
def pod(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("python", PYTHON), ("torchrun", TORCHRUN), ("neuron_parallel_compile", COMPILER)):
        (bin_dir / name).write_text(text.format(root=tmp_path, python=sys.executable))
        (bin_dir / name).chmod(0o755)
    for dataset in ("bert-wikicorpus-seq128", "bert-wikicorpus-seq512"):
        (tmp_path / "data" / "datasets" / dataset).mkdir(parents=True)
        (tmp_path / "data" / "datasets" / dataset / ".staged").write_text("1 shards\n")
    return tmp_path


def run_pod(root: Path, index: int, script: str, **env: str) -> subprocess.CompletedProcess[str]:
    script = script.replace("/data/", f"{root}/data/")
    variables = {
        "PATH": f"{root / 'bin'}:{os.environ['PATH']}",
        "PYTHONPATH": str(REPO),
        "HOSTNAME": f"trn-bert-x-worker-{index}",
        "VC_TASK_INDEX": str(index),
        "NODE_NAME": f"node-{index}",
        **env,
    }
    return subprocess.run(["bash", "-c", script], env=variables, capture_output=True, text=True, timeout=120)


def events(root: Path) -> list[str]:
    path = root / "events"
    lines = path.read_text().splitlines() if path.exists() else []
    return [line.replace(str(root), "") for line in lines]


def test_given_two_phases_then_phase_2_trains_at_512_from_phase_1_and_each_is_exported_by_pod_0(pod):
    script = rendered_script(TrainingPhases((PHASE1, PHASE2)))
    for index in (0, 1):
        done = run_pod(pod, index, script)
        assert done.returncode == 0, done.stderr
    run1, run2 = "/data/runs/bert-large-phase1", "/data/runs/bert-large-phase2"
    # The exports run in the background: in order among themselves, not with the training.
    assert [e for e in events(pod) if not e.startswith("export")] == [
        "precompile trn-bert-x-worker-0 --cache_dir=/data/neuron-cache/bert-large-seq128",
        f"train trn-bert-x-worker-0 {run1} from none seq 128",
        "precompile trn-bert-x-worker-0 --cache_dir=/data/neuron-cache/bert-large-seq512",
        f"train trn-bert-x-worker-0 {run2} from {run1} seq 512",
        # pod 1 (here after pod 0): both phases complete, nothing trained, compiled or exported
    ]
    assert sorted(e for e in events(pod) if e.startswith("export ")) == [
        f"export trn-bert-x-worker-0 {run1} -> {run1}/model vocab /data/datasets/bert-wikicorpus-seq128/vocab.txt",
        f"export trn-bert-x-worker-0 {run2} -> {run2}/model vocab /data/datasets/bert-wikicorpus-seq512/vocab.txt",
    ]
    assert "is complete, not run again" in run_pod(pod, 1, script).stdout
    # The fabric check once per pod that trained, before its first phase (pod 1 trained nothing)
    assert (pod / "fabric_checks").read_text().split() == ["trn-bert-x-worker-0"]


def test_given_phase_1_complete_when_the_job_starts_again_then_only_phase_2_trains(pod):
    # Given: a deploy that ran phase 1 to its end (its cache compiled, its model exported)
    script = rendered_script(TrainingPhases((PHASE1, PHASE2)))
    assert run_pod(pod, 0, script, SHORT="bert-large-phase2").returncode == 0
    (pod / "events").unlink()
    # When: the job starts again (a redeploy, a Volcano restart)
    done = run_pod(pod, 0, script)
    # Then: phase 1 is neither trained, compiled nor exported again
    assert done.returncode == 0, done.stderr
    assert sorted(
        e.split()[0] + " " + e.split()[-1 if e.startswith("exported") else 2] for e in events(pod)
    ) == [
        "export /data/runs/bert-large-phase2",
        "exported /data/runs/bert-large-phase2",
        "train /data/runs/bert-large-phase2",
    ]
    assert "phase 1: /data/runs/bert-large-phase1 is complete, not run again" in done.stdout.replace(
        str(pod), ""
    )


def test_given_phase_1_short_of_its_steps_then_phase_2_does_not_start(pod):
    done = run_pod(pod, 0, rendered_script(TrainingPhases((PHASE1, PHASE2))), SHORT="bert-large-phase1")
    assert done.returncode == 0
    assert "phase 1 ended before its --max_steps: phase 2 waits for it" in done.stdout
    assert [e.split()[0] for e in events(pod)] == ["precompile", "train"]


def test_given_a_failing_phase_1_then_the_pod_fails_before_phase_2_and_the_ledger_names_phase_1(pod):
    done = run_pod(
        pod, 0, rendered_script(TrainingPhases((PHASE1, PHASE2))), TRAIN_RC="3", SHORT="bert-large-phase1"
    )
    assert done.returncode == 3
    assert [e.split()[0] for e in events(pod)] == ["precompile", "train"]
    assert (pod / "data" / "runs" / "bert-large-phase1" / "restarts.jsonl").is_file()
    assert not (pod / "data" / "runs" / "bert-large-phase2").exists()


def test_given_failing_exports_then_the_pod_fails_after_training_and_the_next_start_only_exports(pod):
    done = run_pod(pod, 0, rendered_script(TrainingPhases((PHASE1, PHASE2))), EXPORT_RC="1")
    assert done.returncode == 1
    assert "phase 1: the export failed" in done.stderr and "phase 2: the export failed" in done.stderr
    assert sorted(e.split()[0] for e in events(pod)) == [
        "export",
        "export",
        "precompile",
        "precompile",
        "train",
        "train",
    ]
    (pod / "events").unlink()
    again = run_pod(pod, 0, rendered_script(TrainingPhases((PHASE1, PHASE2))))  # the next start
    assert again.returncode == 0
    assert sorted(e.split()[0] for e in events(pod)) == ["export", "export", "exported", "exported"]


def test_given_a_slow_export_then_phase_2_starts_while_phase_1_exports_and_the_pod_waits_for_it(pod):
    # Pod 0 hosts phase 2's c10d store: the other pods' agents would give up on it after 60 s.
    done = run_pod(pod, 0, rendered_script(TrainingPhases((PHASE1, PHASE2))), EXPORT_S="1")
    assert done.returncode == 0, done.stderr
    seen = [e.split()[0] + " " + e.split()[-1 if e.startswith("exported") else 2] for e in events(pod)]
    assert seen.index("train /data/runs/bert-large-phase2") < seen.index(
        "exported /data/runs/bert-large-phase1"
    )
    assert seen[-2:] == [
        "exported /data/runs/bert-large-phase1",
        "exported /data/runs/bert-large-phase2",
    ] or set(seen[-2:]) == {"exported /data/runs/bert-large-phase1", "exported /data/runs/bert-large-phase2"}


def test_given_the_rendered_phases_then_each_phase_has_its_own_rendezvous_id():
    script = rendered_script(TrainingPhases((PHASE1, PHASE2)))
    ids = [
        line.split("--rdzv_id ")[1].split()[0]
        for line in script.splitlines()
        if "--output_dir" in line and "neuron_parallel_compile" not in line
    ]
    assert len(ids) == 2 and ids[1] == f"{ids[0]}-phase2"


def test_given_one_spec_without_vocab_then_the_script_is_the_one_phase_script_of_before():
    one = rendered_script(TrainingPhases((BertJobSpec(),)))
    assert one == rendered_script(BertJobSpec())
    assert "COMPLETE" not in one and "VC_TASK_INDEX" not in one and "init_from" not in one


def test_given_the_rendered_phases_then_each_torchrun_has_its_own_batch_and_phase_2_its_start():
    script = rendered_script(TrainingPhases((PHASE1, PHASE2)))
    phase1_line, phase2_line = [
        line for line in script.splitlines() if "--output_dir" in line and "precompile" not in line
    ]
    # 16,384 / (16 x 64) and 32,768 / (2 x 64) on 2 x trn1.32xlarge
    assert "--batch_size 16 " in phase1_line and "--grad_accum_usteps 16 " in phase1_line
    assert "--batch_size 2 " in phase2_line and "--grad_accum_usteps 256 " in phase2_line
    assert "--init_from /data/runs/bert-large-phase1 " in phase2_line and "--init_from" not in phase1_line
    for flag in (
        "--seq_len 512",
        "--max_pred_len 80",
        "--lr 2.8e-4",
        "--warmup_steps 781",
        "--max_steps 1563",
    ):
        assert flag in phase2_line


@pytest.mark.parametrize(
    "phases,key,fix",
    [
        ((PHASE1, PHASE2.replace(run_name="bert-large-phase1")), "training_run_name", "its own"),
        ((PHASE1, PHASE2.replace(cache_set="bert-large-seq128")), "training_cache_set", "its own"),
        ((PHASE1, PHASE2.replace(init_from=None)), "training_init_from", "starts from weights"),
        ((PHASE1, PHASE2.replace(model="base")), "training_model", "same pods as phase 1"),
        ((PHASE1, PHASE2.replace(rdzv_backend="etcd")), "training_rdzv_backend", "same pods as phase 1"),
        ((), "training_phases", "1 to 2"),
        ((PHASE1, PHASE2, PHASE2), "training_phases", "1 to 2"),
    ],
)
def test_given_phases_that_cannot_run_together_then_refused_naming_the_key(phases: Any, key, fix):
    with pytest.raises(ConfigError) as err:
        TrainingPhases(phases)
    assert err.value.field_name == key and fix in str(err.value)


def test_given_phase_2_s_batch_not_a_multiple_of_the_workers_then_refused_naming_it():
    with pytest.raises(ConfigError, match="batch_size x workers = 2 x 64 = 128") as err:
        rendered_script(TrainingPhases((PHASE1, PHASE2.replace(global_batch=1000))))
    assert err.value.field_name == "training_global_batch"


def test_given_phase2_spec_then_the_reference_recipe_from_phase_1_s_run():
    assert (PHASE2.batch_size, PHASE2.global_batch, PHASE2.max_steps) == (2, 32768, 1563)
    assert (PHASE2.dataset_name, PHASE2.cache_set, PHASE2.run_name) == (
        "bert-wikicorpus-seq512",
        "bert-large-seq512",
        "bert-large-phase2",
    )
    assert PHASE2.init_from == "/data/runs/bert-large-phase1"
    assert PHASE2.extra_args == {"seq_len": 512, "max_pred_len": 80, "lr": "2.8e-4", "warmup_steps": 781}
    custom = phase2_spec(
        BertJobSpec(run_name="mine", script_args={"lr": "1e-4"}), script_args={"warmup_steps": "10"}
    )
    assert custom.run_name == "mine-phase2" and custom.extra_args["warmup_steps"] == "10"
    assert "lr" in custom.extra_args and custom.extra_args["lr"] == "2.8e-4"  # phase 1's flags not inherited


@pytest.mark.parametrize("path", ["relative/x", "/tmp/x", "/data/../etc", "/data/a b", "/data/x'y"])
def test_given_a_start_or_vocab_outside_fsx_then_refused(path):
    for field in ("init_from", "vocab"):
        with pytest.raises(ConfigError) as err:
            BertJobSpec(**{field: path})
        assert err.value.field_name == f"training_{field}"


def test_given_the_pod_of_index_1_finishing_first_then_it_exports_nothing_and_pod_0_exports_each_phase(pod):
    script = rendered_script(TrainingPhases((PHASE1, PHASE2)))
    assert run_pod(pod, 1, script).returncode == 0
    assert not [e for e in events(pod) if e.startswith("export")]
    assert run_pod(pod, 0, script).returncode == 0
    assert sorted(e.split()[:3] for e in events(pod) if e.startswith("export ")) == [
        ["export", "trn-bert-x-worker-0", "/data/runs/bert-large-phase1"],
        ["export", "trn-bert-x-worker-0", "/data/runs/bert-large-phase2"],
    ]
