"""The README's samples of program output are what the program prints: the synth review, the
figures the walkthrough quotes from it, and the watch commands the stacks output.

After a change to what the review prints, rewrite the README's review block from the program:

    .venv/bin/python -m tests.test_readme_samples
"""

from __future__ import annotations

import json
import re
import sys

import pytest

from tests.support import REPO, TRAINING_STACK, Synth
from trainium_eks.config import PlatformConfig, config_from_context
from trainium_eks.jobs.tensorboard import port_forward_command
from trainium_eks.jobs.training_job import job_commands
from trainium_eks.monitoring.names import grafana_password_command, port_forward_commands
from trainium_eks.report.review import platform_review
from trainium_job.naming import DEFAULT_NAME_PREFIX
from trainium_job.scheduling import TRAINING_NAMESPACE

README = REPO / "README.md"
#: The line before the review block, and the block's fences.
REVIEW_INTRO = "It prints a short review:\n\n```\n"
FENCE = "\n```\n"
#: How the README writes a job's name in the watch commands (the real one ends in a digest).
JOB_NAME = f"{DEFAULT_NAME_PREFIX}-<hash>"


def default_config() -> PlatformConfig:
    """The configuration ``make synth`` reviews: cdk.json's context (no ``-c`` keys)."""
    return config_from_context(json.loads((REPO / "cdk.json").read_text())["context"])


def readme_review(readme: str) -> str:
    """The README's review block (between the fences after :data:`REVIEW_INTRO`)."""
    start = readme.index(REVIEW_INTRO) + len(REVIEW_INTRO)
    return readme[start : readme.index(FENCE, start)]


def with_review(readme: str, review: str) -> str:
    """``readme`` with its review block replaced by ``review``."""
    start = readme.index(REVIEW_INTRO) + len(REVIEW_INTRO)
    return readme[:start] + review + readme[readme.index(FENCE, start) :]


def printed_review(stderr: str) -> str:
    """The review in what the app printed: from its first line to the first line that is neither
    indented nor a warning (the CLI's and cdk-nag's output around it)."""
    lines = stderr.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Trainium platform '"))
    block = [lines[start]]
    for line in lines[start + 1 :]:
        if not line.startswith(("  ", "warning: ")):
            break
        block.append(line)
    return "\n".join(block)


def section(readme: str, heading: str) -> str:
    """The text of the README section under ``heading`` (up to the next heading)."""
    start = readme.index(f"\n{heading}\n") + len(heading) + 2
    end = re.compile(r"^#{1,4} ", re.MULTILINE).search(readme, start)
    return readme[start : end.start() if end else len(readme)]


