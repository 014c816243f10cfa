"""The shell that runs a cluster: processes, pid files, ``cluster.json``, readiness over the wire.

A cluster directory (default ``./.rmq-cluster/<name>``) holds::

    cluster.json            topology, ports, per node: conf, log, command, pid, start time
    conf/<node>.properties  RocketMQ properties (deploy.render)
    store/<node>/           a broker's store root / a NameServer's kvConfig.json
    logs/<node>.log         the node's stdout and stderr
    run/<node>.pid          the node's pid

Every node runs in a session of its own (a Ctrl-C in the shell that ran ``up`` does not reach
it). A pid is signalled only when it is still the process we started: ``/proc/<pid>/stat``'s
start time equals the one recorded at spawn and its command line names the node's conf file.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Final

import attrs
import trio

from ..cluster.acl.local import local_admin, write_private
from ..cluster.home import DEFAULT_ROOT, STATE_FILE, cluster_home
from ..cluster.logging import LOG_FILE_ENV, LogRotation, rotate_files
from ..cluster.protocol.controller import (
    ControllerRequestCode,
    ReplicasInfo,
    decode_replicas_table,
    encode_broker_names,
)
from ..cluster.protocol.route import ClusterInfo, KVTable, TopicRouteData
from ..cluster.remoting.client_pool import RemotingClient, open_remoting_client
from ..cluster.remoting.codec import RemotingCommand
from ..cluster.remoting.codes import RequestCode, ResponseCode
from ..cluster.remoting.peer_auth import Handshake, peer_handshake
from . import render
from .topology import (
    KIND_BROKER,
    KIND_CONTROLLER,
    KIND_NAMESRV,
    METRICS_PORT_AUTO,
    ROLE_ASYNC_MASTER,
    ROLE_AUTO,
    ROLE_DLEDGER,
    ROLE_SLAVE,
    ROLE_SYNC_MASTER,
    NodeSpec,
    ProfileSpec,
    Topology,
    build_topology,
    plan_span,
)

#: Held (flock) by a command that changes the cluster: up, down, restart, promote.
LOCK_FILE: Final = ".lock"
STATE_VERSION: Final = 1
DEFAULT_NAME: Final = "default"
#: ``up``/``restart``: every node must be ready within this.
READY_TIMEOUT_S: Final = 30.0
#: Readiness probes are repeated this often until the deadline.
READY_POLL_INTERVAL_S: Final = 0.05
#: One readiness or status call may take this long.
PROBE_TIMEOUT_S: Final = 1.0
#: ``down``/``restart``: SIGTERM, then SIGKILL after this.
STOP_TIMEOUT_S: Final = 10.0
KILL_WAIT_S: Final = 5.0
EXIT_POLL_INTERVAL_S: Final = 0.02
LOG_TAIL_LINES: Final = 20
FOLLOW_POLL_INTERVAL_S: Final = 0.2
#: ``mqnamesrv``/``mqbroker`` (and ours) print this once serving and registered.
BOOT_MARKER: Final = b"boot success"
#: The line ``spawn`` writes to a node's log before starting it.
SPAWN_BANNER: Final = b"--- rmq-cluster: starting "


class SupervisorError(Exception):
    """A one-line reason a command failed (printed on stderr, exit status 1)."""


def default_dir(name: str = DEFAULT_NAME) -> Path:
    return cluster_home() / name


# =========================================================================== processes


def _read_stat(pid: int) -> tuple[str, int] | None:
    """``(state letter, start time in clock ticks)`` of ``pid``, None when there is none."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    # comm may hold spaces and parentheses: the fields after it start after the last ')'
    rest = raw[raw.rfind(")") + 2 :].split()
    try:
        return rest[0], int(rest[19])
    except (IndexError, ValueError):
        return None


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return []
    return [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]


def memory_bytes(pid: int) -> dict[str, int]:
    """VmRSS and its RssAnon / RssFile parts of ``pid`` from /proc/<pid>/status (bytes)."""
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("VmRSS", "RssAnon", "RssFile", "RssShmem"):
                    out[key] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return {}
    return out


def rss_bytes(pid: int) -> int | None:
    """VmRSS of ``pid`` from /proc/<pid>/status."""
    return memory_bytes(pid).get("VmRSS")


