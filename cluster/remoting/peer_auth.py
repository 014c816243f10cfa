"""Peer authentication for the ports only our own nodes speak on (DLedger, the controller).
Pure: no trio -- the gate wraps processors, the handshake only calls the connection it is given.

Apache RocketMQ and DLedger leave these ports open: whoever reaches them may vote, push log
entries or elect a master. rmq-cluster's nodes share a cluster secret (``clusterSecret``) and
every connection proves it before its first real frame, in both directions:

1. the connecting end sends ``PEER_AUTH_HELLO`` with a fresh nonce ``Nc``;
2. the serving end answers with its own fresh nonce ``Ns`` and
   ``HMAC-SHA256(secret, SERVER_LABEL + Nc + Ns)`` -- the connecting end checks it, so it never
   talks to a server that does not know the secret either;
3. the connecting end sends ``PEER_AUTH_PROVE`` with ``HMAC-SHA256(secret, CLIENT_LABEL + Ns +
   Nc)``; the serving end checks it and from then on serves that connection.

Nonces are per connection, so a recorded handshake is worth nothing on another connection. On an
unauthenticated connection any other frame -- request or oneway, well-formed or not -- is not
answered: the connection is closed, the reason logged (at a limited rate) and counted. What a
secret does not cover: someone who can read and rewrite the TCP stream itself (there is no TLS).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, Final, Protocol

import attrs

from ..logging import get_logger
from .codec import RemotingCommand
from .codes import ResponseCode
from .errors import RemotingConnectError, RemotingError
from .processors import AnyProcessor, Later, Processor, ProcessorTable, Reply, plain

#: Request codes of the handshake (ours: no RocketMQ or DLedger code uses them).
PEER_AUTH_HELLO: Final = 97001
PEER_AUTH_PROVE: Final = 97002
#: The config key every node reads its cluster secret from.
CLUSTER_SECRET_KEY: Final = "clusterSecret"
NONCE_BYTES: Final = 16
#: How long each of the two handshake calls may take.
PEER_AUTH_TIMEOUT_S: Final = 5.0
#: Refusals are logged at most once per this long (with the count so far).
REFUSED_LOG_INTERVAL_S: Final = 10.0
#: Bound into the MACs so a proof is never valid in the other direction or another protocol.
SERVER_LABEL: Final = b"rmq-cluster peer v1 server\x00"
CLIENT_LABEL: Final = b"rmq-cluster peer v1 client\x00"


class PeerAuthError(RemotingConnectError):
    """The other end did not prove it knows the cluster secret."""


class PeerConnection(Protocol):
    """What the handshake needs of a connection (``remoting.connection.Connection``)."""

    close_reason: str | None

    async def invoke(self, request: RemotingCommand, timeout: float = ...) -> RemotingCommand: ...

    async def aclose(self) -> None: ...


Handshake = Callable[[Any], Awaitable[None]]


def proof(secret: str, label: bytes, first: bytes, second: bytes) -> bytes:
    return hmac.new(secret.encode("utf-8"), label + first + second, hashlib.sha256).digest()


def _nonce_field(fields: Any, key: str) -> bytes | None:
    """The hex nonce/proof ``key`` of ``fields``, or None when missing or malformed."""
    value = fields.get(key) if isinstance(fields, dict) else None
    if type(value) is not str or len(value) > 128:
        return None
    try:
        return bytes.fromhex(value)
    except ValueError:
        return None


@attrs.define
class _Pending:
    client_nonce: bytes
    server_nonce: bytes


class PeerAuthGate:
    """The serving end: ``wrap(table)`` serves only connections that proved the secret."""

    def __init__(self, secret: str, *, node: str, port: str) -> None:
        if not secret:
            raise ValueError("a peer-auth gate needs a non-empty secret")
        self._secret = secret
        self.port = port
        self.log = get_logger(node=node, port=port)
        self._authenticated: weakref.WeakSet[Any] = weakref.WeakSet()
        self._pending: weakref.WeakKeyDictionary[Any, _Pending] = weakref.WeakKeyDictionary()
        #: connections closed for a frame before (or instead of) a valid proof
        self.refused = 0
        self.authenticated = 0
        self._last_refused_log = -REFUSED_LOG_INTERVAL_S

    def wrap(self, table: ProcessorTable) -> ProcessorTable:
        processors: dict[int, Processor] = {
            code: self._guard(p) for code, p in table.processors.items()
        }
        processors[PEER_AUTH_HELLO] = self._on_hello
        processors[PEER_AUTH_PROVE] = self._on_prove
        default = self._guard(table.default) if table.default is not None else None
        if default is None:
            default = self._guard(None)
        return ProcessorTable(processors, default)

    def is_authenticated(self, conn: Any) -> bool:
        return conn in self._authenticated

    def _guard(self, processor: AnyProcessor | None) -> Processor:
        """``processor`` for authenticated connections, in the one form (``plain``)."""
        inner = plain(processor) if processor is not None else None

        def guarded(conn: Any, request: RemotingCommand) -> Reply:
            if conn not in self._authenticated:
                return self._refuse(conn, request, "frame before peer authentication")
            if inner is None:
                return request.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                        f"request code {request.code} not supported")
            return inner(conn, request)

        return guarded

    def _on_hello(self, conn: Any, request: RemotingCommand) -> Reply:
        nonce = _nonce_field(request.ext_fields, "nonce")
        if request.is_oneway or nonce is None or len(nonce) != NONCE_BYTES:
            return self._refuse(conn, request, "malformed PEER_AUTH_HELLO")
        server_nonce = secrets.token_bytes(NONCE_BYTES)
        self._pending[conn] = _Pending(nonce, server_nonce)
        return request.response(ResponseCode.SUCCESS, None, {
            "nonce": server_nonce.hex(),
            "proof": proof(self._secret, SERVER_LABEL, nonce, server_nonce).hex(),
        })

    def _on_prove(self, conn: Any, request: RemotingCommand) -> Reply:
        pending = self._pending.pop(conn, None)
        got = _nonce_field(request.ext_fields, "proof")
        if pending is None or got is None or request.is_oneway:
            return self._refuse(conn, request, "PEER_AUTH_PROVE without a handshake")
        want = proof(self._secret, CLIENT_LABEL, pending.server_nonce, pending.client_nonce)
        if not hmac.compare_digest(want, got):
            return self._refuse(conn, request, "wrong cluster secret")
        if conn not in self._authenticated:
            self._authenticated.add(conn)
            self.authenticated += 1
        return request.response(ResponseCode.SUCCESS)

    def _refuse(self, conn: Any, request: RemotingCommand, reason: str) -> Later:
        """Close ``conn`` without an answer; log at a limited rate."""
        self.refused += 1
        self._pending.pop(conn, None)
        now = time.monotonic()
        if now - self._last_refused_log >= REFUSED_LOG_INTERVAL_S:
            self._last_refused_log = now
            self.log.warning("peer_auth_refused", reason=reason, code=request.code,
                             remote=getattr(conn, "peer", "?"), refused=self.refused)
        return Later(_close(conn, f"peer auth: {reason}"))


async def _close(conn: Any, reason: str) -> None:
    conn.close_reason = reason
    await conn.aclose()


def peer_handshake(secret: str, *, timeout: float = PEER_AUTH_TIMEOUT_S) -> Handshake:
    """The connecting end's half, for ``open_remoting_client(handshake=...)``."""
    if not secret:
        raise ValueError("a peer handshake needs a non-empty secret")

    async def handshake(conn: PeerConnection) -> None:
        client_nonce = secrets.token_bytes(NONCE_BYTES)
        try:
            hello = await conn.invoke(RemotingCommand.request(
                PEER_AUTH_HELLO, {"nonce": client_nonce.hex()}), timeout)
        except RemotingError as exc:
            raise PeerAuthError(f"peer authentication failed: {exc}") from exc
        server_nonce = _nonce_field(hello.ext_fields, "nonce")
        got = _nonce_field(hello.ext_fields, "proof")
        if hello.code != ResponseCode.SUCCESS or server_nonce is None or got is None:
            raise PeerAuthError(
                "the peer does not authenticate (no clusterSecret there?): "
                f"code {hello.code} {hello.remark or ''}".rstrip())
        want = proof(secret, SERVER_LABEL, client_nonce, server_nonce)
        if len(server_nonce) != NONCE_BYTES or not hmac.compare_digest(want, got):
            raise PeerAuthError("the peer does not know the cluster secret")
        try:
            done = await conn.invoke(RemotingCommand.request(PEER_AUTH_PROVE, {
                "proof": proof(secret, CLIENT_LABEL, server_nonce, client_nonce).hex(),
            }), timeout)
        except RemotingError as exc:
            raise PeerAuthError(f"the peer refused our proof: {exc}") from exc
        if done.code != ResponseCode.SUCCESS:
            raise PeerAuthError(f"the peer refused our proof: code {done.code}")

    return handshake
