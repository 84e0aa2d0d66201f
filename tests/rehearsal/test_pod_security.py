"""The rehearsal's pods run as their securityContext says: the user and groups, a read-only root
file system with writable volumes, the capabilities and no_new_privs that Kubernetes resolves
from the pod's and the container's settings (tests/rehearsal/manifests.py ``security``,
cluster.py ``Cluster._security``, pod_root.sh).

The expected values come from the synthesized manifests read here directly, and from the
Kubernetes documentation's examples; a pod's PID 1 is checked from outside (/proc/<pid>/status)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.rehearsal.cluster import (
    Cluster,
    Pod,
    namespaces_available,
    pod_network_available,
)
from tests.rehearsal.manifests import (
    Image,
    Security,
    Workload,
    security,
    user_ids,
    workload,
)
from tests.rehearsal.standins import MOUNT as STANDINS_MOUNT
from tests.rehearsal.substitutions import ID_RANGE
from tests.support import k8s_manifests, submitted_jobs

#: Kubernetes, "Configure a Security Context for a Pod or Container", "Set capabilities for a
#: Container": a container's CapPrm without a capabilities field, and with NET_ADMIN and
#: SYS_TIME added.
DOC_DEFAULT_CAPS = 0x00000000A80425FB
DOC_ADDED_CAPS = 0x00000000AA0435FB


def _names(mask: int) -> set[str]:
    """Capability names (no ``CAP_``, upper case) of a mask, as libcap's capsh decodes it."""
    if shutil.which("capsh") is None:
        pytest.skip("needs libcap's capsh to decode capability masks")
    done = subprocess.run(["capsh", f"--decode={mask:#x}"], capture_output=True, text=True, check=True)
    listed = done.stdout.strip().partition("=")[2]
    return {name.upper().removeprefix("CAP_") for name in listed.split(",") if name}


# --- how the settings resolve (no namespaces needed) ---------------------------------------------
def test_given_the_docs_pod_and_container_users_then_the_containers_setting_wins():
    # The documentation's security-context-2.yaml: the pod runs as 1000, its container as 2000.
    pod = {"securityContext": {"runAsUser": 1000}}
    container = {"securityContext": {"runAsUser": 2000, "allowPrivilegeEscalation": False}}
    resolved = security(pod, container)
    assert user_ids(resolved, Image(None, {})) == (2000, 0)  # runAsGroup omitted: root's group
    assert resolved.no_new_privs and not resolved.read_only_root


def test_given_settings_on_the_pod_only_then_every_container_has_them():
    pod = {"securityContext": {"runAsUser": 1000, "runAsGroup": 3000, "supplementalGroups": [4000]}}
    resolved = security(pod, {"securityContext": {"runAsGroup": 5000}})
    assert user_ids(resolved, Image(None, {})) == (1000, 5000)
    assert resolved.supplemental_groups == (4000,)
    assert not resolved.no_new_privs  # allowPrivilegeEscalation defaults to true


def test_given_no_user_anywhere_then_the_images_user_runs():
    assert user_ids(security({}, {}), Image(None, {}, (65534, 65534))) == (65534, 65534)
    assert user_ids(security({}, {}), Image(None, {})) == (0, 0)
    # A runAsUser replaces the image's user and its group.
    pod = {"securityContext": {"runAsUser": 1000}}
    assert user_ids(security(pod, {}), Image(None, {}, (65534, 65534))) == (1000, 0)


def test_given_the_docs_capability_examples_then_the_sets_are_the_docs_masks():
    assert security({}, {}).capabilities == _names(DOC_DEFAULT_CAPS)
    added = {"securityContext": {"capabilities": {"add": ["NET_ADMIN", "SYS_TIME"]}}}
    assert security({}, added).capabilities == _names(DOC_ADDED_CAPS)
    dropped = {"securityContext": {"capabilities": {"drop": ["ALL"], "add": ["IPC_LOCK"]}}}
    assert security({}, dropped).capabilities == {"IPC_LOCK"}


