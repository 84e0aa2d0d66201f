"""What another app gets from the construct library, checked where it runs.

``python tests/package/verify.py`` with the interpreter of a venv that has only the wheel and its
declared dependencies (``make test-package``, once at the pins of constraints.txt and once at the
lowest versions pyproject.toml's ranges allow): each example app (examples/my_cluster: a cluster
of its own and BERT on a cluster it has; examples/my_training_job: the platform and a training job
of the user's own program) synthesizes with the installed copy from a folder outside the
repository, beside a ``training`` package of the app's own; ``mypy --strict`` passes over each
against the installed package (with ``TRAINIUM_EKS_MYPY``, the development venv's mypy); the
package carries its version, dependencies, data (the images' build contexts) and only its own
top-level names; and the doctor refuses cleanly without credentials.
``tests/package/test_package.py`` runs the same assembly checks on the checkout in ``make test``.
"""

from __future__ import annotations

import json
import os
import re
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
EXAMPLE = REPO / "examples" / "my_cluster"
JOB_EXAMPLE = REPO / "examples" / "my_training_job"
#: Files each image's build context needs from the installed package (trainium_eks.images.training_image),
#: and the PEP 561 marker that makes type checkers read the package's annotations.
PACKAGE_DATA = (
    ("trainium_eks", "_docker/Dockerfile"),
    ("trainium_eks", "_docker/tensorboard.Dockerfile"),
    ("trainium_eks", "_docker/.dockerignore"),
    ("trainium_eks._training", "requirements.txt"),
    ("trainium_eks._training.trainer", "model_configs/large.json"),
    ("trainium_eks", "py.typed"),
    ("trainium_job", "py.typed"),
)
#: The only top-level import names the distribution installs: this project's own.
TOP_LEVEL = {"trainium_eks", "trainium_job"}
#: A package of the app's own under a common name (ML repositories often have one): the library
#: must not import it, nor be shadowed by it.
USER_TRAINING_PACKAGE = {
    "training/__init__.py": '"""The app\'s own training code."""\n',
    "training/trainer.py": "def fit() -> None: ...\n",
}


def _checkout_support() -> None:
    """The checkout's test support importable; appended, not prepended: the installed
    trainium_eks still wins over the checkout's."""
    if str(REPO) not in sys.path:
        sys.path.append(str(REPO))


def check_nag_report(outdir: Path) -> None:
    """The synth was cdk-nag gated and nothing is left unacknowledged."""
    # The synth was cdk-nag gated (AwsSolutions and the library's pack): every finding acknowledged,
    # the library's by its own constructs (aws-cdk-lib's validation report, trainium_eks.nag).
    report = json.loads((outdir / "validation-report.json").read_text())
    plugins = {plugin["pluginName"]: plugin for plugin in report["pluginReports"]}
    # A plugin with nothing to report, acknowledged or not, is left out of the report (the
    # TrainiumEks pack on a compliant cluster); AwsSolutions always has acknowledged findings.
    assert "AwsSolutions" in plugins, sorted(plugins)
    unacknowledged = [
        (violation["ruleName"], construct.get("constructPath"))
        for plugin in plugins.values()
        for violation in plugin.get("violations", [])
        for construct in violation.get("violatingConstructs", [])
    ]
    assert unacknowledged == [], unacknowledged


def check_assembly(outdir: Path) -> None:
    """The example app's two stacks: its own cluster and nodegroups, and the workload on the
    existing cluster (its kubectl provider, claim, queue and registry)."""
    _checkout_support()
    from tests.support import MANIFEST, k8s_manifests, submitted_jobs
    from tests.support import resources as of_type

    check_nag_report(outdir)
    template = json.loads((outdir / "ResearchTrainium.template.json").read_text())
    types = [r["Type"] for r in template["Resources"].values()]
    assert types.count("AWS::EKS::Nodegroup") == 2 and "AWS::EKS::Cluster" in types, types
    (lt,) = [
        r
        for r in template["Resources"].values()
        if r["Type"] == "AWS::EC2::LaunchTemplate"
        and "NetworkInterfaces" in r["Properties"]["LaunchTemplateData"]
    ]
    # trn1.32xlarge: one EFA interface per network card, 8 cards.
    assert len(lt["Properties"]["LaunchTemplateData"]["NetworkInterfaces"]) == 8

    workload = json.loads((outdir / "ResearchOnExisting.template.json").read_text())
    types_here = {r["Type"] for r in workload["Resources"].values()}
    assert not types_here & {
        "AWS::EKS::Cluster",
        "AWS::EKS::Nodegroup",
        "AWS::FSx::FileSystem",
        "AWS::ECR::Repository",
    }
    applied = {lid: r["Properties"] for lid, r in of_type(workload, MANIFEST).items()}
    # Service account, a staging Job and a held-out staging Job per phase, TensorBoard, the node
    # health check, and the training job's submission (its ConfigMap, its RBAC, its submitter Job).
    assert len(applied) == 10, sorted(applied)
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
    # The stack applies no Volcano Job: its submitter creates it once the data is staged.
    assert not [o for o in objects if o["apiVersion"].startswith("batch.volcano.sh")]
    (volcano,) = submitted_jobs(workload)
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
    assets = json.loads((outdir / "ResearchOnExisting.assets.json").read_text())
    assert assets.get("dockerImages", {}) == {}


