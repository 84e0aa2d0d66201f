"""The construct library installs as a package and works in another CDK app, also on a cluster
the user already has."""

import json
import subprocess
import sysconfig
import textwrap
import venv

from tests.support import MANIFEST, REPO, k8s_manifests, resources

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

    # The workload on a cluster the user already has: imported with its kubectl provider, with
    # the user's FSx claim, Volcano queue and ECR repository.
    from aws_cdk import aws_ecr as ecr
    from aws_cdk import aws_eks_v2 as eks
    from trainium_eks import PlatformConfig, TrainingWorkload, WorkloadTarget

    mine = cdk.Stack(app, "OnExisting", env=cdk.Environment(region="us-east-1"))
    kubectl = eks.KubectlProvider.from_kubectl_provider_attributes(
        mine, "Kubectl", service_token="arn:aws:lambda:us-east-1:123456789012:function:research-kubectl")
    cluster = eks.Cluster.from_cluster_attributes(
        mine, "Cluster", cluster_name="research", kubectl_provider=kubectl)
    target = WorkloadTarget(
        cluster=cluster, repository=ecr.Repository.from_repository_name(mine, "Repo", "research/bert"),
        namespace="ml", claim_name="lustre", queue_name="research")
    settings = PlatformConfig(region="us-east-1", trainium_az_id="use1-az6", second_az_id="use1-az5",
                              instance_type="trn1n.32xlarge", min_nodes=1, desired_nodes=1,
                              max_nodes=4, name_prefix="research")
    TrainingWorkload(mine, "Bert", target=target, config=settings)
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

    # and the workload went onto the existing cluster: its kubectl provider, claim, queue, registry
    workload = json.loads((tmp_path / "out" / "OnExisting.template.json").read_text())
    types = {r["Type"] for r in workload["Resources"].values()}
    assert not types & {
        "AWS::EKS::Cluster",
        "AWS::EKS::Nodegroup",
        "AWS::FSx::FileSystem",
        "AWS::ECR::Repository",
    }
    applied = {lid: r["Properties"] for lid, r in resources(workload, MANIFEST).items()}
    assert len(applied) == 4  # service account, Volcano Job, staging Job, TensorBoard
    for props in applied.values():
        assert props["ClusterName"] == "research"
        assert props["ServiceToken"] == "arn:aws:lambda:us-east-1:123456789012:function:research-kubectl"
    objects = [obj for _, obj in k8s_manifests(workload)]
    assert {obj["metadata"]["namespace"] for obj in objects} == {"ml"}
    (volcano,) = [o for o in objects if o["apiVersion"].startswith("batch.volcano.sh")]
    assert volcano["spec"]["queue"] == "research" and volcano["metadata"]["name"].startswith("research-")
    pod = volcano["spec"]["tasks"][0]["template"]["spec"]
    assert [
        v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v
    ] == ["lustre"]
    assert pod["containers"][0]["resources"]["limits"]["vpc.amazonaws.com/efa"] == "16"
    assert volcano["spec"]["minAvailable"] == 1
    copies = [
        json.dumps(r["Properties"]["DestImage"])
        for r in resources(workload, "Custom::CDKECRDeployment").values()
    ]
    assert len(copies) == 2 and all("research/bert:" in c for c in copies), copies
