"""The synth benchmark's yardstick is the bare app its docs describe, and it times both synths."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

from bench.bench_synth import BARE_APP, commands


def test_given_the_bare_app_then_it_is_a_vpc_a_cluster_one_nodegroup_and_one_chart(tmp_path):
    # Given the benchmark's bare aws-eks-v2 app, when it is synthesized
    env = {**os.environ, "CDK_OUTDIR": str(tmp_path)}
    subprocess.run([sys.executable, str(BARE_APP)], env=env, check=True, capture_output=True)
    template = json.loads((tmp_path / "bare-eks.template.json").read_text())
    # Then it holds what the docs say: one VPC, one cluster with its kubectl provider, one
    # managed nodegroup, one Helm chart
    types = Counter(r["Type"] for r in template["Resources"].values())
    assert types["AWS::EC2::VPC"] == 1
    assert types["AWS::EKS::Cluster"] == 1
    assert types["AWS::EKS::Nodegroup"] == 1
    assert types["Custom::AWSCDK-EKS-HelmChart"] == 1
    assert types["AWS::Lambda::LayerVersion"] >= 1  # the kubectl layer


def test_given_the_benchmark_then_both_synths_use_the_projects_cli(tmp_path):
    runs = commands(tmp_path)
    assert list(runs) == ["platform", "bare"]
    (platform, here), (bare, there) = runs["platform"], runs["bare"]
    assert platform[0] == bare[0] and platform[0].endswith("node_modules/.bin/cdk") and here == there
    assert str(BARE_APP) in " ".join(bare) and "--app" not in platform


def test_given_another_checkout_then_its_synth_runs_there_in_each_round(tmp_path):
    # Given an earlier commit's worktree, then its synth reads its own cdk.json (runs in it),
    # between the platform's and the bare app's, into a folder of its own
    runs = commands(tmp_path / "out", [tmp_path / "before"])
    assert list(runs) == ["platform", "tree 1", "bare"]
    argv, cwd = runs["tree 1"]
    assert cwd == tmp_path / "before" and "--app" not in argv and argv[-1] == str(tmp_path / "out" / "tree-1")
