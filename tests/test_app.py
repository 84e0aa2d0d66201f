"""The app entry point: bad configuration stops synth with one clear line and writes nothing."""

import pytest

from tests.support import run_app, run_cdk_synth


@pytest.mark.parametrize(
    "context,expected",
    [
        ({"instance_type": "trn1.2xlarge"}, "config 'max_nodes' = 2 is invalid: trn1.2xlarge has no EFA"),
        (
            {"trainium_az_id": "us-west-2a"},
            "config 'trainium_az_id' = 'us-west-2a' is invalid: this is an AZ name",
        ),
    ],
)
def test_given_bad_context_when_app_runs_then_one_line_error_and_no_assembly(context, expected, tmp_path):
    proc = run_app(context, tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: {expected}" or proc.stderr.strip().startswith(f"error: {expected}")
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "Traceback" not in proc.stderr and "jsii" not in proc.stderr
    assert not list(tmp_path.iterdir())


def test_given_bad_value_on_cdk_command_line_then_cli_shows_the_line_without_a_stack_trace(tmp_path):
    synth = run_cdk_synth(tmp_path / "out", {"kubernetes_version": "1.20"})
    assert synth.returncode != 0
    assert (
        "error: config 'kubernetes_version' = '1.20' is invalid: supported: 1.34, 1.35, 1.36" in synth.stderr
    )
    assert "Traceback" not in synth.stderr and "JavaScriptError" not in synth.stderr
    assert not list((tmp_path / "out").glob("*.template.json"))


@pytest.mark.parametrize(
    "context,expected",
    [
        ({"vpc_cidr": "10.0.0.0/17"}, "config 'vpc_cidr' = '10.0.0.0/17' is invalid: the 2 public /24"),
        ({"name_prefix": "trn-"}, "config 'name_prefix' = 'trn-' is invalid: the ECR repository name"),
        ({"endpoint_public_cidrs": "0.0.0.0/1,128.0.0.0/1"}, "config 'endpoint_public_cidrs'"),
        ({"tags": '{"aws:team": "ml"}'}, "config 'tags'"),
        (
            {"training_script_args": '{"lr": "fast"}'},
            "config 'training_script_args' (BertJobSpec.script_args) = {'lr': 'fast'}",
        ),
    ],
)
def test_given_bad_value_through_the_cdk_cli_then_one_line_and_no_assembly_even_over_an_old_one(
    context, expected, tmp_path
):
    out = tmp_path / "out"
    out.mkdir()
    # What an earlier, successful synth leaves in the output directory.
    for name in (
        "manifest.json",
        "tree.json",
        "cdk.out",
        "trn-bert-platform.template.json",
        "trn-bert-platform.assets.json",
        "trn-bert-training.template.json",
        "trn-bert-training.assets.json",
    ):
        (out / name).write_text("{}")
    (out / "asset.0123abcd").mkdir()
    (out / "asset.0123abcd" / "Dockerfile").write_text("FROM scratch\n")
    synth = run_cdk_synth(out, context)
    assert synth.returncode != 0
    errors = [line for line in synth.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith(f"error: {expected}"), synth.stderr[-2000:]
    assert "Traceback" not in synth.stderr and "JavaScriptError" not in synth.stderr
    assert "jsii" not in synth.stderr
    left = sorted(p.name for p in out.iterdir())
    assert not [
        name for name in left if name.endswith(".json") or name.startswith("asset.") or name == "cdk.out"
    ], left


def test_given_output_dir_without_an_assembly_when_synth_fails_then_its_files_are_left_alone(tmp_path):
    from app import remove_stale_assembly

    (tmp_path / "notes.template.json").write_text("mine")
    remove_stale_assembly(str(tmp_path))
    assert (tmp_path / "notes.template.json").read_text() == "mine"


def test_given_a_stale_acknowledgement_when_the_app_synthesizes_then_one_line_and_no_assembly(
    tmp_path, monkeypatch, capsys
):
    # Given the library's acknowledgements with one that matches no finding (a platform-only app)
    import app
    import trainium_eks.cluster.eks_cluster as owner

    # An entry of the table TrainiumCluster applies to itself (paths under it).
    stale = ("SystemNodeRole", "AwsSolutions-IAM5[Resource::*]", "a reason that no longer applies")
    monkeypatch.setattr(
        owner, "TRAINIUM_CLUSTER_ACKNOWLEDGEMENTS", (*owner.TRAINIUM_CLUSTER_ACKNOWLEDGEMENTS, stale)
    )
    # (in process: the jsii kernel, started earlier, does not see CDK_OUTDIR set now)
    new_app = app.cdk.App
    monkeypatch.setattr(
        app.cdk, "App", lambda: new_app(outdir=str(tmp_path), context={"training_enabled": "false"})
    )
    # When the app runs, then the check after synth names the entry in one line, exits 2 and
    # leaves no assembly to deploy
    assert app.main() == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: cdk-nag acknowledgement of AwsSolutions-IAM5[Resource::*] on ")
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".json") or p.name.startswith("asset.")]
