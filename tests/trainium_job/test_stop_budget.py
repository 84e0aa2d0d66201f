"""The graceful-stop budget of a training pod: torchrun's window, a worker's need, the grace period."""

from __future__ import annotations

import pytest

from trainium_job.stop_budget import (
    AGENT_EXIT_MARGIN_S,
    BERT_LARGE_PARAMETERS,
    STEP_S,
    TORCHRUN_SHUTDOWN_S,
    stop_need_s,
    stop_problem,
    termination_grace_period_s,
)


def test_given_bert_large_bf16_state_on_default_fsx_then_it_fits_torchruns_window():
    write_s = BERT_LARGE_PARAMETERS * 6 / (1200 / 1024 * 125e6)
    assert write_s == pytest.approx(13.77, abs=0.01) and STEP_S == pytest.approx(4.28, abs=0.01)
    assert stop_need_s() == pytest.approx(STEP_S + write_s)
    assert stop_problem(fp32_state=False) is None


def test_given_bert_large_fp32_state_on_default_fsx_then_it_misses_the_window_by_two_seconds():
    assert BERT_LARGE_PARAMETERS * 12 == 4_034_713_296
    assert stop_need_s(fp32_state=True) == pytest.approx(31.8, abs=0.1)
    problem = stop_problem(fp32_state=True)
    assert problem is not None and "32 s" in problem and "30 s torchrun gives" in problem


def test_given_faster_tier_or_larger_file_system_then_the_fp32_state_fits():
    assert stop_problem(fp32_state=True, mb_s_per_tib=250) is None  # 4.3 + 13.8 s
    assert stop_problem(fp32_state=True, storage_gib=2400) is None  # twice the throughput


def test_given_torchruns_window_then_the_grace_period_outlasts_it():
    assert termination_grace_period_s() == TORCHRUN_SHUTDOWN_S + AGENT_EXIT_MARGIN_S == 45