def check_job_assembly(outdir: Path) -> None:
    """The job example's stack: the platform and, on it, one job of the user's own image whose
    pods get the library's runtime from the tools image, bounded in spend, submitted by the stack."""
    _checkout_support()
    from tests.support import k8s_manifests, submitted_jobs
    from tests.support import resources as of_type
    from trainium_job.pod import RUNTIME_DIR
    from trainium_job.pod_program import description

    check_nag_report(outdir)
    template = json.loads((outdir / "ToyTraining.template.json").read_text())
    objects = [obj for _, obj in k8s_manifests(template)]
    assert not [o for o in objects if o["apiVersion"].startswith("batch.volcano.sh")]
    (volcano,) = submitted_jobs(template)
    pod = volcano["spec"]["tasks"][0]["template"]["spec"]
    (init,) = pod["initContainers"]
    (trainer,) = pod["containers"]
    # Two images built in the region (no Docker where it deploys): the user's folder and the tools.
    tags = sorted(
        str(r["Properties"]["imageTag"]) for r in of_type(template, "Custom::CDKContainerImageBuild").values()
    )
    assert [t.split("-")[0] for t in tags] == ["job", "tensorboard"], tags
    assert trainer["image"].endswith(tags[0]) and init["image"].endswith(tags[1])
    job = description.loads(trainer["command"][-1])
    assert job.runtime == RUNTIME_DIR and job.budget is not None and job.budget.usd == 100
    (phase,) = job.phases
    assert phase.train[-3:] == ("/app/train.py", "--steps", "2000") and phase.precompile is None
    assets = json.loads((outdir / "ToyTraining.assets.json").read_text())
    assert assets.get("dockerImages", {}) == {}


def synth_example(
    python: str, workdir: Path, env: dict[str, str] | None = None, example: Path = EXAMPLE
) -> tuple[Path, str]:
    """Copy the example app into ``workdir/app`` beside a ``training`` package of its own and
    synthesize it there; (outdir, the ``trainium_eks.__file__`` it imported)."""
    app_dir = workdir / "app"
    shutil.copytree(example, app_dir, ignore=shutil.ignore_patterns("__pycache__", "cdk.out"))
    for name, text in USER_TRAINING_PACKAGE.items():
        (app_dir / name).parent.mkdir(exist_ok=True)
        (app_dir / name).write_text(text)
    outdir = workdir / "out"
    # cdk.json's context as the CDK CLI hands it over (the AZs of the example's account): the App
    # reads CDK_CONTEXT_JSON (aws-cdk-lib 2.275.0 cx-api/lib/cxapi.js CONTEXT_ENV).
    context = json.loads((app_dir / "cdk.json").read_text()).get("context", {})
    env = {**(os.environ if env is None else env), "CDK_CONTEXT_JSON": json.dumps(context)}
    code = (
        f"import app, trainium_eks, training.trainer; app.main({str(outdir)!r}); print(trainium_eks.__file__)"
    )
    proc = subprocess.run(
        [python, "-c", code], cwd=app_dir, capture_output=True, text=True, timeout=600, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return outdir, proc.stdout.strip().splitlines()[-1]


def check_types(app_dir: Path, mypy: str) -> str:
    """``mypy --strict`` over the example, reading the installed package's own annotations."""
    proc = subprocess.run(
        [mypy, "--strict", "--python-executable", sys.executable, "--no-incremental", "app.py"],
        cwd=app_dir,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return proc.stdout.strip().splitlines()[-1]


def check_top_level() -> None:
    """The distribution installs no top-level name but the project's own."""
    files = metadata.files("trainium-eks") or []
    top = {f.parts[0].removesuffix(".py") for f in files if not f.parts[0].endswith((".dist-info", ".data"))}
    assert top == TOP_LEVEL, top


def declared() -> dict[str, Any]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def normalized(requirements: list[str]) -> list[tuple[str, tuple[str, ...]]]:
    """(name, sorted bounds) of each requirement: the wheel's metadata reorders a range's bounds.
    Plain string work: the user's venv has no ``packaging`` to parse them with."""
    parsed = []
    for text in requirements:
        name = re.split(r"[<>=!~ ;\[]", text, maxsplit=1)[0]
        bounds = text[len(name) :].replace(" ", "")
        parsed.append((name.lower().replace("_", "-"), tuple(sorted(filter(None, bounds.split(","))))))
    return sorted(parsed)


def check_metadata() -> None:
    """The installed distribution is the project's: its version and exactly its declared dependencies."""
    project = declared()
    assert metadata.version(project["name"]) == project["version"]
    assert normalized(metadata.requires(project["name"]) or []) == normalized(project["dependencies"])
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
    check_top_level()
    mypy = os.environ.get("TRAINIUM_EKS_MYPY")
    typed = []
    with tempfile.TemporaryDirectory(prefix="package-check-") as tmp:
        for example, check in ((EXAMPLE, check_assembly), (JOB_EXAMPLE, check_job_assembly)):
            workdir = Path(tmp) / example.name
            workdir.mkdir()
            outdir, used = synth_example(sys.executable, workdir, example=example)
            assert prefix in Path(used).resolve().parents, f"{example.name} imported {used}"
            check(outdir)
            typed.append(f"{example.name}: {check_types(workdir / 'app', mypy) if mypy else 'not run'}")
        refusal = check_doctor(Path(tmp))
    versions = ", ".join(
        f"{name} {metadata.version(name)}" for name in ("aws-cdk-lib", "constructs", "cdk-nag")
    )
    print(f"package check: ok: {metadata.version('trainium-eks')} from {used} with {versions}")
    print(f"package check: mypy --strict over the examples: {'; '.join(typed)}")
    print(f"package check: doctor without credentials: {refusal}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
