"""Which pod hosts the c10d store: decided by the worker script (``is_host``), not by torch's guess.

Given two torchrun agents that each believe they run in a pod (``socket.gethostname`` and their
own name's address replaced, as a Volcano pod's /etc/hosts gives them) whose addresses are not the
endpoint's: torch 2.13's guess (``_matches_machine_hostname``) then says "not me" on both, as it
does on EKS when rank 0's DNS record is not yet served, and no agent hosts the store. With the
pod program's decision (:func:`trainium_job.pod_program.program.rendezvous_env`) the pod named
like the endpoint hosts.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from trainium_job.launch import LaunchSpec, c10d_store_host, torchrun_args, without_conf
from trainium_job.pod_program.description import Rendezvous
from trainium_job.pod_program.program import rendezvous_env

pytest.importorskip("torch")

#: A torchrun agent in a pretend pod: its host name, and that name's address (not the endpoint's).
AGENT = textwrap.dedent("""
    import os, socket, sys
    name, address = os.environ["POD_HOSTNAME"], os.environ["POD_ADDRESS"]
    real = socket.getaddrinfo
    def getaddrinfo(host, *args, **kwargs):
        if host == name:
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, name + ".job.ns.svc.cluster.local", (address, 0))]
        return real(host, *args, **kwargs)
    socket.gethostname = lambda: name
    socket.getaddrinfo = getaddrinfo
    from torch.distributed.run import main
    main(sys.argv[1:])
""")
WORKER = textwrap.dedent("""
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    t = torch.ones(1)
    dist.all_reduce(t)
    print("sum", int(t.item()))
