"""Everything the stacks emit that another program reads: every Kubernetes object, Helm values
document, nodegroup label and taint, of both stacks in several configurations, and the Volcano
Job the TorchX component renders.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from tests.support import helm_charts, k8s_manifests, resources, synth_app, variants
from trainium_job.node_health import HEALTH_LABEL, PASSED, PENDING_TAINT
from trainium_job.pod_program import MODULE, loads
from trainium_job.pod_program.description import JobDescription, Phase

#: Configurations whose output is checked: the default (Karpenter's capacity), the fixed nodegroup
#: and every option that changes what is emitted (add-ons, data preparation, the etcd rendezvous,
#: other instance types).
VARIANTS = variants(
    "default",
    "all add-on options",
    "preparation on",
    "etcd rendezvous",
    "trn1n.32xlarge",
    "trn1.2xlarge single node",
    "nodegroup",
)
#: What the TorchX test renders: the README's component on the training namespace and queue.
TORCHX_COMPONENT = "trainium_job/torchx_component.py:trn_dist_ddp"
TORCHX_IMAGE = "123456789012.dkr.ecr.us-west-2.amazonaws.com/trn/training:training-abc"


@dataclass(frozen=True)
class Emitted:
    """One emitted document and where it comes from (for messages)."""

    where: str
    body: dict[str, Any]


@dataclass(frozen=True)
class Chart:
    """One Helm release: chart name, version and its values."""

    where: str
    chart: str
    version: str
    values: dict[str, Any]


@dataclass(frozen=True)
class Nodegroup:
    """The node labels and taints (Kubernetes form) a managed nodegroup gives its nodes."""

    where: str
    labels: dict[str, str]
    taints: tuple[dict[str, str], ...]
    instance_types: tuple[str, ...]
    #: Taints a node starts with and loses once the node health check passes (the pending taint:
    #: a nodegroup's own taint, a NodePool's ``startupTaints``); ``taints`` and ``labels`` are the
    #: node's state after that (the check's ``passed`` label on).
    startup_taints: tuple[dict[str, str], ...] = ()


def _templates() -> Iterator[tuple[str, dict[str, Any]]]:
    for variant, context in VARIANTS.items():
        for stack, template in synth_app(**context).items():
            yield f"{variant} / {stack}", template


@cache
def manifests() -> tuple[Emitted, ...]:
    """Every Kubernetes object the stacks apply, in every variant, the Volcano Jobs their
    submitters create (each from its ConfigMap, trainium_eks.jobs.job_submission), and the TorchX
    Volcano Job."""
    from trainium_job.submission import MANIFEST_KEY

    found = []
    for where, template in _templates():
        for logical_id, obj in k8s_manifests(template):
            found.append(
                Emitted(f"{where} / {logical_id} / {obj['kind']} {obj['metadata'].get('name')}", obj)
            )
            if obj["kind"] == "ConfigMap" and MANIFEST_KEY in obj.get("data", {}):
                job = json.loads(obj["data"][MANIFEST_KEY])
                found.append(
                    Emitted(
                        f"{where} / {logical_id} / submitted {job['kind']} {job['metadata']['name']}", job
                    )
                )
    return (*found, Emitted("TorchX component (kubernetes scheduler dry run)", torchx_job()))


@cache
def charts() -> tuple[Chart, ...]:
    """Every Helm release the stacks install, in every variant."""
    return tuple(
        Chart(f"{where} / {logical_id}", props["Chart"], props["Version"], props.get("Values", {}))
        for where, template in _templates()
        for logical_id, props in helm_charts(template).items()
    )


def _checked(startup_taints: tuple[dict[str, str], ...]) -> dict[str, str]:
    """The label the node health check adds to a node that started with its pending taint."""
    return {HEALTH_LABEL: PASSED} if PENDING_TAINT in startup_taints else {}


@cache
def nodegroups() -> tuple[Nodegroup, ...]:
    """Every managed nodegroup, with its instance types (its own, or its launch template's)."""
    return tuple(group for where, template in _templates() for group in template_nodegroups(where, template))


def template_nodegroups(where: str, template: Mapping[str, Any]) -> list[Nodegroup]:
    """The managed nodegroups and Karpenter NodePools of one template (``where`` names it)."""
    from tests.contracts.nodes import EKS_TAINT_EFFECTS

    found = []
    launch_types = {
        logical_id: lt["Properties"]["LaunchTemplateData"].get("InstanceType")
        for logical_id, lt in resources(template, "AWS::EC2::LaunchTemplate").items()
    }
    for logical_id, group in resources(template, "AWS::EKS::Nodegroup").items():
        props = group["Properties"]
        types = props.get("InstanceTypes") or []
        template_ref = props.get("LaunchTemplate", {}).get("Id", {}).get("Ref")
        if not types and template_ref in launch_types:
            types = [launch_types[template_ref]]
        taints = tuple(
            {"key": t["Key"], "value": t.get("Value", ""), "effect": EKS_TAINT_EFFECTS[t["Effect"]]}
            for t in props.get("Taints", [])
        )
        startup = tuple(t for t in taints if t == PENDING_TAINT)
        found.append(
            Nodegroup(
                f"{where} / {logical_id}",
                {**props.get("Labels", {}), **_checked(startup)},
                tuple(t for t in taints if t not in startup),
                tuple(types),
                startup,
            )
        )
    found.extend(_node_pools(where, template))
    return found


def _node_pools(where: str, template: Mapping[str, Any]) -> Iterator[Nodegroup]:
    """Karpenter NodePools as the nodes they launch: the template's labels and taints, and the
    instance types of its requirement (kubernetes-sigs/karpenter v1.14.1: a node gets its
    NodeClaim template's labels and taints, pkg/controllers/nodeclaim/lifecycle/registration.go
    ``syncNode``; its type is one the ``node.kubernetes.io/instance-type`` requirement allows)."""
    for logical_id, obj in k8s_manifests(template):
        if obj.get("kind") != "NodePool":
            continue
        node = obj["spec"]["template"]
        requirements = {r["key"]: r for r in node["spec"].get("requirements", [])}
        types = requirements.get("node.kubernetes.io/instance-type", {}).get("values", [])
        startup = tuple(node["spec"].get("startupTaints", []))
        yield Nodegroup(
            f"{where} / {logical_id} / NodePool {obj['metadata']['name']}",
            {**node.get("metadata", {}).get("labels", {}), **_checked(startup)},
            tuple(node["spec"].get("taints", [])),
            tuple(types),
            startup,
        )


def torchx_job() -> dict[str, Any]:
    """The Volcano Job ``torchx run -s kubernetes`` submits for the README's component."""
    from kubernetes import client
    from torchx.schedulers.kubernetes_scheduler import create_scheduler
    from torchx.specs.finder import get_component

    app = get_component(TORCHX_COMPONENT).fn(image=TORCHX_IMAGE, claim="fsx-claim")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        info = create_scheduler("contracts").submit_dryrun(
            app, {"queue": "training", "namespace": "training", "validate_spec": False}
        )
    job: dict[str, Any] = client.ApiClient().sanitize_for_serialization(info.request.resource)
    return job


def pod_specs(obj: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """The pod specs of an object: a Pod, a workload's template, a Volcano Job's tasks."""
    spec = obj.get("spec", {})
    if obj.get("kind") == "NodePool":
        return  # its template is a node's, not a pod's
    if obj.get("kind") == "Pod":
        yield spec
    if isinstance(spec.get("template"), dict):
        yield spec["template"].get("spec", {})
    for task in spec.get("tasks", []):
        yield task.get("template", {}).get("spec", {})
    if "jobTemplate" in spec:
        yield spec["jobTemplate"]["spec"]["template"]["spec"]


def containers(pod: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    yield from pod.get("initContainers", [])
    yield from pod.get("containers", [])


def environment(container: Mapping[str, Any]) -> dict[str, str | None]:
    """A container's variables: name -> value (None where it comes from ``valueFrom``)."""
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def description(container: Mapping[str, Any]) -> JobDescription | None:
    """The job description a container's pod program runs (its command's last argument), if it
    runs the pod program (``python -m trainium_job.pod_program``, or its bootstrap from the
    runtime copy)."""
    argv = [*container.get("command", []), *container.get("args", [])]
    if not any(MODULE in str(a) for a in argv[:-1]):
        return None
    return loads(argv[-1])


def phase_environments(container: Mapping[str, Any]) -> list[tuple[Phase, dict[str, str | None]]]:
    """Each phase of a pod program's container with the variables its commands run with: the
    container's, then the phase's own (the program sets them on the phase's children)."""
    described = description(container)
    if described is None:
        return []
    return [(phase, {**environment(container), **dict(phase.env)}) for phase in described.phases]
