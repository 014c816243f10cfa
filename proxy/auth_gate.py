"""The ACL in front of the gRPC service: ``AuthGate`` wraps ``MessagingService`` (the same
``GrpcService`` shape ``h2_server`` serves) and lets a call through only once ``auth.admit``
has admitted it; a refused call is answered in its own response type with status
UNAUTHORIZED (as Apache's proxy answers), a refused Telemetry command with a
``TelemetryCommand`` carrying that status (the stream stays open, as Apache's does).

Rules come from ``plain_acl.yml`` through ``AclGuard`` (loaded at start, reloaded when the file
changes). Refusals are logged with the peer, method, access key and reason (never a secret)
and counted (``denials``)."""

from __future__ import annotations

import time
from typing import Any

import trio
from google.protobuf.message import DecodeError

from ..cluster.acl.guard import AclGuard
from ..cluster.logging import get_logger
from . import auth
from .grpc_wire import GrpcStatus, GrpcWireError
from .h2_server import PEER_KEY, GrpcService, Send
from .pb import definition_pb2 as pb
from .pb import service_pb2 as spb

log = get_logger(node="proxy", component="auth")


def _decode(method: str, payload: bytes, cls: Any = None) -> Any:
    cls = cls or getattr(spb, f"{method}Request", None)
    if cls is None:
        raise GrpcWireError(GrpcStatus.UNIMPLEMENTED, f"unknown method {method}")
    msg = cls()
    try:
        msg.ParseFromString(payload)
    except (DecodeError, ValueError, RecursionError) as exc:
        raise GrpcWireError(GrpcStatus.INVALID_ARGUMENT, f"bad {cls.__name__}") from exc
    return msg


def _clock() -> auth.Clock:
    now = time.time()
    return auth.Clock(now, (0.0, float(time.localtime(now).tm_gmtoff)))


class AuthGate:
    def __init__(self, inner: GrpcService, guard: AclGuard, max_skew_s: float) -> None:
        self.inner = inner
        self.guard = guard
        self.max_skew_s = max_skew_s
        self.denials = 0

    def kind(self, method: str) -> str | None:
        return self.inner.kind(method)

    def refusal(self, method: str, request: Any, metadata: dict[str, str]) -> pb.Status | None:
        """None when the call may go on, else the status to answer it with."""
        peer = metadata.get(PEER_KEY, "")
        try:
            auth.admit(self.guard.rules, method, request, metadata, peer, _clock(),
                       self.max_skew_s)
        except auth.AuthDenied as denied:
            self.denials += 1
            signed = metadata.get(auth.AUTHORIZATION, "")
            key = signed.partition("Credential=")[2].partition(",")[0][:64]
            log.warning("grpc call refused", peer=peer, method=method, access_key=key or None,
                        reason=str(denied))
            return pb.Status(code=pb.UNAUTHORIZED, message=str(denied))
        return None

    async def unary(self, method: str, request: bytes, metadata: dict[str, str]) -> bytes:
        status = self.refusal(method, _decode(method, request), metadata)
        if status is not None:
            resp = getattr(spb, f"{method}Response")(status=status)
            return bytes(resp.SerializeToString())
        return await self.inner.unary(method, request, metadata)

    async def stream(self, method: str, request: bytes, metadata: dict[str, str],
                     send: Send) -> None:
        status = self.refusal(method, _decode(method, request), metadata)
        if status is not None:
            resp = getattr(spb, f"{method}Response")(status=status)
            await send(bytes(resp.SerializeToString()))
            return
        await self.inner.stream(method, request, metadata, send)

    async def bidi(self, method: str, inbound: trio.MemoryReceiveChannel[bytes],
                   metadata: dict[str, str], send: Send) -> None:
        """Each command checked on its way to the service (no buffer in between: the
        connection's own backlog bound stays the only one)."""
        to_inner, from_gate = trio.open_memory_channel[bytes](0)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.inner.bidi, method, from_gate, metadata, send)
            async with to_inner:
                async for payload in inbound:
                    cmd = _decode(method, payload, spb.TelemetryCommand)
                    status = self.refusal(method, cmd, metadata)
                    if status is not None:
                        await send(bytes(spb.TelemetryCommand(status=status).SerializeToString()))
                        continue
                    await to_inner.send(payload)
