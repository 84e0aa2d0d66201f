"""The fabric check's pairs on a real slow link: three stand-in nodes, one process each in its own
network namespace on a bridge (the rehearsal's :class:`tests.rehearsal.cluster.Network`), the
third node's veth pair held to a low rate by a token bucket (``tc qdisc ... tbf``, in the user
namespace's own network stack: no root, no fault switch in the product). torchrun on each, gloo
between them: the pair measurements and the verdict must name the third node.

Each node also has its own host name (a UTS namespace) and an /etc/hosts line mapping it to its
address, as the rehearsal's pods do: torch's c10d rendezvous describes each agent by
``socket.getfqdn()`` (torch/distributed/elastic/rendezvous/dynamic_rendezvous.py,
``_NodeDescGenerator.generate``) and the workers reach rank 0's store by that name (api.py,
``RendezvousStoreInfo``). Sharing this machine's host name, every node gave the same name, which
resolves to nothing inside the namespaces, and ``init_process_group`` never completed."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from tests.rehearsal.cluster import Network, die_with_test, namespaces_available, pod_network_available
from tests.rehearsal.substitutions import POD_NETWORK
from tests.training.conftest import PYTHON, REPO, child_env
from tests.training.node.test_efa_exporter import fake_efa
from training.node.fabric_check import judge
from trainium_job.fabric_check_steps import EXIT_CODE

#: The slow node's rate each way: 1 MiB all-reduces between two workers move ~1 MiB each way, so
#: ~0.2 s each on its pairs, against milliseconds between the other two.
SLOW_RATE = "40mbit"
#: A floor between the two: gloo between namespaces on this machine reaches hundreds of MB/s; the
#: slow pairs 1 MiB / 0.2 s = 0.005 GB/s.
FLOOR_GBPS = 0.05
NODES = 3
SLOW = 2


def _why_not() -> str | None:
    return (
        namespaces_available()
        or pod_network_available()
        or (
            None
            if subprocess.run(["sh", "-c", "command -v tc"], capture_output=True).returncode == 0
            else "needs iproute2's tc"
        )
    )


#: A node's shell: its host name (``NODE_NAME``, in its UTS namespace), its own /etc/hosts and
#: resolv.conf (bind mounts in its mount namespace), "ready" once in its namespaces, then the
#: command when the test says go (its eth0 plugged in).
_NODE_SH = (
    'hostname "$NODE_NAME" && mount --bind "$HOSTS" /etc/hosts && mount --bind "$RESOLV" /etc/resolv.conf '
    '&& echo ready && read go && exec "$@"'
)


def _wait_ready(log: Path) -> None:
    deadline = time.monotonic() + 60
    while not log.read_text().startswith("ready\n"):
        assert time.monotonic() < deadline, "a node did not enter its network namespace"
        time.sleep(0.05)


@pytest.mark.skipif(bool(_why_not()), reason=str(_why_not()))
def test_given_three_nodes_one_behind_a_slow_link_then_the_pairs_name_that_node(tmp_path):
    sysfs = tmp_path / "infiniband"
    fake_efa(sysfs, "rdmap16s27", {"tx_bytes": 5, "rx_bytes": 5})
    network = Network()
    nodes: list[subprocess.Popen[str]] = []
    # The nodes' names in /etc/hosts and no name server: a reverse lookup of a peer's address
    # (gloo's, torch's store) answers at once instead of waiting on a DNS server it cannot reach.
    (tmp_path / "hosts").write_text(
        "127.0.0.1 localhost\n" + "".join(f"{POD_NETWORK}.{11 + i} node-{i}\n" for i in range(NODES))
    )
    (tmp_path / "resolv.conf").write_text("")
    logs = [tmp_path / f"node-{i}.log" for i in range(NODES)]
    try:
        for i in range(NODES):
            torchrun = [
                PYTHON, "-m", "torch.distributed.run", "--nnodes", str(NODES), "--nproc_per_node", "1",
                "--rdzv_backend", "c10d", "--rdzv_endpoint", "node-0:29400", "--rdzv_id", "fab",
                # As the job's script decides it (trainium_job/launch.py c10d_host_lines): the node
                # whose host name is the endpoint's serves the rendezvous, the others connect.
                "--rdzv_conf", f"is_host={int(i == 0)}",
                "-m", "training.node.fabric_check", "measure", "--result_file", str(tmp_path / f"node-{i}.json"),
                "--size_mib", "1", "--iters", "2", "--warmup", "1", "--pair_size_mib", "1", "--pair_iters", "2",
                "--sysfs", str(sysfs),
            ]  # fmt: skip
            nodes.append(
                subprocess.Popen(
                    # A network namespace of its own; it waits until its eth0 is plugged in.
                    [
                        *network.user(),
                        "unshare",
                        "--net",
                        "--mount",
                        "--uts",
                        "--",
                        "sh",
                        "-c",
                        _NODE_SH,
                        "node",
                        *torchrun,
                    ],
                    cwd=REPO,
                    env=child_env(
                        NODE_NAME=f"node-{i}",
                        GLOO_SOCKET_IFNAME="eth0",
                        FI_PROVIDER="efa",
                        HOSTS=str(tmp_path / "hosts"),
                        RESOLV=str(tmp_path / "resolv.conf"),
                    ),
                    stdin=subprocess.PIPE,
                    stdout=logs[i].open("w"),
                    stderr=subprocess.STDOUT,
                    text=True,
                    preexec_fn=die_with_test,
                )
            )
            _wait_ready(logs[i])  # in its network namespace
            network.plug(nodes[-1].pid, f"fab{i}", f"{POD_NETWORK}.{11 + i}")
        slow = nodes[SLOW].pid
        tbf = ["tbf", "rate", SLOW_RATE, "burst", "64kb", "latency", "1s"]
        inside = [*network.user(), "nsenter", f"--target={slow}", "--net", "--"]
        for command in (
            [*inside, "tc", "qdisc", "add", "dev", "eth0", "root", *tbf],  # what the slow node sends
            [*network.enter(), "tc", "qdisc", "add", "dev", f"fab{SLOW}", "root", *tbf],  # what it receives
        ):
            subprocess.run(command, check=True, capture_output=True, timeout=30)
        for node in nodes:
            assert node.stdin is not None
            node.stdin.write("go\n")
            node.stdin.close()
        deadline = time.monotonic() + 60
        while any(node.poll() is None for node in nodes):
            assert time.monotonic() < deadline, "nodes still running after 60 s:\n" + "\n".join(
                log.read_text()[-1500:] for log in logs
            )
            time.sleep(0.2)
    finally:
        for node in nodes:
            if node.poll() is None:
                node.kill()
        network.close()
    assert [node.poll() for node in nodes] == [0] * NODES, "\n".join(log.read_text()[-1500:] for log in logs)

    results = [json.loads((tmp_path / f"node-{i}.json").read_text()) for i in range(NODES)]
    names = [f"node-{i}" for i in range(NODES)]
    for result in results:
        assert sorted(result["nodes"]) == names  # torchrun numbers the nodes in its own order
        assert len(result["pairs"]) == 3 and "pairs_error" not in result
        assert result["pairs"] == results[0]["pairs"]  # every node holds the whole table
    speeds = {tuple(sorted(p["nodes"])): p["busbw_gbps"] for p in results[0]["pairs"]}
    assert (
        speeds[names[0], names[1]] >= FLOOR_GBPS > max(speeds[names[0], names[2]], speeds[names[1], names[2]])
    ), speeds

    for result in results:
        # The stand-in EFA counters do not move (the bytes went over the veth): give the verdict
        # what a node whose collectives ran on EFA counts, so it goes on to the bandwidth.
        on_efa = {**result, "efa_bytes": result["iters"] * result["size_bytes"]}
        v = judge(on_efa, min_busbw_gbps=FLOOR_GBPS, nodes=NODES, seconds=1)
        assert v.exit_code == EXIT_CODE, (v.line, speeds)  # the slow node holds back the whole ring
        assert v.named_nodes == ("node-2",) and v.slow_pairs == ()
        assert v.findings[0].startswith(
            "fabric check names node node-2: every pair with it is below 0.05 GB/s"
        )
