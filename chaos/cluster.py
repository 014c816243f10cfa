"""A cluster brought up for chaos (Trio shell): real node processes behind the chaos proxies.

``chaos_cluster(profile, directory=...)`` starts a ``ProxySet`` on every planned port, then
``deploy.supervisor.up(..., chaos_proxy=True)`` (nodes bind shifted ports and advertise the
proxies'), yields a ``ChaosCluster`` and always tears everything down: proxies healed, paused
nodes continued, every node stopped (SIGKILL by pid for anything left).

``ChaosCluster`` answers live questions over the wire (who is the master of a group now, a
broker's CommitLog max offset, in controller mode the controllers' master and leader) and
signals nodes by pid through the supervisor's records (only processes it started).
``audit_replicas`` ends a run: members catch up with their live master, the nodes stop, and
``rmq-cluster replica-diff`` (a subprocess; chaos.audit builds its arguments and reads its
summary) compares the stores.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import attrs
import orjson
import trio

from ..cluster.logging import get_logger
from ..cluster.protocol.controller import (
    ControllerRequestCode,
    GetMetaDataResponseHeader,
    GetReplicaInfoRequestHeader,
    ReplicaInfoResponseHeader,
)
from ..cluster.protocol.route import ClusterInfo, KVTable
from ..cluster.remoting.client_pool import RemotingClient, open_remoting_client
from ..cluster.remoting.codec import RemotingCommand
from ..cluster.remoting.codes import RequestCode, ResponseCode
from ..deploy import supervisor
from ..deploy.supervisor import ClusterState, NodeRecord, SupervisorError
from ..deploy.topology import (
    KIND_CONTROLLER,
    ROLE_SLAVE,
    ProfileSpec,
    Topology,
    build_topology,
    resolve_profile,
)
from .audit import (
    AUDIT_SKIPPED,
    NEEDS_SPARK,
    audit_command,
    audit_members,
    spark_available,
    summarize,
)
from .checker import MODE_ASYNC, MODE_DLEDGER, MODE_NONE, MODE_SYNC
from .proxy import ProxySet, Route

#: ``up`` waits this long for every node to be ready (2 cores shared: generous).
UP_TIMEOUT_S: Final = 60.0
#: One live-status call (cluster info, runtime info) may take this long.
PROBE_TIMEOUT_S: Final = 2.0
#: A SIGKILLed node is gone within this (else the fault fails loudly).
KILL_WAIT_S: Final = 10.0
EXIT_POLL_INTERVAL_S: Final = 0.02
#: The replica audit: members get this long to catch up with their master before the stop.
CATCH_UP_TIMEOUT_S: Final = 20.0
CATCH_UP_POLL_S: Final = 0.2
#: ``rmq-cluster replica-diff`` on the stopped stores may take this long.
AUDIT_TIMEOUT_S: Final = 180.0
BASE_PORT_TRIES: Final = 50

log = get_logger(component="chaos.cluster")


def mode_of(spec: ProfileSpec) -> str:
    """The checker's promise for a profile."""
    if spec.dledger:
        return MODE_DLEDGER
    if spec.slaves_per_master == 0:
        return MODE_NONE
    return MODE_SYNC if spec.replication == "SYNC" else MODE_ASYNC


def free_proxied_base_port(spec: ProfileSpec) -> int:
    """A base port whose planned ports (the proxies') and shifted ports (the nodes') are free."""
    for _ in range(BASE_PORT_TRIES):
        base = supervisor.free_base_port(spec)
        topo = attrs.evolve(build_topology(spec, base_port=base), chaos_proxy=True)
        if not supervisor.busy_ports(topo):
            return base
    raise SupervisorError("no free port range for a proxied chaos cluster")


