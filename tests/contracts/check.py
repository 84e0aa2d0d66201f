"""The contract checks: each takes what we emit and returns what its consumer would not accept
(an empty list when it accepts everything), so a test can run it on a deliberately wrong copy."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from tests.contracts import (
    charts,
    fsx_csi,
    libfabric,
    neuron,
    nodes,
    pod_security,
    resources,
    torch_elastic,
    volcano,
)
from tests.contracts.emitted import Nodegroup
from tests.contracts.model import Contract

#: Variable prefixes the platform sets or could set, each with the consumers that read such names.
#: A variable with one of these prefixes that none of its consumers reads fails the check.
ENV_CONSUMERS: dict[str, tuple[Contract, ...]] = {
    "FI_": (libfabric.CONTRACT,),
    "NEURON_": (neuron.RUNTIME, neuron.COMPILER),
    "CCOM_": (neuron.COLLECTIVES,),
    "NCCL_": (),
    "XLA_": (),
    "PJRT_": (),
    "TORCH_": (torch_elastic.CONTRACT,),
    "TORCHELASTIC_": (torch_elastic.CONTRACT,),
    "VC_": (volcano.PLUGIN_ENV,),
    "VK_": (volcano.PLUGIN_ENV,),
}
#: Every contract about variables (for names a consumer sets itself, whatever their prefix).
ENV_CONTRACTS = (
    libfabric.CONTRACT,
    neuron.RUNTIME,
    neuron.COMPILER,
    neuron.COLLECTIVES,
    torch_elastic.CONTRACT,
    volcano.PLUGIN_ENV,
)


def check_env(env: Mapping[str, str | None]) -> list[str]:
    """Names no consumer reads, names a consumer sets itself, values it does not accept."""
    problems = []
    for name, value in sorted(env.items()):
        prefix = next((p for p in ENV_CONSUMERS if name.startswith(p)), None)
        entry = next((c.get(name) for c in ENV_CONTRACTS if c.get(name) is not None), None)
        if any(name.startswith(a) and name.endswith(b) for a, b in volcano.PLUGIN_ENV_FORMATS):
            problems.append(f"{name}: set by Volcano's svc plugin ({volcano.PLUGIN_ENV_FORMATS_SOURCE})")
        elif entry is not None and entry.sets_itself:
            problems.append(f"{name}: set by its consumer itself; do not set it ({entry.source})")
        elif entry is not None and not entry.read:
            problems.append(f"{name}: not read by its consumer: {entry.use} ({entry.source})")
        elif entry is None and prefix is not None:
            readers = ", ".join(c.consumer for c in ENV_CONSUMERS[prefix]) or "nothing in the image"
            problems.append(f"{name}: no consumer reads it (checked: {readers})")
        elif entry is not None and entry.values and value is not None and value not in entry.values:
            problems.append(
                f"{name}={value!r}: accepted values are {', '.join(entry.values)} ({entry.source})"
            )
    if env.get("NEURON_CC_FLAGS"):
        problems += check_cc_flags(env["NEURON_CC_FLAGS"] or "")
    return problems


def check_cc_flags(flags: str) -> list[str]:
    """Each flag in ``NEURON_CC_FLAGS`` is one the cache layer or compiler reads; a cache is a
    path or an ``s3://`` URL."""
    problems = []
    for token in shlex.split(flags):
        name, _, value = token.partition("=")
        entry = neuron.CC_FLAGS.get(name)
        if entry is None:
            problems.append(f"NEURON_CC_FLAGS: {name} is not a flag the cited documents describe")
        elif name == "--cache_dir" and not (value.startswith("/") or value.startswith("s3://")):
            problems.append(
                f"NEURON_CC_FLAGS: --cache_dir={value!r} is neither an absolute path nor s3:// URL"
            )
    return problems


def compile_cache(env: Mapping[str, str | None]) -> str | None:
    """The compile cache a Neuron process uses: ``--cache_dir`` wins over the URL variable."""
    for token in shlex.split(env.get("NEURON_CC_FLAGS") or ""):
        if token.startswith("--cache_dir="):
            return token.split("=", 1)[1]
    return env.get("NEURON_COMPILE_CACHE_URL")


