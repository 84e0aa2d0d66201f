"""One validation convention: every construct refuses bad props with the one error type."""

from __future__ import annotations

import ast
from pathlib import Path

import trainium_eks
import trainium_job.errors
from trainium_job.errors import ConfigError

PACKAGE = Path(trainium_eks.__file__).parent


#: Raises that are not a refused value: a parser whose ValueError its callers turn into a
#: problem text, a programming error (an escape hatch that finds another child than aws-cdk-lib had),
#: the nag and build-context checks, argparse's hooks; facts tables that lack a row the code needs
#: (a chart version without DaemonSet facts, a Kubernetes version without a known Neuron AMI
#: release: tests/trainium_eks/addons/test_node_daemons.py and test_nodegroup.py keep them complete).
NOT_PROP_CHECKS = {
    ("parse_s3_uri", "ValueError"),
    ("chart_props", "ValueError"),
    ("construct_at", "LookupError"),
    ("_resolve", "LookupError"),
    ("logical_id", "LookupError"),
    ("newest_compatible_version", "LookupError"),
    ("l1", "TypeError"),
    ("descendant", "TypeError"),
    ("_check", "StaleAcknowledgement"),
    ("_context_files", "FileNotFoundError"),
    ("_raise", "_ArgsError"),
    ("_raise", "_ParseError"),
    ("chart_facts", "KeyError"),
    ("chart_daemons", "KeyError"),
    ("default_neuron_ami_release", "KeyError"),
    # The price table (trainium_eks/report/prices.py) lacking a row or a unit the review needs; the
    # review's tests price every deployment type and tier the configuration accepts.
    ("fsx_storage", "KeyError"),
    ("hourly", "ValueError"),
    # The doctor's AWS profile (--profile, AWS_PROFILE) is not configuration: one line, exit 2.
    ("__init__", "UnknownProfile"),
    # The image-build library's singletons are named by the library: an upgrade that renames them
    # must be caught at synth (a programming error, not a user's value).
    ("harden_builds", "LookupError"),
    # The stack's image builds acknowledged twice: only their first owner calls it (harden_builds).
    ("acknowledge_image_builds", "RuntimeError"),
    # A descriptor read on its class (the dataclass machinery looking for a field's default):
    # Python's protocol for "no such attribute" (trainium_eks.arguments.ClusterArgument).
    ("__get__", "AttributeError"),
}


def _raises(tree: ast.AST) -> list[tuple[str, str]]:
    """(function, exception name) of every ``raise X(...)`` in a function or method."""
    found = []
    for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
        for node in ast.walk(fn):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
                func = node.exc.func
                found.append((fn.name, func.id if isinstance(func, ast.Name) else ast.unparse(func)))
    return found


def test_given_every_construct_and_check_then_it_raises_only_config_error():
    raises = [r for path in PACKAGE.rglob("*.py") for r in _raises(ast.parse(path.read_text()))]
    checks = [r for r in raises if r not in NOT_PROP_CHECKS]
    assert len(checks) > 50  # the props and config checks exist, and are seen
    assert {name for _, name in checks} == {"ConfigError"}


def test_given_the_exemptions_then_each_still_names_a_raise_in_the_package():
    # An exemption whose function was renamed or removed would let a new raise of the same name
    # through unseen: each must still match a raise.
    raises = {r for path in PACKAGE.rglob("*.py") for r in _raises(ast.parse(path.read_text()))}
    assert sorted(NOT_PROP_CHECKS - raises) == []


def test_given_the_old_error_module_then_it_is_the_contract_type():
    assert trainium_job.errors.ConfigError is ConfigError is trainium_eks.ConfigError
    assert issubclass(ConfigError, ValueError)
