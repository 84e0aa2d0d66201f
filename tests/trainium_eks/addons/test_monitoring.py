"""The monitoring add-on as synthesized: order, namespace, neuron-monitor, the training scrape and
its NetworkPolicy, the FSx alarm, AMP with a scoped Pod Identity role, and every switch."""

from __future__ import annotations

import pytest

from tests.support import PLATFORM_STACK, helm_charts, resources, submitted_jobs, synth_app, synth_platform
from tests.trainium_eks.addons import ALL_OPTIONS, chart, depends_on, logical_ids, nodegroup_id, objects
from trainium_eks.config import PlatformConfig, config_from_context
from trainium_eks.monitoring.options import MonitoringOptions, check_monitoring_options
from trainium_job.errors import ConfigError

TRAINIUM = {"trainium-eks/pool": "trainium"}
NEURON_TOLERATION = {"key": "aws.amazon.com/neuron", "operator": "Exists", "effect": "NoSchedule"}


def _named(template, kind, name):
    (found,) = [o for _, o in objects(template, kind) if o["metadata"]["name"] == name]
    return found


def test_given_default_config_then_the_chart_follows_its_namespace_nodes_and_volume_driver(platform_json):
    chart_id, _ = chart(platform_json, "kube-prometheus-stack")
    needs = depends_on(platform_json, chart_id)
    assert nodegroup_id(platform_json, "system") in needs
    (ebs_id,) = logical_ids(platform_json, "AWS::EKS::Addon", "AddonsEbsCsi")
    assert ebs_id in needs
    (namespace_id,) = logical_ids(
        platform_json, "Custom::AWSCDK-EKS-KubernetesResource", "AddonsMonitoringNamespace"
    )
    assert namespace_id in needs
    (manifest_id,) = logical_ids(
        platform_json, "Custom::AWSCDK-EKS-KubernetesResource", "AddonsMonitoringManifest"
    )
    assert chart_id in depends_on(platform_json, manifest_id)  # the CRDs and the webhook first


def test_given_default_config_then_the_monitoring_namespace_admits_privileged_node_agents(platform_json):
    namespace = _named(platform_json, "Namespace", "monitoring")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"


