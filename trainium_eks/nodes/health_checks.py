"""The deep health check of a new Trainium node: its DaemonSet, RBAC, admission policy and AWS role.

Every Trainium node starts tainted ``trainium-eks/node-health=pending`` (the nodegroup's taints, the
NodePool's startupTaints; :data:`trainium_job.node_health.PENDING_TAINT`). The DaemonSet
``node-health-check`` runs ``python -m training.node.health_check`` of the *training image* on each
node that has no ``trainium-eks/node-health`` label yet, with all of the node's Neuron devices, so
nothing else runs on them meanwhile. The check labels the node ``passed`` and lifts the taint, or
labels it ``failed``, taints it with the failed check's name and (``replace``) terminates its
instance. Once labelled, the node no longer matches the DaemonSet, whose controller removes the
pod: the devices are free before a training pod can land (so the pod is not in the training pod's
node budget, :data:`trainium_eks.addons.node_daemons.PRE_TRAINING_DAEMONS`). A node without a verdict
by the bound the checks' own timeouts add up to (:func:`trainium_job.node_health.verdict_deadline_s`)
fails the ``no-verdict`` check, whether its check hangs or keeps crashing: the pod's emptyDir
(:data:`STATE_DIR`) keeps the time of its first start across the container's restarts.

Two parts, two owners:

* :class:`NodeHealthCheck` (the workload, which builds the image): the service account, a
  ClusterRole of nodes get/patch and events create, a ValidatingAdmissionPolicy that lets the
  check (and the training job's service account, which the pre-training fabric check uses to
  mark a node) change nothing on a Node but the health label and the health taints, and the
  DaemonSet.
* :class:`NodeReplacementRole` (the platform, which knows its Trainium capacity): the EKS Pod
  Identity role of that service account, ``ec2:TerminateInstances`` on this cluster's Trainium
  instances only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jsii
from aws_cdk import Annotations, Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct, IConstruct, IValidation

from trainium_job.entry_points import NODE_HEALTH
from trainium_job.errors import ConfigError
from trainium_job.instances import InstanceFacts
from trainium_job.job import SERVICE_ACCOUNT as TRAINING_SERVICE_ACCOUNT
from trainium_job.node_health import HEALTH_LABEL, HEALTH_TAINT_KEYS, PENDING_TAINT
from trainium_job.pod import node_name_env
from trainium_job.scheduling import (
    INSTANCE_TYPE_LABEL,
    NEURON_RESOURCE,
    TRAINING_NAMESPACE,
    TRAINIUM_NODE_LABEL,
    WORKLOAD_TOLERATION,
)
from trainium_job.security import pod_security_context, training_security_context

from ..arguments import AnyCluster, require_cluster
from ..cluster.managed_addons import pod_identity_association, pod_identity_role
from ..nag import NODE_REPLACEMENT_ACKNOWLEDGEMENTS, acknowledge_own_findings

#: The DaemonSet, its service account, ClusterRole and binding, and the admission policy.
NAME = "node-health-check"
SERVICE_ACCOUNT = NAME
#: The pending taint, tolerated by the check and by the device plugins it needs (the Neuron
#: plugin allocates the devices the check requests; the EFA plugin registers the interfaces the
#: training pods request, so the node is whole the moment the check passes).
PENDING_TOLERATION = {
    "key": PENDING_TAINT["key"],
    "operator": "Equal",
    "value": PENDING_TAINT["value"],
    "effect": PENDING_TAINT["effect"],
}
#: Karpenter's label of a node whose startup taints are gone (kubernetes-sigs/karpenter v1.14.1
#: pkg/apis/v1/labels.go L42; set in pkg/controllers/nodeclaim/lifecycle/initialization.go L74-93
#: only once every startup taint is removed). Karpenter counts a DaemonSet's requests against
#: each node it plans unless the DaemonSet cannot land there; a planned node carries this label
#: ``In [true]`` for exactly that simulation (pkg/controllers/provisioning/scheduling/
#: nodeclaimtemplate.go L86-89, scheduler.go L1020-1042). Requiring it absent keeps the check's
#: 16 Neuron devices out of that sum (else no training pod would ever fit a planned node). Real
#: nodes lack it while the check runs (the pending taint is a startup taint), and nodegroup
#: nodes never have it.
KARPENTER_INITIALIZED_LABEL = "karpenter.sh/initialized"
#: Where the check notes its starts: an emptyDir, which outlives the container's restarts, so
#: the verdict's bound runs from the pod's first start (training.node.health_check
#: ``STATE_DIR``; the program's default, repeated here as the mount path).
STATE_DIR = "/run/node-health"
#: Where the check sees the host's sysfs (read-only) and its EFA devices.
HOST_SYS = "/host/sys"
INFINIBAND_SYSFS = f"{HOST_SYS}/class/infiniband"
#: Requests and limits besides the devices: neuron-ls, a small compute graph (compiled by
#: neuronx-cc) and nccom-test inside one node. The pod is gone before training lands.
RESOURCES = {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"cpu": "8", "memory": "16Gi"}}
#: Seconds the check's pod has, once deleted, to finish acting: the label it sets makes the
#: DaemonSet controller delete it at once, and its SIGTERM is only noted while the Events and the
#: instance's termination go out (training.node.health_check ``watch_for_removal``). Kubernetes'
#: default, 30 s, ran out in the offline rehearsal (six nodes checked at once on 2 cores) before
#: the EC2 client was made.
ACTIONS_GRACE_S = 120
#: Tags EKS puts on a managed nodegroup's instances (its Auto Scaling group propagates them; AWS
#: managed policy AWSServiceRoleForAmazonEKSNodegroup, https://docs.aws.amazon.com/aws-managed-policy/
#: latest/reference/AWSServiceRoleForAmazonEKSNodegroup.html, scopes the service's own instance
#: calls by them).
NODEGROUP_NAME_TAG = "eks:nodegroup-name"
NODEGROUP_CLUSTER_TAG = "eks:cluster-name"
#: Tags Karpenter puts on every instance it launches: the NodePool's name and the cluster's
#: (aws/karpenter-provider-aws v1.14.1 pkg/utils/utils.go L116-121 ``staticTags``;
#: pkg/apis/v1/labels.go L185 ``EKSClusterNameTagKey``).
KARPENTER_NODEPOOL_TAG = "karpenter.sh/nodepool"
KARPENTER_CLUSTER_TAG = "eks:eks-cluster-name"


def _labels() -> dict[str, str]:
    return {"app.kubernetes.io/name": NAME, "app.kubernetes.io/part-of": "trainium-eks"}


def service_account_user(namespace: str, name: str) -> str:
    """The user name Kubernetes authenticates a service account's token as."""
    return f"system:serviceaccount:{namespace}:{name}"


