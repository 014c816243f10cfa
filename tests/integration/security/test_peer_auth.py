"""Peer authentication (cluster/remoting/peer_auth.py) over real loopback sockets: only a
connection that proved the cluster secret reaches the processors, in both directions."""

from __future__ import annotations

import socket
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio

from rmq_cluster.cluster.remoting.client_pool import open_remoting_client
from rmq_cluster.cluster.remoting.codec import FrameDecoder, RemotingCommand, encode
from rmq_cluster.cluster.remoting.codes import ResponseCode
from rmq_cluster.cluster.remoting.errors import RemotingConnectError
from rmq_cluster.cluster.remoting.peer_auth import (
    PEER_AUTH_HELLO,
    PEER_AUTH_PROVE,
    PeerAuthError,
    PeerAuthGate,
    peer_handshake,
)
from rmq_cluster.cluster.remoting.processors import ProcessorTable
from rmq_cluster.cluster.remoting.server import RemotingServer

SECRET = "s3cret-of-this-cluster-0123456789"
ECHO, SINK, ASYNC_ECHO = 1, 2, 3


class Seen:
    def __init__(self) -> None:
        self.frames: list[RemotingCommand] = []
        self.sunk = trio.Event()

    def sink(self, conn: object, req: RemotingCommand) -> None:
        self.frames.append(req)
        self.sunk.set()

    def echo(self, conn: object, req: RemotingCommand) -> RemotingCommand:
        self.frames.append(req)
        return req.response(0, body=req.body)

    async def async_echo(self, conn: object, req: RemotingCommand) -> RemotingCommand:
        self.frames.append(req)
        await trio.lowlevel.checkpoint()
        return req.response(0, body=req.body)


@asynccontextmanager
async def gated_server(
    secret: str | None = SECRET,
) -> AsyncIterator[tuple[str, Seen, PeerAuthGate | None]]:
    seen = Seen()
    table = ProcessorTable({ECHO: seen.echo, SINK: seen.sink, ASYNC_ECHO: seen.async_echo})
    gate = PeerAuthGate(secret, node="test", port="peer") if secret else None
    server = RemotingServer(gate.wrap(table) if gate else table, node="test")
    async with trio.open_nursery() as nursery:
        host, port = await nursery.start(server.serve, "127.0.0.1", 0)
        yield f"{host}:{port}", seen, gate
        nursery.cancel_scope.cancel()


def raw_exchange(
    addr: str, frames: list[RemotingCommand], wait_answers: int
) -> tuple[list[RemotingCommand], bool]:
    """Send ``frames`` on a plain socket; the answers read until ``wait_answers`` came or the
    server closed, and whether it closed."""
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        for i, frame in enumerate(frames):
            sock.sendall(encode(frame, opaque=i + 1))
        decoder = FrameDecoder()
        answers: list[RemotingCommand] = []
        while len(answers) < wait_answers or wait_answers == 0:
            try:
                data = sock.recv(65536)
            except (ConnectionResetError, TimeoutError):
                return answers, True
            if not data:
                return answers, True
            answers.extend(decoder.feed(data))
        return answers, False


async def test_authenticated_peer_reaches_processors() -> None:
    async with gated_server() as (addr, seen, gate):
        async with open_remoting_client(node="peer", handshake=peer_handshake(SECRET)) as client:
            resp = await client.invoke(addr, RemotingCommand.request(ECHO, body=b"hi"))
            assert resp.code == ResponseCode.SUCCESS and bytes(resp.body) == b"hi"
            resp = await client.invoke(addr, RemotingCommand.request(ASYNC_ECHO, body=b"yo"))
            assert bytes(resp.body) == b"yo"
            await client.invoke_oneway(addr, RemotingCommand.request(SINK, body=b"x", oneway=True))
            with trio.fail_after(5):
                await seen.sunk.wait()
            unknown = await client.invoke(addr, RemotingCommand.request(4242))
            assert unknown.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        assert gate is not None and gate.authenticated == 1 and gate.refused == 0


