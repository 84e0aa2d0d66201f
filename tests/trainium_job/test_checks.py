"""The shared small checks: one wording per rule, the caller's field name."""

from __future__ import annotations

import pytest

from trainium_job import checks
from trainium_job.errors import ConfigError


@pytest.mark.parametrize(
    "call,fix",
    [
        (lambda: checks.whole_number("n", True), "must be a whole number"),
        (lambda: checks.whole_number("n", 1.0), "must be a whole number"),
        (lambda: checks.whole_number("n", 0, minimum=1), "must be a whole number of at least 1"),
        (lambda: checks.whole_number("n", -1, minimum=0), "must be a whole number 0 or more"),
        (lambda: checks.whole_number("n", 11, minimum=1, maximum=10), "use 1 to 10"),
        (lambda: checks.flag("n", "true"), "must be true or false"),
        (lambda: checks.one_of("n", "c", ("a", "b")), "choose one of a, b"),
        (lambda: checks.dns_label("n", "a_b"), "DNS-1123 label"),
        (lambda: checks.dns_label("n", "ab", max_len=1), "at most 1 lower-case"),
    ],
)
def test_given_bad_value_then_config_error_names_the_field(call, fix):
    with pytest.raises(ConfigError) as err:
        call()
    assert err.value.field_name == "n" and fix in str(err.value)


def test_given_good_values_then_returned():
    assert checks.whole_number("n", 5, minimum=1, maximum=10) == 5
    assert checks.flag("n", False) is False
    assert checks.one_of("n", "a", ("a", "b")) == "a"
    assert checks.dns_label("n", "bert-large-1") == "bert-large-1"