def node_selector(facts: InstanceFacts) -> dict[str, str]:
    """Trainium nodes of ``facts``' type (the labels every Trainium pod selects)."""
    return {**TRAINIUM_NODE_LABEL, INSTANCE_TYPE_LABEL: facts.name}


def node_affinity() -> dict[str, Any]:
    """Of those, the nodes not yet checked (no health label; see
    :data:`KARPENTER_INITIALIZED_LABEL` for the second absence)."""
    return {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {"key": HEALTH_LABEL, "operator": "DoesNotExist"},
                        {"key": KARPENTER_INITIALIZED_LABEL, "operator": "DoesNotExist"},
                    ]
                }
            ]
        }
    }


def health_check_daemonset(
    *, namespace: str, image: str, facts: InstanceFacts, replace: bool
) -> dict[str, Any]:
    """The DaemonSet: the check on every unchecked Trainium node of ``facts``' type, with all its
    Neuron devices, the host's /sys read-only, its own service account's token."""
    container = {
        "name": NAME,
        "image": image,
        "command": [
            "python",
            "-m",
            NODE_HEALTH,
            "--instance-type",
            facts.name,
            "--sysfs",
            INFINIBAND_SYSFS,
            "--state-dir",
            STATE_DIR,
            "--replace" if replace else "--no-replace",
        ],
        "env": [node_name_env()],
        "resources": {
            "requests": {**RESOURCES["requests"], NEURON_RESOURCE: str(facts.neuron_devices)},
            "limits": {**RESOURCES["limits"], NEURON_RESOURCE: str(facts.neuron_devices)},
        },
        "volumeMounts": [
            {"name": "sys", "mountPath": HOST_SYS, "readOnly": True},
            {"name": "state", "mountPath": STATE_DIR},
        ],
        # The training container's: the same image and Neuron tools, every capability dropped
        # but IPC_LOCK (the Neuron runtime's pinned buffers), no privilege escalation.
        "securityContext": training_security_context(),
    }
    spec = {
        "serviceAccountName": SERVICE_ACCOUNT,
        # The check reads and patches its Node: it needs its token (and nothing else does here).
        "automountServiceAccountToken": True,
        "nodeSelector": node_selector(facts),
        "affinity": {"nodeAffinity": node_affinity()},
        # The Trainium nodes' taint and the pending one; never a failed node's (its taint has
        # another value), so a failed node is not checked again until someone lifts it.
        "tolerations": [dict(WORKLOAD_TOLERATION), dict(PENDING_TOLERATION)],
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": ACTIONS_GRACE_S,
        "securityContext": pod_security_context(),
        "containers": [container],
        "volumes": [
            {"name": "sys", "hostPath": {"path": "/sys", "type": "Directory"}},
            # A few bytes: one line per start of the check.
            {"name": "state", "emptyDir": {"sizeLimit": "1Mi"}},
        ],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": NAME, "namespace": namespace, "labels": _labels()},
        "spec": {
            "selector": {"matchLabels": _labels()},
            "template": {"metadata": {"labels": _labels()}, "spec": spec},
        },
    }


