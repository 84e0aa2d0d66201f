"""The training job, submitted once its data is there: a ConfigMap holding its Volcano Job and a
small batch Job on the system nodes that creates it (why this and not Volcano's own ordering:
:mod:`trainium_job.submission`).

The stack applies, after what they need:

- a ConfigMap ``<job>`` with the Volcano Job's manifest (``job.json``);
- a ServiceAccount ``job-submitter`` and a Role that may ``create`` Volcano Jobs in the namespace,
  bound to it (RBAC cannot narrow ``create`` to a name);
- the batch Job ``submit-<job>`` (the tools image: ``python -m training.launch.submit``): it waits
  for the job's inputs with deadlines, checks the spend ceiling, then creates the Volcano Job with
  an owner reference to itself. A changed job is a new ConfigMap and a new submitter, and the old
  submitter's deletion takes the old Volcano Job with it; so does ``cdk destroy``. The submitter
  has no ``ttlSecondsAfterFinished``: its deletion would delete the training job.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from aws_cdk import Stack
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct, IConstruct

from trainium_job.entry_points import SUBMIT
from trainium_job.exit_codes import BUDGET_EXIT_CODE, DEADLINE_EXIT_CODE
from trainium_job.paths import DATA_MOUNT
from trainium_job.pod_program.description import Budget
from trainium_job.scheduling import SYSTEM_NODE_LABEL
from trainium_job.security import pod_security_context, service_security_context
from trainium_job.submission import (
    JOB_NAME_ENV,
    JOB_NAME_LABEL,
    JOB_UID_ENV,
    JOB_UID_LABEL,
    MANIFEST_DIR,
    MANIFEST_KEY,
    Submission,
)
from trainium_job.waits import Wait

from ..arguments import AnyCluster, require_cluster

#: The submitter's ServiceAccount and Role.
SUBMITTER: Final = "job-submitter"
#: Seconds the submitter's pod gets beyond its waits (its image pull on a system node, the API
#: call): the Job's ``activeDeadlineSeconds`` is the waits' sum plus this.
SUBMIT_MARGIN_S: Final = 900
#: Pod failures the Job retries (an API error, an eviction): a deadline or the ceiling ends it.
SUBMIT_RETRIES: Final = 2
#: ``nobody``: the tools image's user.
_UID: Final = 65534


def submitter_rbac(namespace: str) -> list[dict[str, Any]]:
    """The ServiceAccount, the Role that may create Volcano Jobs in ``namespace``, its binding."""
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": SUBMITTER, "namespace": namespace},
            "automountServiceAccountToken": False,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": SUBMITTER, "namespace": namespace},
            "rules": [{"apiGroups": ["batch.volcano.sh"], "resources": ["jobs"], "verbs": ["create"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": SUBMITTER, "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": SUBMITTER},
            "subjects": [{"kind": "ServiceAccount", "name": SUBMITTER, "namespace": namespace}],
        },
    ]


def _label_env(name: str, label: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{label}']"}}}


def submitter_job(
    *, job_name: str, namespace: str, image: str, claim_name: str, submission: Submission
) -> dict[str, Any]:
    """The batch Job ``submit-<job_name>`` (see the module docstring)."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"submit-{job_name}",
            "namespace": namespace,
            "labels": {"app.kubernetes.io/name": "job-submitter"},
        },
        "spec": {
            "backoffLimit": SUBMIT_RETRIES,
            "activeDeadlineSeconds": submission.bound_s + SUBMIT_MARGIN_S,
            # A wait past its deadline or the ceiling is final: no retry.
            "podFailurePolicy": {
                "rules": [
                    {
                        "action": "FailJob",
                        "onExitCodes": {"operator": "In", "values": [DEADLINE_EXIT_CODE, BUDGET_EXIT_CODE]},
                    }
                ]
            },
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/name": "job-submitter"}},
                "spec": {
                    "serviceAccountName": SUBMITTER,
                    "automountServiceAccountToken": True,
                    "restartPolicy": "Never",
                    "nodeSelector": dict(SYSTEM_NODE_LABEL),
                    "securityContext": pod_security_context(run_as=_UID),
                    "containers": [
                        {
                            "name": "submit",
                            "image": image,
                            "command": ["python", "-m", SUBMIT, submission.dumps()],
                            "env": [
                                _label_env(JOB_NAME_ENV, JOB_NAME_LABEL),
                                _label_env(JOB_UID_ENV, JOB_UID_LABEL),
                            ],
                            "resources": {
                                "requests": {"cpu": "50m", "memory": "128Mi"},
                                "limits": {"cpu": "500m", "memory": "256Mi"},
                            },
                            "volumeMounts": [
                                {"name": "job", "mountPath": MANIFEST_DIR, "readOnly": True},
                                {"name": "data", "mountPath": DATA_MOUNT, "readOnly": True},
                            ],
                            "securityContext": service_security_context(run_as_non_root=True),
                        }
                    ],
                    "volumes": [
                        {"name": "job", "configMap": {"name": job_name}},
                        {
                            "name": "data",
                            "persistentVolumeClaim": {"claimName": claim_name, "readOnly": True},
                        },
                    ],
                },
            },
        },
    }


