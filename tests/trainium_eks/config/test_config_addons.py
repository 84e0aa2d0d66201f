"""Add-on configuration: defaults, boolean coercion from context, and errors for bad inputs."""

import dataclasses

import pytest

from trainium_eks.config import PlatformConfig, config_from_context
from trainium_job.errors import ConfigError

FLAGS = ("neuron_scheduler_extension", "neuron_node_problem_detector", "etcd_enabled", "container_insights")


def test_given_no_context_then_add_on_defaults_are_the_documented_ones():
    config = config_from_context({})
    assert config.neuron_scheduler_extension is False
    assert config.neuron_node_problem_detector is False
    assert config.etcd_enabled is True
    assert config.container_insights is False


@pytest.mark.parametrize("field", FLAGS)
@pytest.mark.parametrize(
    "raw, expected", [("true", True), ("False", False), (" TRUE ", True), (True, True), (False, False)]
)
def test_given_context_strings_or_json_booleans_then_flags_are_coerced(field, raw, expected):
    assert getattr(config_from_context({field: raw}), field) is expected


@pytest.mark.parametrize("field", FLAGS)
@pytest.mark.parametrize("raw", ["yes", "1", "", "on"])
def test_given_a_non_boolean_context_value_then_the_error_names_the_field(field, raw):
    with pytest.raises(ConfigError) as err:
        config_from_context({field: raw})
    assert err.value.field_name == field
    assert "must be true or false" in str(err.value)


@pytest.mark.parametrize("field", FLAGS)
def test_given_a_non_boolean_in_code_then_validation_refuses_it(field):
    with pytest.raises(ConfigError) as err:
        PlatformConfig(**{field: "true"})
    assert err.value.field_name == field
    assert "must be true or false" in str(err.value)


def test_given_a_typo_of_an_add_on_flag_then_the_closest_field_is_suggested():
    with pytest.raises(ConfigError, match="did you mean 'etcd_enabled'"):
        config_from_context({"etcd_enable": "true"})


def test_given_container_insights_on_a_version_without_evidence_then_refused(monkeypatch):
    from trainium_eks.compatibility import PINS

    pin = PINS["cloudwatch-observability"]
    rows = {version: row for version, row in pin.compatibility.items() if version != "1.34"}
    monkeypatch.setitem(PINS, "cloudwatch-observability", dataclasses.replace(pin, compatibility=rows))
    with pytest.raises(ConfigError) as err:
        config_from_context({"container_insights": "true", "kubernetes_version": "1.34"})
    assert err.value.field_name == "container_insights"
    assert "not verified for Kubernetes 1.34 (verified: 1.35, 1.36)" in str(err.value)


@pytest.mark.parametrize("version", ["1.34", "1.35", "1.36"])
def test_given_container_insights_on_a_version_with_evidence_then_accepted(version):
    config = config_from_context({"container_insights": "true", "kubernetes_version": version})
    assert config.container_insights is True


def test_given_every_managed_pin_then_evidence_covers_the_default_kubernetes_version():
    from trainium_eks.compatibility import PINS
    from trainium_eks.versions import DEFAULT_KUBERNETES_VERSION, KUBERNETES_RELEASES

    managed = {key: pin.compatibility for key, pin in PINS.items() if pin.managed}
    assert set(managed) == {
        "vpc-cni",
        "pod-identity-agent",
        "node-monitoring-agent",
        "cloudwatch-observability",
        "ebs-csi-driver",
    }
    for key, versions in managed.items():
        assert DEFAULT_KUBERNETES_VERSION in versions, key
        assert set(versions) <= set(KUBERNETES_RELEASES), key


def test_given_1_34_then_review_flags_the_always_on_add_on_without_evidence():
    from trainium_eks.report.review import platform_review

    review = platform_review(config_from_context({"kubernetes_version": "1.34"}))
    assert (
        "warning: eks-node-monitoring-agent v1.6.6-eksbuild.1 is not verified for Kubernetes 1.34" in review
    )
    assert "is not verified" not in platform_review(config_from_context({}))
