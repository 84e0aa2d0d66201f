"""--log_every: which steps are logged (each log line reads the step's values to the host)."""

from __future__ import annotations

import json

from tests.training.trainer.test_pretrain import args_for
from training.trainer.pretrain import parse_args, train


def test_given_log_every_3_then_every_third_step_and_the_last_are_logged(shards, tmp_path):
    out = tmp_path / "run"
    result = train(parse_args(args_for(shards, out, "--log_every", "3")))
    records = [json.loads(x) for x in (out / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [3, 6, 8]
    assert all(r["seq_per_s"] > 0 for r in records)
    assert result["final_loss"] == records[-1]["loss"] and result["end_step"] == 8


def test_given_negative_log_every_then_parser_names_flag_and_value(capsys):
    try:
        parse_args(["--data_dir", "x", "--log_every", "-2"])
    except SystemExit as e:
        assert e.code == 2
    else:
        raise AssertionError("--log_every -2 was accepted")
    assert "--log_every -2: must be >= 0" in capsys.readouterr().err
