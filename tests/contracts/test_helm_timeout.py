"""Every Helm release the stacks install finishes, or fails, inside the function that runs it: the
chart's Timeout, read from the synthesized template, plus the provider's margin stays below the
timeouts of the kubectl handler and of the provider framework function that invokes it."""

from __future__ import annotations

from typing import Any

import pytest

from tests.contracts import helm_provider
from tests.support import resources, synth_platform, variants

HELM_CHART = "Custom::AWSCDK-EKS-HelmChart"
VARIANTS = variants("default", "all add-on options")


def _functions(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return resources(template, "AWS::Lambda::Function")


def helm_budget(template: dict[str, Any]) -> list[tuple[str, int, int]]:
    """(release, helm's timeout in s, the timeout of the functions that run it in s) per chart."""
    functions = _functions(template)
    out = []
    for chart in resources(template, HELM_CHART).values():
        props = chart["Properties"]
        framework_id = props["ServiceToken"]["Fn::GetAtt"][0]
        framework = functions[framework_id]["Properties"]
        assert framework["Handler"] == helm_provider.FRAMEWORK_HANDLER
        handler_id = framework["Environment"]["Variables"]["USER_ON_EVENT_FUNCTION_ARN"]["Fn::GetAtt"][0]
        handler = functions[handler_id]["Properties"]
        assert handler["Description"] == helm_provider.HANDLER_DESCRIPTION
        timeout = props.get("Timeout")
        helm_s = int(timeout.removesuffix("s")) if timeout else helm_provider.HELM_DEFAULT_TIMEOUT_S
        out.append((props["Release"], helm_s, min(handler["Timeout"], framework["Timeout"])))
    return out


@pytest.mark.parametrize("context", VARIANTS.values(), ids=VARIANTS.keys())
def test_given_each_chart_then_helm_stops_before_the_function_that_runs_it(context):
    budget = helm_budget(synth_platform(**context))
    assert {release for release, _, _ in budget} >= {"efa", "volcano", "kube-prometheus-stack"}
    over = [(r, helm, fn) for r, helm, fn in budget if helm + helm_provider.MARGIN_S > fn]
    assert over == []


def test_given_a_chart_as_long_as_its_function_then_the_check_finds_it():
    template = synth_platform()
    (release, _, function_s) = helm_budget(template)[0]
    chart = next(c for c in resources(template, HELM_CHART).values() if c["Properties"]["Release"] == release)
    broken = {
        **template,
        "Resources": {
            **template["Resources"],
            "X": {**chart, "Properties": {**chart["Properties"], "Timeout": f"{function_s}s"}},
        },
    }
    assert any(helm + helm_provider.MARGIN_S > fn for _, helm, fn in helm_budget(broken))
