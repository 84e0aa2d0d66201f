"""The configuration reference: written from the fields' declarations, and committed as written."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from trainium_eks.config import PlatformSettings
from trainium_eks.config.context import CONTEXT_KEYS
from trainium_eks.config.reference import BEGIN, END, field_comments, main, render, rows
from trainium_job.spec import BertJobSpec

PAGE = Path(__file__).resolve().parents[3] / "docs" / "configuration.md"


@dataclass(frozen=True)
class _Declared:
    """Fields declared the ways the reader must understand."""

    #: A comment that runs
    #: over two lines.
    first: int = 1
    #: Shared by the next field.
    low: int = 0
    high: int = 9
    listed: dict[str, str] = field(default_factory=lambda: {"a": "b"})
    # An ordinary comment is not documentation.
    #: Only the run of doc-comment lines right above counts.
    last: str = "x"


def _row(key: str):
    return next(row for row in rows() if key in row.keys)


def test_given_committed_page_then_it_is_what_the_generator_writes():
    current = PAGE.read_text(encoding="utf-8")
    assert render(current) == current, "docs/configuration.md is out of date: run `make docs`"


def test_given_every_context_key_then_the_reference_has_exactly_one_row_for_it():
    keys = [key for row in rows() for key in row.keys]
    assert sorted(keys) == sorted(CONTEXT_KEYS)


def test_given_every_row_then_it_says_what_the_key_means():
    assert [row.keys for row in rows() if not row.meaning] == []


def test_given_a_multiline_comment_then_its_lines_are_joined():
    assert field_comments(_Declared)["first"] == "A comment that runs over two lines."


def test_given_a_field_without_its_own_comment_then_it_shares_the_row_above():
    assert field_comments(_Declared)["high"] == ""
    nodes = _row("desired_nodes")
    assert nodes.keys == ("min_nodes", "desired_nodes", "max_nodes")
    settings = PlatformSettings()
    assert nodes.defaults == tuple(f"`{getattr(settings, k)}`" for k in nodes.keys)


def test_given_plain_comments_above_a_doc_comment_then_only_the_doc_comment_counts():
    assert field_comments(_Declared)["last"] == "Only the run of doc-comment lines right above counts."


def test_given_default_factory_fields_then_the_default_is_the_factory_value_as_json():
    assert _row("tags").defaults == (f"`{json.dumps(dict(PlatformSettings().tags))}`",)
    assert _row("preparation_args").defaults == ("`{}`",)


def test_given_the_job_spec_then_its_fields_are_training_keys_with_the_spec_defaults():
    spec = BertJobSpec()
    # set by the workload from the phase and held-out keys, not keys themselves
    derived = ("init_from", "vocab", "eval_dir")
    for f in dataclasses.fields(BertJobSpec):
        if f.name not in ("script_args", *derived):
            default = getattr(spec, f.name)
            shown = json.dumps(default) if isinstance(default, bool) else default
            assert _row(f"training_{f.name}").defaults == (f"`{shown}`" if default is not None else "unset",)
    keys = [key for row in rows() for key in row.keys]
    assert "training" not in keys and "phase2" not in keys
    assert not [name for name in derived if f"training_{name}" in keys]


def test_given_phase_2_then_its_keys_show_the_reference_phase_2_s_values():
    assert _row("phase2_max_steps").defaults == ("`1563`",)
    assert _row("phase2_global_batch").defaults == ("`32768`",)
    assert _row("phase2_run_name").defaults == ("`bert-large-phase2`",)
    assert "seq_len" in _row("phase2_script_args").defaults[0]
    assert _row("phase2_init_from").defaults == ("empty",)


def test_given_markdown_specials_in_types_and_comments_then_they_are_escaped():
    table = render(f"{BEGIN}{END}")
    assert "| `str \\| None` | unset |" in table
    assert "/data/runs/&lt;run&gt;" in _row("training_run_name").meaning


def test_given_allowed_values_then_they_come_from_the_checks_tables():
    assert "`trn1.2xlarge` (1 node only), `trn1.32xlarge`" in _row("instance_type").meaning
    assert "One of `c10d`, `etcd`, `etcd-v2`." in _row("training_rdzv_backend").meaning


def test_given_a_stale_page_when_checked_then_it_exits_1_naming_make_docs(tmp_path, capsys):
    page = tmp_path / "configuration.md"
    page.write_text(f"# hand-written\n\n{BEGIN}\n| old |\n{END}\n\nmore\n", encoding="utf-8")
    assert main(["--check", str(page)]) == 1
    assert "run `make docs`" in capsys.readouterr().err
    assert main([str(page)]) == 0
    text = page.read_text(encoding="utf-8")
    assert text.startswith("# hand-written\n\n") and text.endswith("\n\nmore\n") and "| old |" not in text
    assert main(["--check", str(page)]) == 0


def test_given_a_page_without_markers_then_it_is_left_alone_and_main_exits_2(tmp_path, capsys):
    assert render("# configuration\n") is None
    page = tmp_path / "configuration.md"
    page.write_text("# configuration\n", encoding="utf-8")
    assert main([str(page)]) == 2
    assert "has no generated block" in capsys.readouterr().err
    assert page.read_text(encoding="utf-8") == "# configuration\n"


def test_given_the_registry_then_the_add_ons_block_has_each_add_on_once_in_its_order():
    # When the page's add-on block is written, then its rows are the registry's add-ons, in order,
    # each with every pin its declaration lists
    import re

    from trainium_eks.addons.registry import ADDONS
    from trainium_eks.config.reference import render_addons

    block = render_addons()
    assert re.findall(r"^\| \[`(\w+)`\]", block, re.M) == [addon.name for addon in ADDONS]
    for addon in ADDONS:
        row = next(line for line in block.splitlines() if line.startswith(f"| [`{addon.name}`]"))
        assert all(f"`{pin.name}` {pin.version}" in row for pin in addon.pins.values()), addon.name