def rbac_objects(
    namespace: str, training_service_account: str = TRAINING_SERVICE_ACCOUNT
) -> list[dict[str, Any]]:
    """The service account, and a ClusterRole bound to it and to the training job's (whose fabric
    check marks a node it names): get and patch nodes (read the node's provider ID and taints,
    set the label and taints), create events (on the Node). No list or watch: each reads its own
    node by name."""
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": SERVICE_ACCOUNT, "namespace": namespace, "labels": _labels()},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": NAME, "labels": _labels()},
            "rules": [
                {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]},
                {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": NAME, "labels": _labels()},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
            "subjects": [
                {"kind": "ServiceAccount", "name": name, "namespace": namespace}
                for name in (SERVICE_ACCOUNT, training_service_account)
            ],
        },
    ]


def _admission_variables() -> list[dict[str, str]]:
    """The policy's CEL variables: the Node's labels but the health label, and its taints but
    those keyed by :data:`HEALTH_TAINT_KEYS`, after and before the update."""
    key = HEALTH_LABEL
    taint_keys = ", ".join(f"'{k}'" for k in HEALTH_TAINT_KEYS)

    def labels(item: str) -> str:
        return (
            f"has({item}.metadata.labels) ? {item}.metadata.labels.filter(k, k != '{key}')"
            f".map(k, k + '=' + {item}.metadata.labels[k]) : []"
        )

    def taints(item: str) -> str:
        return f"has({item}.spec.taints) ? {item}.spec.taints.filter(t, !(t.key in [{taint_keys}])) : []"

    return [
        {"name": "newLabels", "expression": labels("object")},
        {"name": "oldLabels", "expression": labels("oldObject")},
        {"name": "newTaints", "expression": taints("object")},
        {"name": "oldTaints", "expression": taints("oldObject")},
    ]


def _admission_validations() -> list[dict[str, str]]:
    """The policy's rules over :func:`_admission_variables`: the rest of the labels, the taints,
    the annotations and the spec stay as they were."""

    def annotations(item: str) -> str:
        return f"has({item}.metadata.annotations) ? {item}.metadata.annotations : {{}}"

    same_spec = " && ".join(
        f"object.spec.?{field} == oldObject.spec.?{field}"
        for field in ("unschedulable", "providerID", "podCIDR", "podCIDRs", "configSource", "externalID")
    )
    return [
        {
            "expression": "variables.newLabels.size() == variables.oldLabels.size() && "
            "variables.newLabels.all(l, l in variables.oldLabels)",
            "message": f"only the {HEALTH_LABEL} label may change",
        },
        {
            "expression": "variables.newTaints == variables.oldTaints",
            "message": f"only taints with the keys {', '.join(HEALTH_TAINT_KEYS)} may change",
        },
        {
            "expression": f"({annotations('object')}) == ({annotations('oldObject')})",
            "message": "annotations may not change",
        },
        {"expression": same_spec, "message": "the node's spec may not change but its health taints"},
    ]


