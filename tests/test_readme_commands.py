"""The CDK commands of the README and docs run as written: through ``make cdk``, with the project's
Node 24 on a PATH that holds no other Node, selecting the stacks by the names the docs use."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from tests.support import PLATFORM_STACK, REPO, TRAINING_STACK, make_cdk, path_without_node

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
#: A CDK CLI command written without ``make cdk`` (which needs a Node of the machine's own).
BARE_CDK_COMMAND = re.compile(
    r"(?:node_modules/\.bin/)?\bcdk\s+(?:synth|deploy|destroy|ls|list|diff|bootstrap|watch|import)\b"
)
LIST_COMMAND = 'make cdk ARGS="ls"'


def test_given_the_docs_then_every_cdk_command_runs_through_make_cdk():
    bare = [
        f"{path.name}:{number}: {line.strip()}"
        for path in DOCS
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if BARE_CDK_COMMAND.search(line)
    ]
    assert bare == []


def test_given_a_bare_command_then_the_docs_check_finds_it():
    assert BARE_CDK_COMMAND.search("node_modules/.bin/cdk deploy --all")
    assert BARE_CDK_COMMAND.search("cdk destroy trn-bert-platform")
    assert not BARE_CDK_COMMAND.search('make cdk ARGS="destroy trn-bert-platform"')


def test_given_the_test_path_then_it_holds_no_node():
    assert shutil.which("node", path=path_without_node()) is None
    assert shutil.which("make", path=path_without_node()) is not None


def test_given_a_path_without_node_then_the_synth_ran_through_make_cdk_on_node_24(default_synth):
    # The session's synth is `make cdk ARGS="synth ..."` on that PATH (tests.support.run_cdk_synth).
    assert default_synth.returncode == 0
    assert set(default_synth.templates) == {PLATFORM_STACK, TRAINING_STACK}
    assert "end-of-life" not in default_synth.stdout + default_synth.stderr


def test_given_a_path_without_node_when_the_readme_list_command_runs_then_it_lists_both_stacks(tmp_path):
    readme = (REPO / "README.md").read_text()
    assert LIST_COMMAND in readme
    # `ls` runs the app; its assembly goes to a temporary folder, not the repository's cdk.out.
    proc = make_cdk(["ls", "--output", str(tmp_path)])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == [PLATFORM_STACK, TRAINING_STACK]
    assert "end-of-life" not in proc.stdout + proc.stderr


@pytest.mark.parametrize("command", [f"deploy {PLATFORM_STACK}", f"deploy {TRAINING_STACK} --exclusively"])
def test_given_the_name_the_readme_uses_then_the_cli_selects_that_stack(default_synth, command):
    # `synth` with the same selection prints the one template `deploy` would deploy.
    assert f'ARGS="{command}' in (REPO / "README.md").read_text()
    _, stack, *options = command.split()
    proc = make_cdk(["synth", stack, *options, "-a", str(default_synth.outdir), "--json"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["Resources"] == default_synth.templates[stack]["Resources"]
