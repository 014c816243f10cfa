"""The controller node (Trio shell): the Raft member, the remoting server brokers call, and the
scan that elects a new master when a group's master stops heartbeating.

    node = ControllerNode(config)
    async with trio.open_nursery() as n:
        host, port = await n.start(node.serve)

Writes (REGISTER_BROKER, ALTER_SYNC_STATE_SET, ELECT_MASTER, the scan's elections) are decided
by the leader on its applied state (``state.decide_*``), proposed as events through the Raft log
(``dledger/node.py`` over the pure core), and answered once committed *and* applied here.
Reads are answered by the leader once it applied everything up to its own no-op (so it never
answers from a view older than what a previous leader committed).  Followers answer every
request CONTROLLER_NOT_LEADER (2007), naming the leader in the remark; brokers then try the
next controller.  Heartbeats (BROKER_HEARTBEAT 904) are kept by the leader only.

Peer authentication (``clusterSecret``): both ports -- the listen port brokers and admin tools
call and the Raft peer port -- are served behind a ``PeerAuthGate``, and this node's Raft
transport proves the secret on every connection it opens (``peer_handshake``): a peer without
the secret gets no answer, its connection is closed, logged and counted (``listen_gate.refused``,
``peer_gate.refused``).  Without a secret both ports are open, as Apache RocketMQ's; the node
says so at boot with a warning.
"""

from __future__ import annotations

import functools
import os
import random
from collections.abc import Callable
from typing import Any, Final

import trio

from ..cluster.clock import now_ms
from ..cluster.logging import get_logger
from ..cluster.protocol.controller import (
    NO_MASTER,
    AlterSyncStateSetRequestHeader,
    BrokerHeartbeatRequestHeader,
    ControllerBodyError,
    ControllerRequestCode,
    ControllerResponseCode,
    ElectMasterRequestHeader,
    GetMetaDataResponseHeader,
    GetReplicaInfoRequestHeader,
    RegisterBrokerToControllerRequestHeader,
    ReplicaInfoResponseHeader,
    SyncStateSet,
    decode_broker_names,
    encode_replicas_table,
)
from ..cluster.remoting.codec import RemotingCommand
from ..cluster.remoting.codes import ResponseCode
from ..cluster.remoting.headers import HeaderError
from ..cluster.remoting.peer_auth import PeerAuthGate
from ..cluster.remoting.processors import ProcessorTable
from ..cluster.remoting.server import RemotingServer
from ..dledger.core import CoreConfig, Role
from ..dledger.log_storage import FileLogStorage
from ..dledger.messages import Entry
from ..dledger.messages import ResponseCode as RaftCode
from ..dledger.node import (
    DLedgerNode,
    RemotingTransport,
    peer_table,
)
from .config import ControllerConfig
from .state import (
    ApplyOutcome,
    ElectEvent,
    Event,
    EventError,
    GroupState,
    Heartbeat,
    LeaderEvent,
    Liveness,
    Refusal,
    RegisterEvent,
    ReplicasState,
    check_address,
    check_heartbeat,
    decide_alter,
    decide_elect,
    decide_register,
    decode_event,
    encode_event,
    groups_needing_election,
    sync_state_data,
)

#: How long a write waits for its event to commit and apply before answering SYSTEM_BUSY.
PROPOSE_TIMEOUT_S: Final = 3.0
#: Largest heartbeat timeout a broker may ask for.
MAX_HEARTBEAT_TIMEOUT_MS: Final = 60_000

RC = ControllerRequestCode
CC = ControllerResponseCode


