"""The rehearsal's "cluster": pods as process trees in their own namespaces, plugged into one
bridge, one folder as the FSx claim, a node per gang pod (its Neuron driver version and EFA
device in sysfs), and the stand-ins on every pod's PATH.

A pod is ``nsenter`` (into the cluster's user namespace) -> ``unshare`` (new network, mount, UTS
and PID namespaces; ``--kill-child`` so the pod ends with it) -> ``pod_root.sh`` (the pod's root
file system, read-only where its securityContext says so; once the harness has plugged its eth0
into the bridge, ``exec chroot ... setpriv ... env -i ... <container command>``, ``setpriv``
giving it the user, groups, capabilities and no_new_privs its securityContext resolves to): the
container command is the pod's PID 1, as under the kubelet. A pod's init containers run the same
way before it, each to its end, sharing the pod's folder (its volumes).
What differs from a cluster and why: :mod:`tests.rehearsal.substitutions`.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import os
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from tests.contracts.volcano import PLUGIN_ENV
from tests.rehearsal import efa, standins, torch_xla_standin
from tests.rehearsal.kube_api import SERVICE_ACCOUNT_DIR, KubeApi
from tests.rehearsal.manifests import (
    ImageFiles,
    PodSpec,
    Workload,
    config_map_env,
    copy_as_docker_would,
    deployed_config_maps,
    image,
    user_ids,
)
from tests.rehearsal.s3_standin import S3StandIn
from tests.rehearsal.substitutions import (
    CLUSTER_DOMAIN,
    EXTRA_ENV,
    ID_RANGE,
    NODE_NAME,
    OTHER_ADDRESS_BASE,
    POD_MTU,
    POD_NETWORK,
    SLEEP_SCALE,
    STACK_OUTPUT_STANDINS,
    SYSTEM_NODE_NAME,
    WEB_ADDRESS,
    WORKER_ADDRESS_BASE,
    rehearsed_command,
)
from tests.rehearsal.web_standin import WebStandIn
from tests.support import REPO
from trainium_job.submission import JOB_NAME_LABEL, JOB_UID_LABEL

POD_ROOT = Path(__file__).with_name("pod_root.sh")
#: Neuron tool outputs recorded for the deep node health check (their README says whose each is).
RECORDED_HEALTH = REPO / "tests" / "training" / "node" / "recorded" / "health"
#: The recorded nccom-test all-reduce the stand-in answers with, per instance type (the unit tests'
#: choice, tests/training/node/test_health_check.py ``NCCOM_PASS``).
#: What nccom-test prints on a node with a collective fault: a failed run of the Neuron docs.
FAILED_NCCOM_TEST = "nccom_test.failed.txt"
#: Where the deep check's pods find the ``torch_xla`` stand-in (below the state folder, which is
#: mounted at standins.MOUNT): first on their PYTHONPATH.
XLA_STANDIN = Path("python") / "torch_xla" / "__init__.py"
#: The web stand-in's certificate among the stand-ins' files (each pod's ``SSL_CERT_FILE``).
WEB_CERTIFICATE = "web-ca.crt"
RECORDED_NCCOM_TEST = {
    "trn1.2xlarge": "nccom_test.r2_allr.txt",
    "trn1.32xlarge": "nccom_test.r16_allr_show_algorithm.txt",
    "trn1n.32xlarge": "nccom_test.r16_allr_show_algorithm.txt",
    "trn2.48xlarge": "nccom_test.r64_N2_allr.txt",
}
#: Seconds an init container may take (a copy of a few hundred files).
INIT_TIMEOUT_S = 60
VENV_BIN = Path(sys.executable).parent
#: This machine's software a pod's image holds: the checkout (the Dockerfile's WORKDIR), the venv
#: and the Python installation the venv was made from (its python links there).
SOFTWARE = (REPO, Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve())
#: What the image's PATH holds besides the venv (the usual system folders).
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: The lines the kubelet writes at the top of every pod's /etc/hosts (kubelet_pods.go,
#: managedHostsHeader and the localhost entries of ensureHostsFile).
_KUBELET_HOSTS = (
    "# Kubernetes-managed hosts file.",
    "127.0.0.1\tlocalhost",
    "::1\tlocalhost ip6-localhost ip6-loopback",
    "fe00::0\tip6-localnet",
    "fe00::0\tip6-mcastprefix",
    "fe00::1\tip6-allnodes",
    "fe00::2\tip6-allrouters",
)
#: The bridge every pod's eth0 is plugged into, in the network namespace of :class:`Network`.
BRIDGE = "pods"
# Held by the network namespace's process: once the harness has written the user namespace's ID
# maps (a line on stdin), the bridge up with its address, "ready", then wait for stdin to close
# (the test's end, however it ends). The holder itself started before the maps were there, so
# without capabilities; the ip commands it starts after are root in the namespace, with them.
_NETWORK_HOLDER = f"""
import subprocess, sys
sys.stdin.readline()
for command in (
    "ip link set lo up",
    "ip link add name {BRIDGE} type bridge",
    "ip link set {BRIDGE} mtu {POD_MTU} up",
    "ip addr add {POD_NETWORK}.1/24 dev {BRIDGE}",
):
    subprocess.run(command.split(), check=True)
print("ready", flush=True)
sys.stdin.read()
"""


def die_with_test() -> None:
    """``preexec_fn``: SIGKILL the child when the test process dies, however it dies (prctl
    PR_SET_PDEATHSIG, kept across ``exec``); with ``unshare --kill-child`` a killed test run
    leaves no pod behind."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG


