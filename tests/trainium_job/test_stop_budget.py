"""The graceful-stop budget of a training pod: the arithmetic behind its grace period."""

from __future__ import annotations

import pytest

from trainium_job.stop_budget import (
    AGENT_EXIT_MARGIN_S,
    BERT_LARGE_PARAMETERS,
    STEP_S,
    stop_budget_s,
    termination_grace_period_s,
)


def test_given_bert_large_fp32_state_on_default_fsx_then_64_s_budget_and_79_s_grace():
    state = BERT_LARGE_PARAMETERS * 12  # fp32 weights + two AdamW moments
    assert state == 4_034_713_296
    write_s = state / (1200 / 1024 * 125e6)
    assert write_s == pytest.approx(27.54, abs=0.01) and STEP_S == pytest.approx(4.28, abs=0.01)
    assert stop_budget_s() == 64 == -(-2 * (STEP_S + write_s) // 1)
    assert termination_grace_period_s() == 64 + AGENT_EXIT_MARGIN_S == 79


def test_given_faster_tier_or_smaller_state_then_shorter_budget():
    assert stop_budget_s(mb_s_per_tib=1000) == 16  # 2 x (4.3 + 3.4)
    assert stop_budget_s(state_bytes=BERT_LARGE_PARAMETERS * 6) == 37  # bf16 weights and moments
    assert stop_budget_s(storage_gib=2400) == 37  # twice the capacity, twice the throughput
