"""What the rehearsal runs, read from the synthesized training template (not from the Python
objects that built it): the staging Job's, the submitter's, the Volcano Job's (in the submitter's
ConfigMap) and TensorBoard's pod specs, their init containers, and the images they run: the
environment each sets (from its Dockerfile) and, for an image the template builds from a folder
(a job's own image, the tools image as an init container's), the files its COPYs put there."""

from __future__ import annotations

import dataclasses
import json
import posixpath
import re
import shlex
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.contracts.volcano import Policy, action_for_failure, policies
from tests.support import MANIFEST, REPO, k8s_manifests, resources, submitted_jobs
from trainium_job.dataset_runner import DatasetRun
from trainium_job.pod_program import loads

#: The resource type of an image a template builds in the region (cdklabs' deploy-time-build
#: ``ContainerImageBuild``: trainium_eks.images.training_image).
IMAGE_BUILD = "Custom::CDKContainerImageBuild"
#: Kubernetes' default terminationGracePeriodSeconds.
DEFAULT_GRACE_S = 30
#: The image each pod of the library's own workload runs (which Dockerfile built it), by container
#: name; the checkout stands in for their files (:class:`ImageFiles` without a context).
DOCKERFILES = {
    "stage": REPO / "docker" / "Dockerfile",
    "heldout": REPO / "docker" / "Dockerfile",
    "trainer": REPO / "docker" / "Dockerfile",
    "tensorboard": REPO / "docker" / "tensorboard.Dockerfile",
    "submit": REPO / "docker" / "tensorboard.Dockerfile",
    "node-health-check": REPO / "docker" / "Dockerfile",
}


@dataclass(frozen=True)
class ImageFiles:
    """Where the rehearsal takes a container's image from: its Dockerfile (WORKDIR, ENV, USER) and,
    with ``context``, its files, what the Dockerfile's COPYs take from that build context
    (:func:`copy_as_docker_would`). Without a context (the library's images), the checkout stands
    in for the image's WORKDIR."""

    dockerfile: Path
    context: Path | None = None


@dataclass(frozen=True)
class ConfigMapKeyRef:
    """A variable's ``valueFrom.configMapKeyRef`` (Kubernetes API, ConfigMapKeySelector: ``name``,
    ``key``, ``optional``: "Specify whether the ConfigMap or its key must be defined"; unset is
    false)."""

    config_map: str
    key: str
    optional: bool = False


@dataclass(frozen=True)
class StackOutput:
    """A ConfigMap value the template leaves to CloudFormation: another stack's output
    (``Fn::GetStackOutput``), known only at deploy."""

    stack: str
    output: str


@dataclass(frozen=True)
class Mount:
    """A container's volumeMount with the kind of volume behind it."""

    path: str
    kind: str  # "claim", "emptyDir", "hostPath" or "configMap"
    read_only: bool = False
    memory: bool = False  # an emptyDir with medium Memory
    host_path: str = ""  # a hostPath volume's path on the node
    config_map: str = ""  # a configMap volume's ConfigMap
    #: The pod's volume: the containers of one pod that mount it share what it holds.
    volume: str = ""


#: The capabilities containerd gives a container whose securityContext drops none of them
#: (containerd's ``defaultUnixCaps``, the same list as Docker's default set).
RUNTIME_CAPABILITIES = frozenset(
    {
        "CHOWN",
        "DAC_OVERRIDE",
        "FSETID",
        "FOWNER",
        "MKNOD",
        "NET_RAW",
        "SETGID",
        "SETUID",
        "SETFCAP",
        "SETPCAP",
        "NET_BIND_SERVICE",
        "SYS_CHROOT",
        "KILL",
        "AUDIT_WRITE",
    }
)


