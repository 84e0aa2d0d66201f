"""The report's line format and summary."""

from __future__ import annotations

from trainium_eks.doctor.findings import Finding, Status, Verdict, blockers, summary


def test_given_a_finding_with_a_fix_when_printed_then_status_check_found_and_fix_are_one_line():
    finding = Finding.of("trn-quota", Verdict(Status.FAIL, "quota is 0", "ask for 256"))
    assert finding.line == "FAIL trn-quota: quota is 0; ask for 256"


def test_given_a_finding_without_a_fix_when_printed_then_no_separator_trails():
    assert Finding(Status.OK, "bootstrap", "version 30").line == "ok bootstrap: version 30"


def test_given_mixed_findings_when_summarized_then_only_fail_lines_block():
    findings = [
        Finding(Status.OK, "a", "x"),
        Finding(Status.WARN, "b", "y"),
        Finding(Status.FAIL, "c", "z"),
        Finding(Status.WARN, "d", "w"),
    ]
    assert [f.check for f in blockers(findings)] == ["c"]
    assert summary(findings) == "1 ok, 2 warn, 1 FAIL"