def admission_policy(*, users: Sequence[str]) -> list[dict[str, Any]]:
    """A ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1, GA in Kubernetes 1.30) and
    its binding: a Node update by one of ``users`` may change the health label and the taints
    keyed by it or by the failed key (:data:`HEALTH_TAINT_KEYS`), nothing else of the Node's
    labels, annotations, taints or spec.

    RBAC can grant ``patch`` on nodes only whole; this narrows it to what the check writes. A
    PATCH reaches admission as an UPDATE, and ``nodes`` updates never change status (the
    ``nodes/status`` subresource does, which is not granted).
    """
    quoted = ", ".join(f"'{user}'" for user in users)
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": NAME, "labels": _labels()},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["UPDATE"],
                            "resources": ["nodes"],
                        }
                    ]
                },
                "matchConditions": [
                    {"name": "health-writers", "expression": f"request.userInfo.username in [{quoted}]"}
                ],
                "variables": _admission_variables(),
                "validations": _admission_validations(),
            },
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": NAME, "labels": _labels()},
            "spec": {"policyName": NAME, "validationActions": ["Deny"]},
        },
    ]


def health_check_objects(
    *,
    namespace: str,
    image: str,
    facts: InstanceFacts,
    replace: bool,
    training_service_account: str = TRAINING_SERVICE_ACCOUNT,
) -> list[dict[str, Any]]:
    """Everything :class:`NodeHealthCheck` applies, in order."""
    users = [
        service_account_user(namespace, SERVICE_ACCOUNT),
        service_account_user(namespace, training_service_account),
    ]
    return [
        *rbac_objects(namespace, training_service_account),
        *admission_policy(users=users),
        health_check_daemonset(namespace=namespace, image=image, facts=facts, replace=replace),
    ]


