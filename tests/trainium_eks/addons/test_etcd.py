"""etcd for the etcd rendezvous: 3.5 with v2 on, persistent encrypted volume, probes, Service."""

import aws_cdk as cdk
import pytest
from aws_cdk import aws_eks_v2 as eks

from stacks import TrainiumPlatformStack
from tests.support import synth_platform
from tests.trainium_eks.addons import depends_on, logical_ids, objects
from trainium_eks.addons.etcd import EtcdServer
from trainium_eks.config import PlatformConfig
from trainium_eks.versions import AddonPin
from trainium_job.errors import ConfigError


def _one(template, kind):
    (found,) = objects(template, kind)
    return found


def _container(template):
    _, statefulset = _one(template, "StatefulSet")
    (container,) = statefulset["spec"]["template"]["spec"]["containers"]
    return container


def test_given_default_config_then_etcd_3_5_serves_the_v2_api(platform_json):
    container = _container(platform_json)
    image, tag = container["image"].rsplit(":", 1)
    assert image == "gcr.io/etcd-development/etcd"
    assert tag.startswith("v3.5.")
    assert "--enable-v2=true" in container["args"]
    assert "--advertise-client-urls=http://etcd.etcd.svc.cluster.local:2379" in container["args"]


def test_given_default_config_then_etcd_has_probes_and_resources(platform_json):
    container = _container(platform_json)
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"
    assert container["livenessProbe"]["httpGet"]["path"] == "/livez"
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["port"] == "client"
    assert set(container["resources"]) == {"requests", "limits"}
    assert container["resources"]["limits"]["memory"] == "1Gi"


def test_given_default_config_then_etcd_runs_non_root_on_system_nodes(platform_json):
    _, statefulset = _one(platform_json, "StatefulSet")
    pod = statefulset["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"trainium-eks/pool": "system"}
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    container = _container(platform_json)["securityContext"]
    assert container["allowPrivilegeEscalation"] is False
    assert container["readOnlyRootFilesystem"] is True
    assert container["capabilities"] == {"drop": ["ALL"]}
    (namespace,) = [o for _, o in objects(platform_json, "Namespace") if o["metadata"]["name"] == "etcd"]
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_given_default_config_then_data_lives_on_an_encrypted_gp3_claim(platform_json):
    _, statefulset = _one(platform_json, "StatefulSet")
    (claim,) = statefulset["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["storageClassName"] == "gp3-encrypted"
    assert claim["spec"]["resources"]["requests"]["storage"] == "2Gi"
    assert _container(platform_json)["volumeMounts"] == [{"name": "data", "mountPath": "/var/lib/etcd"}]
    assert "--quota-backend-bytes=1073741824" in _container(platform_json)["args"]
    (storage_class,) = [
        o for _, o in objects(platform_json, "StorageClass") if o["metadata"]["name"] == "gp3-encrypted"
    ]
    assert storage_class["provisioner"] == "ebs.csi.aws.com"
    assert storage_class["parameters"]["type"] == "gp3"
    assert storage_class["parameters"]["encrypted"] == "true"
    assert storage_class["volumeBindingMode"] == "WaitForFirstConsumer"


def test_given_default_config_then_service_etcd_exposes_client_port_2379(platform_json):
    (service,) = [o for _, o in objects(platform_json, "Service") if o["metadata"]["name"] == "etcd"]
    assert service["metadata"]["namespace"] == "etcd"
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["ports"] == [
        {"name": "client", "port": 2379, "targetPort": "client", "protocol": "TCP"}
    ]
    _, statefulset = _one(platform_json, "StatefulSet")
    assert (
        service["spec"]["selector"].items() <= statefulset["spec"]["template"]["metadata"]["labels"].items()
    )


def test_given_default_config_then_only_the_training_namespace_may_connect(platform_json):
    (policy,) = [
        o for _, o in objects(platform_json, "NetworkPolicy") if o["metadata"]["namespace"] == "etcd"
    ]
    (rule,) = policy["spec"]["ingress"]
    assert rule["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "training"}}}
    ]
    assert rule["ports"] == [{"protocol": "TCP", "port": 2379}]


def test_given_default_config_then_etcd_comes_after_the_ebs_csi_driver(platform_json):
    (manifest_id,) = logical_ids(platform_json, "Custom::AWSCDK-EKS-KubernetesResource", "AddonsEtcd")
    (addon_id,) = logical_ids(platform_json, "AWS::EKS::Addon", "AddonsEbsCsi")
    assert addon_id in depends_on(platform_json, manifest_id)


def test_given_default_config_then_the_stack_exposes_the_endpoint():
    stack = TrainiumPlatformStack(cdk.App(), "Attrs", config=PlatformConfig())
    assert stack.platform.addons.etcd_endpoint == "etcd.etcd.svc.cluster.local:2379"


def test_given_etcd_disabled_then_no_etcd_and_no_endpoint_and_the_driver_stays_for_monitoring():
    template = synth_platform(etcd_enabled="false")
    assert objects(template, "StatefulSet") == []
    # Prometheus's volume needs the EBS CSI driver too.
    assert logical_ids(template, "AWS::EKS::Addon", "AddonsEbsCsi") != []
    both_off = synth_platform(etcd_enabled="false", monitoring_enabled="false")
    assert logical_ids(both_off, "AWS::EKS::Addon", "AddonsEbsCsi") == []
    stack = TrainiumPlatformStack(cdk.App(), "Off", config=PlatformConfig(etcd_enabled=False))
    assert stack.platform.addons.etcd is None and stack.platform.addons.etcd_endpoint is None


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"pin": AddonPin("gcr.io/etcd-development/etcd", "v3.6.13")}, "needs etcd 3.5.x"),
        ({"quota_bytes": 2 * 1024**3}, "keep it below the 2 GiB volume"),
        ({"client_namespaces": ()}, "client_namespaces"),
    ],
)
def test_given_bad_props_then_etcd_refuses_with_the_field_named(kwargs, message):
    stack = cdk.Stack(cdk.App(), "Direct")
    cluster = eks.Cluster.from_cluster_attributes(stack, "C", cluster_name="c")
    with pytest.raises(ConfigError, match=message):
        EtcdServer(stack, "Etcd", cluster=cluster, storage_class_name="gp3-encrypted", **kwargs)
