"""The fabric check in the job: its commands, where the worker script runs it, and when it is left out."""

from __future__ import annotations

import pytest

from tests.contracts.volcano import action_for_failure, policies
from tests.trainium_job.rendered import worker_container
from trainium_job.errors import ConfigError
from trainium_job.fabric_check_steps import (
    EXIT_CODE,
    NOT_MEASURED_EXIT_CODE,
    RESULT_FILE,
    FabricCheck,
    check_lines,
    measure_args,
)
from trainium_job.launch import LaunchSpec, torchrun_args
from trainium_job.spec import BertJobSpec

SPEC = LaunchSpec(nnodes=2, nproc_per_node=32, rdzv_endpoint="job-worker-0.job:29400", rdzv_id="job")


def _script(spec: BertJobSpec | None = None, instance_type: str = "trn1.32xlarge", nodes: int = 2) -> str:
    return str(worker_container(spec, instance_type=instance_type, nodes=nodes)["command"][2])


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


def test_given_the_lines_then_the_verdict_gets_the_floor_nodes_and_duration():
    *_, measure, verdict = check_lines(SPEC, FabricCheck(min_busbw_gbps=25))
    assert measure.endswith(" || true")  # a failed measurement is the verdict's to report
    assert verdict.startswith(
        f"python -m training.node.fabric_check verdict {RESULT_FILE} --min_busbw_gbps 25 --nodes 2"
    )
    # In the background and waited for (trainium_job.pid1): a SIGTERM reaches the script at once.
    assert verdict.endswith("--seconds $(( $(date +%s) - fabric_start )) & wait $!")


def test_given_the_default_job_then_the_check_runs_after_precompile_and_before_training():
    script = _script()
    assert script.index("touch /data/neuron-cache") < script.index("training.node.fabric_check measure")
    training = script.rstrip("\n").rsplit("\n", 1)[1]  # the script's last line
    assert training.startswith("torchrun ") and "-m training.trainer.pretrain" in training
    assert script.index("training.node.fabric_check verdict") < script.index(training)
    assert "--min_busbw_gbps 10 --nodes 2" in script


@pytest.mark.parametrize(
    "spec, instance_type, nodes",
    [
        (BertJobSpec(fabric_check=False), "trn1.32xlarge", 2),
        (BertJobSpec(), "trn1.32xlarge", 1),
        (BertJobSpec(global_batch=16384, batch_size=16, nproc_per_node=2), "trn1.2xlarge", 1),
    ],
)
def test_given_the_check_off_or_nothing_crossing_a_fabric_then_the_script_has_no_check(
    spec, instance_type, nodes
):
    assert "fabric_check" not in _script(spec, instance_type, nodes)


def test_given_the_default_job_then_it_serves_metrics_on_the_pods_port():
    assert "--metrics_port 9400" in _script()


def test_given_metrics_port_in_script_args_then_it_is_refused():
    with pytest.raises(ConfigError, match="sets --metrics_port itself"):
        BertJobSpec(script_args={"metrics_port": "1"})


def test_given_a_negative_floor_then_one_error_names_the_key():
    with pytest.raises(
        ConfigError,
        match=r"'training_fabric_check_min_busbw_gbps' \(BertJobSpec\.fabric_check_min_busbw_gbps\) = -1",
    ):
        BertJobSpec(fabric_check_min_busbw_gbps=-1)


def test_given_the_exit_codes_then_they_are_no_code_the_worker_uses_otherwise():
    from training.node.driver_check import MISMATCH_EXIT_CODE

    for code in (EXIT_CODE, NOT_MEASURED_EXIT_CODE):
        assert code not in (0, 1, 2, 126, 127, 137, 143, MISMATCH_EXIT_CODE)
    assert EXIT_CODE != NOT_MEASURED_EXIT_CODE


def test_given_the_job_then_a_failed_fabric_aborts_it_and_an_unmeasured_check_restarts_it():
    from trainium_job.pod import ABORT_POLICY, RESTART_POLICIES

    job = policies([ABORT_POLICY, *RESTART_POLICIES])
    assert action_for_failure(job, EXIT_CODE) == "AbortJob"
    assert action_for_failure(job, NOT_MEASURED_EXIT_CODE) == "RestartJob"