class ChaosCluster:
    def __init__(self, spec: ProfileSpec, topology: Topology, directory: Path,
                 proxies: ProxySet | None) -> None:
        self.spec = spec
        self.topology = topology
        self.dir = directory
        self.proxies = proxies
        self.state: ClusterState | None = None
        self.mode = mode_of(spec)
        self.client: RemotingClient | None = None
        #: calls to the controllers, proving the cluster's clusterSecret (opened once it is up)
        self.controller_client: RemotingClient | None = None
        self.log = log.bind(cluster=str(directory))
        #: every pid a node ever had (kill_leftovers checks each is still ours).
        self.seen_pids: dict[str, int] = {}

    # ------------------------------------------------------------------ records

    @property
    def namesrv_addr(self) -> str:
        return self.topology.namesrv_addr

    def record(self, name: str) -> NodeRecord:
        assert self.state is not None
        return self.state.node(name)

    def node_pids(self) -> Mapping[int, str]:
        """{pid: node} of the running nodes (the proxies' owner lookup, from a thread).
        While ``up`` runs, its state file says (every pid is saved as the node spawns)."""
        state = self.state
        if state is None:
            try:
                state = supervisor.load_state(self.dir)
            except SupervisorError:
                return {}
        return {r.pid: r.name for r in list(state.nodes.values()) if r.pid is not None}

    def _remember_pids(self) -> None:
        for pid, name in self.node_pids().items():
            self.seen_pids[f"{name}@{pid}"] = pid

    def brokers(self) -> list[str]:
        return [n.name for n in self.topology.brokers]

    def groups(self) -> list[str]:
        return self.topology.groups

    def members(self, group: str) -> list[str]:
        return [n.name for n in self.topology.group_members(group)]

    def slaves_of(self, group: str) -> list[str]:
        return [n.name for n in self.topology.group_members(group) if n.role == ROLE_SLAVE]

    def controllers(self) -> list[str]:
        return [n.name for n in self.topology.controllers]

    def node_by_addr(self, addr: str) -> str | None:
        """The node at ``addr``: its planned (public) address, or the port it binds behind
        the proxy (the address a node may report about itself)."""
        for n in self.topology.nodes:
            if n.addr == addr:
                return n.name
        for n in self.topology.nodes:
            if f"{n.host}:{self.topology.bind_ports(n)['listenPort']}" == addr:
                return n.name
        return None

    # ------------------------------------------------------------------ live status

    async def _call(self, addr: str, code: int, ext: dict[str, str] | None = None, *,
                    controller: bool = False) -> RemotingCommand | None:
        client = self.controller_client if controller else self.client
        if client is None:
            return None
        try:
            resp = await client.invoke(
                addr, RemotingCommand.request(code, ext or {}), PROBE_TIMEOUT_S
            )
        except Exception:  # unreachable, reset, timed out: no answer
            return None
        return resp if resp.code == ResponseCode.SUCCESS else None

    async def live_master(self, group: str) -> str | None:
        """The node the NameServers list as ``group``'s brokerId 0 right now (a DLedger
        group's leader), confirmed alive; None when there is none."""
        for ns in self.topology.namesrvs:
            resp = await self._call(ns.addr, RequestCode.GET_BROKER_CLUSTER_INFO)
            if resp is None:
                continue
            data = ClusterInfo.decode(resp.body).broker_addr_table.get(group)
            addr = data.broker_addrs.get(0) if data is not None else None
            name = self.node_by_addr(addr) if addr else None
            if name is not None and self.record(name).alive:
                return name
        return None

    async def controller_master(self, group: str) -> tuple[str | None, int] | None:
        """(master node or None, master epoch) of ``group`` as the controller leader says
        (controller mode); None when no controller answers as the ready leader."""
        ext = GetReplicaInfoRequestHeader(broker_name=group).to_ext_fields()
        for ctl in self.controllers():
            resp = await self._call(self.topology.node(ctl).addr,
                                    ControllerRequestCode.CONTROLLER_GET_REPLICA_INFO, ext,
                                    controller=True)
            if resp is None:
                continue
            try:
                h = ReplicaInfoResponseHeader.from_ext_fields(resp.ext_fields)
            except ValueError:
                continue
            name = self.node_by_addr(h.master_address) if h.master_address else None
            return name, int(h.master_epoch or 0)
        return None

    async def controller_leader(self) -> str | None:
        """The controller that answers GET_METADATA_INFO as the Raft leader (None: none)."""
        for ctl in self.controllers():
            resp = await self._call(self.topology.node(ctl).addr,
                                    ControllerRequestCode.CONTROLLER_GET_METADATA_INFO,
                                    controller=True)
            if resp is None:
                continue
            try:
                h = GetMetaDataResponseHeader.from_ext_fields(resp.ext_fields)
            except ValueError:
                continue
            if h.is_leader:
                return ctl
        return None

    async def runtime_info(self, node: str) -> dict[str, str] | None:
        resp = await self._call(self.topology.node(node).addr, RequestCode.GET_BROKER_RUNTIME_INFO)
        if resp is None:
            return None
        try:
            return dict(KVTable.decode(resp.body).table)
        except Exception:
            return None

    async def max_offset(self, node: str) -> int | None:
        info = await self.runtime_info(node)
        try:
            return int(info["commitLogMaxOffset"]) if info else None
        except (KeyError, ValueError):
            return None

    # ------------------------------------------------------------------ process control

    async def kill(self, node: str, signum: int = signal.SIGKILL) -> int | None:
        """Signal ``node`` and wait until it is gone; its pid (None: it was not running)."""
        rec = self.record(node)
        pid = rec.pid
        if not rec.signal(signum):
            return None
        if signum == signal.SIGTERM:
            rec.signal(signal.SIGCONT)
        await trio.to_thread.run_sync(_wait_gone, rec, KILL_WAIT_S)
        return pid

    def pause(self, node: str) -> bool:
        return self.record(node).signal(signal.SIGSTOP)

    def resume(self, node: str) -> bool:
        return self.record(node).signal(signal.SIGCONT)

    async def start(self, node: str) -> float:
        """Start a stopped node again and wait until it is ready; seconds it took."""
        assert self.state is not None
        rec = self.record(node)
        took = await trio.to_thread.run_sync(
            functools.partial(supervisor.restart_node, self.state, rec, timeout=UP_TIMEOUT_S)
        )
        self._remember_pids()
        return float(took)

    def dead_nodes(self) -> list[str]:
        assert self.state is not None
        return [r.name for r in self.state.records() if not r.alive]

    def paused_nodes(self) -> list[str]:
        assert self.state is not None
        return [r.name for r in self.state.records() if r.state() == "paused"]

    async def heal_all(self, *, start_dead: bool = True) -> list[str]:
        """Undo whatever is left: proxies pass, paused nodes continue, dead nodes start
        (unless not ``start_dead``: a killed 4.x master left dead, its slave read instead)."""
        done = []
        if self.proxies is not None and self.proxies.describe():
            self.proxies.heal()
            done.append("proxies healed")
        for name in self.paused_nodes():
            self.resume(name)
            done.append(f"resumed {name}")
        for name in self.dead_nodes() if start_dead else []:
            await self.start(name)
            done.append(f"started {name}")
        return done

    # ------------------------------------------------------------------ replica audit

    async def _catch_up(self, group: str, master: str) -> dict[str, bool]:
        """Wait until every member's CommitLog max offset reaches its master's (read again
        each round: a late send may still land); {member: caught up}."""
        others = [m for m in self.members(group) if m != master]
        done = dict.fromkeys(others, False)
        with trio.move_on_after(CATCH_UP_TIMEOUT_S):
            while True:
                top = await self.max_offset(master)
                for m in others:
                    off = await self.max_offset(m)
                    done[m] = top is not None and off is not None and off >= top
                if all(done.values()):
                    break
                await trio.sleep(CATCH_UP_POLL_S)  # replication runs in the nodes
        return done

    async def audit_replicas(self) -> dict[str, Any]:
        """Let every group's members catch up with its live master, stop the cluster (the
        controllers first, so nobody is elected meanwhile) and compare the stores with
        ``rmq-cluster replica-diff`` (chaos.audit); the ``replica_audit`` object."""
        assert self.state is not None
        groups = {g: self.members(g) for g in self.groups()}
        if all(len(m) < 2 for m in groups.values()):
            return {"verdict": AUDIT_SKIPPED, "reason": "no group has a replica"}
        if not await trio.to_thread.run_sync(spark_available):
            return {"verdict": AUDIT_SKIPPED, "reason": NEEDS_SPARK}
        masters: dict[str, str | None] = {}
        caught_up: dict[str, bool] = {}
        for g in groups:
            master = masters[g] = await self.live_master(g)
            if master is not None:
                caught_up.update(await self._catch_up(g, master))
        configured = {
            g: next((n.name for n in self.topology.group_members(g) if n.broker_id == 0), None)
            for g in groups
        }
        stores = {n: str(self.dir / "store" / n) for n in self.brokers()}
        members = audit_members(groups, masters, configured, stores, dledger=self.spec.dledger)
        self._remember_pids()
        await trio.to_thread.run_sync(
            supervisor.stop_nodes, self.state, self.state.records(KIND_CONTROLLER)
        )
        await trio.to_thread.run_sync(functools.partial(supervisor.down, self.state))
        argv = [sys.executable, "-m", "rmq_cluster.cli", *audit_command(members)]
        with trio.fail_after(AUDIT_TIMEOUT_S):
            proc = await trio.run_process(argv, capture_stdout=True, capture_stderr=True,
                                          check=False)
        try:
            summary = orjson.loads(proc.stdout) if proc.stdout.strip() else None
        except orjson.JSONDecodeError:
            summary = None
        audit = summarize(summary, proc.returncode, stderr=proc.stderr.decode(errors="replace"),
                          caught_up=caught_up)
        audit["masters"] = {g: m for g, m in masters.items()}
        self.log.info("replica audit", verdict=audit["verdict"], divergent=audit["divergent"])
        return audit

    def _teardown(self, purge: bool) -> None:
        if self.state is not None:
            self._remember_pids()
            for rec in self.state.records():
                rec.signal(signal.SIGCONT)
            try:
                supervisor.down(self.state, purge=False)
            except SupervisorError as exc:
                self.log.warning("down failed", error=str(exc))
        from ..deploy.testing import kill_leftovers  # (not at import: it imports pytest)

        kill_leftovers(self.dir, self.seen_pids)
        if purge and (self.dir / supervisor.STATE_FILE).exists():
            import shutil

            shutil.rmtree(self.dir, ignore_errors=True)


