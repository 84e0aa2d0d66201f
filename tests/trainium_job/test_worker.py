"""The description every training container runs, as the job renders it: its phases in order with
their own commands and caches, the checks, the deadlines, and the command that runs it."""

from __future__ import annotations

from typing import Any

import pytest

from tests.contracts.volcano import action_for_failure, policies
from tests.trainium_job.rendered import rendered_job, worker_container
from trainium_job.errors import ConfigError
from trainium_job.exit_codes import BUDGET_EXIT_CODE, DEADLINE_EXIT_CODE, EXIT_CODES
from trainium_job.fabric_check_steps import (
    EXIT_CODE,
    NOT_MEASURED_EXIT_CODE,
    RESULT_FILE,
    FabricCheck,
    measure_args,
)
from trainium_job.launch import LaunchSpec, torchrun_args
from trainium_job.phases import TrainingPhases
from trainium_job.pod_program import MODULE, JobDescription, loads
from trainium_job.pod_program.program import LEDGER_TIMEOUT_S
from trainium_job.spec import BertJobSpec, phase2_spec
from trainium_job.stop_budget import AGENT_EXIT_MARGIN_S, TORCHRUN_SHUTDOWN_S, termination_grace_period_s
from trainium_job.worker import PRECOMPILE_DEADLINE_S

SPEC = LaunchSpec(nnodes=2, nproc_per_node=32, rdzv_endpoint="job-worker-0.job:29400", rdzv_id="job")
PHASE1 = BertJobSpec(vocab="/data/datasets/bert-wikicorpus-seq128/vocab.txt")
PHASE2 = phase2_spec(PHASE1, vocab="/data/datasets/bert-wikicorpus-seq512/vocab.txt")


def described(spec: BertJobSpec | TrainingPhases | None = None, **kwargs: Any) -> JobDescription:
    command = worker_container(spec, **kwargs)["command"]
    assert command[:3] == ["python", "-m", MODULE] and len(command) == 4
    return loads(command[3])


