"""What a failed fabric check does to the nodes it names when the platform's deep node health
check is on (``--heal``): each pod acts on its own node only, then the whole gang exits with the
code the Volcano Job restarts on, so no pod's 69 aborts the job the others are healing (that 75
restarts the job is the rehearsal's: a pod deleted during the fabric check)."""

from __future__ import annotations

from typing import Any

import pytest

from training.node.fabric_check import Verdict, build_parser, heal
from trainium_job.fabric_check_steps import EXIT_CODE, NOT_MEASURED_EXIT_CODE, FabricCheck, verdict_args
from trainium_job.node_health import FABRIC

BELOW = Verdict("fabric check failed on node n2: all-reduce bus bandwidth 1.0 GB/s (floor 10)", EXIT_CODE)


class Actions:
    """Records what ``heal`` asks of ``training.node.node_actions``; ``fail`` makes the API refuse."""

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.fail = fail

    def mark_failed(self, node: str, check: str, message: str, *, replace: bool) -> None:
        self.calls.append(("mark_failed", node, check, replace))
        if self.fail:
            raise RuntimeError("Forbidden")

    def request_recheck(self, node: str, message: str) -> None:
        self.calls.append(("request_recheck", node))


def named(*nodes: str) -> Verdict:
    return Verdict(
        BELOW.line, EXIT_CODE, named_nodes=nodes, findings=(f"fabric check names node {nodes[0]}",)
    )


@pytest.mark.parametrize("replace", [False, True])
def test_given_this_pods_node_named_then_it_is_marked_failed_for_the_fabric_and_the_job_restarts(replace):
    actions = Actions()
    assert heal(named("n2"), "n2", replace=replace, actions=actions) == NOT_MEASURED_EXIT_CODE
    assert actions.calls == [("mark_failed", "n2", FABRIC, replace)]


def test_given_another_node_named_then_this_pod_touches_nothing_and_still_exits_for_a_restart():
    actions = Actions()
    assert heal(named("n2"), "n1", replace=True, actions=actions) == NOT_MEASURED_EXIT_CODE
    assert actions.calls == []


def test_given_a_two_node_failure_then_this_pods_node_goes_back_to_the_deep_check():
    actions = Actions()
    outcome = Verdict(BELOW.line, EXIT_CODE, recheck_nodes=("n1", "n2"))
    assert heal(outcome, "n1", replace=True, actions=actions) == NOT_MEASURED_EXIT_CODE
    assert actions.calls == [("request_recheck", "n1")]


def test_given_a_two_node_failure_where_the_deep_check_cannot_run_again_then_the_node_is_marked_failed():
    actions = Actions()
    outcome = Verdict(BELOW.line, EXIT_CODE, recheck_nodes=("n1", "n2"))
    assert heal(outcome, "n2", replace=True, recheck=False, actions=actions) == NOT_MEASURED_EXIT_CODE
    assert actions.calls == [("mark_failed", "n2", FABRIC, True)]


def test_given_no_node_to_blame_then_the_job_aborts_as_before():
    actions = Actions()
    assert heal(BELOW, "n1", replace=True, actions=actions) == EXIT_CODE
    assert actions.calls == []


def test_given_the_api_refuses_then_the_job_aborts_rather_than_restart_onto_the_same_node(capsys):
    assert heal(named("n2"), "n2", replace=False, actions=Actions(fail=True)) == EXIT_CODE
    assert "could not act on node n2 (RuntimeError: Forbidden); aborting the job" in capsys.readouterr().err


@pytest.mark.parametrize("mode", ["off", "taint", "replace"])
@pytest.mark.parametrize("recheck", [True, False])
def test_given_a_heal_mode_then_the_verdict_line_carries_it_and_the_program_parses_it(mode, recheck):
    line = verdict_args(FabricCheck(heal=mode, recheck=recheck), nodes=3)
    assert ("--heal" in line) == (mode != "off")
    # after "python -m training.node.fabric_check"; the pod program adds the seconds
    argv = [*line[3:], "--seconds", "7"]
    parsed = build_parser().parse_args(argv)
    assert (parsed.heal, parsed.recheck) == (mode, recheck or mode == "off")


def test_given_an_unknown_heal_mode_then_the_check_refuses_it():
    with pytest.raises(ValueError, match="FabricCheck.heal is 'always'; one of off, taint, replace"):
        FabricCheck(heal="always")
