"""Every container variable the stacks and the TorchX component set is one its consumer reads, at
the version the image pins, with a value it accepts; and the consumers get what they require."""

from __future__ import annotations

from tests.contracts.check import check_env, check_training_env
from tests.contracts.emitted import containers, environment, manifests, phase_environments, pod_specs


def _containers():
    for emitted in manifests():
        for pod in pod_specs(emitted.body):
            for container in containers(pod):
                yield emitted, pod, container


def test_given_every_configuration_and_the_torchx_pod_then_each_variable_has_a_consumer():
    problems = [
        f"{emitted.where} / {container['name']}: {problem}"
        for emitted, _, container in _containers()
        for problem in check_env(environment(container))
    ]
    assert problems == []


def test_given_the_training_pods_then_they_carry_what_efa_and_the_compile_cache_require():
    checked = 0
    problems = []
    for emitted, _, container in _containers():
        phases = phase_environments(container)
        if not phases:
            continue
        requests = container.get("resources", {}).get("limits", {})
        for phase, env in phases:
            problems += [
                f"{emitted.where} ({phase.name}): {p}"
                for p in check_training_env(
                    env, efa="vpc.amazonaws.com/efa" in requests, precompiles=phase.precompile is not None
                )
            ]
        checked += 1
    assert checked >= 7  # the Volcano Job of each configuration and TorchX's
    assert problems == []


def test_given_names_no_consumer_reads_then_the_check_names_each_with_its_reason():
    problems = check_env(
        {
            "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "64",
            "CCOM_SOCKET_IFNAME": "eth0",
            "FI_EFA_FORK_SAFE": "maybe",
            "FI_EFA_USE_HUGE_PAGE": "0",
            "NEURON_EXTRACT_GRAPHS_ONLY": "1",
            "NEURON_RT_MADE_UP": "1",
            "VC_WORKER_HOSTS": "a,b",
            "RANK": "0",
            "PYTHONUNBUFFERED": "1",
            "NEURON_CC_FLAGS": "--cache_dir=relative --optlevel=2",
        }
    )
    assert [p.split(":")[0] for p in problems] == [
        "CCOM_SOCKET_IFNAME",
        "FI_EFA_FORK_SAFE='maybe'",
        "NEURON_EXTRACT_GRAPHS_ONLY",
        "NEURON_RT_MADE_UP",
        "RANK",
        "TORCH_ELASTIC_SHUTDOWN_TIMEOUT",
        "VC_WORKER_HOSTS",
        "NEURON_CC_FLAGS",
        "NEURON_CC_FLAGS",
    ]
    assert "pytorch/pytorch#172596" in problems[5]


def test_given_huge_pages_switched_off_then_libfabric_reads_it():
    # FI_EFA_USE_HUGE_PAGE is libfabric's (efa_env.c): either choice about huge pages passes.
    assert check_env({"FI_EFA_USE_HUGE_PAGE": "0"}) == check_env({"FI_EFA_USE_HUGE_PAGE": "1"}) == []


def test_given_a_training_container_without_a_shared_cache_then_the_check_fails():
    assert check_training_env(
        {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1"}, efa=True, precompiles=True
    )
    assert check_training_env({"NEURON_CC_FLAGS": "--cache_dir=/data/c"}, efa=True, precompiles=True) != []
    assert check_training_env({"NEURON_COMPILE_CACHE_URL": "s3://b/c"}, efa=False, precompiles=True) == []