def _reap(pid: int) -> None:
    """Collect ``pid``'s exit status if it is our child (a no-op otherwise)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


# =========================================================================== state


@attrs.define
class NodeRecord:
    spec: NodeSpec
    conf: str
    log: str
    pid_file: str
    cmd: list[str]
    pid: int | None = None
    #: /proc/<pid>/stat start time (clock ticks since boot) recorded at spawn.
    start_time: int | None = None
    #: Size of the log when this process was started (its own output follows).
    log_offset: int = 0

    def booted(self) -> bool:
        """The process printed RocketMQ's boot line (``... boot success ...``) since spawn
        (in the log, or in ``<log>.1`` and the log when the node rotated it since)."""
        try:
            with open(self.log, "rb") as f:
                f.seek(self.log_offset)
                if f.read(len(SPAWN_BANNER)) == SPAWN_BANNER:  # not rotated since spawn
                    return BOOT_MARKER in f.read()
                f.seek(0)
                if BOOT_MARKER in f.read():
                    return True
            with open(f"{self.log}.1", "rb") as f:
                f.seek(self.log_offset)
                return BOOT_MARKER in f.read()
        except OSError:
            return False

    @property
    def name(self) -> str:
        return self.spec.name

    def is_ours(self) -> bool:
        """``pid`` is still the process we started (not a reused pid)."""
        if self.pid is None:
            return False
        stat = _read_stat(self.pid)
        if stat is None:
            return False
        if self.start_time is not None and stat[1] != self.start_time:
            return False
        cmdline = _cmdline(self.pid)
        if not cmdline and self.start_time is not None:
            # exec is still setting up the new image (Popen returns once the close-on-exec
            # pipe closes, a moment before the argument pages are in place): the start time
            # already proves it is the process we spawned
            return True
        return self.conf in cmdline

    def state(self) -> str:
        """``running``, ``paused`` (SIGSTOP) or ``dead`` (gone, a zombie, or not ours)."""
        if self.pid is None:
            return "dead"
        _reap(self.pid)
        stat = _read_stat(self.pid)
        if stat is None or stat[0] in ("Z", "X", "x") or not self.is_ours():
            return "dead"
        if stat[0] in ("T", "t"):
            return "paused"
        return "running"

    @property
    def alive(self) -> bool:
        return self.state() != "dead"

    def signal(self, signum: int) -> bool:
        """Send ``signum`` if the process is still ours and not a zombie; True when sent."""
        if self.pid is None or not self.alive:
            return False
        try:
            os.kill(self.pid, signum)
        except ProcessLookupError:
            return False
        return True

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.spec.name,
            "conf": self.conf,
            "log": self.log,
            "pid_file": self.pid_file,
            "cmd": self.cmd,
            "pid": self.pid,
            "start_time": self.start_time,
            "log_offset": self.log_offset,
        }


@attrs.define
class ClusterState:
    name: str
    dir: Path
    topology: Topology
    nodes: dict[str, NodeRecord]
    created_ms: int = attrs.field(factory=lambda: int(time.time() * 1000))

    @property
    def profile(self) -> str:
        return self.topology.profile

    @property
    def path(self) -> Path:
        return self.dir / STATE_FILE

    def node(self, name: str) -> NodeRecord:
        rec = self.nodes.get(name)
        if rec is None:
            known = ", ".join(self.nodes)
            raise SupervisorError(f"no node {name!r} in cluster {self.name} (nodes: {known})")
        return rec

    def records(self, kind: str | None = None) -> list[NodeRecord]:
        return [r for r in self.nodes.values() if kind is None or r.spec.kind == kind]

    def to_json(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "name": self.name,
            "dir": str(self.dir),
            "created_ms": self.created_ms,
            "profile": self.profile,
            "namesrv_addr": self.topology.namesrv_addr,
            "topology": self.topology.to_json(),
            "nodes": [r.to_json() for r in self.nodes.values()],
        }

    def save(self) -> None:
        # owner-only: the topology's broker properties hold aclSecretKey under ``up --acl``
        write_private(self.path, json.dumps(self.to_json(), indent=2) + "\n", durable=False)

    @classmethod
    def load(cls, directory: Path) -> ClusterState:
        path = directory / STATE_FILE
        try:
            obj = json.loads(path.read_text())
        except FileNotFoundError:
            raise SupervisorError(
                f"no cluster in {directory} (no {STATE_FILE}); start one with rmq-cluster up"
            ) from None
        except (OSError, ValueError) as exc:
            raise SupervisorError(f"cannot read {path}: {exc}") from exc
        try:
            topo = Topology.from_json(obj["topology"])
            specs = {n.name: n for n in topo.nodes}
            nodes = {}
            for n in obj["nodes"]:
                nodes[n["name"]] = NodeRecord(
                    spec=specs[n["name"]],
                    conf=n["conf"],
                    log=n["log"],
                    pid_file=n["pid_file"],
                    cmd=list(n["cmd"]),
                    pid=n.get("pid"),
                    start_time=n.get("start_time"),
                    log_offset=int(n.get("log_offset", 0)),
                )
            return cls(
                name=obj["name"],
                dir=directory,
                topology=topo,
                nodes=nodes,
                created_ms=int(obj.get("created_ms", 0)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise SupervisorError(f"{path} is not a cluster state file: {exc!r}") from exc


@contextlib.contextmanager
def locked(directory: Path) -> Iterator[None]:
    """Hold the cluster directory's lock, or fail at once naming it (two ``up``s racing on one
    directory would each spawn nodes and overwrite the other's pids)."""
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SupervisorError(
                f"another rmq-cluster command is changing the cluster in {directory}; "
                "try again when it is done"
            ) from None
        yield
    finally:
        os.close(fd)


def load_state(directory: Path) -> ClusterState:
    return ClusterState.load(directory)


def new_cluster_secret() -> str:
    """A fresh ``clusterSecret`` (256 random bits, URL-safe text)."""
    return secrets.token_urlsafe(32)


def new_state(name: str, directory: Path, topo: Topology, python: str) -> ClusterState:
    directory = directory.resolve()
    nodes = {}
    for spec in topo.nodes:
        conf = str(directory / "conf" / f"{spec.name}.properties")
        nodes[spec.name] = NodeRecord(
            spec=spec,
            conf=conf,
            log=str(directory / "logs" / f"{spec.name}.log"),
            pid_file=str(directory / "run" / f"{spec.name}.pid"),
            cmd=render.python_command(spec, topo, conf, python),
        )
    return ClusterState(name=name, dir=directory, topology=topo, nodes=nodes)


