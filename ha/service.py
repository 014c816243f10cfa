"""The master side of classic HA (Trio shell): ``HAService`` listens on haListenPort and runs one
``HAConnection`` per slave, each with a read side (offset reports = acks, liveness,
housekeeping timeout) and a write side (stream the CommitLog from the slave's offset in
<= haTransferBatchSize frames, coalesced into big sends, heartbeat when idle).

SYNC_MASTER: ``HAService`` is the store's replica gate (``store.attach_replicas``). A put
decides with the pure ``AckTable`` (``sync_status_nowait``: SLAVE_NOT_AVAILABLE / already acked
/ wait); a waiting put's answer is held on ``ack_watermark`` (push2SlaveMaxOffset), keyed by
the message's end offset, without a task: each ack advance releases every answer it covers in
one send per connection, and the watermark's sweeper answers the rest FLUSH_SLAVE_TIMEOUT after
slaveTimeout, or when this service stops.

    ha = HAService(store, HAConfig(ha_listen_port=listen_port + 1, ...))
    port = await nursery.start(ha.run)      # a SYNC_MASTER store's puts now wait for acks
    ha.update_master_address(addr)          # a SLAVE: REGISTER_BROKER's haServerAddr
    ha.status()                             # per slave: address, ack, diff, in-sync, speed

Like RocketMQ's HAService, it listens on every broker; on a SLAVE store it also runs the
``HAClient`` that replicates from the master.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Final

import attrs
import trio

from ..cluster.clock import now_ms
from ..cluster.logging import get_logger
from ..store.commitlog import PutMessageStatus
from ..store.config import BrokerRole
from ..store.watermark import Watermark
from . import net
from .access import (
    HA_AUTH_ANSWER_BYTES,
    HA_AUTH_NONCE_BYTES,
    SlaveAllowList,
    default_allow_list,
    encode_challenge,
    verify_answer,
)
from .client import (
    HA_RECONNECT_MAX_BACKOFF_S,
    HA_RECONNECT_MIN_BACKOFF_S,
    HAClient,
    HAClientStatus,
)
from .config import HAConfig
from .master import (
    AckTable,
    InSyncState,
    ReportOutcome,
    SlaveStatus,
    transfer_start_offset,
)
from .net import CONNECTION_ERRORS
from .protocol import OffsetReportDecoder, append_frame, encode_heartbeat

if TYPE_CHECKING:
    from ..store.message_store import MessageStore

log = get_logger(component="ha_service")

#: Frames gathered into one send by a write side (8 x 32 KiB frames).
HA_MAX_SEND_BYTES: Final = 256 * 1024
#: Pause after accept fails for lack of file descriptors or memory.
HA_ACCEPT_BACKOFF_S: Final = 0.1
#: How long a connecting slave has to answer the authentication challenge (aclEnable=true).
HA_AUTH_TIMEOUT_S: Final = 5.0
#: Handshakes under way at once, at most (aclEnable=true): a peer accepted beyond them is closed
#: at accept and counted with the refused ones, so unanswered challenges cannot pile up.
HA_MAX_PENDING_HANDSHAKES: Final = 128
#: A refusal for too many pending handshakes is logged at most this often.
HA_REFUSED_LOG_INTERVAL_S: Final = 10.0


@attrs.frozen
class HAStatus:
    """The master's replication view (RocketMQ HARuntimeInfo's content)."""

    listen_port: int | None
    master_max_offset: int
    push_to_slave_max_offset: int
    slaves: tuple[SlaveStatus, ...]
    client: HAClientStatus | None = None  # a SLAVE's replication from its master

    @property
    def in_sync_slave_count(self) -> int:
        return sum(1 for s in self.slaves if s.in_sync)

    def to_json(self) -> dict[str, Any]:
        return {
            "master": self.client is None,
            "haClientRuntimeInfo": self.client.to_json() if self.client is not None else None,
            "masterCommitLogMaxOffset": self.master_max_offset,
            "push2SlaveMaxOffset": self.push_to_slave_max_offset,
            "inSyncSlaveNums": self.in_sync_slave_count,
            "haConnectionInfo": [
                {
                    "addr": s.address,
                    "slaveAckOffset": s.ack_offset,
                    "diff": s.diff_bytes,
                    "inSync": s.in_sync,
                    "transferredByteInSecond": int(s.transfer_bytes_per_s),
                }
                for s in self.slaves
            ],
        }


class HAService:
    def __init__(
        self,
        store: MessageStore,
        config: HAConfig,
        *,
        host: str = "0.0.0.0",
        master_address: str | None = None,
        clock_ms: Callable[[], int] = now_ms,
        client_reconnect_min_backoff_s: float = HA_RECONNECT_MIN_BACKOFF_S,
        client_reconnect_max_backoff_s: float = HA_RECONNECT_MAX_BACKOFF_S,
        auth_secret: str | None = None,
        on_peer_refused: Callable[[], None] | None = None,
        in_sync: InSyncState | None = None,
    ) -> None:
        self.store = store
        #: controller mode (RocketMQ 5): how many slave acks a SYNC put needs given the
        #: SyncStateSet (ha/master.py ``InSyncRule``); None: the 4.x rule (one slave's ack)
        self.in_sync = in_sync
        self.config = config
        self.host = host
        #: aclEnable=true: the shared aclSecretKey slaves prove they know (ha/access.py); ""
        #: (ACL on, no key configured) lets no slave in. None: no handshake (RocketMQ's HA).
        self.auth_secret = auth_secret
        #: called when a peer outside the allow-list was refused (the broker then refreshes
        #: the group's slave hosts from the NameServers, for the default allow-list)
        self.on_peer_refused = on_peer_refused
        self._configured_allow = config.allow_list
        self._slave_hosts: frozenset[str] = frozenset()
        self._resolved: dict[str, list[str]] = {}
        #: who may connect now (haAllowedSlaveAddresses, host names resolved; or the default)
        self.allow_list: SlaveAllowList = self._effective_allow_list()
        #: peers closed at accept: not allowed, or HA_MAX_PENDING_HANDSHAKES under way
        self.refused_connections = 0
        self.pending_handshakes = 0  # accepted peers that have not answered the challenge yet
        self._busy_logged_at = -HA_REFUSED_LOG_INTERVAL_S
        self._busy_logged = 0
        self.auth_failures = 0  # peers that failed the handshake
        self.over_acks = 0  # connections closed for acking past what they were sent
        self.clock_ms = clock_ms
        self.table = AckTable(config.ha_slave_fallbehind_max)
        #: push2SlaveMaxOffset: SYNC_MASTER answers (and puts) wait here for a slave's ack,
        #: FLUSH_SLAVE_TIMEOUT after slaveTimeout
        self.ack_watermark = Watermark(0, timeout_s=config.sync_timeout_s)
        self.ack_advances = 0  # how often push2SlaveMaxOffset rose (= group-transfer wakeups)
        self.ack_reports = 0  # offset reports read from slaves
        self.ship_sends = 0  # sends of CommitLog frames to slaves (all connections)
        self.ship_bytes = 0  # CommitLog bytes shipped
        self.port: int | None = None
        self.connections: dict[int, HAConnection] = {}
        self._next_conn_id = 0
        self._slaves_changed = trio.Event()
        self.log = get_logger(component="ha_service", role=store.role.value)
        #: The slave side, on a SLAVE store only.
        self.client: HAClient | None = (
            HAClient(
                store, master_address, config, clock_ms=clock_ms,
                reconnect_min_backoff_s=client_reconnect_min_backoff_s,
                reconnect_max_backoff_s=client_reconnect_max_backoff_s,
                auth_secret=auth_secret,
            )
            if store.role is BrokerRole.SLAVE
            else None
        )

    # ------------------------------------------------------------------ lifecycle

    async def run(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve haListenPort until cancelled; ``task_status.started(port)``. On a SYNC_MASTER
        store without a replica gate, becomes it (it stays: once this service stops, what
        waits is answered FLUSH_SLAVE_TIMEOUT and SYNC puts SLAVE_NOT_AVAILABLE)."""
        listener = net.listen(self.host, self.config.ha_listen_port)
        self.port = listener.getsockname()[1]
        if self.store.role is BrokerRole.SYNC_MASTER and self.store.replicas is None:
            self.store.attach_replicas(self)
        if self.auth_secret == "":
            self.log.warning("ha_auth_without_secret",
                             reason="aclEnable=true but no aclSecretKey: no slave can connect")
        await self._resolve_hostnames()
        self.log.info("ha_listening", host=self.host, port=self.port,
                      authenticated=self.auth_secret is not None)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self.ack_watermark.run)  # (expires all as it ends)
                if self.client is not None:
                    await nursery.start(self.client.run)
                task_status.started(self.port)
                while True:
                    try:
                        sock = await net.accept(listener)
                    except OSError as exc:
                        self.log.warning("ha_accept_failed", error=str(exc))
                        await trio.sleep(HA_ACCEPT_BACKOFF_S)
                        continue
                    if not self._admit(sock):
                        continue
                    self._next_conn_id += 1
                    conn = HAConnection(
                        self, net.HASocket(sock, net.HA_REPORT_READ_CHUNK_BYTES),
                        self._next_conn_id,
                    )
                    if self.auth_secret is not None:
                        self.pending_handshakes += 1  # until conn.serve's handshake ends
                    nursery.start_soon(conn.serve)
        finally:
            self.ack_watermark.expire_all()  # FLUSH_SLAVE_TIMEOUT: no ack comes any more
            if listener.fileno() >= 0:
                trio.lowlevel.notify_closing(listener)
                listener.close()
            self.log.info("ha_stopped", port=self.port)

    # ------------------------------------------------------------------ who may connect

    def _effective_allow_list(self) -> SlaveAllowList:
        if self._configured_allow.patterns:
            return self._configured_allow.resolved(self._resolved)
        return default_allow_list(self.host, self._slave_hosts)

    def _admit(self, sock: Any) -> bool:
        """Accept-time check: a peer outside the allow-list is closed before any byte."""
        try:
            host, port = sock.getpeername()[:2]
        except OSError:
            sock.close()
            return False
        if self.allow_list.allows(host, port):
            if (self.auth_secret is None
                    or self.pending_handshakes < HA_MAX_PENDING_HANDSHAKES):
                return True
            self._refuse_busy(sock, f"{host}:{port}")
            return False
        self.refused_connections += 1
        sock.close()
        self.log.warning("ha_connection_refused", remote=f"{host}:{port}",
                         reason="not in haAllowedSlaveAddresses")
        if self.on_peer_refused is not None:
            self.on_peer_refused()
        return False

    def _refuse_busy(self, sock: Any, remote: str) -> None:
        """Close a peer accepted while HA_MAX_PENDING_HANDSHAKES are under way (logged at most
        every HA_REFUSED_LOG_INTERVAL_S, with how many since the last line)."""
        sock.close()
        self.refused_connections += 1
        now = trio.current_time()
        if now - self._busy_logged_at >= HA_REFUSED_LOG_INTERVAL_S:
            self.log.warning(
                "ha_connection_refused", remote=remote,
                reason=f"{HA_MAX_PENDING_HANDSHAKES} handshakes under way",
                refused_since_last_log=self.refused_connections - self._busy_logged,
            )
            self._busy_logged_at = now
            self._busy_logged = self.refused_connections

    async def _resolve_hostnames(self) -> None:
        """Resolve the host names of haAllowedSlaveAddresses (once per start or change)."""
        resolved: dict[str, list[str]] = {}
        for name in sorted(self._configured_allow.hostnames):
            try:
                infos = await trio.socket.getaddrinfo(name, None)
            except OSError as exc:
                self.log.warning("ha_allowed_host_unresolved", host=name, error=str(exc))
                continue
            resolved[name] = sorted({str(info[4][0]) for info in infos})
        self._resolved = resolved
        self.allow_list = self._effective_allow_list()

    @property
    def configured_allow_list(self) -> SlaveAllowList:
        """haAllowedSlaveAddresses as configured (empty: the default applies)."""
        return self._configured_allow

    async def set_allowed_addresses(self, config: HAConfig) -> None:
        """A new haAllowedSlaveAddresses (UPDATE_BROKER_CONFIG): applies to new connections."""
        self._configured_allow = config.allow_list
        await self._resolve_hostnames()

    def set_slave_hosts(self, hosts: Iterable[str]) -> None:
        """The hosts of this group's slaves (from the NameServers): the default allow-list of
        a broker that does not bind loopback."""
        new = frozenset(hosts)
        if new != self._slave_hosts:
            self._slave_hosts = new
            self.allow_list = self._effective_allow_list()
            self.log.info("ha_slave_hosts", hosts=sorted(new))

    # ------------------------------------------------------------------ slave side

    def update_master_address(self, addr: str | None) -> None:
        """REGISTER_BROKER's ``haServerAddr`` on a SLAVE (ignored on a master, and when
        haMasterAddress is configured: RocketMQ then keeps the configured one)."""
        if self.client is None or self.config.configured_master_address is not None:
            return
        self.client.set_master_address(addr)

    # ------------------------------------------------------------------ SYNC_MASTER

    def sync_status_nowait(self, end_offset: int) -> PutMessageStatus | None:
        """The SYNC_MASTER answer if it is already decided (SLAVE_NOT_AVAILABLE, or PUT_OK
        when a slave acked past ``end_offset``; in controller mode also PUT_OK or
        IN_SYNC_REPLICAS_NOT_ENOUGH as ``in_sync`` decides), else None: the answer then waits
        on ``ack_watermark`` for ``end_offset``."""
        in_sync = self.in_sync
        if in_sync is not None:
            need = in_sync.rule.slave_acks_needed(in_sync.sync_state_set_size)
            if need is None:
                return PutMessageStatus.IN_SYNC_REPLICAS_NOT_ENOUGH
            if need == 0:
                return PutMessageStatus.PUT_OK
            # need >= 1: one slave's ack (push2SlaveMaxOffset); the 2m-2s layout has one
        # AckTable.sync_decision, inlined (once per SYNC put: three calls cost ~0.3 us)
        table = self.table
        acked = table.push_to_slave_max_offset
        if not table.slaves or end_offset - acked >= table.slave_fallbehind_max:
            return PutMessageStatus.SLAVE_NOT_AVAILABLE
        return PutMessageStatus.PUT_OK if acked >= end_offset else None

    def on_report(self, conn_id: int, offset: int) -> ReportOutcome:
        """A slave's ack; releases every SYNC answer the new push2SlaveMaxOffset covers."""
        self.ack_reports += 1
        before = self.table.push_to_slave_max_offset
        outcome = self.table.on_report(
            conn_id, offset, self.store.max_phys_offset, self.clock_ms()
        )
        after = self.table.push_to_slave_max_offset
        if after > before:
            self.ack_advances += 1
            self.ack_watermark.advance(after)
        return outcome

    def _notify_slaves_changed(self) -> None:
        event, self._slaves_changed = self._slaves_changed, trio.Event()
        event.set()

    @property
    def streaming_slave_count(self) -> int:
        """Connections whose slave has reported and whose transfer has started."""
        return sum(1 for c in self.connections.values() if c.next_transfer_from >= 0)

    async def wait_for_slaves(self, count: int) -> None:
        """Until at least ``count`` slaves are streaming (tests, readiness checks)."""
        while self.streaming_slave_count < count:
            await self._slaves_changed.wait()

    def is_slave_ok(self, master_put_where: int) -> bool:
        return self.table.is_slave_ok(master_put_where)

    # ------------------------------------------------------------------ views

    def status(self) -> HAStatus:
        master_max = self.store.max_phys_offset
        return HAStatus(
            listen_port=self.port,
            master_max_offset=master_max,
            push_to_slave_max_offset=self.table.push_to_slave_max_offset,
            slaves=self.table.status(master_max),
            client=self.client.status() if self.client is not None else None,
        )

    def runtime_info(self) -> dict[str, str]:
        """String entries for GET_BROKER_RUNTIME_INFO's KVTable (our own keys; RocketMQ 4.x
        only logs slaveFallBehindMuch)."""
        st = self.status()
        info = {
            "haListenPort": str(st.listen_port if st.listen_port is not None else -1),
            "haConnectionCount": str(len(st.slaves)),
            "haInSyncSlaveNums": str(st.in_sync_slave_count),
            "haPush2SlaveMaxOffset": str(st.push_to_slave_max_offset),
            # our counters (since boot): acks read, ack advances (group-transfer wakeups),
            # SYNC puts that waited and that acks released, CommitLog sends and bytes shipped
            "haAckReports": str(self.ack_reports),
            "haAckAdvances": str(self.ack_advances),
            "haSyncWaitedPuts": str(self.waited_puts),
            "haSyncReleasedPuts": str(self.acked_puts),
            "haSyncWaitingPuts": str(self.waiting_puts),  # now
            "haShipSends": str(self.ship_sends),
            "haShipBytes": str(self.ship_bytes),
            # HA port access (ha/access.py): peers refused at accept, failed handshakes,
            # connections closed for acking past what they were sent
            "haRefusedConnections": str(self.refused_connections),
            "haAuthFailures": str(self.auth_failures),
            "haOverAcks": str(self.over_acks),
        }
        if st.slaves:
            info["slaveFallBehindMuch"] = str(self.slave_fall_behind_bytes)
        for n, slave in enumerate(sorted(st.slaves, key=lambda x: x.conn_id)):
            # haStatus-like, one line per slave (RocketMQ 5 HARuntimeInfo's per-connection data)
            info[f"haSlave{n}"] = (
                f"addr={slave.address} ackOffset={slave.ack_offset} diff={slave.diff_bytes} "
                f"inSync={str(slave.in_sync).lower()} "
                f"transferBytesPerS={slave.transfer_bytes_per_s:.0f}"
            )
        if st.client is not None:
            info["haMasterAddress"] = st.client.master_address or ""
            info["haClientConnected"] = str(st.client.connected).lower()
            info["haClientLastReadTimestamp"] = str(st.client.last_read_ms)
        if self.client is not None:  # our counters (since boot)
            info["haClientReceives"] = str(self.client.receives)
            info["haClientReports"] = str(self.client.reports)
            lags = self.store.dispatcher.lag_histogram
            if lags is not None:
                # records by ms from the master storing them to this slave dispatching them
                # (readable here): bucket i = i ms, the last = that many or more
                info["haSlaveApplyLagMsHistogram"] = ",".join(map(str, lags))
        return info

    @property
    def waited_puts(self) -> int:
        """What had to wait for an ack (held answers, tasks' puts), since boot."""
        return self.ack_watermark.held.held_total

    @property
    def acked_puts(self) -> int:
        """Of those, what a slave's ack released, since boot."""
        return self.ack_watermark.held.released_total

    @property
    def waiting_puts(self) -> int:
        """What waits for an ack now."""
        return self.ack_watermark.held.waiting

    @property
    def slave_fall_behind_bytes(self) -> int:
        """Master max offset - push2SlaveMaxOffset (RocketMQ slaveFallBehindMuch)."""
        return self.store.max_phys_offset - self.table.push_to_slave_max_offset