def check_training_env(env: Mapping[str, str | None], *, efa: bool, precompiles: bool) -> list[str]:
    """What the consumers require of a training container: Neuron's multi-node environment where
    the pod uses EFA, and a compile cache outside the container where it precompiles."""
    problems = []
    if efa:
        for name, value in neuron.MULTI_NODE_ENV.items():
            if env.get(name) != value:
                problems.append(
                    f"{name}: Neuron's multi-node environment sets {value!r} ({neuron.MULTI_NODE_ENV_SOURCE})"
                )
    if precompiles:
        cache = compile_cache(env)
        if cache is None or cache.startswith(neuron.DEFAULT_CACHE):
            problems.append(
                f"no compile cache outside the container: the default is {neuron.DEFAULT_CACHE}, lost with the "
                "pod and not shared with the training run's other nodes (NEURON_CC_FLAGS --cache_dir)"
            )
    return problems


def check_fsx_volume(pv: Mapping[str, Any]) -> list[str]:
    """A static PersistentVolume of the FSx CSI driver, as its node plugin reads it."""
    csi = pv.get("spec", {}).get("csi", {})
    if csi.get("driver") not in fsx_csi.DRIVER.settable():
        return [f"csi.driver {csi.get('driver')!r} is not {', '.join(sorted(fsx_csi.DRIVER.settable()))}"]
    problems = []
    if not csi.get("volumeHandle"):
        problems.append(f"csi.volumeHandle: the file system ID is missing ({fsx_csi.VOLUME_HANDLE_SOURCE})")
    attributes = csi.get("volumeAttributes", {})
    for key in sorted(set(attributes) - fsx_csi.VOLUME_ATTRIBUTES.settable()):
        problems.append(f"volumeAttributes.{key}: the driver does not read it (keys are case-sensitive)")
    for key in sorted(fsx_csi.VOLUME_ATTRIBUTES.required() - set(attributes)):
        entry = fsx_csi.VOLUME_ATTRIBUTES.get(key)
        assert entry is not None
        problems.append(f"volumeAttributes.{key} is missing: {entry.use} ({entry.source})")
    for option in pv.get("spec", {}).get("mountOptions", []):
        if option not in fsx_csi.MOUNT_OPTIONS.settable():
            problems.append(f"mountOptions: {option!r} has no cited Lustre client meaning")
    return problems


def flatten(values: Mapping[str, Any], prefix: str = "") -> Iterator[str]:
    """Dotted paths of a values document, down to scalars, lists and empty mappings."""
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            yield from flatten(value, f"{path}.")
        else:
            yield path


def check_chart_values(chart: str, values: Mapping[str, Any]) -> list[str]:
    """Every values path we set is one the chart reads (a path under a ``map`` entry is free)."""
    contract = charts.CHART_VALUES.get(chart)
    if contract is None:
        return [f"chart {chart}: no values table in tests/contracts/charts.py (add one with citations)"]
    maps = {e.name for e in contract.entries if e.kind == "map"}
    problems = []
    for path in flatten(values):
        if any(path == m or path.startswith(f"{m}.") for m in maps):
            continue
        entry = contract.get(path)
        if entry is None:
            problems.append(
                f"chart {chart} {contract.version}: values key {path!r} is not one the chart reads"
            )
            continue
        value = _at(values, path)
        if entry.values and str(value) not in entry.values:
            problems.append(f"chart {chart}: {path}={value!r}: accepted values are {', '.join(entry.values)}")
        if entry.kind == "list" and not isinstance(value, list):
            problems.append(f"chart {chart}: {path} must be a list")
    return problems


def _at(values: Mapping[str, Any], path: str) -> Any:
    node: Any = values
    for key in path.split("."):
        node = node.get(key) if isinstance(node, Mapping) else None
    return node


def daemonset_tolerations(chart: str, daemonset: str, values: Mapping[str, Any]) -> list[dict[str, str]]:
    """The tolerations a chart's DaemonSet gets from ``values``, as its template renders them."""
    rule = charts.DAEMONSETS[chart][daemonset]
    if rule.tolerate_all is not None:
        path, default = rule.tolerate_all
        switch = _at(values, path)
        if (default if switch is None else switch) is True:
            return [{"operator": "Exists"}]
    given = _at(values, rule.tolerations)
    return [*rule.built_in, *(rule.default_tolerations if given is None else given)]


