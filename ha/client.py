"""The slave side of classic HA (Trio shell): ``HAClient`` connects to the master's HA port,
reports its CommitLog max offset (at once on connecting, after every append that advanced it,
and every haSendHeartbeatInterval), and appends the master's frames at exactly their physical
offsets with ``store.append_raw`` -- the slave's CommitLog stays a byte-identical prefix of the
master's, and the store's reput service builds ConsumeQueue and Index locally.

It reconnects with a doubling backoff when the master goes away, and ``set_master_address``
re-points it (the broker learns the address from REGISTER_BROKER's result).

    client = HAClient(store, "10.0.0.1:10912", HAConfig())
    await nursery.start(client.run)
    client.set_master_address(result.ha_server_addr)   # after each registration
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import attrs
import trio

from ..cluster.clock import now_ms
from ..cluster.logging import get_logger
from . import net
from .access import HA_AUTH_CHALLENGE_BYTES, auth_answer, decode_challenge
from .config import HAConfig
from .net import CONNECTION_ERRORS
from .protocol import (
    FrameDecoder,
    HAProtocolError,
    coalesce,
    encode_offset_report,
)

if TYPE_CHECKING:
    from ..store.message_store import MessageStore

#: First pause before reconnecting after a failed connect or a closed connection.
HA_RECONNECT_MIN_BACKOFF_S: Final = 0.1
#: The pause doubles up to this (RocketMQ's HAClient retries every 5 s).
HA_RECONNECT_MAX_BACKOFF_S: Final = 5.0


def split_address(addr: str) -> tuple[str, int]:
    host, sep, port = addr.strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"HA master address {addr!r} is not host:port")
    return host.strip("[]"), int(port)


@attrs.frozen
class HAClientStatus:
    """The slave's replication view (RocketMQ HAClientRuntimeInfo's content)."""

    master_address: str | None
    connected: bool
    max_offset: int  # the slave's CommitLog max offset
    last_reported_offset: int
    last_read_ms: int
    last_write_ms: int
    connects: int
    transferred_bytes: int

    def to_json(self) -> dict[str, Any]:
        return {
            "masterAddr": self.master_address or "",
            "connected": self.connected,
            "maxOffset": self.max_offset,
            "lastReportedOffset": self.last_reported_offset,
            "lastReadTimestamp": self.last_read_ms,
            "lastWriteTimestamp": self.last_write_ms,
            "connects": self.connects,
            "transferredBytes": self.transferred_bytes,
        }


class HAClient:
    def __init__(
        self,
        store: MessageStore,
        master_ha_addr: str | None,
        config: HAConfig,
        *,
        clock_ms: Callable[[], int] = now_ms,
        reconnect_min_backoff_s: float = HA_RECONNECT_MIN_BACKOFF_S,
        reconnect_max_backoff_s: float = HA_RECONNECT_MAX_BACKOFF_S,
        auth_secret: str | None = None,
    ) -> None:
        self.store = store
        #: aclEnable=true: answer the master's challenge with this aclSecretKey (ha/access.py)
        self.auth_secret = auth_secret
        self.config = config
        self.clock_ms = clock_ms
        self.reconnect_min_backoff_s = reconnect_min_backoff_s
        self.reconnect_max_backoff_s = reconnect_max_backoff_s
        self._addr = master_ha_addr or config.configured_master_address
        self._addr_changed = trio.Event()
        self._session_scope: trio.CancelScope | None = None
        self._report_needed = trio.Event()
        self._sending = False
        self.connected = False
        self.last_reported_offset = -1
        self.last_read_ms = 0
        self.last_write_ms = 0
        self.connects = 0
        self.transferred_bytes = 0
        self.receives = 0  # socket reads that carried frames
        self.reports = 0  # offset reports sent
        self.log = get_logger(component="ha_client", role="SLAVE")

    # ------------------------------------------------------------------ control

    @property
    def master_address(self) -> str | None:
        return self._addr

    def set_master_address(self, addr: str | None) -> None:
        """Point at a (new) master HA address: a different address drops the current connection
        and connects there; None (no live master in the route) keeps the current connection
        but stops reconnecting once it ends."""
        addr = addr or None
        if addr == self._addr:
            return
        self.log.info("ha_master_address_changed", old=self._addr, new=addr)
        self._addr = addr
        event, self._addr_changed = self._addr_changed, trio.Event()
        event.set()
        if addr is not None and self._session_scope is not None:
            self._session_scope.cancel()

    def close_connection(self) -> None:
        """Drop the current connection (it reconnects after the backoff)."""
        if self._session_scope is not None:
            self._session_scope.cancel()

    def status(self) -> HAClientStatus:
        return HAClientStatus(
            master_address=self._addr,
            connected=self.connected,
            max_offset=self.store.max_phys_offset,
            last_reported_offset=self.last_reported_offset,
            last_read_ms=self.last_read_ms,
            last_write_ms=self.last_write_ms,
            connects=self.connects,
            transferred_bytes=self.transferred_bytes,
        )

    # ------------------------------------------------------------------ main loop

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Replicate until cancelled (connect, stream, reconnect)."""
        task_status.started()
        backoff = self.reconnect_min_backoff_s
        while True:
            addr = self._addr
            if not addr:
                await self._addr_changed.wait()
                continue
            changed = self._addr_changed
            try:
                host, port = split_address(addr)
                sock = await net.connect(host, port)
            except (OSError, ValueError) as exc:
                self.log.info("ha_connect_failed", master=addr, error=str(exc), retry_s=backoff)
                await self._pause(backoff, changed)
                backoff = min(backoff * 2, self.reconnect_max_backoff_s)
                continue
            if self._addr != addr:  # re-pointed while connecting
                sock.close()
                continue
            self.connects += 1
            self.connected = True
            receives = self.receives
            self.log.info("ha_connected", master=addr, offset=self.store.max_phys_offset)
            try:
                with trio.CancelScope() as scope:
                    self._session_scope = scope
                    await self._session(sock)
            finally:
                self._session_scope = None
                self.connected = False
                sock.close()
            self.log.info("ha_disconnected", master=addr, offset=self.store.max_phys_offset)
            if self.receives != receives:  # it streamed: a fresh start after a short pause
                backoff = self.reconnect_min_backoff_s
            if self._addr == addr:
                await self._pause(backoff, self._addr_changed)
                if self.receives == receives:  # refused or silent: back off further
                    backoff = min(backoff * 2, self.reconnect_max_backoff_s)

    async def _pause(self, seconds: float, changed: trio.Event) -> None:
        """Back off, cut short by an address change."""
        with trio.move_on_after(seconds):
            await changed.wait()

    async def _session(self, sock: net.HASocket) -> None:
        self._report_needed = trio.Event()
        self._sending = False
        if self.auth_secret is not None:
            try:
                await self._answer_challenge(sock)
            except (trio.TooSlowError, *CONNECTION_ERRORS) as exc:
                self.log.warning("ha_auth_failed", error=repr(exc))
                return
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._side, self._receiver, sock, nursery.cancel_scope)
            nursery.start_soon(self._side, self._reporter, sock, nursery.cancel_scope)

    async def _answer_challenge(self, sock: net.HASocket) -> None:
        """Read the master's challenge and answer it (before any offset report)."""
        assert self.auth_secret is not None
        got = bytearray()
        with trio.fail_after(self.config.housekeeping_interval_s):
            while len(got) < HA_AUTH_CHALLENGE_BYTES:
                data = await sock.receive()
                if not data:
                    raise HAProtocolError("the master closed before its challenge")
                got += data
        nonce = decode_challenge(bytes(got))  # more bytes than a challenge: not one
        await sock.send_all(auth_answer(self.auth_secret, nonce))

    async def _side(
        self, fn: Callable[[net.HASocket], Any], sock: net.HASocket, scope: trio.CancelScope
    ) -> None:
        try:
            await fn(sock)
        except CONNECTION_ERRORS as exc:
            self.log.warning("ha_client_error", side=fn.__name__, error=repr(exc))
        finally:
            scope.cancel()

    async def _report(self, sock: net.HASocket) -> None:
        """Send the current max offset; if another report is being sent, ask for one more."""
        if self._sending:
            self._report_needed.set()
            return
        self._sending = True
        try:
            offset = self.store.max_phys_offset
            await sock.send_all(encode_offset_report(offset))
            self.reports += 1
            self.last_reported_offset = offset
            self.last_write_ms = self.clock_ms()
        finally:
            self._sending = False

    async def _reporter(self, sock: net.HASocket) -> None:
        """The first report at once, then one every haSendHeartbeatInterval (or on request)."""
        heartbeat_s = self.config.heartbeat_interval_s
        while True:
            self._report_needed = trio.Event()
            await self._report(sock)
            with trio.move_on_after(heartbeat_s):
                await self._report_needed.wait()

    async def _receiver(self, sock: net.HASocket) -> None:
        store = self.store
        decoder = FrameDecoder()
        housekeeping_s = self.config.housekeeping_interval_s
        while True:
            with trio.move_on_after(housekeeping_s) as cs:
                data = await sock.receive()
            if cs.cancelled_caught:
                self.log.warning("ha_master_housekeeping_timeout", seconds=housekeeping_s)
                return
            if not data:
                self.log.info("ha_master_closed")
                return
            self.last_read_ms = self.clock_ms()
            frames = decoder.feed(data)
            if not frames:
                continue
            self.receives += 1
            advanced = False
            for frame in coalesce(frames):
                slave_max = store.max_phys_offset
                if slave_max != 0 and slave_max != frame.offset:
                    self.log.error(
                        "ha_offset_mismatch", slave_offset=slave_max, master_offset=frame.offset
                    )
                    return
                if frame.body:
                    store.append_raw(frame.offset, frame.body)
                    self.transferred_bytes += len(frame.body)
                    advanced = True
            if advanced:
                await self._report(sock)