def _wait_gone(rec: NodeRecord, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while rec.alive:
        if time.monotonic() >= deadline:
            raise SupervisorError(f"{rec.name} (pid {rec.pid}) still runs {timeout:g} s after kill")
        time.sleep(EXIT_POLL_INTERVAL_S)


@asynccontextmanager
async def chaos_cluster(
    profile: str | ProfileSpec,
    *,
    directory: str | os.PathLike[str],
    base_port: int | None = None,
    proxy: bool = True,
    seed: int = 0,
    purge: bool = False,
    say: Callable[[str], Any] | None = None,
) -> AsyncIterator[ChaosCluster]:
    """Bring ``profile`` up (behind proxies unless ``proxy`` is false), yield, tear down."""
    spec = profile if isinstance(profile, ProfileSpec) else resolve_profile(profile)
    say = say or (lambda _line: None)
    directory = Path(await trio.Path(directory).resolve())
    if await trio.Path(directory / supervisor.STATE_FILE).exists():
        raise SupervisorError(f"{directory} already holds a cluster; chaos runs need a fresh one")
    base = base_port
    if base is None:
        base = await trio.to_thread.run_sync(
            free_proxied_base_port if proxy else supervisor.free_base_port, spec
        )
    topo = attrs.evolve(build_topology(spec, base_port=base), chaos_proxy=proxy)
    if base_port is not None:
        # a chosen base port: say which planned port is taken (the proxies' public ones and
        # the nodes' shifted ones) before anything binds, in one line
        for plan in (attrs.evolve(topo, chaos_proxy=False), topo) if proxy else (topo,):
            await trio.to_thread.run_sync(supervisor.check_ports, plan)
    cc = ChaosCluster(spec, topo, directory, None)
    if proxy:
        cc.proxies = ProxySet(
            [Route(node, key, public, bound) for node, key, public, bound in topo.proxy_routes()],
            node_pids=cc.node_pids,
            seed=seed,
        )
    supervisor_become_reaper()
    try:
        async with trio.open_nursery() as nursery, open_remoting_client(
            node="rmq-chaos"
        ) as client:
            cc.client = client
            if cc.proxies is not None:
                await nursery.start(cc.proxies.run)
                say(f"proxies listening on {len(cc.proxies.proxies)} ports")
            result = await trio.to_thread.run_sync(
                functools.partial(
                    supervisor.up, spec, directory=directory, name=directory.name,
                    base_port=base, timeout=UP_TIMEOUT_S, progress=say, chaos_proxy=proxy,
                )
            )
            cc.state = result.state
            cc._remember_pids()
            say(f"cluster {spec.name} ready in {result.ready_s:.1f} s (base port {base})")
            try:
                async with open_remoting_client(
                    node="rmq-chaos-controllers",
                    handshake=supervisor.controller_handshake(result.state),
                ) as controllers:
                    cc.controller_client = controllers
                    yield cc
            finally:
                with trio.CancelScope(shield=True):
                    if cc.proxies is not None:
                        cc.proxies.heal()  # let brokers unregister on their way down
                    await trio.to_thread.run_sync(cc._teardown, purge)
                nursery.cancel_scope.cancel()
    finally:
        from ..deploy.testing import kill_leftovers  # (not at import: it imports pytest)

        await trio.to_thread.run_sync(kill_leftovers, directory, cc.seen_pids)


def supervisor_become_reaper() -> None:
    from ..deploy.testing import become_subreaper

    become_subreaper()

