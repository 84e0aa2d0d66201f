"""Volcano reads the Jobs and Queues the stacks apply (and the TorchX Job) as we mean them."""

from __future__ import annotations

from tests.contracts.check import check_policies, check_queue, check_volcano_job
from tests.contracts.emitted import description, manifests, pod_specs
from tests.contracts.volcano import POD_HOST_FORMAT, SVC_ARGUMENTS


def _of(kind: str, api_group: str):
    return [m for m in manifests() if m.body["kind"] == kind and m.body["apiVersion"].startswith(api_group)]


def test_given_every_volcano_job_then_its_plugins_arguments_and_policies_are_accepted():
    jobs = _of("Job", "batch.volcano.sh/")
    assert len(jobs) >= 7
    assert [f"{j.where}: {p}" for j in jobs for p in check_volcano_job(j.body)] == []


def test_given_every_queue_then_its_fields_and_resources_are_volcanos():
    queues = _of("Queue", "scheduling.volcano.sh/")
    assert len(queues) >= 6
    assert [f"{q.where}: {p}" for q in queues for p in check_queue(q.body)] == []


def test_given_a_job_then_the_rendezvous_endpoint_is_the_host_name_the_svc_plugin_gives_node_0():
    for emitted in _of("Job", "batch.volcano.sh/")[:-1]:  # the CDK jobs (TorchX's names its own task)
        job = emitted.body
        (task,) = job["spec"]["tasks"]
        host = POD_HOST_FORMAT.format(job=job["metadata"]["name"], task=task["name"], index=0)
        (pod,) = pod_specs({"spec": {"tasks": [task]}})
        described = description(pod["containers"][0])
        assert described is not None, emitted.where
        train = list(described.phases[0].train)
        if train[train.index("--rdzv_backend") + 1] == "c10d":
            assert train[train.index("--rdzv_endpoint") + 1].split(":")[0] == host, emitted.where


def test_given_wrong_names_then_the_volcano_checks_fail():
    job = {"spec": {"plugins": {"svc": ["--publish-not-ready-adresses"], "env": ["x"], "nccl": []}}}
    assert len(check_volcano_job(job)) == 3
    assert check_policies([{"event": "PodRunning", "action": "SyncJob"}]) == [
        "policy event 'PodRunning': the admission webhook refuses it",
        "policy action 'SyncJob': the admission webhook refuses it",
    ]
    assert check_queue({"spec": {"weight": 1, "capacity": {"cpu": "1"}}}) == [
        "Queue spec.capacity: not a field of QueueSpec"
    ]


def test_given_the_svc_plugin_then_either_network_policy_choice_is_an_accepted_argument():
    # The monitoring work may pass --disable-network-policy (the plugin's NetworkPolicy admits only
    # the job's own pods); both arguments are the plugin's.
    assert {"--publish-not-ready-addresses", "--disable-network-policy"} == SVC_ARGUMENTS.settable()
    job = {"spec": {"plugins": {"svc": ["--publish-not-ready-addresses", "--disable-network-policy"]}}}
    assert check_volcano_job(job) == []
