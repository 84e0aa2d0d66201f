"""Storage configuration (FSx, ECR): defaults, coercion from context, one clear error per bad input."""

import pytest

from trainium_eks.config import PlatformConfig, config_from_context
from trainium_job.errors import ConfigError


def test_given_no_context_then_storage_defaults_are_persistent_2_cheapest_tier_and_lz4():
    config = config_from_context({})
    assert (
        config.fsx_deployment_type,
        config.fsx_storage_gib,
        config.fsx_throughput_per_tib,
        config.fsx_compression,
        config.fsx_s3_import_uri,
        config.fsx_s3_export_uri,
        config.ecr_keep_images,
    ) == ("PERSISTENT_2", 1200, None, True, None, None, 20)


def test_given_string_context_values_then_storage_fields_are_coerced():
    config = config_from_context(
        {
            "fsx_storage_gib": "4800",
            "fsx_throughput_per_tib": "500",
            "fsx_compression": "false",
            "fsx_s3_import_uri": "s3://my-data/bert/",
            "fsx_s3_export_uri": "none",
            "ecr_keep_images": "5",
        }
    )
    assert (config.fsx_storage_gib, config.fsx_throughput_per_tib, config.fsx_compression) == (
        4800,
        500,
        False,
    )
    assert (config.fsx_s3_import_uri, config.fsx_s3_export_uri, config.ecr_keep_images) == (
        "s3://my-data/bert/",
        None,
        5,
    )


def test_given_json_context_values_then_bool_and_optional_int_keep_their_types():
    config = config_from_context({"fsx_compression": True, "fsx_throughput_per_tib": 1000})
    assert config.fsx_compression is True and config.fsx_throughput_per_tib == 1000
    assert config_from_context({"fsx_throughput_per_tib": "null"}).fsx_throughput_per_tib is None


def test_given_scratch_2_without_throughput_then_it_is_accepted():
    config = config_from_context({"fsx_deployment_type": "SCRATCH_2", "fsx_storage_gib": "2400"})
    assert config.fsx_deployment_type == "SCRATCH_2" and config.fsx_throughput_per_tib is None


@pytest.mark.parametrize(
    "context, field, fix",
    [
        ({"fsx_deployment_type": "PERSISTENT_1"}, "fsx_deployment_type", "PERSISTENT_2, SCRATCH_2"),
        ({"fsx_deployment_type": "persistent_2"}, "fsx_deployment_type", "PERSISTENT_2, SCRATCH_2"),
        ({"fsx_storage_gib": "1000"}, "fsx_storage_gib", "1200 GiB or a multiple of 2400"),
        ({"fsx_storage_gib": "3600"}, "fsx_storage_gib", "nearest: 2400 or 4800"),
        ({"fsx_deployment_type": "SCRATCH_2", "fsx_storage_gib": "1800"}, "fsx_storage_gib", "SCRATCH_2"),
        ({"fsx_storage_gib": "big"}, "fsx_storage_gib", "whole number"),
        ({"fsx_throughput_per_tib": "200"}, "fsx_throughput_per_tib", "125, 250, 500, 1000"),
        ({"fsx_throughput_per_tib": "fast"}, "fsx_throughput_per_tib", "whole number"),
        (
            {"fsx_deployment_type": "SCRATCH_2", "fsx_throughput_per_tib": "125"},
            "fsx_throughput_per_tib",
            "leave it unset",
        ),
        ({"fsx_compression": "maybe"}, "fsx_compression", "true or false"),
        ({"fsx_s3_import_uri": "my-bucket/data"}, "fsx_s3_import_uri", "s3://my-bucket"),
        ({"fsx_s3_import_uri": "s3://My_Bucket/data"}, "fsx_s3_import_uri", "not a valid S3 bucket name"),
        ({"fsx_s3_export_uri": "s3://ab/out"}, "fsx_s3_export_uri", "not a valid S3 bucket name"),
        ({"fsx_s3_export_uri": "s3://192.168.0.1/out"}, "fsx_s3_export_uri", "not a valid S3 bucket name"),
        (
            {"fsx_s3_import_uri": "s3://my-data/bert", "fsx_s3_export_uri": "s3://my-data/bert/out"},
            "fsx_s3_export_uri",
            "overlaps fsx_s3_import_uri",
        ),
        ({"ecr_keep_images": "0"}, "ecr_keep_images", "1 to 1000"),
        ({"fsx_storage_gb": "1200"}, "fsx_storage_gb", "did you mean 'fsx_storage_gib'"),
    ],
)
def test_given_a_bad_storage_value_then_config_error_names_field_value_and_fix(context, field, fix):
    with pytest.raises(ConfigError) as err:
        config_from_context(context)
    assert err.value.field_name == field
    assert fix in err.value.fix
    assert f"'{field}'" in str(err.value)


def test_given_python_values_of_the_wrong_type_then_config_error():
    with pytest.raises(ConfigError, match="fsx_compression"):
        PlatformConfig(fsx_compression="yes")
    with pytest.raises(ConfigError, match="fsx_throughput_per_tib"):
        PlatformConfig(fsx_throughput_per_tib=True)