@dataclass(frozen=True)
class Security:
    """A container's security settings as Kubernetes resolves them from its pod's and its own
    ``securityContext`` (:func:`security`)."""

    #: None: the image's user (its Dockerfile's USER, root without one).
    run_as_user: int | None = None
    #: None: the group of the image's USER when ``run_as_user`` is None as well, else root (0).
    run_as_group: int | None = None
    #: The pod's ``supplementalGroups``: the container's processes are in them too.
    supplemental_groups: tuple[int, ...] = ()
    #: The kubelet refuses to start the container if its user resolves to root.
    run_as_non_root: bool = False
    read_only_root: bool = False
    #: ``allowPrivilegeEscalation: false``: the runtime sets no_new_privs on the process.
    no_new_privs: bool = False
    #: The container's capability set (bounding set; also permitted and effective when it runs
    #: as root), names without ``CAP_``.
    capabilities: frozenset[str] = RUNTIME_CAPABILITIES


@dataclass(frozen=True)
class PodSpec:
    """One pod's only container, as the template has it (and its init containers, each a PodSpec
    of the same pod)."""

    container: str
    command: tuple[str, ...]
    env: Mapping[str, str]
    #: Variables from the downward API: name -> the pod field (``fieldRef.fieldPath``).
    field_env: Mapping[str, str]
    mounts: tuple[Mount, ...]
    grace_period_s: int
    instance_type: str | None
    port: int | None  # the first containerPort
    readiness_path: str | None  # the readiness probe's httpGet path
    #: What the scheduler matches against a Node (``kube_api.schedulable``).
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, str], ...] = ()
    #: ``requiredDuringSchedulingIgnoredDuringExecution`` node selector terms.
    node_affinity: tuple[Mapping[str, Any], ...] = ()
    #: Whether the kubelet mounts the ServiceAccount's token (``automountServiceAccountToken``).
    service_account_token: bool = False
    security: Security = Security()
    #: The batch Job that owns the pod (its name: the ``batch.kubernetes.io/job-name`` label).
    job_name: str | None = None
    #: The container's image, as the template names it.
    image: str = ""
    #: The pod's ``initContainers``, in order: each runs to its end before the next, and the
    #: container after the last.
    init_containers: tuple[PodSpec, ...] = ()
    #: Variables from a ConfigMap's key, resolved at the container's start (:func:`config_map_env`).
    config_env: Mapping[str, ConfigMapKeyRef] = field(default_factory=dict)
    #: The pod's ``serviceAccountName`` (Kubernetes' ``default`` when unset).
    service_account: str = "default"

    def claim_path(self) -> str:
        """Where the pod mounts the (one) FSx claim."""
        (path,) = (m.path for m in self.mounts if m.kind == "claim")
        return path


@dataclass(frozen=True)
class Workload:
    """The pods of the training stack."""

    namespace: str
    job_name: str  # the Volcano Job's name (the svc plugin's subdomain)
    task: str  # its task's name (host names ``<job>-<task>-<index>``)
    replicas: int
    policies: tuple[Policy, ...]  # the Volcano Job's lifecycle policies, in order
    worker: PodSpec
    #: The first phase's staging Job's pod and TensorBoard's (None in a template without them: a
    #: job of the user's own program).
    staging: PodSpec | None = None
    tensorboard: PodSpec | None = None
    #: The node-health-check DaemonSet's pod (None in a template without it).
    health_check: PodSpec | None = None
    #: The job's submitter's pod (None: the template applies the Volcano Job itself).
    submitter: PodSpec | None = None
    #: The Volcano Job as its submitter creates it (the ConfigMap's ``job.json``).
    job: Mapping[str, Any] = field(default_factory=dict)
    #: Every ConfigMap of the template: name -> its data (a configMap volume's files).
    config_maps: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    #: ConfigMap name -> key -> the stack output its value is at deploy (:func:`stack_outputs`).
    stack_outputs: Mapping[str, Mapping[str, StackOutput]] = field(default_factory=dict)
    #: The ServiceAccounts of the workload's namespace that an EKS Pod Identity association gives
    #: an IAM role (the template's ``AWS::EKS::PodIdentityAssociation``): their pods get AWS
    #: credentials from the Pod Identity webhook and agent.
    pod_identity: frozenset[str] = frozenset()
    #: The Volcano Job's plugins (``spec.plugins``' names): what the job controller adds to its pods.
    plugins: tuple[str, ...] = ()
    #: Container name -> the image it runs (init containers included).
    images: Mapping[str, ImageFiles] = field(
        default_factory=lambda: {name: ImageFiles(path) for name, path in DOCKERFILES.items()}
    )

    def action_for_failure(self, exit_code: int) -> str | None:
        """What Volcano does when a pod of the job fails with ``exit_code`` (None: no policy)."""
        return action_for_failure(self.policies, exit_code)


