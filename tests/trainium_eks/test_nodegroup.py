"""The Trainium nodegroup in the default synth: Neuron AMI, launch template, one AZ, taint."""

from aws_cdk.assertions import Match

from tests.support import resources


def _trainium_nodegroup(platform_json):
    (ng,) = [
        r
        for r in resources(platform_json, "AWS::EKS::Nodegroup").values()
        if r["Properties"]["Labels"].get("trainium-eks/pool") == "trainium"
    ]
    return ng["Properties"]


def test_given_default_config_when_synthesized_then_nodegroup_uses_the_neuron_ami(platform_json):
    props = _trainium_nodegroup(platform_json)
    assert props["AmiType"] == "AL2023_x86_64_NEURON"
    # The instance type lives in the launch template, not on the nodegroup.
    assert "InstanceTypes" not in props
    assert props["CapacityType"] == "ON_DEMAND"


def test_given_default_config_then_two_nodes_with_auto_repair(platform_json):
    props = _trainium_nodegroup(platform_json)
    assert props["ScalingConfig"] == {"MinSize": 2, "DesiredSize": 2, "MaxSize": 2}
    assert props["NodeRepairConfig"] == {"Enabled": True}


def test_given_default_config_then_nodes_are_tainted_for_training_only(platform_template):
    platform_template.has_resource_properties(
        "AWS::EKS::Nodegroup",
        {
            "AmiType": "AL2023_x86_64_NEURON",
            "Taints": [{"Key": "aws.amazon.com/neuron", "Value": "true", "Effect": "NO_SCHEDULE"}],
            "LaunchTemplate": {
                "Id": {"Ref": Match.string_like_regexp("TrainiumLaunchTemplate")},
                "Version": Match.any_value(),
            },
        },
    )


def test_given_default_config_then_nodegroup_uses_only_the_trainium_az_subnet(platform_json):
    props = _trainium_nodegroup(platform_json)
    (subnet_ref,) = props["Subnets"]
    subnet = platform_json["Resources"][subnet_ref["Ref"]]["Properties"]
    assert subnet["AvailabilityZoneId"] == "usw2-az4"
    assert subnet["MapPublicIpOnLaunch"] is False