class JobSubmission(Construct):
    """Applies a Volcano Job through its submitter (module docstring).

    Args:
        cluster: the cluster (with a kubectl provider).
        namespace: the training namespace (the FSx claim's).
        job_name: the Volcano Job's name (its manifest's).
        digest: the digest of the job's spec: the construct ids of the ConfigMap and the submitter
            carry it, so a changed job is a new pair (a batch Job's pod template is immutable) and
            the old pair is deleted after it, with the old Volcano Job.
        job: the Volcano Job's manifest (may hold tokens: the image URI).
        image: the tools image URI (the submitter's).
        claim_name: the FSx claim, mounted read-only (the markers, the spend).
        waits: what must be there before the job is created, each bounded. Default ``()``.
        budget: the job's spend ceiling: a job at it is not created. Default None.
        depends_on: constructs applied first (Volcano's chart and queue, the claim, the images).
            Default ``()``.

    Attributes: submission (:class:`~trainium_job.submission.Submission`), job_name,
    submitter_name, config_map, rbac, manifest (the submitter Job's ``KubernetesManifest``).
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: AnyCluster,
        namespace: str,
        job_name: str,
        digest: str,
        job: Mapping[str, Any],
        image: str,
        claim_name: str,
        waits: Sequence[Wait] = (),
        budget: Budget | None = None,
        depends_on: Sequence[IConstruct] = (),
    ) -> None:
        super().__init__(scope, id)
        cluster = require_cluster(cluster)
        self.job_name = job_name
        self.submission = Submission(
            namespace=namespace,
            manifest_file=f"{MANIFEST_DIR}/{MANIFEST_KEY}",
            waits=tuple(waits),
            budget=budget,
        )
        config_map = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": job_name, "namespace": namespace},
            "data": {MANIFEST_KEY: Stack.of(self).to_json_string(dict(job))},
        }
        self.config_map = eks.KubernetesManifest(
            self, f"Manifest{digest}", cluster=cluster, manifest=[config_map]
        )
        self.rbac = eks.KubernetesManifest(self, "Rbac", cluster=cluster, manifest=submitter_rbac(namespace))
        submitter = submitter_job(
            job_name=job_name,
            namespace=namespace,
            image=image,
            claim_name=claim_name,
            submission=self.submission,
        )
        self.submitter_name = submitter["metadata"]["name"]
        self.manifest = eks.KubernetesManifest(
            self, f"Submitter{digest}", cluster=cluster, manifest=[submitter]
        )
        self.manifest.node.add_dependency(self.config_map, self.rbac)
        for dependency in depends_on:
            for applied in (self.config_map, self.rbac, self.manifest):
                applied.node.add_dependency(dependency)