def deployed_config_maps(workload: Workload, outputs: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """``workload``'s ConfigMaps as the cluster holds them once deployed: a value that is a stack
    output (:attr:`Workload.stack_outputs`) is ``outputs``' value of that output (output name ->
    value), where it has one; else the template's placeholder stays."""
    maps = {name: dict(data) for name, data in workload.config_maps.items()}
    for name, keys in workload.stack_outputs.items():
        for key, output in keys.items():
            if output.output in outputs:
                maps[name][key] = outputs[output.output]
    return maps


def config_map_env(spec: PodSpec, workload: Workload, outputs: Mapping[str, str]) -> dict[str, str]:
    """The variables that the container ``spec`` of ``workload`` takes from ConfigMaps, as the
    kubelet resolves them at the container's start (kubelet_pods.go ``makeEnvironmentVariables``,
    case ``ConfigMapKeyRef``): a key the ConfigMap holds gives its value; a ConfigMap not there, or
    a key it lacks, leaves the variable unset when ``optional``, and otherwise fails the
    container's start ("couldn't find key %v in ConfigMap %v/%v": CreateContainerConfigError, the
    container never runs): refused here with a ValueError. A value that is a stack output
    the harness has no value for in ``outputs`` (:func:`deployed_config_maps`) is refused too."""
    maps = deployed_config_maps(workload, outputs)
    env = {}
    for name, ref in spec.config_env.items():
        where = f"pod {spec.container}: env {name}: ConfigMap {ref.config_map}"
        output = workload.stack_outputs.get(ref.config_map, {}).get(ref.key)
        if output is not None and output.output not in outputs:
            raise ValueError(
                f"{where} key {ref.key} is the output {output.output} of stack {output.stack}, known at "
                f"deploy: the rehearsal has values for {sorted(outputs)} here (the stand-in S3's bucket "
                "for the model bucket's, in a cluster that starts it)"
            )
        value = maps.get(ref.config_map, {}).get(ref.key)
        if value is not None:
            env[name] = value
        elif not ref.optional:
            missing = f"has no key {ref.key}" if ref.config_map in maps else "is not in the template"
            raise ValueError(
                f"{where} {missing}, and the reference is not optional: the kubelet would not start "
                "the container (CreateContainerConfigError)"
            )
    return env


def stack_outputs(template: Mapping[str, Any]) -> dict[str, dict[str, StackOutput]]:
    """ConfigMap name -> key -> :class:`StackOutput`, for every ConfigMap value of ``template``'s
    manifests that is a whole ``Fn::GetStackOutput`` (the manifest is a ``Fn::Join`` of JSON text
    and tokens; :func:`tests.support.k8s_manifests` writes every such token as one placeholder)."""
    found: dict[str, dict[str, StackOutput]] = {}
    for resource in resources(template, MANIFEST).values():
        manifest = resource["Properties"]["Manifest"]
        if not isinstance(manifest, dict) or "Fn::Join" not in manifest:
            continue
        separator, parts = manifest["Fn::Join"]
        outputs: list[StackOutput] = []
        text: list[str] = []
        for part in parts:
            if isinstance(part, dict) and "Fn::GetStackOutput" in part:
                ref = part["Fn::GetStackOutput"]
                text.append(f"STACK_OUTPUT_{len(outputs)}")
                outputs.append(StackOutput(str(ref["StackName"]), str(ref["OutputName"])))
            else:
                text.append(part if isinstance(part, str) else "TOKEN")
        if not outputs:
            continue
        for obj in json.loads(separator.join(text)):
            for key, value in obj.get("data", {}).items() if obj.get("kind") == "ConfigMap" else ():
                matched = re.fullmatch(r"STACK_OUTPUT_(\d+)", value)
                if matched:
                    found.setdefault(obj["metadata"]["name"], {})[key] = outputs[int(matched.group(1))]
    return found


def pod_identity_accounts(template: Mapping[str, Any], namespace: str) -> frozenset[str]:
    """The ServiceAccounts of ``namespace`` that ``template``'s Pod Identity associations name."""
    return frozenset(
        str(r["Properties"]["ServiceAccount"])
        for r in resources(template, "AWS::EKS::PodIdentityAssociation").values()
        if r["Properties"]["Namespace"] == namespace
    )


def security(pod: Mapping[str, Any], container: Mapping[str, Any]) -> Security:
    """The effective security settings of ``container`` in the pod spec ``pod``."""
    pod_context = pod.get("securityContext", {})
    context = container.get("securityContext", {})
    if pod_context.get("fsGroup") is not None:
        # The kubelet would give the volumes to that group: not played.
        raise ValueError("securityContext.fsGroup: the rehearsal has no stand-in for volume ownership")
    if context.get("privileged", False):
        raise ValueError(
            "securityContext.privileged: the rehearsal has no stand-in for a privileged container"
        )

    def resolved(name: str) -> Any:
        # Kubernetes, "Configure a Security Context for a Pod or Container": "Security settings
        # that you specify for a Container apply only to the individual Container, and they
        # override settings made at the Pod level when there is overlap" (runAsUser, runAsGroup,
        # runAsNonRoot are the fields both levels have).
        return context[name] if context.get(name) is not None else pod_context.get(name)

    capabilities = context.get("capabilities", {})
    drop = {c.upper().removeprefix("CAP_") for c in capabilities.get("drop", [])}
    add = {c.upper().removeprefix("CAP_") for c in capabilities.get("add", [])}
    if "ALL" in add:
        raise ValueError("capabilities.add ALL: the rehearsal has no stand-in for a privileged container")
    kept = frozenset() if "ALL" in drop else RUNTIME_CAPABILITIES - drop
    return Security(
        run_as_user=resolved("runAsUser"),
        run_as_group=resolved("runAsGroup"),
        supplemental_groups=tuple(pod_context.get("supplementalGroups", [])),
        run_as_non_root=bool(resolved("runAsNonRoot")),
        # Only a container field: the pod has none of it.
        read_only_root=bool(context.get("readOnlyRootFilesystem", False)),
        # Unset is true. Kubernetes API, SecurityContext: "This bool directly controls if the
        # no_new_privs flag will be set on the container process".
        no_new_privs=context.get("allowPrivilegeEscalation", True) is False,
        capabilities=kept | add,
    )


def pod_spec(template: Mapping[str, Any]) -> PodSpec:
    """The PodSpec of a pod template (``{"metadata": ..., "spec": ...}``) with one container, and
    its init containers."""
    spec = template["spec"]
    (container,) = spec["containers"]
    inits = tuple(_container_spec(spec, c) for c in spec.get("initContainers", []))
    return dataclasses.replace(_container_spec(spec, container), init_containers=inits)


def _mounts(spec: Mapping[str, Any], container: Mapping[str, Any]) -> tuple[Mount, ...]:
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    mounts = []
    for m in container.get("volumeMounts", []):
        name = m["name"]
        volume = volumes[name]
        if "persistentVolumeClaim" in volume:
            read_only = m.get("readOnly", False) or volume["persistentVolumeClaim"].get("readOnly", False)
            mounts.append(Mount(m["mountPath"], "claim", read_only, volume=name))
        elif "emptyDir" in volume:
            memory = volume["emptyDir"].get("medium") == "Memory"
            mounts.append(Mount(m["mountPath"], "emptyDir", m.get("readOnly", False), memory, volume=name))
        elif "hostPath" in volume:
            host = volume["hostPath"]["path"]
            mounts.append(
                Mount(m["mountPath"], "hostPath", m.get("readOnly", False), host_path=host, volume=name)
            )
        elif "configMap" in volume and set(volume["configMap"]) == {"name"}:
            config_map = volume["configMap"]["name"]
            mounts.append(Mount(m["mountPath"], "configMap", True, config_map=config_map, volume=name))
        else:
            raise ValueError(f"volume {name}: the rehearsal has no stand-in for {sorted(volume)}")
    return tuple(mounts)


def _container_spec(spec: Mapping[str, Any], container: Mapping[str, Any]) -> PodSpec:
    """``container`` of the pod spec ``spec`` as a PodSpec (without init containers)."""
    env, field_env, config_env = {}, {}, {}
    for e in container.get("env", []):
        source = e.get("valueFrom", {})
        if "value" in e:
            env[e["name"]] = e["value"]
        elif "fieldRef" in source:
            field_env[e["name"]] = source["fieldRef"]["fieldPath"]
        elif "configMapKeyRef" in source:
            ref = source["configMapKeyRef"]
            config_env[e["name"]] = ConfigMapKeyRef(ref["name"], ref["key"], bool(ref.get("optional", False)))
        else:
            raise ValueError(
                f"env {e['name']}: the rehearsal has no stand-in for {sorted(e.get('valueFrom', e))}"
            )
    probe = container.get("readinessProbe", {}).get("httpGet")
    ports = container.get("ports", [])
    return PodSpec(
        container=container["name"],
        command=tuple(container["command"]),
        env=env,
        field_env=field_env,
        mounts=_mounts(spec, container),
        grace_period_s=spec.get("terminationGracePeriodSeconds", DEFAULT_GRACE_S),
        instance_type=spec.get("nodeSelector", {}).get("node.kubernetes.io/instance-type"),
        port=ports[0]["containerPort"] if ports else None,
        readiness_path=probe["path"] if probe else None,
        node_selector=dict(spec.get("nodeSelector", {})),
        tolerations=tuple(spec.get("tolerations", [])),
        node_affinity=tuple(
            spec.get("affinity", {})
            .get("nodeAffinity", {})
            .get("requiredDuringSchedulingIgnoredDuringExecution", {})
            .get("nodeSelectorTerms", [])
        ),
        # The ServiceAccount admission plugin mounts the token unless a pod opts out.
        service_account_token=spec.get("automountServiceAccountToken", True),
        security=security(spec, container),
        image=str(container.get("image", "")),
        config_env=config_env,
        service_account=spec.get("serviceAccountName") or "default",
    )


def workload(template: Mapping[str, Any]) -> Workload:
    """The staging Job, the Volcano Job (one task) and the TensorBoard Deployment of ``template``."""
    objects = [obj for _, obj in k8s_manifests(template)]

    def one(kind: str, api: str, app: str) -> dict[str, Any]:
        (found,) = (
            o
            for o in objects
            if o["kind"] == kind
            and o["apiVersion"].startswith(api)
            and o["metadata"].get("labels", {}).get("app.kubernetes.io/name") == app
        )
        return found

    (volcano,) = submitted_jobs(template)
    daemon_sets = _labelled(objects, "DaemonSet", "node-health-check")
    return dataclasses.replace(
        _volcano_workload(template, objects, volcano),
        staging=job_pod(first_staging(objects, volcano)),
        tensorboard=pod_spec(one("Deployment", "apps/", "tensorboard")["spec"]["template"]),
        health_check=pod_spec(daemon_sets[0]["spec"]["template"]) if daemon_sets else None,
    )


def job_workload(template: Mapping[str, Any], assembly: Path) -> Workload:
    """The Volcano Job (one task) that ``template``'s job submitter creates, and the submitter: a
    job without staging or TensorBoard (a job of the user's own program, ``TrainiumTrainingJob``).
    Every container runs an image the template builds, found by its tag (:func:`image_builds`,
    with the cloud assembly ``assembly`` the template is part of)."""
    objects = [obj for _, obj in k8s_manifests(template)]
    (volcano,) = submitted_jobs(template)
    found = _volcano_workload(template, objects, volcano)
    builds = image_builds(template, assembly)
    images = {}
    submitter = [found.submitter] if found.submitter is not None else []
    for spec in (found.worker, *found.worker.init_containers, *submitter):
        tag = spec.image.rpartition(":")[2]
        if tag not in builds:
            raise ValueError(
                f"container {spec.container}: image {spec.image}: the template builds no image of that "
                f"tag ({', '.join(sorted(builds))}): the rehearsal has no stand-in for its files"
            )
        images[spec.container] = builds[tag]
    return dataclasses.replace(found, images=images)


def _labelled(objects: list[dict[str, Any]], kind: str, app: str) -> list[dict[str, Any]]:
    return [
        o
        for o in objects
        if o["kind"] == kind and o["metadata"].get("labels", {}).get("app.kubernetes.io/name") == app
    ]


def _volcano_workload(
    template: Mapping[str, Any], objects: list[dict[str, Any]], volcano: Mapping[str, Any]
) -> Workload:
    """The Workload of the Volcano Job ``volcano`` and its submitter, if ``objects`` (the
    Kubernetes objects of ``template``) hold one."""
    submitters = _labelled(objects, "Job", "job-submitter")
    (task,) = volcano["spec"]["tasks"]
    namespace = volcano["metadata"]["namespace"]
    return Workload(
        namespace=namespace,
        job_name=volcano["metadata"]["name"],
        task=task["name"],
        replicas=task["replicas"],
        policies=policies(volcano["spec"].get("policies", [])),
        worker=pod_spec(task["template"]),
        plugins=tuple(sorted(volcano["spec"].get("plugins", {}))),
        submitter=job_pod(submitters[0]) if submitters else None,
        job=volcano,
        config_maps={o["metadata"]["name"]: o.get("data", {}) for o in objects if o["kind"] == "ConfigMap"},
        stack_outputs=stack_outputs(template),
        pod_identity=pod_identity_accounts(template, namespace),
    )


def image_builds(template: Mapping[str, Any], assembly: Path) -> dict[str, ImageFiles]:
    """Image tag -> the files of each image ``template`` builds in the region
    (:data:`IMAGE_BUILD`): its build command's ``--file`` in the build context the build
    downloads (its ``sourceS3Url``: an asset of the cloud assembly ``assembly``, a folder there)."""
    folders = {}
    for manifest in assembly.glob("*.assets.json"):
        for key, asset in json.loads(manifest.read_text()).get("files", {}).items():
            if asset["source"].get("packaging") == "zip":  # a folder the CDK zips at publishing
                folders[key] = assembly / asset["source"]["path"]
    builds = {}
    for logical_id, resource in resources(template, IMAGE_BUILD).items():
        props = resource["Properties"]
        url = props["sourceS3Url"]
        url = url.get("Fn::Sub", "") if isinstance(url, dict) else str(url)
        key = posixpath.basename(url).removesuffix(".zip")
        dockerfile = re.search(r"--file (\S+)", props["buildCommand"])
        if key not in folders or dockerfile is None:
            raise ValueError(f"{logical_id}: no build context folder or --file in the assembly for {url}")
        builds[str(props["imageTag"])] = ImageFiles(folders[key] / dockerfile.group(1), folders[key])
    return builds


def staging_jobs(objects: list[dict[str, Any]], volcano: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The staging Jobs in the order the gang trains their datasets: by the phases of the pods'
    description and the dataset marker each waits for (a two-phase job has a staging Job per phase)."""
    stagings = [
        o
        for o in objects
        if o["kind"] == "Job"
        and o["apiVersion"].startswith("batch/")
        and o["metadata"].get("labels", {}).get("app.kubernetes.io/name") == "dataset-staging"
    ]
    (task,) = volcano["spec"]["tasks"]
    (container,) = task["template"]["spec"]["containers"]
    described = loads(container["command"][-1])
    markers = [wait.ready for phase in described.phases for wait in phase.waits]
    assert markers, "the pods' description waits for no dataset marker"

    def writes(job: Mapping[str, Any], marker: str) -> bool:
        # Its program's failed marker is beside the set whose marker it writes (JobPaths).
        run = DatasetRun.loads(job["spec"]["template"]["spec"]["containers"][0]["command"][-1])
        return run.failed == f"{posixpath.dirname(marker)}.staging-failed"

    ordered = []
    for marker in markers:
        (found,) = [o for o in stagings if writes(o, marker)]
        ordered.append(found)
    return ordered


def heldout_jobs(objects: list[dict[str, Any]], volcano: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The held-out staging Jobs, in the order of the phases whose shards each waits for (none
    without ``heldout_enabled``)."""
    heldouts = _labelled(objects, "Job", "heldout-staging")
    (task,) = volcano["spec"]["tasks"]
    (container,) = task["template"]["spec"]["containers"]
    markers = [wait.ready for phase in loads(container["command"][-1]).phases for wait in phase.waits]

    def waits_for(job: Mapping[str, Any]) -> str:
        run = DatasetRun.loads(job["spec"]["template"]["spec"]["containers"][0]["command"][-1])
        (found,) = [wait.ready for wait in run.waits if wait.ready in markers]
        return found

    return sorted(heldouts, key=lambda job: markers.index(waits_for(job)))


def first_staging(objects: list[dict[str, Any]], volcano: Mapping[str, Any]) -> dict[str, Any]:
    """The staging Job of the first phase the gang trains."""
    return staging_jobs(objects, volcano)[0]


def stagings(template: Mapping[str, Any]) -> tuple[PodSpec, ...]:
    """The pods of ``template``'s staging Jobs, one per training phase, in the phases' order."""
    objects = [obj for _, obj in k8s_manifests(template)]
    (volcano,) = submitted_jobs(template)
    return tuple(job_pod(job) for job in staging_jobs(objects, volcano))


def heldouts(template: Mapping[str, Any]) -> tuple[PodSpec, ...]:
    """The pods of ``template``'s held-out staging Jobs, in the phases' order."""
    objects = [obj for _, obj in k8s_manifests(template)]
    (volcano,) = submitted_jobs(template)
    return tuple(job_pod(job) for job in heldout_jobs(objects, volcano))


def job_pod(job: Mapping[str, Any]) -> PodSpec:
    """The pod of a batch Job, with the Job's name."""
    return dataclasses.replace(pod_spec(job["spec"]["template"]), job_name=job["metadata"]["name"])


@dataclass(frozen=True)
class Image:
    """The parts of an image the rehearsal reproduces: its working directory, environment and
    user."""

    workdir: str | None
    env: Mapping[str, str]
    #: USER as (uid, gid); gid None where USER names no group. None: no USER (root).
    user: tuple[int, int | None] | None = None


def user_ids(security: Security, built: Image) -> tuple[int, int]:
    """(uid, gid) a container runs as: its securityContext's, else its image's USER, else root.
    Kubernetes, "Configure a Security Context for a Pod or Container": runAsGroup "If this field
    is omitted, the primary group ID of the containers will be root(0)"."""
    image_uid, image_gid = built.user or (0, None)
    if security.run_as_user is None:
        uid, gid = image_uid, image_gid
    else:
        uid, gid = security.run_as_user, None
    if security.run_as_group is not None:
        gid = security.run_as_group
    return uid, gid if gid is not None else 0


def image(dockerfile: Path) -> Image:
    """WORKDIR, ENV and USER of ``dockerfile`` (``ENV K=V ...`` lines, continuations joined;
    USER in numbers: names would need the image's /etc/passwd)."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    workdir, env = None, {}
    user: tuple[int, int | None] | None = None
    for line in text.splitlines():
        word, _, rest = line.strip().partition(" ")
        if word == "WORKDIR":
            workdir = rest.strip()
        elif word == "USER":
            uid, sep, gid = rest.strip().partition(":")
            if not uid.isdigit() or (sep and not gid.isdigit()):
                raise ValueError(f"{dockerfile}: USER {rest.strip()!r}: only numeric IDs are read")
            user = (int(uid), int(gid) if sep else None)
        elif word == "ENV":
            for item in shlex.split(rest):
                key, sep, value = item.partition("=")
                if not sep:
                    raise ValueError(f"{dockerfile}: ENV {rest!r}: only the KEY=VALUE form is read")
                env[key] = value
    return Image(workdir, env, user)


def copy_as_docker_would(dockerfile: Path, context: Path, into: Path) -> Path:
    """Lay out under ``into``, as the image's root holds them, the files the last stage of
    ``dockerfile`` COPYs from ``context``; return its WORKDIR's folder there (made, as WORKDIR
    makes it). Read as the Dockerfile reference's COPY and WORKDIR sections say: a source folder
    gives its contents, not itself; a destination ending in ``/`` (or of several sources) is a
    folder, else a file source is written at it; a relative destination, and a relative WORKDIR,
    are below the WORKDIR before it. The context's ``.dockerignore`` leaves files out
    (:func:`_ignored`). What the rehearsal cannot reproduce is refused: ADD, COPY's flags
    (``--from``, ``--chown``, ...), variables, wildcards."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    workdir = "/"
    copies: list[tuple[list[str], str, bool]] = []
    for line in text.splitlines():
        word, _, rest = line.strip().partition(" ")
        word, rest = word.upper(), rest.strip()
        if word == "FROM":  # a new stage: only the last one's files are the image's
            workdir, copies = "/", []
        elif word == "WORKDIR":
            workdir = posixpath.normpath(posixpath.join(workdir, _literal(dockerfile, rest)))
        elif word == "ADD" or (word == "COPY" and rest.startswith("--")):
            raise ValueError(f"{dockerfile}: {line.strip()!r}: only plain COPY is reproduced")
        elif word == "COPY":
            words = json.loads(rest) if rest.startswith("[") else shlex.split(rest)
            *sources, target = (_literal(dockerfile, w) for w in words)
            folder = target.endswith("/") or len(sources) > 1
            destination = posixpath.normpath(posixpath.join(workdir, target))
            copies.append((sources, destination, folder))
    ignored = _ignored(context)
    for sources, destination, folder in copies:
        where = into / destination.lstrip("/")
        for source in sources:
            found = context / source
            if not found.exists():
                raise FileNotFoundError(f"{dockerfile}: COPY {source}: not in the build context {context}")
            if found.is_dir():
                for path in sorted(p for p in found.rglob("*") if p.is_file()):
                    if not ignored(path.relative_to(context).as_posix()):
                        (where / path.relative_to(found)).parent.mkdir(parents=True, exist_ok=True)
                        shutil.copy2(path, where / path.relative_to(found))
            elif not ignored(found.relative_to(context).as_posix()):
                file = where / found.name if folder else where
                file.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(found, file)
    made = into / workdir.lstrip("/")
    made.mkdir(parents=True, exist_ok=True)
    return made


def _literal(dockerfile: Path, word: str) -> str:
    if any(c in word for c in "$*?["):
        raise ValueError(f"{dockerfile}: {word!r}: variables and wildcards are not reproduced")
    return word


def _ignored(context: Path) -> Callable[[str], bool]:
    """Whether a file (its path in ``context``) is left out by the context's ``.dockerignore``:
    its patterns matched as Go's filepath.Match (fnmatch, ``*`` not crossing a ``/``), ``**``
    any number of folders, a matched folder leaving out what it holds (Dockerfile reference,
    ".dockerignore file"); exceptions (``!``) are refused."""
    path = context / ".dockerignore"
    lines = path.read_text().splitlines() if path.exists() else []
    patterns = [line.strip().strip("/") for line in lines if line.strip() and not line.startswith("#")]
    if any(p.startswith("!") for p in patterns):
        raise ValueError(f"{path}: exceptions (!) are not reproduced")
    expressions = [re.compile(_pattern(p)) for p in patterns]

    def ignored(rel: str) -> bool:
        parts = rel.split("/")
        prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
        return any(e.fullmatch(prefix) for e in expressions for prefix in prefixes)

    return ignored


def _pattern(pattern: str) -> str:
    """A .dockerignore pattern as a regular expression (``**`` any folders, ``*`` and ``?`` within one)."""
    out = ""
    for part in re.split(r"(\*\*/?|\*|\?)", pattern):
        if part.startswith("**"):
            out += "(?:.*/)?" if part.endswith("/") else ".*"
        elif part == "*":
            out += "[^/]*"
        elif part == "?":
            out += "[^/]"
        else:
            out += re.escape(part)
    return out