class HAConnection:
    """One slave: a read side and a write side; either ending closes the connection.

    Acks are checked against what this connection shipped (our rule, beyond RocketMQ's): the
    first report only says where the slave starts; a later report past the end of the bytes
    sent here (``ack_limit``) closes the connection; only reports above the transfer start
    (``ack_floor``) count as acks, so SYNC puts are released by bytes actually sent.
    """

    def __init__(self, service: HAService, sock: net.HASocket, conn_id: int) -> None:
        self.service = service
        self.sock = sock
        self.conn_id = conn_id
        self.requested_offset = -1  # the slave's first report
        self._requested = trio.Event()
        self.next_transfer_from = -1
        #: highest offset the slave may report: the end of what was handed to the socket
        #: (or its own start before that); -1 until the first report
        self.ack_limit = -1
        #: reports at or below this are not acks (nothing was shipped there on this connection)
        self.ack_floor = -1
        self.log = service.log.bind(remote=sock.peer, conn=conn_id)

    async def serve(self) -> None:
        try:
            extra = b""
            if self.service.auth_secret is not None:
                try:
                    answer_tail = await self._authenticate()
                finally:
                    self.service.pending_handshakes -= 1  # counted at accept
                if answer_tail is None:
                    return
                extra = answer_tail
            await self._serve_slave(extra)
        finally:
            self.sock.close()

    async def _authenticate(self) -> bytes | None:
        """Challenge the peer (ha/access.py); the bytes after its answer, or None (refused)."""
        svc = self.service
        nonce = secrets.token_bytes(HA_AUTH_NONCE_BYTES)
        got = bytearray()
        try:
            with trio.fail_after(HA_AUTH_TIMEOUT_S):
                await self.sock.send_all(encode_challenge(nonce))
                while len(got) < HA_AUTH_ANSWER_BYTES:
                    data = await self.sock.receive()
                    if not data:
                        break
                    got += data
        except (trio.TooSlowError, *CONNECTION_ERRORS) as exc:
            svc.auth_failures += 1
            self.log.warning("ha_slave_auth_failed", reason=f"no answer: {exc!r}")
            return None
        answer = bytes(got[:HA_AUTH_ANSWER_BYTES])
        if len(answer) < HA_AUTH_ANSWER_BYTES or not verify_answer(
            svc.auth_secret, nonce, answer
        ):
            svc.auth_failures += 1
            self.log.warning("ha_slave_auth_failed", reason="wrong answer to the challenge")
            return None
        self.log.info("ha_slave_authenticated")
        return bytes(got[HA_AUTH_ANSWER_BYTES:])

    async def _serve_slave(self, extra: bytes) -> None:
        svc = self.service
        svc.table.add(self.conn_id, self.sock.peer, svc.clock_ms())
        svc.connections[self.conn_id] = self
        self.log.info("ha_slave_connected")
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._side, self._read_side, nursery.cancel_scope, extra)
                nursery.start_soon(self._side, self._write_side, nursery.cancel_scope)
        finally:
            svc.table.remove(self.conn_id)
            svc.connections.pop(self.conn_id, None)
            svc._notify_slaves_changed()
            self.log.info("ha_slave_disconnected")

    async def _side(self, fn: Callable[..., Any], scope: trio.CancelScope, *args: Any) -> None:
        try:
            await fn(*args)
        except CONNECTION_ERRORS as exc:
            self.log.warning("ha_connection_error", side=fn.__name__, error=repr(exc))
        finally:
            scope.cancel()

    async def _read_side(self, extra: bytes = b"") -> None:
        svc = self.service
        decoder = OffsetReportDecoder()
        housekeeping_s = svc.config.housekeeping_interval_s
        data: bytes | memoryview = extra
        while True:
            if not data:
                with trio.move_on_after(housekeeping_s) as cs:
                    data = await self.sock.receive()
                if cs.cancelled_caught:
                    self.log.warning("ha_slave_housekeeping_timeout", seconds=housekeeping_s)
                    return
                if not data:
                    return
            offset = decoder.feed(data)
            data = b""
            if offset is None:
                continue
            if offset > self.ack_limit:  # the one compare of a normal ack
                if self.requested_offset >= 0:
                    svc.over_acks += 1
                    self.log.error(
                        "ha_slave_ack_beyond_sent", slave_offset=offset,
                        sent_offset=self.ack_limit, master_offset=svc.store.max_phys_offset,
                    )
                    return
                outcome = svc.table.note_report(
                    self.conn_id, offset, svc.store.max_phys_offset, svc.clock_ms()
                )
                if outcome is ReportOutcome.BEYOND_MASTER:
                    self.log.error(
                        "ha_slave_ahead_of_master", slave_offset=offset,
                        master_offset=svc.store.max_phys_offset,
                    )
                    return
                self.requested_offset = offset
                self.ack_limit = self.ack_floor = offset
                self._requested.set()
                continue
            if offset > self.ack_floor:
                svc.on_report(self.conn_id, offset)
            else:  # a repeat of its start: alive, no ack
                svc.table.note_report(
                    self.conn_id, offset, svc.store.max_phys_offset, svc.clock_ms()
                )

    async def _write_side(self) -> None:
        svc = self.service
        store = svc.store
        sock = self.sock
        await self._requested.wait()
        nxt = transfer_start_offset(
            self.requested_offset, store.max_phys_offset,
            store.config.mapped_file_size_commit_log,
        )
        self.next_transfer_from = nxt
        # acks count from the transfer start (an empty slave starts at the last file)
        self.ack_floor = max(self.ack_floor, nxt)
        self.ack_limit = max(self.ack_limit, nxt)
        svc._notify_slaves_changed()
        self.log.info("ha_transfer_start", offset=nxt, requested=self.requested_offset)
        batch = svc.config.ha_transfer_batch_size
        heartbeat_s = svc.config.heartbeat_interval_s
        last_write = trio.current_time()
        while True:
            max_off = store.max_phys_offset
            if nxt < max_off:
                # ship everything appended so far (<= HA_MAX_SEND_BYTES per send), then yield
                while nxt < max_off:
                    out = bytearray()
                    while nxt < max_off and len(out) < HA_MAX_SEND_BYTES:
                        view = store.read_raw(nxt, batch)
                        if view is None or not len(view):
                            if view is not None:
                                view.release()
                            break
                        append_frame(out, nxt, view)
                        nxt += len(view)
                        view.release()
                    if not out:
                        self.log.error(
                            "ha_transfer_unreadable", offset=nxt,
                            min_offset=store.min_phys_offset, max_offset=max_off,
                        )
                        return
                    self.ack_limit = nxt  # before the send: the slave may ack part of it
                    await sock.send_all(out)
                    svc.ship_sends += 1
                    svc.ship_bytes += len(out)
                    self.next_transfer_from = nxt
                last_write = trio.current_time()
                await trio.lowlevel.checkpoint()
                continue
            remaining = heartbeat_s - (trio.current_time() - last_write)
            if remaining <= 0:
                await sock.send_all(encode_heartbeat(nxt))
                last_write = trio.current_time()
                continue
            with trio.move_on_after(remaining):
                await store.wait_appended_beyond(nxt)