def test_given_settings_the_rehearsal_cannot_play_then_reading_the_pod_fails_naming_them():
    with pytest.raises(ValueError, match="fsGroup"):
        security({"securityContext": {"fsGroup": 2000}}, {})
    with pytest.raises(ValueError, match="privileged"):
        security({}, {"securityContext": {"privileged": True}})


# --- the synthesized pods, run ------------------------------------------------------------------
#: Run as each pod's container command: what the pod is (its IDs, its mounts' options, whether
#: each folder given takes a new file), one JSON line, then it waits to be killed, so the test can
#: read its PID 1 from outside.
PROBE = """
import errno, json, os, sys, time
def write(folder):
    path = os.path.join(folder, ".security-probe")
    try:
        with open(path, "w") as f:
            f.write("x")
    except OSError as e:
        return errno.errorcode[e.errno]
    os.remove(path)
    return "written"
with open("/proc/self/mountinfo") as f:
    mounts = [(line.split()[4], line.split()[5].split(",")) for line in f]
print(json.dumps({
    "uid": os.getuid(), "gid": os.getgid(), "groups": sorted(os.getgroups()),
    "writes": {p: write(p) for p in sys.argv[1:]}, "mounts": mounts,
}), flush=True)
time.sleep(300)
"""
#: (Workload field, the pod's app.kubernetes.io/name, the kind of object that holds it).
PODS = {
    "tensorboard": ("tensorboard", "Deployment"),
    "staging": ("dataset-staging", "Job"),
    "worker": ("bert-pretrain", "Job"),
}
#: The container runtime's own mounts in a container, not the image's.
RUNTIME_MOUNTS = ("/dev", "/proc", "/sys")