def write_files(state: ClusterState) -> None:
    d = state.dir
    for sub in ("conf", "logs", "run", "store"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    for spec in state.topology.nodes:
        (d / "store" / spec.name).mkdir(parents=True, exist_ok=True)
    for rel, text in render.local_files(state.topology, str(d)).items():
        # created owner-only (a broker's may hold aclSecretKey), never widened by a chmod
        write_private(d / rel, text, mode=render.file_mode(rel), durable=False)
    state.save()


# =========================================================================== ports


def busy_ports(topo: Topology, host: str = "127.0.0.1") -> list[tuple[int, str]]:
    """``(port, "node portName")`` of every planned port something else is bound to."""
    busy = []
    for port, what in topo.ports():
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            # the nodes set SO_REUSEADDR too: a port in TIME_WAIT is not busy for them
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, port))
            except OSError as exc:
                if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                    busy.append((port, what))
                else:
                    raise
    return busy


def check_ports(topo: Topology) -> None:
    hosts = {n.host for n in topo.nodes}
    # one host (``up --bind ADDR``: ADDR) is probed there; anything else on loopback
    busy = busy_ports(topo, hosts.pop()) if len(hosts) == 1 else busy_ports(topo)
    if busy:
        port, what = busy[0]
        more = f" (and {len(busy) - 1} more)" if len(busy) > 1 else ""
        raise SupervisorError(
            f"port {port} ({what}) is already in use{more}; "
            "stop what holds it or pick another --base-port"
        )


#: Where test clusters are planned when the kernel's ephemeral range cannot be read.
TEST_PORT_LOW: Final = 11000
TEST_PORT_HIGH: Final = 32000
#: ``LOW-HIGH`` narrows that range (the pytest plugin's setting of the same name, see
#: deploy/testing.py); a parallel test run gives each worker its own slice (tests/conftest.py).
TEST_PORTS_ENV: Final = "RMQ_CLUSTER_TEST_PORTS"


def ports_for_tests() -> tuple[int, int]:
    """``(low, high)`` test clusters are planned in: ``$RMQ_CLUSTER_TEST_PORTS`` when it holds
    a range (the plugin reports a malformed one), else the whole default range."""
    low, _, high = os.environ.get(TEST_PORTS_ENV, "").partition("-")
    if low.strip().isdigit() and high.strip().isdigit():
        lo, hi = int(low), int(high)
        if 1024 < lo < hi <= 65535:
            return lo, hi
    return TEST_PORT_LOW, TEST_PORT_HIGH


def _ephemeral_range() -> tuple[int, int]:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = (int(x) for x in f.read().split())
        return lo, hi
    except (OSError, ValueError):
        return 32768, 60999


def free_base_port(
    spec: ProfileSpec, *, low: int | None = None, high: int | None = None
) -> int:
    """A random base port whose whole plan is free right now and lies outside the kernel's
    ephemeral port range (so an outgoing connection cannot take a planned port before the
    node binds it), within ``low``-``high`` (default: ``ports_for_tests()``); the /metrics
    ports of ``up --metrics`` are probed too, whether or not ``spec`` asks for them. For
    tests and benchmarks."""
    import random

    if low is None or high is None:
        low, high = ports_for_tests()
    spec = attrs.evolve(
        spec,
        broker_properties={**spec.broker_properties, "metricsPort": METRICS_PORT_AUTO},
        namesrv_properties={**spec.namesrv_properties, "metricsPort": METRICS_PORT_AUTO},
    )
    span = plan_span(spec)
    eph_lo, eph_hi = _ephemeral_range()
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(low, high - span)
        if base <= eph_hi and base + span >= eph_lo:
            continue
        topo = build_topology(spec, base_port=base)
        if not busy_ports(topo):
            return base
    raise SupervisorError("no free port range found for a test cluster")


# =========================================================================== spawning


def _child_env(log: str | None = None) -> dict[str, str]:
    """The environment of a node: this one, with unbuffered output (nodes import the installed
    ``rmq_cluster``, whatever the current directory holds) and, given its ``log``, that file
    named for the node to rotate (cluster/logging.py; $RMQ_CLUSTER_LOG_MAX_BYTES and
    $RMQ_CLUSTER_LOG_BACKUPS pass through)."""
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    if log is not None:
        env[LOG_FILE_ENV] = log
    return env


def _rotate_before_spawn(log: str) -> None:
    """A log already at its rotation size is rotated before a node appends to it (the node
    itself rotates what it writes); bad rotation settings are a one-line error."""
    try:
        rotation = LogRotation.from_env({**os.environ, LOG_FILE_ENV: log})
    except ValueError as exc:
        raise SupervisorError(str(exc)) from None
    assert rotation is not None
    try:
        if os.path.getsize(log) >= rotation.max_bytes:
            rotate_files(log, rotation.backups)
    except FileNotFoundError:
        pass


#: Popen objects of nodes this process started (kept so they are reaped, never collected early).
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def spawn(state: ClusterState, rec: NodeRecord) -> None:
    """Start ``rec``'s process in its own session, output appended to its log; record its pid."""
    Path(rec.log).parent.mkdir(parents=True, exist_ok=True)
    _rotate_before_spawn(rec.log)
    with open(rec.log, "ab") as log:
        rec.log_offset = log.tell()
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        banner = f"{rec.name} at {stamp}: {' '.join(rec.cmd)}\n"
        log.write(SPAWN_BANNER + banner.encode())
        log.flush()
        proc = subprocess.Popen(
            rec.cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=str(state.dir),
            env=_child_env(rec.log),
            start_new_session=True,
            close_fds=True,
        )
    _CHILDREN[proc.pid] = proc
    rec.pid = proc.pid
    stat = _read_stat(proc.pid)
    rec.start_time = stat[1] if stat else None
    Path(rec.pid_file).parent.mkdir(parents=True, exist_ok=True)
    Path(rec.pid_file).write_text(f"{proc.pid}\n")
    state.save()