def check_psa_labels(labels: Mapping[str, str]) -> list[str]:
    """The Pod Security Admission labels of a namespace."""
    problems = []
    for key, value in sorted(labels.items()):
        if not key.startswith(pod_security.PREFIX):
            continue
        entry = pod_security.CONTRACT.get(key)
        if entry is None:
            problems.append(f"label {key}: Pod Security Admission reads no such label")
        elif entry.values and value not in entry.values:
            problems.append(f"label {key}={value!r}: levels are {', '.join(entry.values)}")
        elif key.endswith("-version") and not re.match(pod_security.VERSION_PATTERN, value):
            problems.append(f"label {key}={value!r}: a version is 'latest' or 'v1.<minor>'")
    if f"{pod_security.PREFIX}enforce" not in labels:
        problems.append(
            "no enforce label: the namespace falls back to the cluster default (privileged on EKS)"
        )
    return problems


def check_volcano_job(job: Mapping[str, Any]) -> list[str]:
    """Plugins and their arguments, and policies, as the job controller and webhook read them."""
    spec = job.get("spec", {})
    problems = []
    for plugin, args in sorted(spec.get("plugins", {}).items()):
        if plugin not in volcano.PLUGINS.settable():
            problems.append(f"plugins.{plugin}: no such plugin in Volcano {volcano.VERSION}")
        elif plugin in volcano.NO_ARGUMENTS and args:
            problems.append(f"plugins.{plugin}: takes no arguments ({volcano.NO_ARGUMENTS[plugin]})")
        elif plugin == "svc":
            for arg in args:
                flag, _, value = arg.partition("=")
                if flag not in volcano.SVC_ARGUMENTS.settable() or value not in ("", "true", "false"):
                    problems.append(
                        f"plugins.svc: {arg!r} is not a flag of the svc plugin (parse errors are only logged)"
                    )
    problems += check_policies(spec.get("policies", []))
    for task in spec.get("tasks", []):
        problems += check_policies(task.get("policies", []))
    return problems


def check_policies(policies: Iterable[Mapping[str, Any]]) -> list[str]:
    problems = []
    for policy in policies:
        events = [policy["event"]] if "event" in policy else list(policy.get("events", []))
        for event in events:
            if event not in volcano.POLICY_EVENTS.settable():
                problems.append(f"policy event {event!r}: the admission webhook refuses it")
        action = policy.get("action")
        if action is not None and action not in volcano.POLICY_ACTIONS.settable():
            problems.append(f"policy action {action!r}: the admission webhook refuses it")
        if events and "exitCode" in policy:
            problems.append("a policy with both an event and an exitCode is refused")
    return problems


def check_queue(queue: Mapping[str, Any]) -> list[str]:
    problems = [
        f"Queue spec.{key}: not a field of QueueSpec"
        for key in sorted(queue.get("spec", {}))
        if key not in volcano.QUEUE_SPEC.settable()
    ]
    return problems + check_resource_names(queue.get("spec", {}).get("capability", {}))


def check_resource_names(names: Iterable[str]) -> list[str]:
    problems = []
    for name in sorted(set(names)):
        entry = resources.CONTRACT.get(name)
        if entry is None:
            problems.append(f"resource {name!r}: nothing advertises it")
        elif not entry.read:
            problems.append(f"resource {name!r}: {entry.use}")
    return problems


def placement(
    selector: Mapping[str, str], tolerations: Iterable[Mapping[str, str]], groups: Iterable[Nodegroup]
) -> list[Nodegroup]:
    """The nodegroups whose nodes a pod with this node selector and these tolerations can land on:
    every selector label on the node (a nodegroup's own label, the instance-type label the
    kubelet sets, or another well-known label) and every NoSchedule/NoExecute taint tolerated."""
    tolerations = [dict(t) for t in tolerations]
    fits = []
    for group in groups:
        if not all(_carries(group, key, value) for key, value in selector.items()):
            continue
        blocking = [t for t in group.taints if t["effect"] in ("NoSchedule", "NoExecute")]
        if all(any(nodes.tolerates(t, taint) for t in tolerations) for taint in blocking):
            fits.append(group)
    return fits


def _carries(group: Nodegroup, key: str, value: str) -> bool:
    if key in group.labels:
        return group.labels[key] == value
    if key == "node.kubernetes.io/instance-type":
        return value in group.instance_types
    if key == "kubernetes.io/os":
        return value == "linux"
    return False


def check_selector_labels(selector: Mapping[str, str], groups: Iterable[Nodegroup]) -> list[str]:
    """Each selector key is a label some nodegroup sets or a well-known node label."""
    ours = {key for group in groups for key in group.labels}
    well_known = nodes.WELL_KNOWN_LABELS.settable()
    return [
        f"nodeSelector {key}: no nodegroup sets it and it is not a well-known node label"
        for key in sorted(selector)
        if key not in ours and key not in well_known
    ]
