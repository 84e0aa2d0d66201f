"""The training metrics: names and values a scrape sees, and the endpoint of a real CPU run."""

from __future__ import annotations

import math
import subprocess
import time
import urllib.request

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.training.conftest import PYTHON, REPO, child_env, free_port, tiny_args
from training.trainer.cli import parse_args
from training.trainer.prom_metrics import EVAL_NAMES, TrainingMetrics, start_metrics
from trainium_job.restarts import CAUSES, Totals
from trainium_job.telemetry import TRAINING_METRICS


def samples(metrics: TrainingMetrics) -> dict[str, float]:
    text = generate_latest(metrics.registry).decode()
    return {
        s.name: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if not s.name.endswith("_created")
    }


def test_given_a_report_then_every_metric_is_exported_with_its_value():
    m = TrainingMetrics()
    m.started(step=4, max_steps=8, checkpoint_every=3, resumed_from=4, labels={"model": "tiny", "run": "r1"})
    m.stepped(5)
    m.report(loss=7.5, lr=1e-3, grad_norm=2.0, seq_per_s=100.0, step_s=0.08, mfu=0.31)
    m.checkpointed(6, 1.25)
    m.restarts(Totals(dict.fromkeys(CAUSES, 0), dict.fromkeys(CAUSES, 0.0), {("n1", "hang"): 1}))
    got = samples(m)
    assert {name for name in got} == set(TRAINING_METRICS)
    assert got["bert_train_step"] == 5
    assert got["bert_train_max_steps"] == 8
    assert got["bert_train_loss"] == 7.5
    assert got["bert_train_learning_rate"] == 1e-3
    assert got["bert_train_sequences_per_second"] == 100.0
    assert got["bert_train_step_duration_seconds"] == 0.08
    assert got["bert_train_mfu_ratio"] == 0.31
    assert got["bert_train_last_checkpoint_step"] == 6
    assert got["bert_train_checkpoint_duration_seconds"] == 1.25
    assert got["bert_train_checkpoints_total"] == 1
    assert got["bert_train_checkpoint_interval_steps"] == 3
    assert got["bert_train_suspect_nodes"] == 1
    assert abs(got["bert_train_last_step_timestamp_seconds"] - time.time()) < 60


def test_given_no_report_yet_then_no_zero_loss_is_exported():
    m = TrainingMetrics()
    m.started(step=0, max_steps=8, checkpoint_every=3, resumed_from=None, labels={})
    assert "bert_train_loss" not in samples(m) and "bert_train_step" in samples(m)


def test_given_a_node_whose_process_never_reports_then_only_the_progress_is_exported():
    m = TrainingMetrics()
    m.started(step=0, max_steps=8, checkpoint_every=3, resumed_from=None, labels={})
    got = samples(m)
    assert "bert_train_step" in got and got["bert_train_last_checkpoint_step"] == 0
    rank0_only = {name for name, (_, rank0) in TRAINING_METRICS.items() if rank0}
    assert not rank0_only & set(got)


def test_given_an_unknown_peak_then_mfu_stays_absent():
    m = TrainingMetrics()
    m.report(loss=1.0, lr=1.0, grad_norm=1.0, seq_per_s=1.0, step_s=1.0, mfu=None)
    assert "bert_train_mfu_ratio" not in samples(m)


def test_given_metric_names_then_they_follow_the_prometheus_conventions():
    for name in TRAINING_METRICS:
        assert name.startswith("bert_train_")
        counters = (
            "bert_train_checkpoints_total",
            "bert_train_restarts_total",
            "bert_train_lost_seconds_total",
        )
        assert name.endswith("_total") == (name in counters), name


@pytest.mark.parametrize("local_rank, port", [(1, 9400), (0, 0)])
def test_given_no_port_or_another_local_rank_then_no_server(local_rank, port):
    assert start_metrics(port, local_rank=local_rank) is None


def test_given_a_bad_port_then_usage_error(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--data_dir", "d", "--metrics_port", "70000"])
    assert "--metrics_port 70000" in capsys.readouterr().err


def test_given_a_cpu_run_with_a_port_then_its_endpoint_serves_the_run(shards, tmp_path):
    port = free_port()
    args = tiny_args(shards, tmp_path / "out", "--max_steps", "400", "--metrics_port", str(port))
    proc = subprocess.Popen([PYTHON, "-m", "training.trainer.pretrain", *args], cwd=REPO, env=child_env())
    try:
        deadline, text = time.monotonic() + 120, ""
        while "bert_train_loss " not in text:
            assert proc.poll() is None and time.monotonic() < deadline, "no metrics from the run"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                    text = r.read().decode()
            except OSError:
                time.sleep(0.2)
        names = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
        assert {"bert_train_step", "bert_train_loss", "bert_train_sequences_per_second"} <= names
        assert 'model="tiny"' in text and 'device="cpu"' in text
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def test_given_an_evaluation_then_its_values_replace_the_nan_of_the_first_report():
    # Given rank 0's metrics after its first step report: the evaluation series exist, at NaN
    m = TrainingMetrics()
    m.report(loss=1.0, lr=1.0, grad_norm=1.0, seq_per_s=1.0, step_s=1.0, mfu=None)
    before = samples(m)
    assert all(math.isnan(before[f"bert_train_{n}"]) for n in EVAL_NAMES)
    # When a held-out evaluation reports
    m.evaluated(step=200, mlm_loss=2.5, mlm_accuracy=0.61, nsp_accuracy=0.93)
    # Then its values are served
    got = samples(m)
    assert got["bert_train_eval_mlm_loss"] == 2.5 and got["bert_train_eval_step"] == 200
    assert (
        got["bert_train_eval_mlm_accuracy_ratio"] == 0.61
        and got["bert_train_eval_nsp_accuracy_ratio"] == 0.93
    )