def _forget(state: ClusterState, rec: NodeRecord) -> None:
    if rec.pid is not None:
        proc = _CHILDREN.pop(rec.pid, None)
        if proc is not None:
            proc.poll()
    rec.pid = None
    rec.start_time = None
    with contextlib.suppress(FileNotFoundError):
        Path(rec.pid_file).unlink()


def stop_nodes(
    state: ClusterState,
    records: Iterable[NodeRecord],
    *,
    timeout: float = STOP_TIMEOUT_S,
    signum: int = signal.SIGTERM,
) -> list[str]:
    """SIGTERM (and SIGCONT, for paused ones) ``records``, SIGKILL what is left after
    ``timeout``; forget their pids. Returns the names that needed SIGKILL."""
    records = list(records)
    for rec in records:
        if rec.signal(signum):
            rec.signal(signal.SIGCONT)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(r.alive for r in records):
        time.sleep(EXIT_POLL_INTERVAL_S)
    killed = []
    for rec in records:
        if rec.signal(signal.SIGKILL):
            killed.append(rec.name)
    deadline = time.monotonic() + KILL_WAIT_S
    while time.monotonic() < deadline and any(r.alive for r in records):
        time.sleep(EXIT_POLL_INTERVAL_S)
    for rec in records:
        if not rec.alive:
            _forget(state, rec)
    state.save()
    return killed


def stray_pids(state: ClusterState) -> list[int]:
    """Live processes running one of this cluster's conf files whose pid the state does not
    hold (an ``up`` killed between spawning a node and saving its pid, say)."""
    confs = {r.conf for r in state.records()}
    known = {r.pid for r in state.records() if r.pid is not None}
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in known or int(entry) == os.getpid():
            continue
        args = _cmdline(int(entry))
        stat = _read_stat(int(entry))
        if args and confs.intersection(args) and stat is not None and stat[0] not in "ZXx":
            found.append(int(entry))
    return found


def stop_strays(state: ClusterState, *, timeout: float = STOP_TIMEOUT_S) -> list[int]:
    """SIGTERM, then SIGKILL after ``timeout``, every stray of this cluster; their pids."""
    strays = stray_pids(state)
    for pid in strays:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
            os.kill(pid, signal.SIGCONT)
    deadline = time.monotonic() + timeout
    while strays and time.monotonic() < deadline and stray_pids(state):
        time.sleep(EXIT_POLL_INTERVAL_S)
    for pid in stray_pids(state):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return strays


def log_tail(path: str, lines: int = LOG_TAIL_LINES) -> list[str]:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            data = f.read()
    except OSError:
        return []
    return data.decode("utf-8", "replace").splitlines()[-lines:]


# =========================================================================== readiness


class NodeFailed(Exception):
    def __init__(self, node: str, reason: str) -> None:
        super().__init__(f"{node}: {reason}")
        self.node = node
        self.reason = reason


def _acl_hook(state: ClusterState) -> Callable[[RemotingCommand], RemotingCommand] | None:
    """Sign probes with the cluster's admin account when it runs with ACL (``up --acl``)."""
    creds = local_admin(state.dir)
    return creds.sign if creds is not None else None


def controller_handshake(state: ClusterState) -> Handshake | None:
    """Prove the cluster's ``clusterSecret`` to its controllers: their ports answer nobody
    else (None for a cluster without one)."""
    secret = state.topology.cluster_secret
    return peer_handshake(secret) if secret else None


async def _call(
    client: RemotingClient, addr: str, code: int, ext: dict[str, str] | None = None
) -> RemotingCommand | None:
    try:
        return await client.invoke(addr, RemotingCommand.request(code, ext or {}), PROBE_TIMEOUT_S)
    except Exception:  # not listening yet, reset, timeout: all mean "not ready"
        return None


async def namesrv_ready(client: RemotingClient, rec: NodeRecord) -> bool:
    resp = await _call(client, rec.spec.addr, RequestCode.GET_BROKER_CLUSTER_INFO)
    return resp is not None and resp.code == ResponseCode.SUCCESS


async def controller_ready(client: RemotingClient, rec: NodeRecord) -> bool:
    """A controller answers CONTROLLER_GET_METADATA_INFO (it is up, leader or not)."""
    resp = await _call(client, rec.spec.addr, ControllerRequestCode.CONTROLLER_GET_METADATA_INFO)
    return resp is not None and resp.code == ResponseCode.SUCCESS


async def controller_sync_state(
    client: RemotingClient, topo: Topology
) -> dict[str, ReplicasInfo]:
    """Every controller-mode group's replicas (master, epoch, SyncStateSet) from the controller
    leader; {} when no controller answers as leader."""
    names = encode_broker_names(topo.groups)
    for ctl in topo.controllers:
        try:
            resp = await client.invoke(ctl.addr, RemotingCommand.request(
                ControllerRequestCode.CONTROLLER_GET_SYNC_STATE_DATA, {}, names), PROBE_TIMEOUT_S)
        except Exception:  # not listening, reset, timeout: ask the next one
            continue
        if resp.code == ResponseCode.SUCCESS:
            try:
                return decode_replicas_table(resp.body)
            except ValueError:
                return {}
    return {}