class NodeHealthCheck(Construct):
    """The node health check's Kubernetes objects (see the module docstring).

    Attributes: manifest.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: AnyCluster,
        image: str,
        facts: InstanceFacts,
        namespace: str = TRAINING_NAMESPACE,
        replace: bool = True,
        training_service_account: str = TRAINING_SERVICE_ACCOUNT,
        depends_on: Sequence[IConstruct] = (),
    ) -> None:
        """
        Args:
            cluster: the cluster (with a kubectl provider).
            image: the training image URI (it holds the check and the Neuron tools).
            facts: the Trainium instance type (its Neuron devices, the check's expectations).
            namespace: the training namespace. Default ``TRAINING_NAMESPACE``.
            replace: a failed node's instance is terminated (the platform's
                :class:`NodeReplacementRole` must exist). Default True.
            training_service_account: the training job's, also allowed to mark a node. Default
                "bert-trainer".
            depends_on: applied first (the namespace, the image build). Default ``()``.
        """
        super().__init__(scope, id)
        cluster = require_cluster(cluster)
        self.manifest = eks.KubernetesManifest(
            self,
            "Manifest",
            cluster=cluster,
            manifest=health_check_objects(
                namespace=namespace,
                image=image,
                facts=facts,
                replace=replace,
                training_service_account=training_service_account,
            ),
        )
        for dependency in depends_on:
            self.manifest.node.add_dependency(dependency)


def terminate_conditions(*, cluster_name: str, nodegroup_name: str | None, node_pool: str | None) -> dict:
    """The tag conditions of ``ec2:TerminateInstances``: the managed nodegroup's instances of this
    cluster, or the instances Karpenter launched for the ``node_pool`` of this cluster."""
    if nodegroup_name is not None:
        tags = {NODEGROUP_NAME_TAG: nodegroup_name, NODEGROUP_CLUSTER_TAG: cluster_name}
    else:
        assert node_pool is not None, "give the nodegroup's name or the NodePool's"
        tags = {KARPENTER_NODEPOOL_TAG: node_pool, KARPENTER_CLUSTER_TAG: cluster_name}
    return {"StringEquals": {f"aws:ResourceTag/{k}": v for k, v in tags.items()}}


class NodeReplacementRole(Construct):
    """The check's AWS role (EKS Pod Identity of its service account): terminate an instance of
    this cluster's Trainium capacity, nothing else.

    Attributes: role, association (the check's), training_association (the training job's).
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: AnyCluster,
        nodegroup_name: str | None = None,
        node_pool: str | None = None,
        namespace: str = TRAINING_NAMESPACE,
        training_service_account: str = TRAINING_SERVICE_ACCOUNT,
    ) -> None:
        """
        Args:
            cluster: the cluster (its name scopes the instances).
            nodegroup_name: the Trainium managed nodegroup's name, or
            node_pool: the Trainium NodePool's (Karpenter launches the nodes). One of the two.
            namespace: the check's namespace. Default ``TRAINING_NAMESPACE``.
            training_service_account: the training job's, whose fabric check replaces a node it
                names (``training.node.fabric_check --heal replace``). Default "bert-trainer".
        """
        super().__init__(scope, id)
        cluster = require_cluster(cluster)
        if (nodegroup_name is None) == (node_pool is None):
            raise ConfigError(
                "NodeReplacementRole.nodegroup_name / node_pool",
                (nodegroup_name, node_pool),
                "give exactly one: the Trainium nodegroup's name, or the Karpenter NodePool's",
            )
        self.role = pod_identity_role(
            self,
            "Role",
            description="Trainium node health check: terminate a failed node of this cluster (EKS Pod Identity)",
        )
        instances = Stack.of(self).format_arn(service="ec2", resource="instance", resource_name="*")
        self.role.add_to_policy(
            iam.PolicyStatement(
                actions=["ec2:TerminateInstances"],
                resources=[instances],
                conditions=terminate_conditions(
                    cluster_name=cluster.cluster_name, nodegroup_name=nodegroup_name, node_pool=node_pool
                ),
            )
        )
        # The check's, and the training pods' (their fabric check replaces a node it names the
        # same way): a role may be associated with several service accounts, each of which has
        # one association.
        self.association, self.training_association = (
            pod_identity_association(
                self,
                construct_id,
                cluster=cluster,
                namespace=namespace,
                service_account=account,
                role=self.role,
            )
            for construct_id, account in (
                ("PodIdentity", SERVICE_ACCOUNT),
                ("TrainingPodIdentity", training_service_account),
            )
        )
        acknowledge_own_findings(self, NODE_REPLACEMENT_ACKNOWLEDGEMENTS)


@jsii.implements(IValidation)
class _TaintLifted:
    """At synth: some :class:`NodeHealthCheck` in the app lifts the pending taint of ``nodes``."""

    def __init__(self, nodes: IConstruct) -> None:
        self._nodes = nodes

    def validate(self) -> list[str]:
        if not any(isinstance(c, NodeHealthCheck) for c in self._nodes.node.root.node.find_all()):
            Annotations.of(self._nodes).add_warning_v2(
                "trainium-eks:pending-taint",
                f"TrainiumNodeOptions.health_check=True: every node starts with the taint "
                f"{PENDING_TAINT['key']}={PENDING_TAINT['value']}:{PENDING_TAINT['effect']}, which only the node "
                "health check lifts, and no NodeHealthCheck is in this app (TrainingWorkload builds it with "
                "trainium_health_check): nothing will run on these nodes; add the workload, or set "
                "health_check=False",
            )
        return []


def warn_unlifted_taint(nodes: IConstruct) -> None:
    """A synth warning on ``nodes`` (started with ``PENDING_TAINT``) when the app has no
    :class:`NodeHealthCheck` to lift it; checked once the app is built, so a workload declared
    later, or in another stack of the app, counts."""
    nodes.node.add_validation(_TaintLifted(nodes))