@pytest.mark.parametrize("code", [ECHO, SINK, ASYNC_ECHO, 4242, PEER_AUTH_PROVE])
@pytest.mark.parametrize("oneway", [False, True])
async def test_stranger_frames_never_reach_processors(code: int, oneway: bool) -> None:
    async with gated_server() as (addr, seen, gate):
        frames = [RemotingCommand.request(code, {"proof": "00" * 32}, b"body", oneway=oneway),
                  RemotingCommand.request(ECHO, body=b"after")]
        answers, closed = await trio.to_thread.run_sync(raw_exchange, addr, frames, 0)
        assert closed and answers == []  # no answer at all, the connection closed
        assert seen.frames == []
        assert gate is not None and gate.refused >= 1


async def test_wrong_secret_is_refused_both_ways() -> None:
    async with gated_server() as (addr, seen, _gate):
        wrong = peer_handshake("another-secret-0123456789")
        async with open_remoting_client(node="peer", handshake=wrong) as client:
            with pytest.raises(PeerAuthError, match="does not know the cluster secret"):
                await client.invoke(addr, RemotingCommand.request(ECHO))
        assert seen.frames == []


async def test_forged_prove_after_hello_is_refused() -> None:
    """A stranger may start the handshake; a proof it cannot make closes the connection."""
    async with gated_server() as (addr, seen, gate):
        frames = [RemotingCommand.request(PEER_AUTH_HELLO, {"nonce": "ab" * 16}),
                  RemotingCommand.request(PEER_AUTH_PROVE, {"proof": "cd" * 32}),
                  RemotingCommand.request(ECHO, body=b"x")]
        answers, closed = await trio.to_thread.run_sync(raw_exchange, addr, frames, 0)
        assert closed
        assert [a.code for a in answers] == [ResponseCode.SUCCESS]  # the HELLO only
        assert seen.frames == [] and gate is not None and gate.refused >= 1


async def test_replayed_handshake_is_worthless() -> None:
    """A proof is bound to both nonces: replaying a recorded PROVE on a new connection fails."""
    async with gated_server() as (addr, seen, _gate):
        recorded: list[RemotingCommand] = []
        real = peer_handshake(SECRET)

        async def recording(conn: object) -> None:
            orig = conn.invoke  # type: ignore[attr-defined]

            async def invoke(req: RemotingCommand, timeout: float = 5.0) -> RemotingCommand:
                recorded.append(req)
                return await orig(req, timeout)

            conn.invoke = invoke  # type: ignore[attr-defined]
            try:
                await real(conn)
            finally:
                del conn.invoke  # type: ignore[attr-defined]

        async with open_remoting_client(node="peer", handshake=recording) as client:
            await client.invoke(addr, RemotingCommand.request(ECHO, body=b"ok"))
        assert [r.code for r in recorded] == [PEER_AUTH_HELLO, PEER_AUTH_PROVE]
        seen.frames.clear()
        answers, closed = await trio.to_thread.run_sync(
            raw_exchange, addr, [*recorded, RemotingCommand.request(ECHO, body=b"x")], 0)
        assert closed and [a.code for a in answers] == [ResponseCode.SUCCESS]
        assert seen.frames == []


async def test_client_refuses_a_server_without_the_secret() -> None:
    """Mutual: a node that cannot prove the secret (an open port, or an impostor) is not
    talked to."""
    async with gated_server(secret=None) as (addr, seen, _gate):
        async with open_remoting_client(node="peer", handshake=peer_handshake(SECRET),
                                        connect_timeout=2) as client:
            with pytest.raises(RemotingConnectError, match="does not authenticate"):
                await client.invoke(addr, RemotingCommand.request(ECHO))
        assert seen.frames == []


async def test_malformed_hello_closes() -> None:
    async with gated_server() as (addr, seen, _gate):
        for fields in ({}, {"nonce": "zz"}, {"nonce": "ab" * 8}, {"nonce": "ab" * 200}):
            answers, closed = await trio.to_thread.run_sync(
                raw_exchange, addr, [RemotingCommand.request(PEER_AUTH_HELLO, fields)], 0)
            assert closed and answers == []
        # garbage bytes that are not a frame at all
        host, port = addr.rsplit(":", 1)

        def garbage() -> bytes:
            with socket.create_connection((host, int(port)), timeout=5) as sock:
                sock.sendall(struct.pack(">I", 8) + b"\x00" * 8)
                return sock.recv(100)

        assert await trio.to_thread.run_sync(garbage) == b""
        assert seen.frames == []