class ControllerNode:
    def __init__(
        self,
        config: ControllerConfig,
        *,
        clock_ms: Callable[[], int] = now_ms,
        rng: random.Random | None = None,
        fsync: bool = True,
    ) -> None:
        config.validate()
        self.config = config
        self.clock_ms = clock_ms
        self.rng = rng
        self.fsync = fsync
        self.log = get_logger(node=f"controller-{config.self_id}", role="controller")
        self.state = ReplicasState()
        self.liveness = Liveness(clock_ms(), config.broker_heartbeat_timeout_ms)
        self.raft: DLedgerNode | None = None
        self.applied_index = -1
        self._ready_index = 1 << 62
        self._applied = trio.Event()
        self.address: tuple[str, int] | None = None
        #: ``host:port`` brokers dial (advertisedListenPort behind a proxy)
        self.listen_address = ""
        self.peer_address: tuple[str, int] | None = None
        self.elections = 0
        self.bad_events = 0
        secret = config.cluster_secret
        name = f"controller-{config.self_id}"
        #: None without clusterSecret (open ports, Apache-compatible)
        self.listen_gate = PeerAuthGate(secret, node=name, port="controller") if secret else None
        self.peer_gate = PeerAuthGate(secret, node=name, port="controller-raft") if secret else None

    # ------------------------------------------------------------------ observing

    @property
    def is_leader(self) -> bool:
        return self.raft is not None and self.raft.role is Role.LEADER

    @property
    def is_ready_leader(self) -> bool:
        return self.is_leader and self.applied_index >= self._ready_index

    @property
    def leader_id(self) -> str:
        return self.raft.leader_id if self.raft is not None else ""

    # ------------------------------------------------------------------ Raft wiring

    def _on_apply(self, entry: Entry) -> None:
        self.applied_index = entry.index
        if entry.body:
            try:
                ev = decode_event(entry.body)
            except EventError as exc:
                self.bad_events += 1
                self.log.error("controller event unreadable", index=entry.index, error=str(exc))
            else:
                outcome = self.state.apply(ev)
                if outcome is ApplyOutcome.APPLIED:
                    self._log_applied(ev)
        self._applied.set()
        self._applied = trio.Event()

    def _log_applied(self, ev: Event) -> None:
        if isinstance(ev, ElectEvent):
            self.elections += 1
            self.log.info("master elected", group=ev.group, master=ev.master_id,
                          epoch=ev.new_epoch, leader=self.is_leader)
        elif isinstance(ev, LeaderEvent):
            self.log.info("controller leader address", controller=ev.controller_id,
                          address=ev.address)
        elif not isinstance(ev, RegisterEvent):
            self.log.info("SyncStateSet altered", group=ev.group,
                          sync_state_set=sorted(ev.sync_state_set), sse_epoch=ev.new_sse_epoch)

    def _on_role_change(self, role: Role, term: int, leader: str) -> None:
        if role is Role.LEADER:
            assert self.raft is not None
            self._ready_index = self.raft.core.storage.last_index()
            self.liveness = Liveness(self.clock_ms(), self.config.broker_heartbeat_timeout_ms)
        else:
            self._ready_index = 1 << 62
        self.log.info("controller role", raft_role=role.value, term=term, leader=leader)

    async def propose(self, ev: Event) -> int:
        """Commit and apply ``ev``; ResponseCode.SUCCESS, CONTROLLER_NOT_LEADER or SYSTEM_BUSY."""
        raft = self.raft
        if raft is None or not self.is_ready_leader:
            return CC.CONTROLLER_NOT_LEADER
        result = await raft.append(encode_event(ev), PROPOSE_TIMEOUT_S)
        if result.code is RaftCode.NOT_LEADER:
            return CC.CONTROLLER_NOT_LEADER
        if result.code is not RaftCode.SUCCESS or result.index < 0:
            return ResponseCode.SYSTEM_BUSY
        with trio.move_on_after(PROPOSE_TIMEOUT_S):
            while self.applied_index < result.index:
                await self._applied.wait()
        if self.applied_index >= result.index:
            return ResponseCode.SUCCESS
        return ResponseCode.SYSTEM_BUSY

    # ------------------------------------------------------------------ serving

    async def serve(
        self, *, task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED
    ) -> None:
        cfg = self.config
        peers = cfg.peer_map()
        tick = cfg.tick_ms
        core_cfg = CoreConfig(
            cfg.group, cfg.self_id, tuple(peers),
            heartbeat_interval=max(1, cfg.raft_heartbeat_ms // tick),
            election_timeout=max(2, cfg.raft_election_timeout_ms // tick),
            vote_jitter_min=1,
            vote_jitter_max=max(2, cfg.raft_election_timeout_ms // tick // 2),
        )
        store_dir = os.path.join(cfg.store_path, cfg.self_id)
        storage = await trio.to_thread.run_sync(
            functools.partial(FileLogStorage, store_dir, fsync=self.fsync,
                              data_file_bytes=16 * 1024 * 1024, index_file_bytes=32 * 65536)
        )
        others = {pid: addr for pid, addr in peers.items() if pid != cfg.self_id}
        name = f"controller-{cfg.self_id}"
        transport = RemotingTransport(others, node=name, secret=cfg.cluster_secret)
        self.raft = DLedgerNode(
            core_cfg, storage, transport, rng=self.rng, tick_ms=tick,
            on_apply=self._on_apply, on_role_change=self._on_role_change,
            offload_io=self.fsync,
        )
        server = RemotingServer(self._gated(self.listen_gate, self.processor_table()), node=name)
        peer_server = RemotingServer(
            self._gated(self.peer_gate, peer_table(self.raft)), node=f"{name}-dledger")
        _h, _sep, peer_port = peers[cfg.self_id].rpartition(":")
        if self.listen_gate is None:
            self.log.warning("controller ports are open: no clusterSecret, so anyone who reaches "
                             "the listen or Raft port may register, elect or vote "
                             "(Apache-compatible)", listen_port=cfg.listen_port,
                             raft_port=int(peer_port))
        try:
            async with trio.open_nursery() as nursery:
                self.peer_address = await nursery.start(
                    peer_server.serve, cfg.bind_address, int(peer_port))
                await nursery.start(transport.run)
                await nursery.start(self.raft.run)
                self.address = await nursery.start(
                    server.serve, cfg.bind_address, cfg.listen_port
                )
                host, port = self.address
                if host in ("0.0.0.0", "::", ""):  # a wildcard bind: the host peers know us by
                    host = peers[cfg.self_id].rpartition(":")[0]
                self.listen_address = f"{host}:{cfg.advertised_listen_port or port}"
                nursery.start_soon(self._scan_loop)
                self.log.info("controller serving", address=self.address,
                              peers=self.peer_address, group=cfg.group)
                task_status.started(self.address)
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(storage.close)

    async def _scan_loop(self) -> None:
        """On the leader: elect for every group whose master stopped heartbeating."""
        interval = self.config.scan_interval_ms / 1000.0
        while True:
            await trio.sleep(interval)
            if not self.is_ready_leader:
                continue
            me = self.config.self_id
            if self.listen_address and self.state.controllers.get(me) != self.listen_address:
                await self.propose(LeaderEvent(me, self.listen_address))
            for ev in groups_needing_election(
                self.state, self.liveness, self.clock_ms(),
                unclean=self.config.elect_unclean_master,
            ):
                self.log.info("electing", group=ev.group, candidate=ev.master_id,
                              epoch=ev.new_epoch)
                await self.propose(ev)

    # ------------------------------------------------------------------ processors

    @staticmethod
    def _gated(gate: PeerAuthGate | None, table: ProcessorTable) -> ProcessorTable:
        return gate.wrap(table) if gate is not None else table

    def processor_table(self) -> ProcessorTable:
        return ProcessorTable({
            RC.BROKER_HEARTBEAT: self.on_heartbeat,
            RC.CONTROLLER_REGISTER_BROKER: self.on_register,
            RC.CONTROLLER_GET_REPLICA_INFO: self.on_get_replica_info,
            RC.CONTROLLER_ALTER_SYNC_STATE_SET: self.on_alter_sync_state_set,
            RC.CONTROLLER_ELECT_MASTER: self.on_elect_master,
            RC.CONTROLLER_GET_METADATA_INFO: self.on_get_metadata,
            RC.CONTROLLER_GET_SYNC_STATE_DATA: self.on_get_sync_state_data,
        })

    def _not_leader(self, request: RemotingCommand) -> RemotingCommand:
        leader = self.leader_id or "unknown"
        return request.response(
            CC.CONTROLLER_NOT_LEADER,
            f"controller {self.config.self_id} is not the ready leader (leader: {leader})",
        )

    def _replica_answer(self, request: RemotingCommand, g: GroupState) -> RemotingCommand:
        header = ReplicaInfoResponseHeader(
            master_broker_id=g.master_id, master_address=g.master_address,
            master_epoch=g.master_epoch, sync_state_set_epoch=g.sse_epoch,
        )
        return request.response(
            ResponseCode.SUCCESS, None, header.to_ext_fields(), g.sync_state().encode()
        )

    def _refused(self, request: RemotingCommand, refusal: Refusal) -> RemotingCommand:
        return request.response(refusal.code, refusal.remark)

    @staticmethod
    def _invalid(request: RemotingCommand, exc: Exception) -> RemotingCommand:
        return request.response(CC.CONTROLLER_INVALID_REQUEST, str(exc))

    def on_heartbeat(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        if not self.is_leader:
            return self._not_leader(request)
        try:
            h = BrokerHeartbeatRequestHeader.from_ext_fields(request.ext_fields)
            check_address(h.broker_addr, "brokerAddr")
            if h.broker_id is None or h.broker_id < 0:
                raise HeaderError("BrokerHeartbeatRequestHeader", "brokerId", "is required")
        except (HeaderError, EventError) as exc:
            return self._invalid(request, exc)
        refusal = check_heartbeat(self.state.group(h.broker_name), h.broker_id, h.broker_addr)
        if refusal is not None:
            return self._refused(request, refusal)
        timeout = h.heartbeat_timeout_mills or self.config.broker_heartbeat_timeout_ms
        timeout = max(1, min(timeout, MAX_HEARTBEAT_TIMEOUT_MS))
        self.liveness.beat(h.broker_name, h.broker_id, Heartbeat(
            self.clock_ms(), timeout, max(0, h.epoch or 0), max(0, h.max_offset or 0),
            h.broker_addr,
        ))
        return request.response(ResponseCode.SUCCESS)

    async def on_register(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        if not self.is_ready_leader:
            return self._not_leader(request)
        try:
            h = RegisterBrokerToControllerRequestHeader.from_ext_fields(request.ext_fields)
            ev = RegisterEvent(h.cluster_name, h.broker_name, h.broker_id, h.broker_address)
            decode_event(encode_event(ev))  # the same checks the state machine makes
        except (HeaderError, EventError) as exc:
            return self._invalid(request, exc)
        decided = decide_register(self.state, ev, self.liveness, self.clock_ms())
        if isinstance(decided, Refusal):
            self.log.warning("registration refused", group=ev.group, broker_id=ev.broker_id,
                             address=ev.address, reason=decided.remark)
            return self._refused(request, decided)
        if decided is not None:
            code = await self.propose(decided)
            if code != ResponseCode.SUCCESS:
                return request.response(code, "registration not committed; retry")
        g = self.state.group(h.broker_name)
        if g is None or g.member_map.get(h.broker_id) != h.broker_address:
            return request.response(CC.CONTROLLER_INVALID_REQUEST,
                                    "registration refused: too many groups or replicas")
        self.liveness.beat(h.broker_name, h.broker_id, Heartbeat(
            self.clock_ms(), self.config.broker_heartbeat_timeout_ms, 0, 0, h.broker_address,
        ))
        return self._replica_answer(request, g)

    def on_get_replica_info(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        if not self.is_ready_leader:
            return self._not_leader(request)
        try:
            h = GetReplicaInfoRequestHeader.from_ext_fields(request.ext_fields)
        except HeaderError as exc:
            return self._invalid(request, exc)
        g = self.state.group(h.broker_name)
        if g is None:
            return request.response(CC.CONTROLLER_BROKER_METADATA_NOT_EXIST,
                                    f"group {h.broker_name} is unknown")
        return self._replica_answer(request, g)

    async def on_alter_sync_state_set(
        self, conn: Any, request: RemotingCommand
    ) -> RemotingCommand:
        if not self.is_ready_leader:
            return self._not_leader(request)
        try:
            h = AlterSyncStateSetRequestHeader.from_ext_fields(request.ext_fields)
            wanted = SyncStateSet.decode(request.body or b"")
        except (HeaderError, ControllerBodyError) as exc:
            return self._invalid(request, exc)
        decided = decide_alter(self.state, h.broker_name, h.master_broker_id, h.master_epoch,
                               wanted.broker_ids, wanted.epoch,
                               live=self.liveness, now_ms=self.clock_ms())
        if isinstance(decided, Refusal):
            self.log.info("SyncStateSet change refused", group=h.broker_name,
                          master=h.master_broker_id, wanted=sorted(wanted.broker_ids),
                          reason=decided.remark)
            return self._refused(request, decided)
        code = await self.propose(decided)
        if code != ResponseCode.SUCCESS:
            return request.response(code, "SyncStateSet change not committed; retry")
        g = self.state.group(h.broker_name)
        if g is None or g.sse_epoch != decided.new_sse_epoch or g.master_epoch != h.master_epoch:
            return request.response(CC.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
                                    "the group changed meanwhile; read it again")
        return request.response(ResponseCode.SUCCESS, None, {}, g.sync_state().encode())

    async def on_elect_master(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        if not self.is_ready_leader:
            return self._not_leader(request)
        try:
            h = ElectMasterRequestHeader.from_ext_fields(request.ext_fields)
        except HeaderError as exc:
            return self._invalid(request, exc)
        designated = h.broker_id if h.designate_elect else None
        decided = decide_elect(self.state, h.broker_name, self.liveness, self.clock_ms(),
                               unclean=self.config.elect_unclean_master, designated=designated)
        if isinstance(decided, Refusal):
            self.log.info("election refused", group=h.broker_name, designated=designated,
                          reason=decided.remark)
            return self._refused(request, decided)
        if decided is not None:
            code = await self.propose(decided)
            if code != ResponseCode.SUCCESS:
                return request.response(code, "election not committed; retry")
        g = self.state.group(h.broker_name)
        if g is None or g.master_id == NO_MASTER:
            return request.response(CC.CONTROLLER_MASTER_NOT_AVAILABLE,
                                    f"no alive replica of {h.broker_name} may become master")
        return self._replica_answer(request, g)

    def leader_listen_address(self) -> str | None:
        """The Raft leader's listen address (what brokers dial), as it announced it; None
        while the leader is unknown or has not announced itself yet."""
        if self.is_leader and self.listen_address:
            return self.listen_address
        leader = self.leader_id
        return self.state.controllers.get(leader) if leader else None

    def on_get_metadata(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        peers = self.config.peer_map()
        leader = self.leader_id
        header = GetMetaDataResponseHeader(
            group=self.config.group, controller_leader_id=leader or None,
            controller_leader_address=self.leader_listen_address(),
            is_leader=self.is_leader, peers=";".join(f"{k}-{v}" for k, v in peers.items()),
        )
        return request.response(ResponseCode.SUCCESS, None, header.to_ext_fields())

    def on_get_sync_state_data(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        if not self.is_ready_leader:
            return self._not_leader(request)
        try:
            names = decode_broker_names(request.body) if request.body else []
        except ControllerBodyError as exc:
            return self._invalid(request, exc)
        table = sync_state_data(self.state, names, self.liveness, self.clock_ms())
        return request.response(ResponseCode.SUCCESS, None, {}, encode_replicas_table(table))
