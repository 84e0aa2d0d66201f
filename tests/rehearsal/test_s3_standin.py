"""The rehearsal's stand-in S3 (tests.rehearsal.s3_standin) on its own: a process in a network
namespace of its own, plugged into the bridge as a pod is, uploads a model folder with the upload's
command line and the stand-in's environment; the stand-in lists and hands back what landed."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from transformers import BertConfig, BertForPreTraining

from tests.rehearsal.cluster import die_with_test
from tests.rehearsal.s3_standin import S3StandIn
from tests.rehearsal.substitutions import POD_NETWORK
from tests.support import REPO
from trainium_job.entry_points import UPLOAD_MODEL

PREFIX = "rehearsal-phase1/model"


@pytest.fixture()
def standin(network, tmp_path):
    standin = S3StandIn(tmp_path / "s3", network.enter(), f"{POD_NETWORK}.1", preexec_fn=die_with_test)
    yield standin
    standin.close()


@pytest.fixture()
def model_dir(tmp_path):
    folder = tmp_path / "model"
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=32, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64
    )
    config.architectures = ["BertForPreTraining"]
    BertForPreTraining(config).save_pretrained(folder)
    (folder / "README.md").write_text("# rehearsal\n")
    return folder


def test_given_a_pod_on_the_bridge_then_its_upload_lands_in_the_stand_in_and_loads(
    standin, pod, model_dir, tmp_path
):
    # When a pod runs the upload's command line with the stand-in's environment (twice: a redeploy)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("AWS_")}, **standin.env()}
    command = [*pod, sys.executable, "-m", UPLOAD_MODEL, str(model_dir), standin.uri(PREFIX)]
    first = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    second = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    # Then both succeed, the second sending nothing
    assert first.returncode == 0, first.stderr
    assert second.returncode == 0, second.stderr
    files = sorted(p.name for p in model_dir.iterdir())
    assert f"{len(files)} uploaded" in first.stdout.splitlines()[-1]
    assert f"0 uploaded (0.0 MB), {len(files)} skipped" in second.stdout.splitlines()[-1]
    # And the stand-in holds each file once, with its SHA-256 checksum
    objects = standin.objects()
    assert sorted(objects) == [f"{PREFIX}/{name}" for name in files]
    assert all(o["versions"] == 1 and o["checksum_sha256"] for o in objects.values())
    # And what it hands back loads in transformers
    fetched = standin.download(PREFIX, tmp_path / "fetched")
    assert sorted(p.name for p in fetched.iterdir()) == files
    BertForPreTraining.from_pretrained(fetched)


def test_given_the_stand_in_then_its_environment_names_the_s3_endpoint_on_the_bridge(standin):
    assert standin.env() == {
        "AWS_ENDPOINT_URL_S3": f"http://{POD_NETWORK}.1:80",
        "AWS_ACCESS_KEY_ID": "rehearsal",
        "AWS_SECRET_ACCESS_KEY": "rehearsal",
        "AWS_REGION": "us-west-2",
        "AWS_DEFAULT_REGION": "us-west-2",
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    assert standin.uri("/run/model/") == "s3://rehearsal-models/run/model"
    assert standin.objects() == {}
