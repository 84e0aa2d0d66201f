"""``make integ``: the cost notice, the acknowledgement, deploy then destroy."""

from __future__ import annotations

import io
import subprocess

from tests.integ.run import main
from trainium_eks import instance_facts


class Recorder:
    def __init__(self, *codes: int) -> None:
        self.codes, self.commands = list(codes), []

    def __call__(self, command, cwd=None):
        self.commands.append(command)
        return subprocess.CompletedProcess(command, self.codes.pop(0))


def test_given_no_cost_acknowledgement_when_run_then_it_prints_the_estimate_and_deploys_nothing():
    out, run = io.StringIO(), Recorder()
    assert main([], env={}, run=run, out=out) == 2
    text = out.getvalue()
    price = instance_facts("trn1.32xlarge").on_demand_usd_per_hour
    assert f"cost:         ${2 * price:,.2f}/h on demand" in text
    assert f"integ run: about 2 h of 2 x trn1.32xlarge = ${2 * 2 * price:,.0f} of Trainium time" in text
    assert "make integ ACK_COST=yes" in text
    assert run.commands == []


def test_given_the_acknowledgement_when_run_then_deploy_all_then_destroy_all_with_the_context():
    out, run = io.StringIO(), Recorder(0, 0)
    assert main(["-c", "desired_nodes=4"], env={"ACK_COST": "yes"}, run=run, out=out) == 0
    deploy, destroy = run.commands
    assert deploy[1:3] == ["deploy", "--all"] and destroy[1:3] == ["destroy", "--all"]
    assert deploy[-2:] == ["-c", "desired_nodes=4"] == destroy[-2:]
    assert "4 x trn1.32xlarge" in out.getvalue()


def test_given_a_failed_assertion_when_run_then_it_still_destroys_and_fails():
    run = Recorder(1, 0)
    assert main([], env={"ACK_COST": "yes"}, run=run, out=io.StringIO()) == 1
    assert [c[1] for c in run.commands] == ["deploy", "destroy"]


def test_given_integ_keep_when_run_then_nothing_is_destroyed_and_the_command_is_printed():
    out, run = io.StringIO(), Recorder(1)
    assert main([], env={"ACK_COST": "yes", "INTEG_KEEP": "yes"}, run=run, out=out) == 1
    assert [c[1] for c in run.commands] == ["deploy"]
    assert "destroy with:" in out.getvalue()
