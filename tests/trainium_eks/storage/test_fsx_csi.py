"""FSx CSI driver and the static volume: chart pin, controller IAM, PV/PVC content, schema, order."""

import pytest

from tests.support import (
    helm_charts,
    k8s_manifests,
    resources,
    synth_platform,
    validate_k8s,
)
from trainium_eks.nodes.karpenter import KARPENTER_SERVICE_ACCOUNT
from trainium_eks.storage import fsx_csi
from trainium_eks.storage.fsx_csi import CLAIM_NAME
from trainium_job.scheduling import TRAINING_NAMESPACE


def _objects(template_json, kind):
    return [(lid, obj) for lid, obj in k8s_manifests(template_json) if obj["kind"] == kind]


def _driver(template_json):
    (chart,) = [
        (lid, c) for lid, c in helm_charts(template_json).items() if c["Chart"] == "aws-fsx-csi-driver"
    ]
    return chart


def _file_system_id(template_json):
    (logical_id,) = resources(template_json, "AWS::FSx::FileSystem")
    return logical_id


def test_given_default_config_then_the_driver_chart_is_the_pinned_one(platform_json):
    _, chart = _driver(platform_json)
    assert (chart["Repository"], chart["Chart"], chart["Version"]) == (
        fsx_csi.CHART.repository,
        fsx_csi.CHART.name,
        fsx_csi.CHART.version,
    )
    assert chart["Version"] == "1.17.0"
    assert chart["Namespace"] == "kube-system"


def test_given_default_config_then_controller_runs_on_system_nodes_and_node_plugin_everywhere(platform_json):
    _, chart = _driver(platform_json)
    values = chart["Values"]
    assert values["controller"]["nodeSelector"] == {"trainium-eks/pool": "system"}
    assert values["controller"]["region"] == "us-west-2"
    assert values["controller"]["serviceAccount"] == {"create": True, "name": "fsx-csi-controller-sa"}
    # Trainium nodes are tainted; the node plugin must mount there.
    assert values["node"]["tolerateAllTaints"] is True


def _fsx_associations(template: dict) -> dict:
    """The Pod Identity associations of kube-system but Karpenter's controller's (the FSx CSI
    controller's; the node health check's are in the training namespace)."""
    return {
        k: a
        for k, a in resources(template, "AWS::EKS::PodIdentityAssociation").items()
        if a["Properties"]["Namespace"] == "kube-system"
        and a["Properties"]["ServiceAccount"] != KARPENTER_SERVICE_ACCOUNT
    }


def test_given_default_config_then_controller_gets_describe_only_through_pod_identity(platform_json):
    (association,) = _fsx_associations(platform_json).values()
    props = association["Properties"]
    assert (props["Namespace"], props["ServiceAccount"]) == ("kube-system", "fsx-csi-controller-sa")
    role_id = props["RoleArn"]["Fn::GetAtt"][0]
    role = platform_json["Resources"][role_id]["Properties"]
    (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert sorted(trust["Action"]) == ["sts:AssumeRole", "sts:TagSession"]
    assert "ManagedPolicyArns" not in role
    statements = [
        s
        for p in resources(platform_json, "AWS::IAM::Policy").values()
        if {"Ref": role_id} in p["Properties"]["Roles"]
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]
    assert statements == [{"Action": "fsx:DescribeFileSystems", "Effect": "Allow", "Resource": "*"}]


def test_given_default_config_then_chart_waits_for_the_pod_identity_association(platform_json):
    chart_id, _ = _driver(platform_json)
    (association_id,) = _fsx_associations(platform_json)
    assert association_id in platform_json["Resources"][chart_id]["DependsOn"]


def test_given_default_config_then_the_training_namespace_is_created(platform_json):
    ((_, namespace),) = [
        (lid, o)
        for lid, o in _objects(platform_json, "Namespace")
        if o["metadata"]["name"] == TRAINING_NAMESPACE
    ]
    validate_k8s(namespace, "1.36")


def test_given_default_config_then_a_static_retained_rwx_volume_names_the_file_system(platform_json):
    ((_, pv),) = _objects(platform_json, "PersistentVolume")
    spec = pv["spec"]
    fs_id = _file_system_id(platform_json)
    # Keys as the driver reads them: kubernetes-sigs/aws-fsx-csi-driver@v1.9.0
    # pkg/driver/controller.go:55-56 ("dnsname", "mountname"); tests/contracts/fsx_csi.py.
    assert spec["csi"] == {
        "driver": "fsx.csi.aws.com",
        "volumeHandle": f"REF_{fs_id}",
        "volumeAttributes": {"dnsname": f"ATT_{fs_id}_DNSName", "mountname": f"ATT_{fs_id}_LustreMountName"},
    }
    assert spec["capacity"] == {"storage": "1200Gi"}
    assert spec["accessModes"] == ["ReadWriteMany"]
    assert spec["persistentVolumeReclaimPolicy"] == "Retain"
    assert spec["storageClassName"] == ""
    assert spec["mountOptions"] == ["flock"]
    assert spec["claimRef"] == {"namespace": TRAINING_NAMESPACE, "name": CLAIM_NAME}


def test_given_default_config_then_the_claim_binds_that_volume_by_name(platform_json):
    ((_, pv),) = _objects(platform_json, "PersistentVolume")
    ((_, pvc),) = _objects(platform_json, "PersistentVolumeClaim")
    assert (pvc["metadata"]["name"], pvc["metadata"]["namespace"]) == ("fsx-claim", "training")
    assert pvc["spec"]["volumeName"] == pv["metadata"]["name"]
    assert pvc["spec"]["storageClassName"] == ""  # no dynamic provisioning
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pvc["spec"]["resources"] == {"requests": {"storage": "1200Gi"}}


@pytest.mark.parametrize("kind", ["PersistentVolume", "PersistentVolumeClaim"])
def test_given_default_config_then_volume_and_claim_are_valid_kubernetes_1_36(platform_json, kind):
    ((_, obj),) = _objects(platform_json, kind)
    validate_k8s(obj, "1.36")


def test_given_default_config_then_volume_is_applied_after_the_driver_and_namespace(platform_json):
    ((pv_manifest, _),) = _objects(platform_json, "PersistentVolume")
    ((ns_manifest, _),) = [
        (lid, o)
        for lid, o in _objects(platform_json, "Namespace")
        if o["metadata"]["name"] == TRAINING_NAMESPACE
    ]
    chart_id, _ = _driver(platform_json)
    depends = platform_json["Resources"][pv_manifest]["DependsOn"]
    assert chart_id in depends and ns_manifest in depends


def test_given_a_larger_file_system_then_volume_grows_and_claim_request_stays_resizable():
    template = synth_platform(fsx_storage_gib="4800", fsx_throughput_per_tib="250")
    ((_, pv),) = _objects(template, "PersistentVolume")
    ((_, pvc),) = _objects(template, "PersistentVolumeClaim")
    assert pv["spec"]["capacity"] == {"storage": "4800Gi"}
    # A static claim cannot be resized: its request stays at the smallest FSx size.
    assert pvc["spec"]["resources"]["requests"]["storage"] == "1200Gi"
    (fs,) = resources(template, "AWS::FSx::FileSystem").values()
    assert fs["Properties"]["StorageCapacity"] == 4800
    assert fs["Properties"]["LustreConfiguration"]["PerUnitStorageThroughput"] == 250