""")


#: What each worker prints once the gang met and all-reduced.
WORK_DONE = "sum 2"
#: How long the whole gang may take, and how long the agents may take to end once both workers
#: printed WORK_DONE before they count as hung in their teardown (see TEARDOWN_SIGNS).
GANG_TIMEOUT_S, TEARDOWN_GRACE_S = 180, 30


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_gang(tmp_path: Path, *, decide: bool) -> list[subprocess.CompletedProcess[str]]:
    (tmp_path / "agent.py").write_text(AGENT)
    (tmp_path / "worker.py").write_text(WORKER)
    host = socket.gethostname()  # resolvable here, not "localhost" (which torch always takes as its own)
    spec = LaunchSpec(
        nnodes=2,
        nproc_per_node=1,
        rdzv_endpoint=f"{host}:{free_port()}",
        rdzv_id="c10d-host",
        max_restarts=0,
        module="worker",
        rdzv_conf={"read_timeout": "10"},
        torchrun=f"{sys.executable} {tmp_path / 'agent.py'}",
    )
    store_host = c10d_store_host(spec)
    assert store_host is not None
    rendezvous = Rendezvous(host=store_host, conf=spec.rdzv_conf)
    argv = torchrun_args(without_conf(spec))
    # The workers' store address: the patched host name does not resolve (torch uses getfqdn()).
    at = argv.index("-m")
    argv[at:at] = ["--local_addr", host]
    argv[:1] = argv[0].split()  # the launcher is two words here
    pods = []
    for index in range(2):
        pod = host.split(".")[0] if index == 0 else "job-worker-1"
        decided = (
            rendezvous_env(rendezvous, pod)
            if decide
            else {"PET_RDZV_CONF": ",".join("=".join(kv) for kv in spec.rdzv_conf)}
        )
        env = {
            **os.environ,
            **decided,
            "HOSTNAME": pod,
            "POD_HOSTNAME": f"job-worker-{index}",
            "POD_ADDRESS": f"10.255.255.{index + 1}",
            "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
            "PYTHONPATH": str(tmp_path),
        }
        # Files, not pipes: the output is read while the agents still run (see TEARDOWN_GRACE_S).
        out, err = tmp_path / f"pod{index}.out", tmp_path / f"pod{index}.err"
        with out.open("w") as stdout, err.open("w") as stderr:
            process = subprocess.Popen(
                argv,
                env=env,
                cwd=tmp_path,
                text=True,
                stdout=stdout,
                stderr=stderr,
                start_new_session=True,  # its own process group: a failed test leaves no agent behind
            )
        pods.append((process, out, err))
    deadline = time.monotonic() + GANG_TIMEOUT_S
    try:
        while time.monotonic() < deadline and any(pod.poll() is None for pod, _, _ in pods):
            if all(WORK_DONE in out.read_text() for _, out, _ in pods):
                deadline = min(deadline, time.monotonic() + TEARDOWN_GRACE_S)
            time.sleep(0.5)
    finally:
        for pod, _, _ in pods:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pod.pid, signal.SIGKILL)
            pod.wait()
    # A pod still running at the deadline reads as return code None: killed, not ended.
    return [
        subprocess.CompletedProcess(
            pod.args, None if pod.returncode < 0 else pod.returncode, out.read_text(), err.read_text()
        )
        for pod, out, err in pods
    ]


#: What torch's agents print when they crash or fail in their teardown, after the workers have
#: succeeded (seen in 2 of 8 CI runs, never in isolation): the store host's agent aborts at exit
#: ("terminate called without an active exception": a C++ thread still joinable when destroyed)
#: and the other agent's rendezvous shutdown then fails (torch/distributed/elastic/agent/server/
#: api.py, the agent's ``_shutdown``), or an agent that never ends (return code None; seen once in
#: CI, stop 37, with the worker's "sum 2" printed). What this test checks is that the gang met; on a cluster
#: the Volcano Job would restart such a pod, and the trainer would find its run complete.
TEARDOWN_SIGNS = ("has failed to shutdown the rendezvous", "terminate called without an active exception")


def test_given_the_program_s_decision_then_the_pod_named_like_the_endpoint_hosts_and_the_gang_meets(tmp_path):
    pods = run_gang(tmp_path, decide=True)
    # The gang met: both workers joined the store's group and all-reduced (what is under test).
    assert all(WORK_DONE in p.stdout for p in pods), [p.stderr[-2000:] for p in pods]
    # And ended cleanly, but for the agents' teardown after the work was done.
    clean = [p.returncode in (0, None) or any(sign in p.stderr for sign in TEARDOWN_SIGNS) for p in pods]
    assert clean == [True, True], [(p.returncode, p.stderr[-1000:]) for p in pods]


def test_given_torch_s_guess_alone_then_no_pod_hosts_and_the_gang_fails(tmp_path):
    pods = run_gang(tmp_path, decide=False)
    assert [p.returncode for p in pods] == [1, 1]
    assert all("RendezvousConnectionError" in p.stderr for p in pods)


def test_given_the_decision_then_is_host_is_1_only_on_the_endpoint_s_pod_and_the_conf_keeps_its_settings():
    spec = LaunchSpec(
        nnodes=2, nproc_per_node=32, rdzv_endpoint="j-worker-0.j:29400", rdzv_conf={"join_timeout": "900"}
    )
    store_host = c10d_store_host(spec)
    assert store_host == "j-worker-0"
    rendezvous = Rendezvous(host=store_host, conf=spec.rdzv_conf)
    seen = {
        host: rendezvous_env(rendezvous, host)["PET_RDZV_CONF"]
        for host in ("j-worker-0", "j-worker-1", "j-worker-0.j.ns.svc.cluster.local", "j-worker-00")
    }
    assert seen == {
        "j-worker-0": "is_host=1,join_timeout=900",
        "j-worker-1": "is_host=0,join_timeout=900",
        "j-worker-0.j.ns.svc.cluster.local": "is_host=1,join_timeout=900",
        "j-worker-00": "is_host=0,join_timeout=900",
    }
    assert "--rdzv_conf" not in torchrun_args(without_conf(spec))
    etcd = LaunchSpec(nnodes=2, nproc_per_node=32, rdzv_endpoint="etcd:2379", rdzv_backend="etcd")
    assert c10d_store_host(etcd) is None and without_conf(etcd) == etcd