async def broker_registered(client: RemotingClient, topo: Topology, spec: NodeSpec) -> bool:
    """The broker answers, every NameServer lists it in its cluster and routes its brokerName
    topic to it (a restarted broker answering means it registered again at boot)."""
    group = spec.group or spec.name
    own = await _call(client, spec.addr, RequestCode.GET_BROKER_RUNTIME_INFO)
    if own is None or own.code != ResponseCode.SUCCESS:
        return False
    for ns in topo.namesrvs:
        resp = await _call(client, ns.addr, RequestCode.GET_BROKER_CLUSTER_INFO)
        if resp is None or resp.code != ResponseCode.SUCCESS:
            return False
        info = ClusterInfo.decode(resp.body)
        data = info.broker_addr_table.get(group)
        if data is None or spec.addr not in data.broker_addrs.values():
            return False
        route = await _call(client, ns.addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": group})
        if route is None or route.code != ResponseCode.SUCCESS:
            return False
        routed = TopicRouteData.decode(route.body)
        if not any(spec.addr in b.broker_addrs.values() for b in routed.broker_datas):
            return False
    if spec.role == ROLE_SLAVE:
        # a slave is ready once its HA client is connected to the master (a SYNC_MASTER's
        # sends wait for it); brokers that do not report HA state are not held back
        kv = _kv(own)
        if kv is not None and kv.get("haClientConnected", "true") != "true":
            return False
    return True


def _kv(resp: RemotingCommand) -> dict[str, str] | None:
    try:
        return dict(KVTable.decode(resp.body).table)
    except Exception:
        return None


async def wait_ready(
    state: ClusterState, records: Sequence[NodeRecord], *, timeout: float = READY_TIMEOUT_S
) -> None:
    """Poll until every record is ready; raise NodeFailed naming the first one that died or
    is still not ready at the deadline."""
    pending = list(records)
    # a DLedger group is ready when it has elected a leader (registered as brokerId 0)
    leaderless = sorted(
        {r.spec.group for r in records
         if r.spec.role in (ROLE_DLEDGER, ROLE_AUTO) and r.spec.group}
    )
    deadline = trio.current_time() + timeout
    async with open_remoting_client(node="rmq-cluster", rpc_hook=_acl_hook(state)) as client, \
            open_remoting_client(node="rmq-cluster-controllers",
                                 handshake=controller_handshake(state)) as controllers:
        while pending or leaderless:
            for rec in list(pending):
                if not rec.alive:
                    raise NodeFailed(rec.name, "exited during startup")
                if not rec.booted():
                    continue
                if rec.spec.kind == KIND_NAMESRV:
                    ok = await namesrv_ready(client, rec)
                elif rec.spec.kind == KIND_CONTROLLER:
                    ok = await controller_ready(controllers, rec)
                else:
                    ok = await broker_registered(client, state.topology, rec.spec)
                if ok:
                    pending.remove(rec)
            if not pending:
                for group in list(leaderless):
                    if await group_has_leader(client, state.topology, group):
                        leaderless.remove(group)
            if not pending and not leaderless:
                return
            if trio.current_time() >= deadline:
                if pending:
                    rec = pending[0]
                    what = (
                        "answer" if rec.spec.kind == KIND_NAMESRV else "register and be routable"
                    )
                    raise NodeFailed(rec.name, f"did not {what} within {timeout:g} s")
                first = state.topology.group_members(leaderless[0])[0].name
                raise NodeFailed(
                    first, f"group {leaderless[0]} elected no leader within {timeout:g} s"
                )
            await trio.sleep(READY_POLL_INTERVAL_S)


async def group_has_leader(client: RemotingClient, topo: Topology, group: str) -> bool:
    """Every NameServer lists a master (brokerId 0) for ``group``."""
    for ns in topo.namesrvs:
        resp = await _call(client, ns.addr, RequestCode.GET_BROKER_CLUSTER_INFO)
        if resp is None or resp.code != ResponseCode.SUCCESS:
            return False
        data = ClusterInfo.decode(resp.body).broker_addr_table.get(group)
        if data is None or 0 not in data.broker_addrs:
            return False
    return True


# =========================================================================== status


async def _runtime_info(client: RemotingClient, addr: str) -> dict[str, str] | None:
    resp = await _call(client, addr, RequestCode.GET_BROKER_RUNTIME_INFO)
    if resp is None or resp.code != ResponseCode.SUCCESS:
        return None
    return _kv(resp)


def _int_or_none(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


async def gather_status(state: ClusterState) -> dict[str, Any]:
    """The ``status --json`` object (one call per running broker, concurrently)."""
    topo = state.topology
    states = {r.name: r.state() for r in state.records()}
    infos: dict[str, dict[str, str] | None] = {}

    async def one(client: RemotingClient, rec: NodeRecord) -> None:
        infos[rec.name] = await _runtime_info(client, rec.spec.addr)

    hook = _acl_hook(state)
    replicas: dict[str, ReplicasInfo] = {}
    controller_roles: dict[str, str] = {}
    async with open_remoting_client(node="rmq-cluster-status", rpc_hook=hook) as client, \
            open_remoting_client(node="rmq-cluster-status-controllers",
                                 handshake=controller_handshake(state)) as controllers, \
            trio.open_nursery() as n:
        for rec in state.records(KIND_BROKER):
            if states[rec.name] == "running":
                n.start_soon(one, client, rec)
        if topo.controllers:
            replicas = await controller_sync_state(controllers, topo)
            controller_roles = await _controller_roles(controllers, state, states)
    nodes = [
        _node_status(rec, states[rec.name], infos, topo, replicas, controller_roles)
        for rec in state.records()
    ]
    return {
        "name": state.name,
        "profile": state.profile,
        "dir": str(state.dir),
        "namesrv_addr": topo.namesrv_addr,
        "nodes": nodes,
    }


async def _controller_roles(
    controllers: RemotingClient, state: ClusterState, states: dict[str, str]
) -> dict[str, str]:
    """Each running controller's role (LEADER or FOLLOWER), by node name, as it answers it."""
    roles: dict[str, str] = {}
    for rec in state.records(KIND_CONTROLLER):
        if states[rec.name] == "running":
            meta = await _call(controllers, rec.spec.addr,
                               ControllerRequestCode.CONTROLLER_GET_METADATA_INFO)  # fmt: skip
            if meta is not None and meta.code == ResponseCode.SUCCESS:
                leader = meta.ext_fields.get("isLeader") == "true"
                roles[rec.name] = "LEADER" if leader else "FOLLOWER"
    return roles


def _node_status(
    rec: NodeRecord,
    node_state: str,
    infos: dict[str, dict[str, str] | None],
    topo: Topology,
    replicas: dict[str, ReplicasInfo],
    controller_roles: dict[str, str],
) -> dict[str, Any]:
    """One node's entry in ``status --json``: its spec and process, plus what it (or, for a
    controller-mode broker, the controller) says of its role and replication."""
    spec = rec.spec
    alive = node_state != "dead"
    info = infos.get(rec.name) or {}
    node: dict[str, Any] = {
        "name": spec.name,
        "kind": spec.kind,
        "group": spec.group,
        "role": spec.role,
        "broker_id": spec.broker_id,
        "addr": spec.addr,
        "pid": rec.pid if alive else None,
        "alive": alive,
        "state": node_state,
        "rss_bytes": rss_bytes(rec.pid) if alive and rec.pid else None,
    }
    if spec.kind == KIND_CONTROLLER:
        node["role"] = controller_roles.get(spec.name)
    if spec.kind == KIND_BROKER:
        _add_replication(node, spec, infos.get(rec.name), infos, topo)
        if spec.role == ROLE_AUTO:  # controller mode: the controller's view
            _add_controller_view(node, spec, replicas.get(spec.group or ""))
        if spec.role == ROLE_DLEDGER:
            _add_dledger(node, info)
    return node


def _add_replication(
    node: dict[str, Any],
    spec: NodeSpec,
    info: dict[str, str] | None,
    infos: dict[str, dict[str, str] | None],
    topo: Topology,
) -> None:
    """A broker's commitlog end; a slave's lag behind its master and HA link; a master's
    slave counts."""
    max_offset = _int_or_none((info or {}).get("commitLogMaxOffset"))
    node["commitlog_max_offset"] = max_offset
    if spec.role == ROLE_SLAVE:
        master = topo.master_of(spec)
        master_info = infos.get(master.name) if master else None
        master_max = _int_or_none((master_info or {}).get("commitLogMaxOffset"))
        node["ack_offset"] = max_offset
        node["diff_bytes"] = (
            max(0, master_max - max_offset)
            if master_max is not None and max_offset is not None
            else None
        )
        connected = (info or {}).get("haClientConnected")
        node["ha_connected"] = None if connected is None else connected == "true"
        node["master_addr"] = (info or {}).get("haMasterAddress") or None
    elif spec.role in (ROLE_ASYNC_MASTER, ROLE_SYNC_MASTER) and info is not None:
        node["ha_slaves"] = _int_or_none(info.get("haConnectionCount"))
        node["ha_in_sync_slaves"] = _int_or_none(info.get("haInSyncSlaveNums"))


def _add_controller_view(node: dict[str, Any], spec: NodeSpec, group: ReplicasInfo | None) -> None:
    """A controller-mode broker's role, epoch and in-sync state as the controller sees them."""
    if group is not None:
        is_master = group.master_broker_id == spec.broker_id
        node["role"] = "MASTER" if is_master else "SLAVE"
        node["epoch"] = group.master_epoch
        node["sync_state_set"] = sorted(r.broker_id for r in group.in_sync)
        node["in_sync"] = any(r.broker_id == spec.broker_id for r in group.in_sync)


def _add_dledger(node: dict[str, Any], info: dict[str, str]) -> None:
    """A DLedger broker's live role, term, leader and commit index (the leader registers as 0)."""
    node["role"] = info.get("brokerRole") or info.get("dLegerRole")
    node["term"] = _int_or_none(info.get("dLegerTerm"))
    node["leader"] = info.get("dLegerLeaderId")
    node["commit_index"] = _int_or_none(info.get("dLegerCommitIndex"))
    live_id = _int_or_none(info.get("brokerId"))
    if live_id is not None:
        node["broker_id"] = live_id


def status(state: ClusterState) -> dict[str, Any]:
    return trio.run(gather_status, state)


# =========================================================================== up / down


@attrs.frozen
class UpResult:
    state: ClusterState
    already_running: bool
    ready_s: float
    #: the nodes this ``up`` started (all of them for a new or stopped cluster; the dead ones
    #: of a cluster that was partly running)
    started: tuple[str, ...] = ()


Printer = Callable[[str], None]


def _fail_message(state: ClusterState, failed: NodeFailed) -> str:
    rec = state.nodes.get(failed.node)
    lines = [f"node {failed.node} failed: {failed.reason}"]
    if rec is not None:
        tail = log_tail(rec.log)
        if tail:
            lines.append(f"--- last {len(tail)} lines of {rec.log}:")
            lines.extend(tail)
    return "\n".join(lines)


def up(
    spec: ProfileSpec,
    *,
    directory: Path,
    name: str,
    base_port: int | None,
    python: str | None = None,
    timeout: float = READY_TIMEOUT_S,
    progress: Printer | None = None,
    chaos_proxy: bool = False,
    hosts: Sequence[str] | None = None,
) -> UpResult:
    """Start the cluster (or find it running); raise SupervisorError when it cannot be ready.

    ``chaos_proxy``: nodes bind shifted ports and advertise the planned ones, where the caller
    must already run a chaos.proxy.ProxySet (``rmq-cluster chaos run`` does)."""
    directory = directory.resolve()
    existed = directory.exists()
    try:
        with locked(directory):
            return _up_locked(
                spec, directory=directory, name=name, base_port=base_port, python=python,
                timeout=timeout, say=progress or (lambda _line: None), chaos_proxy=chaos_proxy,
                hosts=hosts,
            )
    except BaseException:
        if not existed and not (directory / STATE_FILE).exists():
            # nothing was started or written (a busy port, say): leave no directory behind
            shutil.rmtree(directory, ignore_errors=True)
            if directory.parent.name == DEFAULT_ROOT:
                with contextlib.suppress(OSError):
                    directory.parent.rmdir()
        raise


def _up_locked(
    spec: ProfileSpec,
    *,
    directory: Path,
    name: str,
    base_port: int | None,
    python: str | None,
    timeout: float,
    say: Printer,
    chaos_proxy: bool = False,
    hosts: Sequence[str] | None = None,
) -> UpResult:
    if (directory / STATE_FILE).exists():
        state = load_state(directory)
        if state.profile != spec.name:
            raise SupervisorError(
                f"{directory} holds cluster {state.name} with profile {state.profile}, "
                f"not {spec.name}; use its profile, another --dir/--name, or down --purge it"
            )
        if base_port is not None and base_port != state.topology.base_port:
            raise SupervisorError(
                f"{directory} holds cluster {state.name} on base port "
                f"{state.topology.base_port}, not {base_port}; down --purge it to move it"
            )
        dead = [r for r in state.records() if not r.alive]
        if not dead:
            return UpResult(state, already_running=True, ready_s=0.0)
        if len(dead) < len(state.nodes):
            # partly running: start the dead nodes on their data (a dead DLedger group too)
            return _start_dead(state, dead, timeout=timeout, say=say)
        # a stopped cluster starts again on its data with its own plan
        state.name = name if name != DEFAULT_NAME else state.name
        if not state.topology.cluster_secret:  # made before peer authentication existed
            state.topology = attrs.evolve(state.topology, cluster_secret=new_cluster_secret())
    else:
        topo = build_topology(
            spec, base_port=base_port if base_port is not None else 9876,
            hosts=list(hosts) if hosts else None,
        )
        topo = attrs.evolve(topo, chaos_proxy=chaos_proxy, cluster_secret=new_cluster_secret())
        state = new_state(name, directory, topo, python or sys.executable)
    check_ports(state.topology)
    write_files(state)
    started = time.monotonic()
    try:
        for batch in start_batches(state):
            for rec in batch:
                spawn(state, rec)
            say(f"started {', '.join(r.name for r in batch)}; waiting until ready")
            trio.run(_wait, state, batch, timeout)
    except NodeFailed as failed:
        message = _fail_message(state, failed)
        stop_nodes(state, state.records(), timeout=2.0)
        stop_strays(state, timeout=2.0)
        raise SupervisorError(message) from None
    except BaseException:
        stop_nodes(state, state.records(), timeout=2.0)
        stop_strays(state, timeout=2.0)
        raise
    return UpResult(state, already_running=False, ready_s=time.monotonic() - started,
                    started=tuple(state.nodes))


def _start_dead(
    state: ClusterState, dead: Sequence[NodeRecord], *, timeout: float, say: Printer
) -> UpResult:
    """``up`` on a partly running cluster: start ``dead`` (in start order, each batch ready
    before the next) on their own data; the running nodes are left alone. A node that does
    not get ready is stopped again (the others keep running) and named in the error."""
    _check_free(state, dead)
    write_files(state)
    started = time.monotonic()
    names = {r.name for r in dead}
    for batch in start_batches(state, only=names):
        _spawn_and_wait(state, batch, timeout)
        say(f"started {', '.join(r.name for r in batch)} (were not running)")
    return UpResult(state, already_running=False, ready_s=time.monotonic() - started,
                    started=tuple(r.name for r in dead))


def _check_free(state: ClusterState, records: Sequence[NodeRecord]) -> None:
    """Raise SupervisorError naming the first port of ``records`` something else holds."""
    ports = [(p, f"{r.name} {k}") for r in records
             for k, p in state.topology.bind_ports(r.spec).items()]
    some = attrs.evolve(state.topology, nodes=tuple(r.spec for r in records))
    busy = [b for b in busy_ports(some) if b in ports]
    if busy:
        port, what = busy[0]
        raise SupervisorError(f"port {port} ({what}) is already in use")


def _spawn_and_wait(state: ClusterState, batch: Sequence[NodeRecord], timeout: float) -> None:
    """Start ``batch`` together and wait until every one is ready; on failure stop exactly
    those (nothing else) and raise SupervisorError with the failed node's log tail."""
    for rec in batch:
        spawn(state, rec)
    try:
        trio.run(_wait, state, batch, timeout)
    except NodeFailed as failed:
        message = _fail_message(state, failed)
        stop_nodes(state, batch, timeout=2.0)
        raise SupervisorError(message) from None
    except BaseException:
        stop_nodes(state, batch, timeout=2.0)
        raise


def start_batches(state: ClusterState, only: set[str] | None = None) -> list[list[NodeRecord]]:
    """NameServers, then masters (and DLedger nodes), then slaves; each batch is started
    together once the one before is ready. A slave learns its master's HA address from the
    answer to its REGISTER_BROKER, so it must register after its master (or wait for its next
    registration, 30 s later). ``only``: just these nodes, in the same order."""
    namesrvs = state.records(KIND_NAMESRV) + state.records(KIND_CONTROLLER)
    brokers = state.records(KIND_BROKER)
    if only is not None:
        namesrvs = [r for r in namesrvs if r.name in only]
        brokers = [r for r in brokers if r.name in only]
    masters = [r for r in brokers if r.spec.role != ROLE_SLAVE]
    slaves = [r for r in brokers if r.spec.role == ROLE_SLAVE]
    return [batch for batch in (namesrvs, masters, slaves) if batch]


async def _wait(state: ClusterState, records: Sequence[NodeRecord], timeout: float) -> None:
    await wait_ready(state, records, timeout=timeout)


def down(state: ClusterState, *, purge: bool = False) -> dict[str, Any]:
    """Stop every node (brokers first, so they unregister); ``purge`` deletes the directory."""
    was_alive = [r.name for r in state.records() if r.alive]
    killed = stop_nodes(state, state.records(KIND_BROKER))
    killed += stop_nodes(state, state.records(KIND_CONTROLLER))
    killed += stop_nodes(state, state.records(KIND_NAMESRV))
    strays = stop_strays(state)
    left = [r.name for r in state.records() if r.alive]
    if left:
        raise SupervisorError(f"could not stop {', '.join(left)}")
    if stray_pids(state):
        raise SupervisorError(f"could not stop pids {stray_pids(state)} running this cluster")
    purged = False
    if purge:
        if not (state.dir / STATE_FILE).exists():
            raise SupervisorError(f"refusing to purge {state.dir}: no {STATE_FILE} in it")
        shutil.rmtree(state.dir)
        purged = True
        parent = state.dir.parent
        if parent.name == DEFAULT_ROOT:  # ./.rmq-cluster/ holding no other cluster goes too
            with contextlib.suppress(OSError):
                parent.rmdir()
    return {
        "name": state.name,
        "stopped": was_alive,
        "killed": killed,
        "strays": strays,
        "purged": purged,
    }


# =========================================================================== single nodes


def restart_node(
    state: ClusterState, rec: NodeRecord, *, timeout: float = READY_TIMEOUT_S
) -> float:
    """Stop ``rec`` if it runs, start it again, wait until it is ready; seconds it took.
    (Only ``rec``: ``rmq-cluster restart`` adds :func:`dead_quorum_peers` itself.)"""
    return restart_nodes(state, [rec], timeout=timeout)


def restart_nodes(
    state: ClusterState, records: Sequence[NodeRecord], *, timeout: float = READY_TIMEOUT_S
) -> float:
    """Stop ``records`` that run, start them all together (in start order), wait until every
    one is ready; seconds it took. Their data is kept."""
    running = [r for r in records if r.alive]
    if running:
        stop_nodes(state, running)
    _check_free(state, records)
    started = time.monotonic()
    for batch in start_batches(state, only={r.name for r in records}):
        _spawn_and_wait(state, batch, timeout)
    return time.monotonic() - started


def dead_quorum_peers(state: ClusterState, rec: NodeRecord) -> list[NodeRecord]:
    """The stopped members of ``rec``'s DLedger group that must start with it for the group
    to have a quorum (a majority) running: all of them when it has none (DLedger groups
    only; [] otherwise)."""
    if rec.spec.role != ROLE_DLEDGER or not rec.spec.group:
        return []
    members = [state.node(m.name) for m in state.topology.group_members(rec.spec.group)]
    others = [m for m in members if m.name != rec.name]
    alive = 1 + sum(1 for m in others if m.alive)
    if alive > len(members) // 2:
        return []
    return [m for m in others if not m.alive]


def group_records(state: ClusterState, name: str) -> list[NodeRecord]:
    """The records of node ``name``, or of every member of group ``name`` (a brokerName)."""
    if name in state.nodes:
        return [state.nodes[name]]
    members = state.topology.group_members(name)
    if not members:
        state.node(name)  # raises, naming the nodes
    return [state.node(m.name) for m in members]


def promote_node(state: ClusterState, rec: NodeRecord) -> float:
    """RocketMQ 4.x's manual switch: a slave becomes its group's master (brokerId 0).

    The group's master must be down. Rewrites the node's properties (brokerId=0,
    brokerRole=ASYNC_MASTER) and restarts it.
    """
    if rec.spec.role != ROLE_SLAVE:
        raise SupervisorError(f"{rec.name} is not a slave (role {rec.spec.role})")
    master = state.topology.master_of(rec.spec)
    if master is not None and state.node(master.name).alive:
        raise SupervisorError(
            f"{master.name} (master of {rec.spec.group}) is still running; kill it first"
        )
    promoted = attrs.evolve(rec.spec, role=ROLE_ASYNC_MASTER, broker_id=0)
    demoted = (
        attrs.evolve(master, role=ROLE_SLAVE, broker_id=rec.spec.broker_id) if master else None
    )
    nodes = tuple(
        promoted if n.name == rec.name else demoted if demoted and n.name == demoted.name else n
        for n in state.topology.nodes
    )
    state.topology = attrs.evolve(state.topology, nodes=nodes)
    for r in state.records():
        r.spec = state.topology.node(r.name)
    write_files(state)
    return restart_node(state, rec)
