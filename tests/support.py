"""Helpers shared by the CDK tests: the default synth, and readers for what a template applies."""

from __future__ import annotations

import functools
import http.server
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from aws_cdk.assertions import Template

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = REPO / ".venv" / "bin"
#: The pinned CDK CLI (package.json); run it with :func:`cli_env`'s PATH (Node 24 first).
CDK_CLI = REPO / "node_modules" / ".bin" / "cdk"
#: The stacks' construct IDs (their names, and their templates' names) for the default ``name_prefix``.
PLATFORM_STACK = "trn-bert-platform"
TRAINING_STACK = "trn-bert-training"

#: Every add-on option switched on.
ALL_OPTIONS = {
    "neuron_scheduler_extension": "true",
    "neuron_node_problem_detector": "true",
    "etcd_enabled": "true",
    "container_insights": "true",
    "monitoring_alertmanager": "true",
    "monitoring_amp_remote_write": "true",
}
#: The app with the dataset prepared from a corpus on FSx instead of staged.
PREPARATION_ON = {
    "preparation_enabled": "true",
    "preparation_args": '{"dupe_factor": "10"}',
    "training_phases": "1",
}
#: A Capacity Block with the EFA-only interface layout (what differs in a node's launch).
CAPACITY_BLOCK = {
    "capacity_type": "capacity-block",
    "capacity_reservation_id": "cr-0123456789abcdef0",
    "efa_interface_layout": "efa-only",
}
#: The fixed Trainium nodegroup instead of the default (Karpenter): its nodes up from deploy to destroy.
NODEGROUP = {"trainium_capacity": "nodegroup"}
#: The configurations tests synthesize beside the default, by name: every option that changes
#: what the stacks emit or put on a node. Tests pick theirs with :func:`variants`, so equal
#: contexts are synthesized once for the session (:func:`synth_app` caches per context).
VARIANTS: dict[str, dict[str, str]] = {
    "default": {},
    "all add-on options": ALL_OPTIONS,
    "preparation on": PREPARATION_ON,
    "etcd rendezvous": {"training_rdzv_backend": "etcd"},
    "etcd off": {"etcd_enabled": "false"},
    "trn1n.32xlarge": {"instance_type": "trn1n.32xlarge"},
    "trn2.48xlarge": {"instance_type": "trn2.48xlarge"},
    "karpenter": {"trainium_capacity": "karpenter"},
    "nodegroup": NODEGROUP,
    "nodegroup preparation on": {**NODEGROUP, **PREPARATION_ON},
    "nodegroup capacity block": {**NODEGROUP, **CAPACITY_BLOCK},
    "karpenter capacity block": {"trainium_capacity": "karpenter", **CAPACITY_BLOCK},
    "trn1.2xlarge single node": {
        "instance_type": "trn1.2xlarge",
        "min_nodes": "1",
        "desired_nodes": "1",
        "max_nodes": "1",
    },
}


def variants(*names: str) -> dict[str, dict[str, str]]:
    """The named :data:`VARIANTS`, in the order given."""
    return {name: VARIANTS[name] for name in names}


HELM_CHART = "Custom::AWSCDK-EKS-HelmChart"
MANIFEST = "Custom::AWSCDK-EKS-KubernetesResource"


#: The stamps of the Makefile's set-up targets. A test runs ``make cdk`` with them taken as up to
#: date (``-o``): it must not reinstall the environment it runs in (``make test`` made them).
SETUP_STAMPS = (".venv/.runtime", "node_modules/.installed")


@cache
def path_without_node() -> str:
    """A PATH of one folder holding only ``make``: no Node, so ``make cdk`` must bring its own."""
    folder = Path(tempfile.mkdtemp(prefix="path-without-node-"))
    make = shutil.which("make")
    assert make is not None, "make is not installed"
    (folder / "make").symlink_to(make)
    return str(folder)


