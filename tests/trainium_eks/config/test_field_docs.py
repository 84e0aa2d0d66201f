"""The configuration's field documentation: declared once beside each field, shown by help()."""

from __future__ import annotations

import dataclasses
import inspect
import pydoc
from dataclasses import dataclass

from trainium_eks.config import PlatformConfig, PlatformSettings
from trainium_eks.config.field_docs import field_docs, field_groups, with_field_docs


@dataclass(frozen=True)
class _Documented:
    """Fields documented by attribute docstrings."""

    first: int = 1
    """A docstring that runs
    over two lines."""
    low: int = 0
    """Shared by the next field."""
    high: int = 9
    # An ordinary comment is not documentation.
    last: str = "x"
    """The last one."""


def test_given_attribute_docstrings_then_each_field_reads_its_own_and_shares_the_one_above():
    docs = field_docs(_Documented)
    assert docs == {
        "first": "A docstring that runs over two lines.",
        "low": "Shared by the next field.",
        "high": "",
        "last": "The last one.",
    }
    assert field_groups(_Documented)[1] == (("low", "high"), "Shared by the next field.")


def test_given_the_settings_then_every_field_is_documented_by_a_docstring_not_a_comment():
    # One declaration per field doc: the docstring IDEs show. A `#:` comment left above a field
    # (say, from a merge) would document nothing an IDE shows.
    source = inspect.getsource(PlatformSettings)
    assert "#:" not in source
    groups = field_groups(PlatformSettings)
    assert [names for names, doc in groups if not doc] == []
    assert sum(len(names) for names, _ in groups) == len(dataclasses.fields(PlatformSettings))


def test_given_help_on_the_config_then_it_lists_every_field_with_its_documentation():
    shown = pydoc.render_doc(PlatformConfig, renderer=pydoc.TextDoc())
    for names, doc in field_groups(PlatformSettings):
        assert ", ".join(names) + ":" in shown
        assert " ".join(doc.split()[:4]) in " ".join(shown.split())
    assert "AWS region of the stack" in (PlatformSettings.__doc__ or "")


def test_given_a_class_without_documented_fields_then_its_docstring_is_kept():
    @dataclass
    class Bare:
        """Only this."""

        value: int = 0

    assert with_field_docs(Bare) == "Only this."
