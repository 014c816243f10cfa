"""A fault-injecting TCP proxy (Trio shell): the chaos network.

With ``chaos_proxy`` on (``deploy.supervisor.up(..., chaos_proxy=True)``), every node binds an
internal port and a ``Proxy`` listens on the node's planned (public) port, so every byte
between the node and anyone else (peers, NameServers, clients, a slave's HA connection, DLedger
peers) crosses a proxy: the NameServer list, ``dLegerPeers``, the broker address a broker
registers and the HA address a master advertises all name public ports.

A proxy applies a ``Policy``:

* pass: forward both ways;
* cut (``block_all`` or ``blocked`` owners): existing connections are reset (SO_LINGER 0: RST)
  and new ones are reset at once, or held silently when ``blackhole`` (the peer sees a
  connection that never answers, like an iptables DROP);
* delay: every chunk is forwarded ``delay_s`` later (order kept);
* drop: a TCP stream cannot lose bytes, so a lost packet shows up to the endpoints as TCP's
  retransmission wait; with probability ``drop_p`` a chunk is held for
  ``RETRANSMIT_BASE_S * 2**k`` (k consecutive drops, capped), the effect iptables' random drop
  has on a TCP connection.

Who is on the other end: at accept the proxy finds which cluster node owns the connecting
socket (``/proc/net/tcp`` gives the socket's inode, ``/proc/<pid>/fd`` of each node says whose
it is); anything else is a client (``CLIENT``). That is how a partition also cuts a node's own
outgoing connections (to a NameServer, its master's HA port, DLedger peers) at the other
nodes' proxies.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import socket
import struct
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

import attrs
import trio

from ..cluster.logging import get_logger

#: The owner name of a connection no cluster node holds (a producer, a consumer, the CLI).
CLIENT: Final = "client"
READ_CHUNK_BYTES: Final = 64 * 1024
#: Chunks queued per direction before the reader waits for the writer (delay mode).
MAX_QUEUED_CHUNKS: Final = 256
CONNECT_TIMEOUT_S: Final = 3.0
LISTEN_BACKLOG: Final = 512
#: Pause after accept fails (no descriptors or memory).
ACCEPT_BACKOFF_S: Final = 0.1
#: Drop emulation: the first retransmission wait, doubling per consecutive drop up to the cap.
RETRANSMIT_BASE_S: Final = 0.2
MAX_RETRANSMIT_DOUBLINGS: Final = 4
_LINGER_RST: Final = struct.pack("ii", 1, 0)

log = get_logger(component="chaos.proxy")


@attrs.frozen
class Policy:
    """What a proxy does with a connection (see the module text)."""

    block_all: bool = False
    blocked: frozenset[str] = frozenset()
    blackhole: bool = False
    delay_s: float = 0.0
    drop_p: float = 0.0

    def blocks(self, owner: str) -> bool:
        return self.block_all or owner in self.blocked

    @property
    def is_pass(self) -> bool:
        return self == PASS

    def describe(self) -> str:
        parts = []
        if self.block_all:
            parts.append("cut all" + (" (black hole)" if self.blackhole else ""))
        elif self.blocked:
            parts.append(f"cut {','.join(sorted(self.blocked))}")
        if self.delay_s:
            parts.append(f"delay {self.delay_s * 1000:g} ms")
        if self.drop_p:
            parts.append(f"drop {self.drop_p:g}")
        return "; ".join(parts) or "pass"


PASS: Final = Policy()


def _rst_close(sock: Any) -> None:
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RST)
    with contextlib.suppress(OSError):
        sock.close()


# --------------------------------------------------------------------------- who connects


def _tcp_inode(local_port: int, remote_port: int) -> int | None:
    """The inode of the TCP socket with this local and remote port (from /proc/net/tcp*)."""
    want_local = f":{local_port:04X}"
    want_remote = f":{remote_port:04X}"
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f, None)
                for line in f:
                    fields = line.split()
                    if len(fields) > 9 and fields[1].endswith(want_local) and fields[
                        2
                    ].endswith(want_remote):
                        return int(fields[9])
        except OSError:
            continue
    return None


def socket_owner(peer_port: int, proxy_port: int, pids: Mapping[int, str]) -> str:
    """Which of ``pids`` ({pid: node name}) holds the socket that connected from
    ``peer_port`` to our ``proxy_port``; ``CLIENT`` when none does."""
    inode = _tcp_inode(peer_port, proxy_port)
    if inode is None or inode == 0:
        return CLIENT
    target = f"socket:[{inode}]"
    for pid, name in pids.items():
        base = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(base)
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"{base}/{fd}") == target:
                    return name
            except OSError:
                continue
    return CLIENT


# --------------------------------------------------------------------------- the proxy


class _Conn:
    def __init__(self, owner: str, client: Any) -> None:
        self.owner = owner
        self.client = client
        self.upstream: Any = None
        self.scope = trio.CancelScope()


class Proxy:
    """Listens on ``listen``, forwards to ``upstream``, applies its policy."""

    def __init__(
        self,
        name: str,
        *,
        node: str,
        listen: tuple[str, int],
        upstream: tuple[str, int],
        owner_of: Callable[[int, int], str] | None = None,
        seed: int = 0,
    ) -> None:
        self.name = name
        self.node = node
        self.listen = listen
        self.upstream = upstream
        self.owner_of = owner_of
        self.policy = PASS
        self.conns: set[_Conn] = set()
        self.rng = random.Random(seed)
        self.accepted = 0
        self.refused = 0
        self.cut = 0
        self.bytes = 0
        self._changed = trio.Event()
        self.log = log.bind(proxy=name, node=node)

    def set_policy(self, policy: Policy) -> None:
        """Apply at once: blocked live connections are reset."""
        self.policy = policy
        for conn in list(self.conns):
            if policy.blocks(conn.owner):
                self.cut += 1
                conn.scope.cancel()
        self._changed.set()
        self._changed = trio.Event()

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED
                    ) -> None:
        lsock = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        with lsock:
            lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            await lsock.bind(self.listen)
            lsock.listen(LISTEN_BACKLOG)
            port = int(lsock.getsockname()[1])
            self.listen = (self.listen[0], port)
            async with trio.open_nursery() as nursery:
                task_status.started(port)
                while True:
                    try:
                        sock, addr = await lsock.accept()
                    except OSError as exc:  # out of descriptors or memory: try again soon
                        self.log.warning("accept failed", error=str(exc))
                        await trio.sleep(ACCEPT_BACKOFF_S)
                        continue
                    self.accepted += 1
                    nursery.start_soon(self._handle, sock, int(addr[1]))

    async def _owner(self, peer_port: int) -> str:
        if self.owner_of is None:
            return CLIENT
        return await trio.to_thread.run_sync(self.owner_of, peer_port, self.listen[1])

    async def _handle(self, sock: Any, peer_port: int) -> None:
        owner = await self._owner(peer_port)
        conn = _Conn(owner, sock)
        try:
            while self.policy.blocks(owner):
                if not self.policy.blackhole:
                    self.refused += 1
                    return
                await self._changed.wait()  # held silently until the policy changes
            self.conns.add(conn)
            with conn.scope:
                try:
                    with trio.fail_after(CONNECT_TIMEOUT_S):
                        up = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                        conn.upstream = up
                        await up.connect(self.upstream)
                    up.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                except (OSError, trio.TooSlowError):
                    return
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._pump, sock, up, nursery.cancel_scope)
                    nursery.start_soon(self._pump, up, sock, nursery.cancel_scope)
        finally:
            self.conns.discard(conn)
            _rst_close(sock)
            if conn.upstream is not None:
                _rst_close(conn.upstream)

    def _hold_s(self, state: list[int]) -> float:
        """Extra wait for one chunk under the current policy (delay, emulated loss)."""
        policy = self.policy
        extra = policy.delay_s
        if policy.drop_p > 0 and self.rng.random() < policy.drop_p:
            state[0] = min(state[0] + 1, MAX_RETRANSMIT_DOUBLINGS)
            extra += RETRANSMIT_BASE_S * (2 ** (state[0] - 1))
        else:
            state[0] = 0
        return extra

    async def _pump(self, src: Any, dst: Any, scope: trio.CancelScope) -> None:
        send, recv = trio.open_memory_channel[tuple[float, bytes]](MAX_QUEUED_CHUNKS)
        drops = [0]

        async def writer() -> None:
            try:
                async with recv:
                    async for due, data in recv:
                        wait = due - trio.current_time()
                        if wait > 0:
                            await trio.sleep(wait)  # the injected delay itself
                        view = memoryview(data)
                        while view:
                            n = await dst.send(view)
                            view = view[n:]
                        self.bytes += len(data)
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                scope.cancel()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer)
            async with send:
                last_due = -math.inf
                while True:
                    try:
                        data = await src.recv(READ_CHUNK_BYTES)
                    except OSError:
                        scope.cancel()
                        return
                    if not data:
                        break
                    due = max(trio.current_time() + self._hold_s(drops), last_due)
                    last_due = due
                    await send.send((due, data))


# --------------------------------------------------------------------------- a cluster's proxies


@attrs.frozen
class Route:
    """One proxied port: ``public`` (what everyone dials) -> ``internal`` (what the node binds)."""

    node: str
    port_name: str
    public: int
    internal: int


class ProxySet:
    """The proxies in front of every port of a cluster, and the faults they inject."""

    def __init__(
        self,
        routes: Iterable[Route],
        *,
        host: str = "127.0.0.1",
        node_pids: Callable[[], Mapping[int, str]] | None = None,
        seed: int = 0,
    ) -> None:
        self.host = host
        self.routes = list(routes)
        self.node_pids = node_pids
        owner_of = self._owner_of if node_pids is not None else None
        self.proxies = [
            Proxy(
                f"{r.node} {r.port_name}",
                node=r.node,
                listen=(host, r.public),
                upstream=(host, r.internal),
                owner_of=owner_of,
                seed=seed * 1000 + i,
            )
            for i, r in enumerate(self.routes)
        ]
        self.nodes = sorted({r.node for r in self.routes})

    def _owner_of(self, peer_port: int, proxy_port: int) -> str:
        assert self.node_pids is not None
        return socket_owner(peer_port, proxy_port, self.node_pids())

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        async with trio.open_nursery() as nursery:
            for p in self.proxies:
                await nursery.start(p.serve)
            task_status.started()

    def of(self, node: str) -> list[Proxy]:
        return [p for p in self.proxies if p.node == node]

    def heal(self) -> None:
        for p in self.proxies:
            p.set_policy(PASS)

    def partition(
        self, isolated: Iterable[str], *, peers: Iterable[str] | None = None,
        blackhole: bool = False,
    ) -> None:
        """Cut every connection between a node of ``isolated`` and ``peers`` (None: everyone
        else, clients included), both ways: the isolated nodes' own proxies refuse the peers,
        the peers' proxies refuse connections the isolated nodes open."""
        iso = frozenset(isolated)
        others = None if peers is None else frozenset(peers) - iso
        for p in self.proxies:
            old = p.policy
            if p.node in iso:
                if others is None:
                    p.set_policy(attrs.evolve(old, block_all=True, blackhole=blackhole))
                else:
                    p.set_policy(attrs.evolve(old, blocked=old.blocked | others,
                                              blackhole=blackhole))
            elif others is None or p.node in others:
                p.set_policy(attrs.evolve(old, blocked=old.blocked | iso, blackhole=blackhole))

    def slow(self, nodes: Iterable[str], *, delay_s: float = 0.0, drop_p: float = 0.0) -> None:
        """Delay and/or emulated loss on every connection to ``nodes``."""
        wanted = set(nodes)
        for p in self.proxies:
            if p.node in wanted:
                p.set_policy(attrs.evolve(p.policy, delay_s=delay_s, drop_p=drop_p))

    def describe(self) -> dict[str, str]:
        return {p.name: p.policy.describe() for p in self.proxies if not p.policy.is_pass}