def bash_commands(text: str) -> list[str]:
    """The commands of the ``bash`` blocks in ``text``: comments dropped, continuations joined."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.DOTALL):
        joined = re.sub(r"\\\n\s*", "", block)
        for line in joined.splitlines():
            command = re.sub(r"\s+#.*$", "", line).strip()
            if command:
                commands.append(command)
    return commands


def review_value(review: str, pattern: str) -> re.Match[str]:
    match = re.search(pattern, review)
    assert match, f"the review no longer prints {pattern!r}"
    return match


# --- the review block -------------------------------------------------------------------------------


def test_given_the_default_configuration_then_the_readme_shows_the_review_it_prints():
    # Run `python -m tests.test_readme_samples` to rewrite the block after a change.
    assert readme_review(README.read_text()) == platform_review(default_config())


def test_given_the_synth_then_the_app_prints_the_readmes_review(default_synth: Synth):
    assert printed_review(default_synth.stderr) == readme_review(README.read_text())


def test_given_a_review_block_then_it_is_found_and_rewritten_whole():
    readme = "intro\n" + REVIEW_INTRO + "old line\nold line 2" + FENCE + "after\n"
    assert readme_review(readme) == "old line\nold line 2"
    assert with_review(readme, "new") == "intro\n" + REVIEW_INTRO + "new" + FENCE + "after\n"
    stderr = "cdk-nag: ok\nTrainium platform 'x' in r (z)\n  nodes: 2\nwarning: w\n\nSuccessfully synthesized"
    assert printed_review(stderr) == "Trainium platform 'x' in r (z)\n  nodes: 2\nwarning: w"


#: What a newcomer reads first fits in this many lines; the rest is linked in docs/.
README_MAX_LINES = 250


def test_given_the_readme_then_it_stays_short_and_links_the_rest():
    readme = README.read_text()
    assert len(readme.splitlines()) <= README_MAX_LINES
    for doc in sorted((REPO / "docs").glob("*.md")):
        assert f"docs/{doc.name}" in readme, f"the README links no docs/{doc.name}"


# --- the figures the prose quotes from the review ---------------------------------------------------


def _prose_figures() -> list[str]:
    """What the README's prose says of the default (Karpenter) review and of the fixed nodegroup's,
    written from the review's lines (so a changed figure on either side fails)."""
    review = platform_review(default_config())
    nodegroup = platform_review(config_from_context({"trainium_capacity": "nodegroup"}))
    training = review_value(review, r"training: +BERT-large, (\d+) workers \((\d+) x (\d+)\)")
    batch = review_value(review, r"phase 1: +seq 128, (micro-batch .*? = global batch [\d,]+)")[1]
    phase2 = review_value(
        review,
        r"phase 2: .*\n  schedule: +([\d,]+) steps .*\n.*\n  estimate: .*?published.*: ([\d.]+) h, \$([\d,]+)",
    )
    price = review_value(review, r"cost: +(\$[\d,.]+/h) on demand")[1]
    steps, sequences = review_value(review, r"schedule: +([\d,]+) steps = ([\d,]+) sequences").groups()
    published = review_value(review, r"\(published ([\d,.]+) seq/s/node\): ([\d.]+) h, \$([\d,]+) on demand")
    walkthrough = review_value(
        review, r"([\d,]+) seq/s \(walkthrough's 2-node EKS run\): ([\d.]+) h, \$([\d,]+)"
    )
    idle = review_value(review, r"idle: +(\$[\d.]+/h) with no job running")[1]
    fixed_idle = review_value(nodegroup, r"idle: +(\$[\d,.]+/h) with no job running")[1]
    gang = review_value(review, r"gang not complete after (\d+) min")[1]
    empty = review_value(review, r"removes them (\d+) min after the last job ends")[1]
    millions = int(sequences.replace(",", "")) / 1e6
    return [
        f"{training[1]} workers ({training[2]} x {training[3]} NeuronCores),\n{batch}",
        f"phase 2 ({phase2[1]} steps of 32,768 sequences at 512 tokens from phase 1's final checkpoint): at least\n"
        f"~{phase2[2]} h / ~${phase2[3]}",
        f"{price} on demand",
        f"phase 1 ({steps} steps = {millions:g} M sequences): ~{published[2]} h / ~${published[3]} at the "
        f"published {published[1]} seq/s per\nnode, ~{walkthrough[2]} h / ~${walkthrough[3]} at the ~{walkthrough[1]} "
        "seq/s the original 2-node EKS walkthrough logged",
        f"`deploy` to `destroy` ({price} whether a job runs or\nnot; about {fixed_idle} idle in all)",
        f"removes them `trainium_idle_minutes` ({empty}) after the last one ends",
        f"(about {idle} with the defaults)",
        f"`trainium_gang_wait_minutes` ({gang}) without them",
    ]


@pytest.mark.parametrize("figure", _prose_figures())
def test_given_the_prose_then_each_figure_it_quotes_is_the_reviews(figure):
    # The prose is wrapped: compare with runs of white space as one space.
    assert " ".join(figure.split()) in " ".join(README.read_text().split())


# --- the watch commands -------------------------------------------------------------------------------


def test_given_the_watch_section_then_each_command_is_one_the_stacks_output():
    # The job's three (its stack outputs, training_job.add_job_outputs), Grafana's and Prometheus's
    # port-forward and Grafana's password (the monitoring add-on), TensorBoard's (its output).
    outputs = {
        *job_commands(job_name=JOB_NAME, namespace=TRAINING_NAMESPACE).values(),
        *port_forward_commands().values(),
        grafana_password_command(),
        port_forward_command(TRAINING_NAMESPACE),
    }
    shown = bash_commands(
        section(README.read_text(), "### 4. Watch a run (the stack outputs print these with the job's name)")
    )
    assert sorted(shown) == sorted(outputs)


def test_given_the_synth_then_the_job_outputs_are_the_readmes_commands_with_the_jobs_name(
    default_synth: Synth,
):
    outputs = default_synth.templates[TRAINING_STACK]["Outputs"]
    (name,) = {
        m[1]
        for o in outputs.values()
        if (m := re.search(rf"({DEFAULT_NAME_PREFIX}-[0-9a-f]{{8}})\b", str(o["Value"])))
    }
    for key, command in job_commands(job_name=name, namespace=TRAINING_NAMESPACE).items():
        assert outputs[key]["Value"] == command


def main() -> int:
    """Rewrite the README's review block from the program."""
    readme = README.read_text()
    updated = with_review(readme, platform_review(default_config()))
    if updated != readme:
        README.write_text(updated)
        print(f"{README.relative_to(REPO)}: review block rewritten", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