_PROBE = ("unshare", "--user", "--map-root-user", "--net", "--mount", "--uts", "--pid", "--fork")


def namespaces_available() -> str | None:
    """None when this machine can run the rehearsal's pods, else why not (one line)."""
    if sys.platform != "linux" or not all(shutil.which(t) for t in ("unshare", "nsenter", "chroot")):
        return "needs Linux with util-linux's unshare and nsenter and coreutils' chroot"
    done = subprocess.run([*_PROBE, "--", "true"], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        return f"unprivileged user namespaces unavailable here: {done.stderr.strip()[:200]}"
    return None


def pod_network_available() -> str | None:
    """None when this machine can also plug pods into a bridge (:class:`Network`), else why not."""
    if shutil.which("ip") is None:
        return "needs iproute2's ip"
    links = "ip link add name probe0 type bridge && ip link add name probe1 type veth peer name probe2"
    done = subprocess.run([*_PROBE, "--", "sh", "-c", links], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        return f"cannot make bridge and veth links in a network namespace here: {done.stderr.strip()[:200]}"
    return None


def container_exit_code(returncode: int) -> int:
    """A pod's exit code as Kubernetes reports it: 128 + the signal for a killed PID 1."""
    return returncode if returncode >= 0 else 128 - returncode


def _maps_ids(path: str, count: int) -> bool:
    """Whether the ID map at ``path`` (``/proc/self/uid_map``, ``gid_map``) gives IDs 0 to
    ``count - 1`` in one line."""
    for line in Path(path).read_text().splitlines():
        inside, _, length = (int(x) for x in line.split())
        if inside == 0 and length >= count:
            return True
    return False


def id_range_mappable() -> bool:
    """Whether this process may map :data:`ID_RANGE` IDs in a child user namespace: that takes
    CAP_SETUID and CAP_SETGID here and those IDs mapped here (user_namespaces(7), "Defining user
    and group ID mappings"). Without (an unprivileged user, and no newuidmap, which util-linux's
    ``--map-users`` needs), only the harness's own ID can be mapped: to root."""
    status = Path("/proc/self/status").read_text()
    (effective,) = (int(line.split()[1], 16) for line in status.splitlines() if line.startswith("CapEff:"))
    setgid_setuid = (1 << 6) | (1 << 7)  # CAP_SETGID, CAP_SETUID (linux/capability.h)
    return (
        effective & setgid_setuid == setgid_setuid
        and _maps_ids("/proc/self/uid_map", ID_RANGE)
        and _maps_ids("/proc/self/gid_map", ID_RANGE)
    )


class Network:
    """The rehearsal's user namespace, and in it the network namespace of the bridge that every
    pod's eth0 is plugged into (the test reaches the pods from there).

    ``ids``: how many IDs from 0 the user namespace maps (each to itself): :data:`ID_RANGE`, or 1
    (root, as the harness's own user) where this machine allows no more."""

    def __init__(self) -> None:
        self.ids = ID_RANGE if id_range_mappable() else 1
        self.proc = subprocess.Popen(
            [
                "unshare",
                "--user",
                *(["--map-root-user"] if self.ids == 1 else []),
                "--net",
                "--",
                sys.executable,
                "-I",
                "-c",
                _NETWORK_HOLDER,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
            preexec_fn=die_with_test,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            if self.ids > 1:
                self._map_ids()
            self.proc.stdin.write("mapped\n")
            self.proc.stdin.flush()
        except Exception:
            self.close()
            raise
        line = self.proc.stdout.readline().strip()
        if line != "ready":
            self.close()
            raise RuntimeError(f"the network namespace did not come up: {line!r}")

    def _map_ids(self) -> None:
        """Write the new user namespace's uid_map and gid_map from here, in the parent namespace:
        from inside, a namespace may map only the ID of its creator (user_namespaces(7))."""
        own = os.readlink("/proc/self/ns/user")
        deadline = time.monotonic() + 30
        while os.readlink(f"/proc/{self.proc.pid}/ns/user") == own:  # unshare has not unshared yet
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the rehearsal's user namespace did not come up")
            time.sleep(0.01)
        for name in ("uid_map", "gid_map"):
            Path(f"/proc/{self.proc.pid}/{name}").write_text(f"0 0 {ID_RANGE}\n")

    def enter(self) -> list[str]:
        """Command prefix that runs a program on the bridge's side (and in the user namespace)."""
        return ["nsenter", f"--target={self.proc.pid}", "--user", "--net", "--preserve-credentials", "--"]

    def user(self) -> list[str]:
        """Command prefix that runs a program in the rehearsal's user namespace (the pods' owner)."""
        return ["nsenter", f"--target={self.proc.pid}", "--user", "--preserve-credentials", "--"]

    def plug(self, pid: int, link: str, address: str) -> None:
        """The CNI's part: a veth pair, ``link`` on the bridge and ``eth0`` with ``address`` in the
        network namespace of process ``pid``; that namespace's loopback up."""
        inside = f"nsenter --target={pid} --net -- sh -c " + shlex.quote(
            f"ip addr add {address}/24 dev eth0 && ip link set eth0 up && ip link set lo up"
        )
        script = " && ".join(
            (
                f"ip link add name {link} mtu {POD_MTU} type veth peer name eth0 netns {pid}",
                f"ip link set {link} master {BRIDGE} up",
                inside,
            )
        )
        done = subprocess.run([*self.enter(), "sh", "-c", script], capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise RuntimeError(f"could not plug pod {pid} into the bridge: {done.stderr.strip()}")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def _children(pid: int) -> list[int]:
    """PIDs whose parent is ``pid`` (``/proc/<pid>/task/<pid>/children``, else a scan of /proc
    where the kernel lacks that file)."""
    try:
        return [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except FileNotFoundError:
        found = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:  # the field after the state: the parent's PID
                found.append(int(stat.parent.name))
        return found
    except OSError:
        return []


@dataclass
class Pod:
    """One started pod: its process, its log, and the Kubernetes-style controls."""

    name: str
    hostname: str
    address: str
    node: str
    proc: subprocess.Popen
    log: Path
    _log_file: IO[bytes] = field(repr=False)
    #: The whole ``unshare`` line and the container's folder (the pod's, with its volumes, for its
    #: main container), for a container restart.
    command: tuple[str, ...] = ()
    pod_dir: Path | None = None
    #: The container whose process this is (an init container's, where the pod failed in it).
    container: str = ""
    #: The pod's init containers that ran before this container, in order.
    inits: tuple[Pod, ...] = ()

    def pid1(self, timeout: float = 10) -> int:
        """The host PID of the pod's PID 1 (the child of ``unshare``)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = _children(self.proc.pid)
            if found:
                return found[0]
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        raise RuntimeError(f"pod {self.name}: no PID 1 found")

    def worker(self, module: str, local_rank: int) -> int:
        """The host PID of the process in this pod that runs ``python -m module`` with that
        ``LOCAL_RANK`` (torchrun's worker), found among the pod's processes."""
        pending, seen = [self.proc.pid], set()
        while pending:
            pid = pending.pop()
            if pid in seen:
                continue
            seen.add(pid)
            pending.extend(_children(pid))
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if module.encode() in argv and f"LOCAL_RANK={local_rank}".encode() in environ:
                return pid
        raise RuntimeError(f"pod {self.name}: no {module} worker of LOCAL_RANK {local_rank}")

    def terminate(self) -> None:
        """What the kubelet does first when a pod is deleted or evicted: SIGTERM to PID 1."""
        os.kill(self.pid1(), signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL to ``unshare``: its ``--kill-child`` takes PID 1, and with it the whole pod."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._log_file.close()

    def wait(self, timeout: float) -> int | None:
        """The pod's exit code, or None if it still runs after ``timeout`` seconds."""
        try:
            return container_exit_code(self.proc.wait(timeout=timeout))
        except subprocess.TimeoutExpired:
            return None

    @property
    def running(self) -> bool:
        return self.proc.poll() is None

    def output(self) -> str:
        return self.log.read_text(errors="replace")


#: Runs a command as PID 1 of a new PID namespace (and a user namespace that allows it); the
#: namespace, and everything in it, ends with ``unshare``.
PID1 = ("unshare", "--user", "--map-root-user", "--pid", "--kill-child=SIGKILL", "--")


def launch(
    command: list[str],
    log: Path,
    *,
    name: str,
    hostname: str,
    address: str = "",
    node: str = "",
    append: bool = False,
) -> Pod:
    """Start ``command`` (an ``unshare ... --kill-child`` line, e.g. :data:`PID1` + argv) as a pod,
    stdout and stderr to ``log`` (after what it holds with ``append``), in a session of its own."""
    log_file = open(log, "ab" if append else "wb")  # noqa: SIM115 - closed by Pod.kill
    proc = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=log_file,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=die_with_test,
    )
    return Pod(name, hostname, address, node, proc, log, log_file)


@dataclass(frozen=True)
class Node:
    """What a pod sees of its node: folders bound over /sys/module and /sys/class (both in the
    node's ``sys`` folder, which a hostPath volume of /sys mounts)."""

    name: str
    sys_module: Path  # holds neuron/version
    sys_class: Path  # holds infiniband/<the stand-in EFA device>
    efa_counters: Path  # the device's hw_counters folder

    @property
    def sys(self) -> Path:
        return self.sys_module.parent


class Cluster:
    """The pods of one :class:`~tests.rehearsal.manifests.Workload`, the FSx folder, the nodes of
    the gang (their Neuron driver version, their EFA devices) and the stand-ins.

    ``driver_version``: what each node's /sys/module/neuron/version holds (written at each gang
    pod's start); ``fabric.follow``: whether the nodes' EFA counters follow the pods' traffic;
    ``s3``: start the stand-in S3 (:attr:`s3`) for the model bucket, which the pods of a
    ServiceAccount with Pod Identity reach (:mod:`tests.rehearsal.substitutions`); ``web``: start
    the web stand-in (:attr:`web`) serving each of these ``https://`` URLs from its local file.
    """

    def __init__(
        self,
        root: Path,
        workload: Workload,
        *,
        s3_objects: Mapping[str, Path],
        dpkg_versions: Mapping[str, str],
        driver_version: str,
        s3: bool = False,
        web: Mapping[str, Path] | None = None,
    ) -> None:
        self.root = root
        self.workload = workload
        self.fsx = root / "fsx"
        self.state = root / "rehearsal"
        self.driver_version = driver_version
        self.pods: list[Pod] = []
        self._started = 0
        self._workdirs: dict[ImageFiles, Path] = {}
        self._job_uids: dict[str, str] = {}
        self.fsx.mkdir(parents=True)
        self._install_standins(s3_objects, dpkg_versions)
        self.fabric = efa.FabricCounters()
        self.network = Network()
        self.s3: S3StandIn | None = None
        self.web: WebStandIn | None = None
        try:
            if s3:
                self.s3 = S3StandIn(
                    root / "s3", self.network.enter(), f"{POD_NETWORK}.1", preexec_fn=die_with_test
                )
            if web:
                self.web = WebStandIn(
                    root / "web", self.network.enter(), WEB_ADDRESS, web, BRIDGE, preexec_fn=die_with_test
                )
                # OpenSSL's default verify file in every pod (substitutions: the web's stand-in).
                (self.state / WEB_CERTIFICATE).write_bytes(self.web.certificate())
        except Exception:
            self.close()
            raise

    def _install_standins(self, s3_objects: Mapping[str, Path], dpkg_versions: Mapping[str, str]) -> None:
        (self.state / "bin").mkdir(parents=True)
        shutil.copy(standins.__file__, self.state / "standins.py")
        objects = {}
        for url, path in s3_objects.items():
            shutil.copy(path, self.state / path.name)
            objects[url] = str(standins.MOUNT / path.name)
        recorded: dict[str, dict[str, str]] = {"neuron_ls": {}, "nccom_test": {}}
        for instance_type, nccom in RECORDED_NCCOM_TEST.items():
            for kind, path in (
                ("neuron_ls", RECORDED_HEALTH / f"neuron_ls.{instance_type}.json"),
                ("nccom_test", RECORDED_HEALTH / nccom),
            ):
                shutil.copy(path, self.state / path.name)
                recorded[kind][instance_type] = path.name
        xla = self.state / XLA_STANDIN
        xla.parent.mkdir(parents=True)
        shutil.copy(Path(torch_xla_standin.__file__), xla)
        shutil.copy(RECORDED_HEALTH / FAILED_NCCOM_TEST, self.state / FAILED_NCCOM_TEST)
        self._config: dict[str, Any] = {
            "s3_objects": objects,
            "sleep_scale": SLEEP_SCALE,
            "instance_type": self.workload.worker.instance_type,
            "dpkg_versions": dict(dpkg_versions),
            **recorded,
            # pod host name -> Neuron devices missing / the NeuronCore that computes wrong / the
            # recorded failed all-reduce its nccom-test prints
            "device_faults": {},
            "core_faults": {},
            "collective_faults": {},
            "hang_faults": {},  # pod host name -> its neuron-ls never answers
        }
        self._write_config()
        for tool in standins.TOOLS:
            script = self.state / "bin" / tool
            script.write_text(standins.wrapper(tool, sys.executable))
            script.chmod(0o755)

    def _write_config(self) -> None:
        path = self.state / standins.CONFIG
        path.with_suffix(".tmp").write_text(json.dumps(self._config))
        path.with_suffix(".tmp").replace(path)  # a stand-in never reads half a file

    def s3_failure(self, url: str, message: str | None) -> None:
        """``aws s3 cp`` of ``url`` fails with ``message`` (None: it works again)."""
        failures = self._config.setdefault("s3_failures", {})
        if message is None:
            failures.pop(url, None)
        else:
            failures[url] = message
        self._write_config()

    def device_fault(self, host: str, missing: int) -> None:
        """The pod with host name ``host`` sees ``missing`` Neuron devices fewer in ``neuron-ls``."""
        self._config["device_faults"][host] = missing
        self._write_config()

    def core_fault(self, host: str, core: int) -> None:
        """In the pod with host name ``host``, NeuronCore ``core`` computes wrong (its
        ``torch_xla`` stand-in: :mod:`tests.rehearsal.torch_xla_standin`)."""
        self._config["core_faults"][host] = core
        self._write_config()

    def hang_fault(self, host: str) -> None:
        """In the pod with host name ``host``, ``neuron-ls`` never answers (a hung driver)."""
        self._config["hang_faults"][host] = True
        self._write_config()

    def collective_fault(self, host: str) -> None:
        """In the pod with host name ``host``, ``nccom-test`` prints a failed run and exits 1."""
        self._config["collective_faults"][host] = FAILED_NCCOM_TEST
        self._write_config()

    # --- names, addresses, nodes ------------------------------------------------------------
    def worker_host(self, index: int) -> str:
        """The svc plugin's host name of gang pod ``index``: ``<job>-<task>-<index>``."""
        return f"{self.workload.job_name}-{self.workload.task}-{index}"

    def hosts_file(self, path: Path, own: tuple[str, str] | None) -> Path:
        """/etc/hosts of a pod: the kubelet's line for every gang pod (FQDN first, the
        ``<host>.<job>`` name the cluster DNS answers, the short name), and ``own`` (address,
        host name) for a pod outside the gang."""
        job, ns = self.workload.job_name, self.workload.namespace
        lines = list(_KUBELET_HOSTS)
        for i in range(self.workload.replicas):
            host = self.worker_host(i)
            address = f"{POD_NETWORK}.{WORKER_ADDRESS_BASE + i}"
            lines.append(f"{address}\t{host}.{job}.{ns}.svc.{CLUSTER_DOMAIN}\t{host}.{job}\t{host}")
        if own is not None:
            lines.append(f"{own[0]}\t{own[1]}")
        if self.web is not None:  # the cluster DNS's answer for the web's hosts (substitutions)
            lines += self.web.hosts_lines()
        path.write_text("\n".join(lines) + "\n")
        return path

    def node(self, index: int | str) -> Node:
        """Node ``index`` of the gang, or the node of that name (created on first use; it keeps
        its EFA counters)."""
        name = NODE_NAME.format(index) if isinstance(index, int) else index
        sys = self.root / "nodes" / name / "sys"
        node = Node(name, sys / "module", sys / "class", efa.make_device(sys / "class"))
        (node.sys_module / "neuron").mkdir(parents=True, exist_ok=True)
        return node

    # --- pods -------------------------------------------------------------------------------
    def start_worker(self, index: int, node: Node | None = None) -> Pod:
        """Gang pod ``index``, on its own node or on ``node``."""
        node = node or self.node(index)
        # Linux prints a module's version attribute as "%s\n" (kernel/params.c).
        (node.sys_module / "neuron" / "version").write_text(self.driver_version.strip() + "\n")
        address = f"{POD_NETWORK}.{WORKER_ADDRESS_BASE + index}"
        # The env plugin's variables (tests.contracts.volcano PLUGIN_ENV): the pod's task index.
        plugin_env = (
            {e.name: str(index) for e in PLUGIN_ENV.entries} if "env" in self.workload.plugins else {}
        )
        pod = self._start(self.workload.worker, self.worker_host(index), address, node=node, env=plugin_env)
        if pod.container == self.workload.worker.container:  # not a pod that failed in an init container
            self.fabric.watch(pod.pid1(), node.efa_counters)
        return pod

    def start_staging(self, spec: PodSpec | None = None, hostname: str = "stage-dataset") -> Pod:
        """The staging Job's pod (``spec``: another staging Job's, such as phase 2's)."""
        spec = spec or self.workload.staging
        if spec is None:
            raise ValueError("the template has no staging Job")
        return self._start(spec, hostname, self._other_address(), own=True)

    def start_tensorboard(self) -> Pod:
        if self.workload.tensorboard is None:
            raise ValueError("the template has no TensorBoard")
        return self._start(self.workload.tensorboard, "tensorboard", self._other_address(), own=True)

    def start_health_check(self, node: Node, api: KubeApi, extra_args: Sequence[str] = ()) -> Pod:
        """The node-health-check DaemonSet's pod on ``node``: the API server's address in its
        environment and the ServiceAccount's files at their path, as the kubelet gives them; the
        EC2 endpoint and AWS credentials of the stand-in (:mod:`tests.rehearsal.substitutions`).
        ``extra_args`` go after the container's command (a scene's own setting)."""
        spec = self.workload.health_check
        if spec is None:
            raise ValueError("the template has no node-health-check DaemonSet")
        spec = dataclasses.replace(spec, command=(*spec.command, *extra_args))
        hostname = f"node-health-check-{node.name}"
        account = api.service_account(self.root / "service-accounts" / hostname)
        return self._start(
            spec,
            hostname,
            self._other_address(),
            node=node,
            own=True,
            env={**api.env(), **api.aws_env(), "PYTHONPATH": self._with_xla_standin(spec, node)},
            service_account=account,
        )

    def _with_xla_standin(self, spec: PodSpec, node: Node) -> str:
        """The pod's PYTHONPATH with the ``torch_xla`` stand-in's folder first."""
        own = self.environment(spec, node.name)[1].get("PYTHONPATH")
        folder = str(standins.MOUNT / XLA_STANDIN.parent.parent)
        return folder if not own else f"{folder}:{own}"

    def job_uid(self, job_name: str) -> str:
        """The UID the batch Job ``job_name`` has in the rehearsal (one per name)."""
        return self._job_uids.setdefault(job_name, str(uuid.uuid4()))

    def start_submitter(self, api: KubeApi) -> Pod:
        """The job's submitter: the stand-in API server's address in its environment and the
        ServiceAccount's files at their path, as the kubelet gives them."""
        spec = self.workload.submitter
        if spec is None:
            raise ValueError("the template has no job submitter")
        hostname = "submit-job"
        account = api.service_account(self.root / "service-accounts" / f"{hostname}-{self._started}")
        return self._start(
            spec, hostname, self._other_address(), own=True, env=api.env(), service_account=account
        )

    def _other_address(self) -> str:
        return f"{POD_NETWORK}.{OTHER_ADDRESS_BASE + self._started}"

    def _image_files(self, spec: PodSpec) -> ImageFiles:
        found = self.workload.images.get(spec.container)
        if found is None:
            raise ValueError(f"pod {spec.container}: the rehearsal knows no image for this container")
        return found

    def _workdir(self, files: ImageFiles) -> Path:
        """The folder of the image's WORKDIR, its files laid out as its Dockerfile's COPYs put
        them (:func:`~tests.rehearsal.manifests.copy_as_docker_would`), made once per image."""
        if files not in self._workdirs:
            into = self.root / "images" / str(len(self._workdirs))
            into.mkdir(parents=True)
            assert files.context is not None
            self._workdirs[files] = copy_as_docker_would(files.dockerfile, files.context, into)
        return self._workdirs[files]

    def environment(self, spec: PodSpec, node: str) -> tuple[str, dict[str, str]]:
        """(working directory, environment) of a pod: its image's (the checkout as the WORKDIR of
        the library's images, the WORKDIR itself for an image with files of its own), the venv and
        the stand-ins on PATH, then the pod's own variables (the downward API's as the kubelet
        resolves them), then ``EXTRA_ENV``."""
        files = self._image_files(spec)
        built = image(files.dockerfile)
        workdir = built.workdir
        checkout = files.context is None

        def local(value: str) -> str:
            return value.replace(workdir, str(REPO)) if workdir and checkout else value

        fields = {"spec.nodeName": node}
        if spec.job_name is not None:  # a batch Job's pod: the Job controller's labels
            fields[f"metadata.labels['{JOB_NAME_LABEL}']"] = spec.job_name
            fields[f"metadata.labels['{JOB_UID_LABEL}']"] = self.job_uid(spec.job_name)
        unknown = sorted(set(spec.field_env.values()) - set(fields))
        if unknown:
            raise ValueError(f"pod {spec.container}: the rehearsal has no stand-in for the fields {unknown}")
        # EKS Pod Identity's part (tests.rehearsal.substitutions): the stand-in S3's credentials.
        identity = self.s3.env() if self.s3 and spec.service_account in self.workload.pod_identity else {}
        env = {
            "PATH": f"{standins.MOUNT / 'bin'}:{VENV_BIN}:{SYSTEM_PATH}",
            "HOME": "/root",
            **{k: local(v) for k, v in built.env.items()},
            **spec.env,
            **{name: fields[path] for name, path in spec.field_env.items()},
            **config_map_env(spec, self.workload, self.stack_outputs()),
            **identity,
            **({"SSL_CERT_FILE": str(standins.MOUNT / WEB_CERTIFICATE)} if self.web else {}),
            **EXTRA_ENV,
        }
        if not workdir:
            return "/", env
        return (str(REPO) if checkout else workdir), env

    def stack_outputs(self) -> dict[str, str]:
        """The stack outputs the pods may read (output name -> value): the stand-ins'
        (``STACK_OUTPUT_STANDINS``) in a cluster with the stand-in S3, else none."""
        return dict(STACK_OUTPUT_STANDINS) if self.s3 is not None else {}

    def _image(self, spec: PodSpec, own: Path, service_account: Path | None) -> list[str]:
        """pod_root.sh's ``private`` and ``image`` entries: the image's WORKDIR, for an image with
        files of its own (a copy per container in ``own``: what the container writes there is its
        own, as in its writable layer); and each folder of this machine shown as an empty folder
        (0755) holding only the image's software, bound read-only: one on the way to that software
        that other users may not traverse, and the nearest one holding a folder the image or a
        volume needs that this machine lacks (a mount point below one of this machine's folders
        would be made on its file system: pod_root.sh refuses that).

        A real image keeps its software where any user can run it (its Python in /usr/local or
        /opt, 0755): a container declared to run as a non-root user runs it there. This machine
        may not: the venv's python links into /root/.pyenv, and /root is 0700 (only root may
        pass), so a non-root pod could not even start python. The folder's other contents (the
        harness user's home and what is in it) are no part of the image, so no pod sees them."""
        files = self._image_files(spec)
        workdir = None if files.context is None else image(files.dockerfile).workdir
        if files.context is not None and not workdir:
            raise ValueError(
                f"pod {spec.container}: the rehearsal binds an image's files at its WORKDIR: none"
            )
        private: dict[Path, list[Path]] = {}
        for software in SOFTWARE:
            for folder in reversed(software.parents[:-1]):  # from the top-level folder down
                if not folder.stat().st_mode & stat.S_IXOTH:
                    private.setdefault(folder, [])
                    break
        # Folders the harness mounts afresh, and the volumes: what lies below them is theirs.
        fresh = [*(["/run"] if service_account is not None else []), *(m.path for m in spec.mounts)]
        for needed in [*([workdir] if workdir else []), *(m.path for m in spec.mounts)]:
            path = Path(needed)
            if path.exists() or any(path.is_relative_to(f) and str(path) != f for f in fresh):
                continue
            folder = next(parent for parent in path.parents if parent.exists())
            if folder != Path("/") and not any(folder.is_relative_to(p) for p in private):
                private.setdefault(folder, [])
        args: list[str] = []
        for folder in sorted(private, key=lambda f: len(f.parts)):
            if any(folder != p and folder.is_relative_to(p) for p in private):
                continue  # shown empty with the folder above it
            args += ["private", "-", str(folder), "-"]
            for software in SOFTWARE:
                if software.is_relative_to(folder):
                    args += ["image", str(software), str(software), "ro"]
        if workdir:
            copy = own / "image"
            shutil.copytree(self._workdir(files), copy)
            args += ["image", str(copy), workdir, "rw"]
        return args

    def _security(self, spec: PodSpec) -> list[str]:
        """The ``setpriv`` line before the container command: the user, groups, capabilities and
        no_new_privs the pod's securityContext resolves to (:class:`~tests.rehearsal.manifests.Security`),
        set as the runtime sets them before it runs the command.

        Capabilities: the container's set is its bounding set; a root process keeps all of it
        (effective and permitted), a non-root one none (the kernel clears them at its exec: no
        ambient or inheritable ones, which the runtime leaves empty), as on the node."""
        security = spec.security
        uid, gid = user_ids(security, image(self._image_files(spec).dockerfile))
        if security.run_as_non_root and uid == 0:
            # The kubelet's check: the container would not start (CreateContainerConfigError).
            raise ValueError(f"pod {spec.container}: runAsNonRoot, but its user resolves to root")
        groups = sorted({gid, *security.supplemental_groups})
        ids: list[str] = []
        if self.network.ids > 1:
            if max(uid, *groups) >= self.network.ids:
                raise ValueError(
                    f"pod {spec.container}: user {uid}, groups {groups}: the rehearsal maps IDs below "
                    f"{self.network.ids} only"
                )
            ids = [f"--reuid={uid}", f"--regid={gid}", f"--groups={','.join(map(str, groups))}"]
        # else: only root is mapped (an unprivileged harness); the pod runs as root
        # (tests.rehearsal.substitutions).
        bounding = ",".join(["-all", *(f"+{c.lower()}" for c in sorted(security.capabilities))])
        return [
            "/usr/bin/setpriv",
            *ids,
            f"--bounding-set={bounding}",
            "--inh-caps=-all",
            "--ambient-caps=-all",
            *(["--no-new-privs"] if security.no_new_privs else []),
            "--",
        ]

    def _mounts(
        self,
        spec: PodSpec,
        pod_dir: Path,
        own: Path,
        hosts: Path,
        node: Node | None,
        service_account: Path | None,
    ) -> list[str]:
        """pod_root.sh's volume entries of one container: the pod's volumes in ``pod_dir`` (one
        folder per emptyDir and configMap volume, whichever of the pod's containers mounts it), the
        container's own /tmp in ``own``."""
        args = ["bind", str(hosts), "/etc/hosts", "ro", "bind", str(self.state), str(standins.MOUNT), "rw"]
        if node is not None:
            args += ["bind", str(node.sys_module), "/sys/module", "ro"]
            args += ["bind", str(node.sys_class), "/sys/class", "ro"]
        if service_account is not None:
            # The container's own /run (the image's, empty), then the kubelet's projected volume
            # at /var/run/secrets/...: /var/run is a link to /run on this machine as in the image.
            if Path("/var/run").resolve() != Path("/run"):
                raise RuntimeError(
                    "the rehearsal mounts the ServiceAccount below /run: /var/run must link there"
                )
            args += ["tmpfs", "-", "/run", "rw"]
            args += [
                "bind",
                str(service_account),
                "/run" + SERVICE_ACCOUNT_DIR.removeprefix("/var/run"),
                "ro",
            ]
        shadowed: list[tuple[Path, str]] = []  # (pod folder, its mount path)
        for mount in spec.mounts:
            mode = "ro" if mount.read_only else "rw"
            if mount.kind == "claim":
                args += ["bind", str(self.fsx), mount.path, mode]
            elif mount.kind == "configMap":
                # The kubelet's projection of the ConfigMap: a file per key, read-only.
                folder = pod_dir / f"config-{mount.volume}"
                folder.mkdir(exist_ok=True)
                maps = deployed_config_maps(self.workload, self.stack_outputs())
                for key, value in maps[mount.config_map].items():
                    (folder / key).write_text(value)
                args += ["bind", str(folder), mount.path, "ro"]
            elif mount.kind == "hostPath":
                if mount.host_path != "/sys" or node is None:
                    raise ValueError(
                        f"hostPath {mount.host_path}: the rehearsal stands in for a node's /sys only"
                    )
                args += ["bind", str(node.sys), mount.path, mode]
            elif mount.memory:
                args += ["tmpfs", "-", mount.path, mode]
            else:
                folder = pod_dir / f"empty-{mount.volume}"
                folder.mkdir(exist_ok=True)
                # The kubelet makes an emptyDir writable for every user (0777, its empty_dir.go):
                # whatever user the container runs as may write there.
                folder.chmod(0o777)
                args += ["bind", str(folder), mount.path, mode]
                shadowed.append((folder, mount.path))
        if not any(m.path == "/tmp" for m in spec.mounts):  # the container's own /tmp
            folder = own / "tmp"
            folder.mkdir()
            folder.chmod(0o1777)
            # Part of the root file system: read-only with it.
            args += ["bind", str(folder), "/tmp", "ro" if spec.security.read_only_root else "rw"]
            shadowed.append((folder, "/tmp"))
        # A pod folder mounted over one that holds the image's software (say the checkout under
        # /tmp): bind that software again on top, as the image would still have it.
        for software in SOFTWARE:
            for folder, mount_path in shadowed:
                if software.is_relative_to(mount_path):
                    (folder / software.relative_to(mount_path)).mkdir(parents=True, exist_ok=True)
                    args += ["bind", str(software), str(software), "ro"]
        return args

    def _start(
        self,
        spec: PodSpec,
        hostname: str,
        address: str,
        *,
        node: Node | None = None,
        own: bool = False,
        env: Mapping[str, str] | None = None,
        service_account: Path | None = None,
    ) -> Pod:
        """The pod of ``spec``: its init containers, each to its end, then its container. A pod
        whose init container failed is that container's ended process: the pod's container never
        starts (restartPolicy Never), as the kubelet leaves it."""
        self._started += 1
        name = f"{self._started:02d}-{hostname}"
        pod_dir = self.root / "pods" / name
        pod_dir.mkdir(parents=True)
        hosts = self.hosts_file(pod_dir / "hosts", (address, hostname) if own else None)

        def container(of: PodSpec, own: Path, container_name: str, link: str) -> Pod:
            return self._container(
                of, pod_dir, own, container_name, hostname, address, link=link, node=node, hosts=hosts,
                env=env, service_account=service_account,
            )  # fmt: skip

        inits: list[Pod] = []
        for n, init in enumerate(spec.init_containers):
            if any(m.memory for m in init.mounts):
                raise ValueError(f"init container {init.container}: a memory emptyDir is not shared here")
            own_dir = pod_dir / "init" / init.container
            ended = container(init, own_dir, f"{name}-{init.container}", f"veth{self._started}i{n}")
            ended.inits = tuple(inits)
            code = ended.wait(INIT_TIMEOUT_S)
            if code is None:
                ended.kill()
                raise RuntimeError(f"init container {init.container} of {name} still runs: {ended.output()}")
            if code != 0:
                return ended
            inits.append(ended)
        pod = container(spec, pod_dir, name, f"veth{self._started}")
        pod.inits = tuple(inits)
        return pod

    def _container(
        self,
        spec: PodSpec,
        pod_dir: Path,
        own: Path,
        name: str,
        hostname: str,
        address: str,
        *,
        link: str,
        node: Node | None,
        hosts: Path,
        env: Mapping[str, str] | None,
        service_account: Path | None,
    ) -> Pod:
        """One container of the pod in ``pod_dir`` (its volumes), its own files (its root, its log,
        its /tmp) in ``own``, its network namespace plugged in at the pod's address as ``link``."""
        (own / "root").mkdir(parents=True)
        node_name = node.name if node is not None else SYSTEM_NODE_NAME
        workdir, pod_env = self.environment(spec, node_name)
        pod_env.update(env or {})
        plugged = own / "network-ready"
        command = [
            *self.network.user(),
            "unshare",
            "--net",
            "--mount",
            "--uts",
            "--pid",
            "--kill-child=SIGKILL",
            "--",
            "/bin/sh",
            str(POD_ROOT),
            str(own / "root"),
            hostname,
            str(plugged),
            "ro" if spec.security.read_only_root else "rw",
            *self._image(spec, own, service_account),
            *self._mounts(spec, pod_dir, own, hosts, node, service_account),
            "--",
            *self._security(spec),
            "/usr/bin/env",
            "-i",
            "-C",
            workdir,
            *(f"{k}={v}" for k, v in sorted(pod_env.items())),
            *rehearsed_command(spec.command),
        ]
        pod = launch(command, own / "log.txt", name=name, hostname=hostname, address=address, node=node_name)
        pod.command, pod.pod_dir, pod.container = tuple(command), own, spec.container
        self.pods.append(pod)
        try:
            self.network.plug(pod.pid1(), link, address)
        except Exception:
            pod.kill()
            raise
        plugged.touch()
        return pod

    def restart(self, pod: Pod) -> Pod:
        """The kubelet's restart of a pod's container that ended (``restartPolicy: Always``): the
        same command in the same pod folder, so the pod's emptyDir volumes hold what the ended
        container wrote there; its log goes on in the same file. The new container gets a network
        namespace of its own, plugged in at the pod's address again (the old one went with it)."""
        if pod.running or pod.pod_dir is None:
            raise ValueError(f"pod {pod.name}: only a started pod's ended container restarts")
        pod.kill()  # reaps it, closes its log
        plugged = pod.pod_dir / "network-ready"
        plugged.unlink(missing_ok=True)
        again = launch(
            list(pod.command), pod.log, name=pod.name, hostname=pod.hostname, address=pod.address,
            node=pod.node, append=True,
        )  # fmt: skip
        again.command, again.pod_dir, again.container = pod.command, pod.pod_dir, pod.container
        self.pods.append(again)
        self._started += 1
        try:
            self.network.plug(again.pid1(), f"veth{self._started}", pod.address)
        except Exception:
            again.kill()
            raise
        plugged.touch()
        return again

    def stop(self, pod: Pod, grace_period_s: float) -> int:
        """Pod deletion: SIGTERM to PID 1, SIGKILL after the grace period; the exit code."""
        if pod.running:
            pod.terminate()
        code = pod.wait(grace_period_s)
        if code is None:
            pod.kill()
            code = container_exit_code(pod.proc.returncode)
        return code

    # --- what the pods did --------------------------------------------------------------------
    def calls(self, tool: str | None = None) -> list[dict[str, Any]]:
        """The stand-ins' calls so far (optionally of one tool), oldest first."""
        path = self.state / standins.CALLS
        found = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
        return [c for c in found if tool is None or c["tool"] == tool]

    def http_get(self, url: str, timeout: float = 5) -> tuple[int, str]:
        """GET ``url`` from the bridge's side: (status or 0 when unreachable, body)."""
        code = (
            "import sys, urllib.request\n"
            "try:\n"
            f"    r = urllib.request.urlopen(sys.argv[1], timeout={timeout})\n"
            "except OSError as e:\n"
            "    print(0); print(e); sys.exit()\n"
            "print(r.status); sys.stdout.write(r.read().decode())\n"
        )
        done = subprocess.run(
            [*self.network.enter(), sys.executable, "-I", "-c", code, url],
            capture_output=True,
            text=True,
            timeout=timeout + 30,
        )
        status, _, body = done.stdout.partition("\n")
        return (int(status) if status.isdigit() else 0), body

    def close(self) -> None:
        """Kill every pod still running (each takes its whole PID namespace along), the counters'
        thread and the network."""
        for pod in self.pods:
            pod.kill()
        if self.s3 is not None:
            self.s3.close()
        if self.web is not None:
            self.web.close()
        self.fabric.close()
        self.network.close()
