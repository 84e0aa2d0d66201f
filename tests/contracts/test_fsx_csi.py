"""Every FSx PersistentVolume the stacks apply is one the FSx CSI driver's node plugin can mount."""

from __future__ import annotations

import copy

from tests.contracts.check import check_fsx_volume
from tests.contracts.emitted import manifests


def _volumes():
    return [m for m in manifests() if m.body["kind"] == "PersistentVolume"]


def test_given_every_configuration_then_the_driver_reads_each_volume_it_applies():
    volumes = _volumes()
    assert len(volumes) >= 6  # one per configuration
    assert [f"{v.where}: {p}" for v in volumes for p in check_fsx_volume(v.body)] == []


def test_given_the_former_camel_case_keys_then_the_contract_check_fails():
    volume = copy.deepcopy(_volumes()[0].body)
    attributes = volume["spec"]["csi"]["volumeAttributes"]
    volume["spec"]["csi"]["volumeAttributes"] = {
        "dnsName": attributes["dnsname"],
        "mountName": attributes["mountname"],
    }
    problems = check_fsx_volume(volume)
    assert any(p.startswith("volumeAttributes.dnsName: the driver does not read it") for p in problems)
    assert any(
        p.startswith("volumeAttributes.dnsname is missing") and "dnsname is not provided" in p
        for p in problems
    )
    assert any(p.startswith("volumeAttributes.mountname is missing") for p in problems)


def test_given_another_driver_name_or_an_unknown_mount_option_then_the_check_fails():
    volume = copy.deepcopy(_volumes()[0].body)
    volume["spec"]["mountOptions"] = ["flock", "noatime-please"]
    assert check_fsx_volume(volume) == ["mountOptions: 'noatime-please' has no cited Lustre client meaning"]
    volume["spec"]["csi"]["driver"] = "fsx.csi.aws.amazon.com"
    assert check_fsx_volume(volume)[0].startswith("csi.driver 'fsx.csi.aws.amazon.com'")