def _manifest(template: Mapping[str, Any], pod: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(pod spec, its one container) of ``pod`` as the template has them (the Volcano Job: as its
    submitter creates it, from its ConfigMap)."""
    app, kind = PODS[pod]
    for obj in [*(obj for _, obj in k8s_manifests(template)), *submitted_jobs(template)]:
        if obj["kind"] == kind and obj["metadata"].get("labels", {}).get("app.kubernetes.io/name") == app:
            spec = obj["spec"]["tasks"][0]["template"] if "tasks" in obj["spec"] else obj["spec"]["template"]
            (container,) = spec["spec"]["containers"]
            return spec["spec"], container
    raise AssertionError(f"no {kind} {app} in the template")


def _mountinfo() -> dict[str, str]:
    """Mount ID -> per-mount options, of this process's mount namespace (this machine's)."""
    lines = Path("/proc/self/mountinfo").read_text().splitlines()
    return {line.split()[0]: line.split()[5] for line in lines}


def _status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {k: v.strip() for k, _, v in (line.partition(":") for line in lines)}


@pytest.fixture(scope="module")
def pods(training_json: dict[str, Any]) -> Workload:
    return workload(training_json)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, pods: Workload) -> Iterator[Cluster]:
    why = namespaces_available() or pod_network_available()
    if why is not None:
        pytest.skip(f"the rehearsal's pods {why}")
    host_before = _mountinfo()
    root = tmp_path_factory.mktemp("security")
    # The stand-in S3: the gang pod reads the model bucket's name (a stack output) at its start.
    made = Cluster(root, pods, s3_objects={}, dpkg_versions={}, driver_version="2.0.0.0", s3=True)
    try:
        yield made
    finally:
        made.close()
    # A read-only root is bind remounts in the pods' own mount namespaces: none of this
    # machine's mounts changed its options (a remount of the file system itself would have).
    host_after = _mountinfo()
    changed = {
        k: (host_before[k], v) for k, v in host_after.items() if k in host_before and host_before[k] != v
    }
    assert not changed, f"this machine's mounts changed: {changed}"


def _probe(cluster: Cluster, which: str, folders: list[str]) -> tuple[Pod, dict[str, Any]]:
    spec = getattr(cluster.workload, which)
    cluster.workload = replace(
        cluster.workload, **{which: replace(spec, command=("python", "-I", "-c", PROBE, *folders))}
    )
    try:
        if which == "worker":
            pod = cluster.start_worker(0)
        else:
            pod = getattr(cluster, f"start_{which}")()
    finally:
        cluster.workload = replace(cluster.workload, **{which: spec})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        lines = [line for line in pod.output().splitlines() if line.startswith("{")]
        if lines:
            return pod, json.loads(lines[0])
        if not pod.running:
            break
        time.sleep(0.05)
    pod.kill()
    raise AssertionError(f"pod {which} did not report: {pod.output()[-2000:]}")


@pytest.mark.parametrize("which", ["tensorboard", "staging", "worker"])
def test_given_a_synthesized_pod_then_it_runs_as_its_security_context_says(
    cluster: Cluster, training_json: dict[str, Any], which: str
) -> None:
    pod_spec, container = _manifest(training_json, which)
    pod_context, context = pod_spec.get("securityContext", {}), container.get("securityContext", {})
    # Kubernetes: the container's runAsUser/runAsGroup, else the pod's; neither image these pods
    # run (docker/Dockerfile: the Neuron DLC; tensorboard.Dockerfile: USER 65534:65534) says
    # otherwise than what the manifests set, or root for the DLC.
    uid = context.get("runAsUser", pod_context.get("runAsUser", 0))
    gid = context.get("runAsGroup", pod_context.get("runAsGroup", 0))
    if uid and cluster.network.ids < ID_RANGE:
        pytest.skip(
            "only root can be mapped in the rehearsal's user namespace here (an unprivileged harness)"
        )
    volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
    read_only = {
        m["mountPath"]: bool(
            m.get("readOnly") or volumes[m["name"]].get("persistentVolumeClaim", {}).get("readOnly")
        )
        for m in container["volumeMounts"]
    }
    root_read_only = bool(context.get("readOnlyRootFilesystem"))
    assert context["capabilities"]["drop"] == ["ALL"]
    capabilities = set(context["capabilities"].get("add", []))

    pod, seen = _probe(cluster, which, ["/", *read_only])
    try:
        status = _status(pod.pid1())
    finally:
        pod.kill()

    assert (seen["uid"], seen["gid"], seen["groups"]) == (uid, gid, [gid])
    assert status["Uid"].split() == [str(uid)] * 4 and status["Gid"].split() == [str(gid)] * 4
    # Only root keeps its capabilities at exec: a non-root process has none left.
    assert _names(int(status["CapEff"], 16)) == (capabilities if uid == 0 else set())
    assert _names(int(status["CapPrm"], 16)) == (capabilities if uid == 0 else set())
    assert _names(int(status["CapBnd"], 16)) == capabilities
    assert status["NoNewPrivs"] == ("1" if context.get("allowPrivilegeEscalation") is False else "0")
    # The root (its own tmpfs here) takes no file where readOnlyRootFilesystem; each volume
    # keeps its own mode.
    assert seen["writes"] == {
        "/": "EROFS" if root_read_only else "written",
        **{path: "EROFS" if ro else "written" for path, ro in read_only.items()},
    }
    if root_read_only:
        # The rest of the image too: every mount but the volumes, the runtime's and the
        # stand-ins' folder (a harness mount, tests.rehearsal.substitutions).
        own = [*read_only, *RUNTIME_MOUNTS, str(STANDINS_MOUNT)]
        image_mounts = [
            (path, options)
            for path, options in seen["mounts"]
            if not any(path == p or path.startswith(p.rstrip("/") + "/") for p in own)
        ]
        writable = [path for path, options in image_mounts if "ro" not in options]
        assert image_mounts and not writable, f"image mounts left writable: {writable}"


def test_given_a_pod_whose_user_is_root_but_must_not_be_then_it_does_not_start(cluster: Cluster) -> None:
    # runAsNonRoot with no user that is not root: the kubelet refuses to create the container.
    spec = cluster.workload.staging
    refused = replace(spec, security=replace(spec.security, run_as_non_root=True))
    cluster.workload = replace(cluster.workload, staging=refused)
    try:
        with pytest.raises(ValueError, match="runAsNonRoot"):
            cluster.start_staging()
    finally:
        cluster.workload = replace(cluster.workload, staging=spec)


def test_given_the_kubernetes_security_default_then_nothing_is_taken_away():
    assert Security().capabilities == _names(DOC_DEFAULT_CAPS) and not Security().no_new_privs