def make_cdk(args: list[str], *, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    """``make cdk ARGS="<args>"``, the README's way to run the CDK CLI, on :func:`path_without_node`
    and with no AWS credentials."""
    env = cli_env()
    env["PATH"] = path_without_node()
    for name in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES"):  # not an outer make's options
        env.pop(name, None)
    command = ["make", "-s", *(f"-o{stamp}" for stamp in SETUP_STAMPS), "cdk"]
    command.append("ARGS=" + shlex.join(args).replace("$", "$$"))
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def cli_env() -> dict[str, str]:
    """Environment for the CDK CLI: Node 24 from the venv first on PATH, no AWS credentials."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CDK_"))}
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    # Make sure no credentials or profile of the machine leak into an "offline" synth.
    env["AWS_CONFIG_FILE"] = os.devnull
    env["AWS_SHARED_CREDENTIALS_FILE"] = os.devnull
    env["AWS_EC2_METADATA_DISABLED"] = "true"
    return env


@dataclass
class Synth:
    """One run of ``cdk synth`` into ``outdir``."""

    outdir: Path
    returncode: int
    stdout: str
    stderr: str
    templates: dict[str, dict[str, Any]] = field(default_factory=dict)

    def template(self, stack: str = PLATFORM_STACK) -> Template:
        return Template.from_json(self.templates[stack])


def run_cdk_synth(outdir: Path, context: Mapping[str, str] | None = None) -> Synth:
    """Synthesize the app with the real CDK CLI the README's way (:func:`make_cdk`)."""
    args = ["synth", "--quiet", "--output", str(outdir)]
    for key, value in (context or {}).items():
        args += ["-c", f"{key}={value}"]
    proc = make_cdk(args)
    synth = Synth(outdir, proc.returncode, proc.stdout, proc.stderr)
    if proc.returncode == 0:
        for path in outdir.glob("*.template.json"):
            synth.templates[path.name.removesuffix(".template.json")] = json.loads(path.read_text())
    return synth


def run_app(context: Mapping[str, Any], outdir: Path) -> subprocess.CompletedProcess[str]:
    """Run ``app.py`` directly with ``context`` the way the CLI passes it (CDK_CONTEXT_JSON)."""
    env = cli_env()
    env["CDK_CONTEXT_JSON"] = json.dumps(dict(context))
    env["CDK_OUTDIR"] = str(outdir)
    return subprocess.run(
        [sys.executable, "app.py"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )


@cache
def _synth_variant(items: tuple[tuple[str, str], ...]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    import aws_cdk as cdk

    from app import instantiate_stacks
    from trainium_eks.config import config_from_context
    from trainium_eks.nag import check_acknowledgements

    app = cdk.App()
    stacks = instantiate_stacks(app, config_from_context(dict(items)))
    # What app.py's cdk-nag plugins check at synth: every deferred acknowledgement still applies.
    check_acknowledgements(app)
    templates = [Template.from_stack(stack).to_json() for stack in stacks]
    return templates[0], (templates[1] if len(templates) > 1 else None)


def synth_platform(**context: str) -> dict[str, Any]:
    """The platform template for a non-default ``context``, synthesized in-process (as ``app.py``
    composes it) once per context for the whole session (shared by every test module; treat it
    as read only)."""
    return _synth_variant(tuple(sorted(context.items())))[0]


def synth_training(**context: str) -> dict[str, Any]:
    """The training stack's template for ``context``, from the same synthesis as
    :func:`synth_platform`."""
    training = _synth_variant(tuple(sorted(context.items())))[1]
    assert training is not None, "training_enabled is false: the app has no training stack"
    return training


def synth_app(**context: str) -> dict[str, dict[str, Any]]:
    """Stack -> template of the app for ``context`` (both stacks when training is on)."""
    platform, training = _synth_variant(tuple(sorted(context.items())))
    return {PLATFORM_STACK: platform, **({"training": training} if training is not None else {})}


def resources(template: Mapping[str, Any], type_name: str) -> dict[str, dict[str, Any]]:
    """Logical id -> resource, for every resource of ``type_name``."""
    return {k: v for k, v in template["Resources"].items() if v["Type"] == type_name}


def _detokenize(value: Any) -> Any:
    """Replace CloudFormation intrinsics by placeholder strings so manifests parse as JSON."""
    if isinstance(value, dict):
        if len(value) == 1:
            ((key, arg),) = value.items()
            if key == "Fn::Join":
                sep, parts = arg
                return sep.join(str(_detokenize(p)) for p in parts)
            if key == "Ref":
                return f"REF_{arg}"
            if key == "Fn::GetAtt":
                return "ATT_" + "_".join(arg if isinstance(arg, list) else [arg])
            if key.startswith("Fn::"):
                return f"FN_{key[4:]}"
        return {k: _detokenize(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_detokenize(v) for v in value]
    return value


def k8s_manifests(template: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(logical id, object) for every Kubernetes object the stack applies with kubectl.

    CloudFormation tokens inside a manifest become placeholder strings (``REF_x``/``ATT_x``).
    """
    for logical_id, resource in resources(template, MANIFEST).items():
        raw = _detokenize(resource["Properties"]["Manifest"])
        for obj in json.loads(raw):
            yield logical_id, obj


def submitted_jobs(template: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The Volcano Jobs the stack's submitters create, each from a ConfigMap's ``job.json``
    (trainium_eks.jobs.job_submission): the training jobs, which the stack does not apply itself."""
    from trainium_job.submission import MANIFEST_KEY

    return [
        json.loads(obj["data"][MANIFEST_KEY])
        for _, obj in k8s_manifests(template)
        if obj["kind"] == "ConfigMap" and MANIFEST_KEY in obj.get("data", {})
    ]


def helm_charts(template: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Logical id -> properties of every Helm release, ``Values`` parsed from JSON."""
    charts = {}
    for logical_id, resource in resources(template, HELM_CHART).items():
        props = dict(resource["Properties"])
        if "Values" in props:
            props["Values"] = json.loads(_detokenize(props["Values"]))
        charts[logical_id] = props
    return charts


def validate_k8s(obj: Mapping[str, Any], kubernetes_version: str) -> None:
    """Validate a core Kubernetes object against the OpenAPI schema of ``kubernetes_version``.

    Raises ``kubernetes_validate.ValidationError`` with the failing path.
    """
    import kubernetes_validate

    kubernetes_validate.validate(dict(obj), f"{kubernetes_version}.0", strict=True)


@contextmanager
def served_folder(folder: Path) -> Iterator[str]:
    """``http://127.0.0.1:<port>/`` serving ``folder`` (made here) for the life of the block: the
    stand-in of an ``https://`` source a staging command downloads."""
    folder.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
