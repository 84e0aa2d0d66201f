"""What another app gets from the construct library, checked where it runs.

``python tests/package/verify.py`` with the interpreter of a venv that has only the wheel and its
declared dependencies (``make test-package``): the external app synthesizes with the installed
copy, the package carries its version, dependencies and data (the images' build contexts), and
the doctor refuses cleanly without credentials. ``tests/package/test_package.py`` runs the same
assembly checks on the checkout in ``make test``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from importlib import metadata, resources
from pathlib import Path
from typing import Any

import tomllib

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
#: Files each image's build context needs from the installed package (trainium_eks.training_image).
PACKAGE_DATA = (
    ("trainium_eks", "_docker/Dockerfile"),
    ("trainium_eks", "_docker/tensorboard.Dockerfile"),
    ("trainium_eks", "_docker/.dockerignore"),
    ("training", "requirements.txt"),
    ("training.trainer", "model_configs/large.json"),
)


def check_assembly(outdir: Path) -> None:
    """The external app's two stacks: its own cluster and nodegroups, and the workload on the
    existing cluster (its kubectl provider, claim, queue and registry)."""
    # Appended, not prepended: the installed trainium_eks still wins over the checkout's.
    if str(REPO) not in sys.path:
        sys.path.append(str(REPO))
    from tests.support import MANIFEST, k8s_manifests
    from tests.support import resources as of_type

    template = json.loads((outdir / "External.template.json").read_text())
    types = [r["Type"] for r in template["Resources"].values()]
    assert types.count("AWS::EKS::Nodegroup") == 2 and "AWS::EKS::Cluster" in types, types
    (lt,) = [
        r
        for r in template["Resources"].values()
        if r["Type"] == "AWS::EC2::LaunchTemplate"
        and "NetworkInterfaces" in r["Properties"]["LaunchTemplateData"]
    ]
    assert len(lt["Properties"]["LaunchTemplateData"]["NetworkInterfaces"]) == 16

    workload = json.loads((outdir / "OnExisting.template.json").read_text())
    types_here = {r["Type"] for r in workload["Resources"].values()}
    assert not types_here & {
        "AWS::EKS::Cluster",
        "AWS::EKS::Nodegroup",
        "AWS::FSx::FileSystem",
        "AWS::ECR::Repository",
    }
    applied = {lid: r["Properties"] for lid, r in of_type(workload, MANIFEST).items()}
    # Service account, Volcano Job, staging Job, TensorBoard, the node health check.
    assert len(applied) == 5, sorted(applied)
    for props in applied.values():
        assert props["ClusterName"] == "research"
        assert props["ServiceToken"] == "arn:aws:lambda:us-east-1:123456789012:function:research-kubectl"
    objects = [obj for _, obj in k8s_manifests(workload)]
    assert {obj["metadata"]["namespace"] for obj in objects if "namespace" in obj["metadata"]} == {"ml"}
    # Cluster-scoped: the node health check's role, its binding (to the "ml" accounts) and policy.
    cluster_scoped = sorted(obj["kind"] for obj in objects if "namespace" not in obj["metadata"])
    assert cluster_scoped == [
        "ClusterRole",
        "ClusterRoleBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ]
    (binding,) = [o for o in objects if o["kind"] == "ClusterRoleBinding"]
    assert {subject["namespace"] for subject in binding["subjects"]} == {"ml"}
    (volcano,) = [o for o in objects if o["apiVersion"].startswith("batch.volcano.sh")]
    assert volcano["spec"]["queue"] == "research" and volcano["metadata"]["name"].startswith("research-")
    pod = volcano["spec"]["tasks"][0]["template"]["spec"]
    claims = [v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v]
    assert claims == ["lustre"]
    assert pod["containers"][0]["resources"]["limits"]["vpc.amazonaws.com/efa"] == "16"
    assert volcano["spec"]["minAvailable"] == 1
    # Both images are built in the region into the user's repository (no image asset to upload).
    builds = [
        json.dumps(r["Properties"]["repositoryUri"])
        for r in of_type(workload, "Custom::CDKContainerImageBuild").values()
    ]
    assert len(builds) == 2 and all("research/bert" in b for b in builds), builds
    assets = json.loads((outdir / "OnExisting.assets.json").read_text())
    assert assets.get("dockerImages", {}) == {}


def synth_external_app(python: str, workdir: Path, env: dict[str, str] | None = None) -> tuple[Path, str]:
    """Copy the external app into ``workdir/external`` and synthesize it there; (outdir, the
    ``trainium_eks.__file__`` it printed)."""
    app_dir = workdir / "external"
    app_dir.mkdir()
    shutil.copy(HERE / "external_app.py", app_dir / "app.py")
    outdir = workdir / "out"
    proc = subprocess.run(
        [python, "app.py", str(outdir)], cwd=app_dir, capture_output=True, text=True, timeout=600, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return outdir, proc.stdout.strip().splitlines()[-1]


def declared() -> dict[str, Any]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def check_metadata() -> None:
    """The installed distribution is the project's: its version and exactly its declared dependencies."""
    project = declared()
    assert metadata.version(project["name"]) == project["version"]
    assert sorted(metadata.requires(project["name"]) or []) == sorted(project["dependencies"])
    for package, name in PACKAGE_DATA:
        assert resources.files(package).joinpath(name).is_file(), f"{package}: {name} is not installed"


def check_doctor(workdir: Path) -> str:
    """``python -m trainium_eks.doctor`` with no credentials anywhere: its one FAIL line, exit 1."""
    home = workdir / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    # No instance metadata on a workstation: don't wait for it (botocore's IMDS provider).
    env.update(HOME=str(home), AWS_EC2_METADATA_DISABLED="true")
    proc = subprocess.run(
        [sys.executable, "-m", "trainium_eks.doctor"],
        cwd=home,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert any(line.startswith("FAIL credentials: no AWS credentials found") for line in lines), lines
    return next(line for line in lines if line.startswith("FAIL credentials"))


def main() -> int:
    import trainium_eks

    prefix = Path(sys.prefix).resolve()
    assert prefix in Path(trainium_eks.__file__).resolve().parents, (
        f"{trainium_eks.__file__} is not installed"
    )
    check_metadata()
    with tempfile.TemporaryDirectory(prefix="package-check-") as tmp:
        outdir, used = synth_external_app(sys.executable, Path(tmp))
        assert prefix in Path(used).resolve().parents, f"the external app imported {used}"
        check_assembly(outdir)
        refusal = check_doctor(Path(tmp))
    print(f"package check: ok: {metadata.version('trainium-eks')} from {used}")
    print(f"package check: doctor without credentials: {refusal}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
