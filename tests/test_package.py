"""The construct library installs as a package and works in another CDK app."""

import json
import subprocess
import sysconfig
import textwrap
import venv

from tests.support import REPO

EXTERNAL_APP = textwrap.dedent("""
    import sys
    import aws_cdk as cdk
    import trainium_eks
    from trainium_eks import NeuronNodegroup, TrainiumCluster, TrainiumNetwork, instance_facts

    app = cdk.App(outdir=sys.argv[1])
    stack = cdk.Stack(app, "External", env=cdk.Environment(region="us-east-1"))
    net = TrainiumNetwork(stack, "Net", az_ids=("use1-az6", "use1-az5"))
    eks = TrainiumCluster(stack, "Eks", vpc=net.vpc, subnets=net.private_subnets,
                          kubernetes_version="1.35")
    NeuronNodegroup(stack, "Trn", cluster=eks.cluster, facts=instance_facts("trn1n.32xlarge"),
                    subnet=net.trainium_subnet, min_size=1, desired_size=1, max_size=4)
    app.synth()
    print(trainium_eks.__file__)
""")


def test_given_a_fresh_virtualenv_when_the_project_is_installed_then_another_app_can_use_it(tmp_path):
    # given: a fresh venv; the pinned third-party dependencies come from the project's venv
    # through a .pth file so the test needs no network, the project itself is pip-installed.
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (tmp_path / "venv" / site.split(str(env_dir) + "/", 1)[1] / "deps.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n"
    )
    subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--no-deps", str(REPO)],
        check=True,
        capture_output=True,
        cwd=tmp_path,
    )
    app_dir = tmp_path / "external"
    app_dir.mkdir()
    (app_dir / "app.py").write_text(EXTERNAL_APP)

    # when: the external app synthesizes, far from the repository
    proc = subprocess.run(
        [python, "app.py", str(tmp_path / "out")], cwd=app_dir, capture_output=True, text=True, timeout=300
    )

    # then: the installed copy was used and the constructs built the cluster pieces
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().startswith(str(env_dir)), proc.stdout
    template = json.loads((tmp_path / "out" / "External.template.json").read_text())
    types = [r["Type"] for r in template["Resources"].values()]
    assert types.count("AWS::EKS::Nodegroup") == 2 and "AWS::EKS::Cluster" in types
    (lt,) = [
        r
        for r in template["Resources"].values()
        if r["Type"] == "AWS::EC2::LaunchTemplate"
        and "NetworkInterfaces" in r["Properties"]["LaunchTemplateData"]
    ]
    assert len(lt["Properties"]["LaunchTemplateData"]["NetworkInterfaces"]) == 16