def test_given_default_config_then_neuron_monitor_runs_as_neuron_publishes_it_on_trainium_nodes(
    platform_json,
):
    daemonset = _named(platform_json, "DaemonSet", "neuron-monitor")
    spec = daemonset["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    # aws-neuron-sdk src/k8/k8s-neuron-monitor-daemonset.yml L43-64 (81ce03ae).
    assert container["image"] == "public.ecr.aws/neuron/neuron-monitor:1.3.0"
    assert container["command"] == ["/opt/bin/entrypoint.sh"]
    assert container["args"][:2] == ["--port", "8000"]
    assert container["ports"] == [{"containerPort": 8000, "protocol": "TCP"}]
    assert container["securityContext"] == {"privileged": True}
    assert container["resources"]["requests"] == {"cpu": "256m", "memory": "128Mi"}
    assert spec["nodeSelector"] == TRAINIUM and spec["tolerations"] == [NEURON_TOLERATION]
    monitor = _named(platform_json, "PodMonitor", "neuron-monitor")
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["portNumber"] == 8000  # the port has no name
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["selector"]["matchLabels"] == daemonset["spec"]["selector"]["matchLabels"]


def _selects(selector: dict, labels: dict) -> bool:
    """Kubernetes' LabelSelector: every ``matchLabels`` pair and every ``matchExpressions``
    requirement, ANDed (k8s.io/apimachinery pkg/apis/meta/v1 types.go LabelSelector; operators
    In, NotIn, Exists, DoesNotExist)."""
    if not selector.get("matchLabels", {}).items() <= labels.items():
        return False
    for requirement in selector.get("matchExpressions", []):
        key, operator, values = requirement["key"], requirement["operator"], requirement.get("values", [])
        present = key in labels
        if not {
            "Exists": present,
            "DoesNotExist": not present,
            "In": present and labels.get(key) in values,
            "NotIn": not present or labels.get(key) not in values,
        }[operator]:
            return False
    return True


def test_given_default_config_then_the_training_pods_are_scraped_by_port_name_and_admitted(
    platform_json, training_json
):
    monitor = _named(platform_json, "PodMonitor", "bert-training")
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["training"]}
    # Both of a training pod's metrics ports: the trainer's and the pod program's.
    endpoints = monitor["spec"]["podMetricsEndpoints"]
    assert [e["port"] for e in endpoints] == ["metrics", "program"]
    assert all({r["targetLabel"] for r in e["relabelings"]} == {"node", "training_job"} for e in endpoints)
    (job,) = submitted_jobs(training_json)
    pod = job["spec"]["tasks"][0]["template"]
    assert _selects(monitor["spec"]["selector"], pod["metadata"]["labels"])
    ports = {p["name"]: p["containerPort"] for p in pod["spec"]["containers"][0]["ports"]}
    assert ports == {"metrics": 9400, "program": 9401}
    policy = _named(platform_json, "NetworkPolicy", "bert-training-ingress")
    assert _selects(policy["spec"]["podSelector"], pod["metadata"]["labels"])
    peers, scrape = policy["spec"]["ingress"]
    assert "ports" not in peers  # the job's pods reach each other on any port (c10d, collectives)
    assert scrape["ports"] == [{"protocol": "TCP", "port": 9400}, {"protocol": "TCP", "port": 9401}]
    assert scrape["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    ]
    # Nothing else of the workload is a training pod: not the staging, the submitter, TensorBoard.
    others = [
        o["spec"]["template"]["metadata"].get("labels", {})
        for _, o in objects(training_json, "Job") + objects(training_json, "Deployment")
    ]
    assert others and not any(_selects(monitor["spec"]["selector"], labels) for labels in others)


def test_given_default_config_then_the_network_policy_waits_for_the_training_namespace(platform_json):
    (policy_id,) = logical_ids(
        platform_json, "Custom::AWSCDK-EKS-KubernetesResource", "AddonsMonitoringTrainingIngress"
    )
    assert any(d.startswith("StorageVolumeNamespace") for d in depends_on(platform_json, policy_id))


def test_given_default_config_then_the_workload_runs_its_exporters_with_requests_and_read_only_sys(
    training_json,
):
    efa = _named(training_json, "DaemonSet", "efa-exporter")
    spec = efa["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert container["command"][:3] == ["python", "-m", "training.node.efa_exporter"]
    assert container["volumeMounts"] == [{"name": "sys", "mountPath": "/host/sys", "readOnly": True}]
    assert spec["volumes"][0]["hostPath"]["path"] == "/sys"
    assert container["resources"]["requests"] == {"cpu": "20m", "memory": "48Mi"}
    assert spec["securityContext"]["runAsNonRoot"] is True and spec["tolerations"] == [NEURON_TOLERATION]
    assert container["image"].endswith(
        ":tensorboard-" + container["image"].rsplit("-", 1)[1]
    )  # the tools image
    fsx = _named(training_json, "Deployment", "fsx-exporter")
    (mount,) = fsx["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    assert mount == {"name": "data", "mountPath": "/data", "readOnly": True}
    for name in ("efa-exporter", "fsx-exporter"):
        assert (
            _named(training_json, "PodMonitor", name)["metadata"]["labels"]["release"]
            == "kube-prometheus-stack"
        )


def test_given_a_type_without_efa_then_no_efa_exporter():
    training = synth_app(instance_type="trn1.2xlarge", min_nodes="1", desired_nodes="1", max_nodes="1")[
        "training"
    ]
    assert not [o for _, o in objects(training, "DaemonSet") if o["metadata"]["name"] == "efa-exporter"]
    assert _named(training, "Deployment", "fsx-exporter")


def test_given_default_config_then_fsx_free_capacity_has_a_cloudwatch_alarm(platform_json):
    ((_, alarm),) = resources(platform_json, "AWS::CloudWatch::Alarm").items()
    props = alarm["Properties"]
    assert props["Namespace"] == "AWS/FSx" and props["MetricName"] == "FreeDataStorageCapacity"
    (dimension,) = props["Dimensions"]
    (file_system_id,) = resources(platform_json, "AWS::FSx::FileSystem")
    assert dimension == {"Name": "FileSystemId", "Value": {"Ref": file_system_id}}
    assert props["ComparisonOperator"] == "LessThanThreshold"
    assert props["Threshold"] == 1200 * 1024**3 * 10 / 100


def test_given_default_config_then_grafana_and_prometheus_port_forwards_are_outputs(platform_json):
    values = {str(o["Value"]) for o in platform_json["Outputs"].values()}
    assert "kubectl port-forward -n monitoring svc/kube-prometheus-stack-grafana 3000:80" in values
    assert "kubectl port-forward -n monitoring svc/kube-prometheus-stack-prometheus 9090:9090" in values


def test_given_amp_remote_write_then_prometheus_writes_with_a_role_scoped_to_the_workspace():
    template = synth_platform(**ALL_OPTIONS)
    ((workspace_id, _),) = resources(template, "AWS::APS::Workspace").items()
    (association,) = [
        r["Properties"]
        for r in resources(template, "AWS::EKS::PodIdentityAssociation").values()
        if r["Properties"]["Namespace"] == "monitoring"
    ]
    assert association["ServiceAccount"] == "kube-prometheus-stack-prometheus"
    role_id = association["RoleArn"]["Fn::GetAtt"][0]
    (policy,) = [
        p["Properties"]["PolicyDocument"]["Statement"]
        for p in resources(template, "AWS::IAM::Policy").values()
        if {"Ref": role_id} in p["Properties"]["Roles"]
    ]
    assert policy == [
        {"Action": "aps:RemoteWrite", "Effect": "Allow", "Resource": {"Fn::GetAtt": [workspace_id, "Arn"]}}
    ]
    values = chart(template, "kube-prometheus-stack")[1]["Values"]
    (remote,) = values["prometheus"]["prometheusSpec"]["remoteWrite"]
    assert remote["url"] == f"ATT_{workspace_id}_PrometheusEndpointremote_write"
    assert remote["sigv4"] == {"region": "us-west-2"}
    assert values["prometheus"]["serviceAccount"]["name"] == association["ServiceAccount"]


def test_given_monitoring_off_then_no_stack_no_exporters_and_no_alarm():
    app = synth_app(monitoring_enabled="false")
    platform, training = app[PLATFORM_STACK], app["training"]
    assert "kube-prometheus-stack" not in {p["Release"] for p in helm_charts(platform).values()}
    assert not objects(platform, "PodMonitor") and not objects(training, "PodMonitor")
    assert not resources(platform, "AWS::CloudWatch::Alarm")


@pytest.mark.parametrize(
    "switch, kind, name",
    [
        ("monitoring_neuron_monitor", "DaemonSet", "neuron-monitor"),
        ("monitoring_grafana", "ConfigMap", "trainium-bert-dashboard"),
    ],
)
def test_given_a_part_switched_off_then_it_is_left_out(switch, kind, name):
    template = synth_platform(**{switch: "false"})
    assert not [o for _, o in objects(template, kind) if o["metadata"]["name"] == name]


def test_given_exporters_off_then_the_workload_has_none():
    training = synth_app(monitoring_exporters="false")["training"]
    assert not objects(training, "PodMonitor")


@pytest.mark.parametrize(
    "context, key",
    [
        ({"monitoring_volume_gib": 5}, "monitoring_volume_gib"),
        ({"monitoring_retention_days": 0}, "monitoring_retention_days"),
        ({"monitoring_fsx_free_percent": 100}, "monitoring_fsx_free_percent"),
        ({"monitoring_enabled": False, "monitoring_amp_remote_write": True}, "monitoring_amp_remote_write"),
        ({"monitoring_enabled": False, "monitoring_alertmanager": True}, "monitoring_alertmanager"),
    ],
)
def test_given_a_bad_monitoring_setting_then_one_error_names_its_key(context, key):
    with pytest.raises(ConfigError, match=f"'{key}'"):
        PlatformConfig(**context)


def test_given_options_from_a_library_user_then_the_construct_checks_them_by_field():
    with pytest.raises(ConfigError, match="'volume_gib' = 20000"):
        check_monitoring_options(MonitoringOptions(volume_gib=20000))


@pytest.mark.parametrize(
    "context, line",
    [
        (
            {},
            "  monitoring:   Prometheus (30 d or 40 GiB on a 50 GiB gp3 volume), Grafana, neuron-monitor, "
            "EFA and FSx exporters",
        ),
        (
            {
                "monitoring_volume_gib": "100",
                "monitoring_grafana": "false",
                "monitoring_amp_remote_write": "true",
            },
            "  monitoring:   Prometheus (30 d or 80 GiB on a 100 GiB gp3 volume), neuron-monitor, EFA and FSx "
            "exporters, remote write to Amazon Managed Service for Prometheus",
        ),
        ({"monitoring_enabled": "false"}, "  monitoring:   off (monitoring_enabled=false)"),
    ],
)
def test_given_monitoring_settings_then_the_review_says_what_runs_and_how_long_data_is_kept(context, line):
    from trainium_eks.report.review import platform_review

    assert line in platform_review(config_from_context(context)).splitlines()