def flag(argv: tuple[str, ...], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_given_the_default_job_then_the_container_runs_the_program_with_no_shell_and_no_wait_loop():
    (command,) = [worker_container()["command"]]
    assert command[0] == "python" and "bash" not in command
    text = " ".join(command)
    for shell in ("until ", "sleep ", "trap ", "&& ", "; do"):
        assert shell not in text


def test_given_the_default_job_then_the_driver_check_precompile_fabric_check_and_training_are_described():
    job = described()
    (phase,) = job.phases
    assert job.driver_check == ("python", "-m", "training.node.driver_check")
    assert phase.precompile is not None and phase.precompile.argv[0] == "neuron_parallel_compile"
    assert phase.precompile.marker == "/data/neuron-cache/bert-large-seq128/.precompiled"
    assert phase.precompile.deadline_s == PRECOMPILE_DEADLINE_S
    assert phase.train[0] == "torchrun" and flag(phase.train, "-m") == "training.trainer.pretrain"
    assert flag(phase.train, "--metrics_port") == "9400"
    assert job.fabric_check is not None
    assert job.fabric_check.verdict[-4:] == ("--min_busbw_gbps", "10", "--nodes", "2")
    assert (dict(phase.env)["NEURON_CC_FLAGS"]) == "--cache_dir=/data/neuron-cache/bert-large-seq128"


def test_given_the_default_job_then_every_wait_is_bounded_and_the_start_bound_adds_them_up():
    job = described()
    (phase,) = job.phases
    (wait,) = phase.waits
    assert wait.ready == "/data/datasets/bert-wikicorpus-seq128/.staged" and wait.deadline_s > 0
    assert phase.precompile is not None
    assert job.bound_s(phase) == wait.deadline_s + phase.precompile.deadline_s + job.checks_s
    assert job.checks_s > 0


def test_given_two_phases_then_each_has_its_own_rendezvous_id_batch_cache_and_phase_2_its_start():
    job = described(TrainingPhases((PHASE1, PHASE2)))
    one, two = job.phases
    assert flag(two.train, "--rdzv_id") == f"{flag(one.train, '--rdzv_id')}-phase2"
    # 16,384 / (16 x 64) and 32,768 / (2 x 64) on 2 x trn1.32xlarge
    assert (flag(one.train, "--batch_size"), flag(one.train, "--grad_accum_usteps")) == ("16", "16")
    assert (flag(two.train, "--batch_size"), flag(two.train, "--grad_accum_usteps")) == ("2", "256")
    assert flag(two.train, "--init_from") == "/data/runs/bert-large-phase1" and "--init_from" not in one.train
    for name, value in (
        ("--seq_len", "512"),
        ("--max_pred_len", "80"),
        ("--lr", "2.8e-4"),
        ("--max_steps", "1563"),
    ):
        assert flag(two.train, name) == value
    assert dict(two.env)["NEURON_CC_FLAGS"] == "--cache_dir=/data/neuron-cache/bert-large-seq512"
    assert two.waits[0].ready == "/data/datasets/bert-wikicorpus-seq512/.staged"
    assert one.export is not None and two.export is not None
    assert (one.export.model_dir, two.export.model_dir) == (
        "/data/runs/bert-large-phase1/model",
        "/data/runs/bert-large-phase2/model",
    )
    assert one.export.argv[one.export.argv.index("--vocab") + 1] == PHASE1.vocab


def test_given_one_spec_without_vocab_then_one_phase_without_export():
    (phase,) = described(BertJobSpec()).phases
    assert phase.export is None


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
        described(TrainingPhases((PHASE1, PHASE2.replace(global_batch=1000))))
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


# --- the fabric check -------------------------------------------------------------------------


def test_given_the_job_launch_then_the_measurement_runs_through_the_same_torchrun():
    argv = measure_args(SPEC, FabricCheck())
    training = torchrun_args(SPEC)
    # Same nodes, workers and rendezvous endpoint as training; its own id, no restarts.
    assert argv[: argv.index("--rdzv_id")] == training[: training.index("--rdzv_id")]
    assert argv[argv.index("--rdzv_id") + 1] == "job-fabric-check"
    assert argv[argv.index("--max_restarts") + 1] == "0"
    assert argv[argv.index("-m") :] == [
        "-m", "training.node.fabric_check", "measure", "--result_file", RESULT_FILE,
        "--size_mib", "128", "--iters", "20", "--warmup", "5", "--pair_size_mib", "32", "--pair_iters", "5",
    ]  # fmt: skip


@pytest.mark.parametrize(
    "spec, instance_type, nodes",
    [
        (BertJobSpec(fabric_check=False), "trn1.32xlarge", 2),
        (BertJobSpec(), "trn1.32xlarge", 1),
        (BertJobSpec(global_batch=16384, batch_size=16, nproc_per_node=2), "trn1.2xlarge", 1),
    ],
)
def test_given_the_check_off_or_nothing_crossing_a_fabric_then_the_description_has_no_check(
    spec, instance_type, nodes
):
    assert described(spec, instance_type=instance_type, nodes=nodes).fabric_check is None


def test_given_metrics_port_in_script_args_then_it_is_refused():
    with pytest.raises(ConfigError, match="sets --metrics_port itself"):
        BertJobSpec(script_args={"metrics_port": "1"})


def test_given_the_exit_codes_then_no_two_rows_share_a_code_and_none_is_a_code_of_the_programs_it_runs():
    codes = [row.code for row in EXIT_CODES]
    assert len(set(codes)) == len(codes)
    # pretrain 0, 2; Python 1, 120; bash 126, 127; timeout(1) 124, 125: none may carry a meaning.
    assert not set(codes) & {0, 1, 2, 120, 124, 125, 126, 127}


def test_given_the_job_then_the_aborting_codes_abort_it_and_the_others_restart_it():
    # Volcano's own policy resolution (tests/contracts/volcano.py, read from volcano-sh/volcano)
    job = policies(rendered_job()["spec"]["policies"])
    for code in (EXIT_CODE, DEADLINE_EXIT_CODE, BUDGET_EXIT_CODE):
        assert action_for_failure(job, code) == "AbortJob"
    for code in (NOT_MEASURED_EXIT_CODE, 143, 78, 1):
        assert action_for_failure(job, code) == "RestartJob"


def test_given_a_stopped_pod_then_its_ledger_line_fits_in_the_grace_left_after_torchrun():
    # The program kills its children LEDGER_TIMEOUT_S before the grace ends, after torchrun's own
    # stop window: the ledger's line is written before the kubelet's SIGKILL.
    assert LEDGER_TIMEOUT_S < AGENT_EXIT_MARGIN_S
    assert termination_grace_period_s() - LEDGER_TIMEOUT_S > TORCHRUN_SHUTDOWN_S
