"""The HA port (issue 19, item 5) over real sockets, files and brokers: a peer outside
haAllowedSlaveAddresses gets no byte; a fake slave's claims and over-acks release no SYNC put
(the send hears FLUSH_SLAVE_TIMEOUT) while a real slave still replicates; with ACL on, a slave
must answer the master's challenge with the shared secret, and one that cannot gets nothing."""

from __future__ import annotations

import contextlib
import socket
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from rmq_cluster.cluster.config import ConfigError
from rmq_cluster.cluster.remoting.codes import ResponseCode
from rmq_cluster.ha.access import (
    HA_AUTH_CHALLENGE_BYTES,
    SlaveAllowList,
    auth_answer,
    decode_challenge,
    default_allow_list,
)
from rmq_cluster.ha.config import HAConfig
from rmq_cluster.ha.protocol import FrameDecoder, encode_offset_report
from rmq_cluster.ha.service import HAService
from rmq_cluster.store.commitlog import PutMessageStatus
from rmq_cluster.store.config import BrokerRole
from rmq_cluster.store.message_store import MessageStore
from tests.integration.broker.conftest import WAIT_S, ok, running_cluster
from tests.integration.broker.test_broker_ha import _start_slave
from tests.integration.ha.ha_testlib import (
    FAST_HA,
    FILE_SIZE,
    MasterNode,
    SlaveNode,
    append_many,
)

SECRET = "ha-shared-secret"
#: A loopback address other than 127.0.0.1 (Linux routes all of 127/8 to lo): the "stranger".
STRANGER_IP = "127.0.0.2"


class AuthMaster(MasterNode):
    """MasterNode whose HAService takes extra keyword arguments (auth_secret, ...)."""

    def __init__(self, root: Path, role: BrokerRole = BrokerRole.ASYNC_MASTER,
                 service_kw: dict[str, Any] | None = None, **ha: Any) -> None:
        super().__init__(root, role, **ha)
        self.service_kw = service_kw or {}

    async def start(self, nursery: trio.Nursery) -> None:
        self._done = trio.Event()
        self.store = MessageStore.open(self.cfg)
        self.ha = HAService(self.store, HAConfig(ha_listen_port=self.port, **self.ha_overrides),
                            host="127.0.0.1", **self.service_kw)
        self.port = await nursery.start(self._run)


class AuthSlave(SlaveNode):
    def __init__(self, root: Path, secret: str | None) -> None:
        super().__init__(root)
        self.secret = secret

    async def start(self, nursery: trio.Nursery, master_addr: str | None) -> None:
        self._done = trio.Event()
        self.store = MessageStore.open(self.cfg)
        self.ha = HAService(
            self.store, HAConfig(ha_listen_port=0, **self.ha_overrides), host="127.0.0.1",
            master_address=master_addr, client_reconnect_min_backoff_s=0.05,
            client_reconnect_max_backoff_s=0.2, auth_secret=self.secret,
        )
        await nursery.start(self._run)


async def _connect_from(ip: str, port: int) -> trio.SocketStream:
    sock = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    await sock.bind((ip, 0))
    await sock.connect(("127.0.0.1", port))
    return trio.SocketStream(sock)


async def _read_all(stream: trio.SocketStream) -> bytes:
    """Everything until the master closes (bounded by the caller's deadline); a reset (it
    closed with our bytes unread) ends it too."""
    got = bytearray()
    with contextlib.suppress(trio.BrokenResourceError):
        while data := await stream.receive_some(65536):
            got += data
    return bytes(got)


# ----------------------------------------------------------------------------- allow-list


def test_allow_list_patterns_and_defaults() -> None:
    allow = SlaveAllowList.parse("10.1.0.0/16, 192.168.1.7:4000, [::1], *:9")
    assert allow.allows("10.1.2.3", 1) and not allow.allows("10.2.0.1", 1)
    assert allow.allows("192.168.1.7", 4000) and not allow.allows("192.168.1.7", 4001)
    assert allow.allows("::1", 5) and allow.allows("::ffff:10.1.0.9", 5)
    assert allow.allows("8.8.8.8", 9)  # "*:9": anyone from port 9
    assert not allow.allows("not-an-ip", 1)
    for bad in ("10.0.0.0/33", "1.2.3.4:0", "a b", "[::1", "1.2.3.4:port"):
        with pytest.raises(ConfigError):
            SlaveAllowList.parse(bad)
    # the safe defaults: loopback peers for a loopback-bound master; otherwise only the
    # group's slave hosts (nobody before they are known)
    loop = default_allow_list("127.0.0.1")
    assert loop.allows("127.0.0.1", 1) and loop.allows("127.0.0.2", 1)
    assert not loop.allows("10.0.0.1", 1)
    assert not default_allow_list("0.0.0.0").allows("10.0.0.5", 1)
    assert default_allow_list("0.0.0.0", ["10.0.0.5"]).allows("10.0.0.5", 7)
    assert not default_allow_list("10.0.0.1", ["10.0.0.5"]).allows("10.0.0.6", 7)


async def test_stranger_gets_no_bytes_and_the_real_slave_replicates(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    master = AuthMaster(tmp_path / "m", ha_allowed_slave_addresses="127.0.0.1")
    await master.start(nursery)
    end = append_many(master.s, 0, 50)
    with trio.fail_after(WAIT_S):
        stranger = await _connect_from(STRANGER_IP, master.port)
        async with stranger:
            # it asks for everything from 0, as a slave would; the master closes at accept
            with contextlib.suppress(trio.BrokenResourceError):
                await stranger.send_all(encode_offset_report(0))
            assert await _read_all(stranger) == b""
    assert master.h.refused_connections == 1
    assert master.h.table.connection_count == 0
    slave = SlaveNode(tmp_path / "s")
    await slave.start(nursery, master.addr)
    with trio.fail_after(WAIT_S):
        await slave.wait_offset(end)
    assert slave.s.max_phys_offset == end
    await slave.stop()
    await master.stop()


# ----------------------------------------------------------------------------- acks


async def test_ack_past_what_was_sent_closes_and_releases_nothing(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    """A peer that stops reading while the master streams, then acks the master's whole log:
    the bytes were never handed to its socket, so the ack is refused and closes it; the SYNC
    put it claimed to cover times out. A report beyond the master's log is refused too."""
    master = AuthMaster(tmp_path / "m", BrokerRole.SYNC_MASTER, slave_timeout_ms=300)
    await master.start(nursery)
    ha = master.h
    # ~12 MiB: more than the socket buffers of both ends hold, so the master's send blocks
    end = 0
    while end < 12 * 1024 * 1024:
        end = append_many(master.s, end // 1000, 2000)
    with trio.fail_after(WAIT_S):
        fake = await trio.open_tcp_stream("127.0.0.1", master.port)
        async with fake:
            # it asks from the second CommitLog file on, then never reads
            await fake.send_all(encode_offset_report(FILE_SIZE))
            await ha.wait_for_slaves(1)
            conn = next(iter(ha.connections.values()))
            await trio.testing.wait_all_tasks_blocked(0.05)  # the write side: pipe full
            assert FILE_SIZE < conn.ack_limit < end
            waiter_result: list[PutMessageStatus] = []

            async def wait_put() -> None:  # a SYNC put of ``end`` waiting for its ack
                status, mark = master.s.put_wait(end)
                assert mark is ha.ack_watermark
                passed = await mark.wait_for(end, mark.held.timeout_s)
                waiter_result.append(status if passed else master.s.timeout_status(mark, end))

            async with trio.open_nursery() as n:
                n.start_soon(wait_put)
                await trio.testing.wait_all_tasks_blocked(0.01)
                await fake.send_all(encode_offset_report(end))  # <= master max, > sent
            assert waiter_result == [PutMessageStatus.FLUSH_SLAVE_TIMEOUT]
    assert ha.over_acks == 1
    assert ha.table.push_to_slave_max_offset < end
    with trio.fail_after(WAIT_S):
        while ha.table.connection_count:
            await trio.testing.wait_all_tasks_blocked(0.01)
        # beyond the master's log: refused at the first report
        fake2 = await trio.open_tcp_stream("127.0.0.1", master.port)
        async with fake2:
            await fake2.send_all(encode_offset_report(end + 1))
            got = await _read_all(fake2)
        assert not FrameDecoder().feed(got)
    await master.stop()


async def test_fake_slave_claim_does_not_make_sync_master_answer_send_ok(tmp_path: Path) -> None:
    """A SYNC_MASTER broker; a peer connects to its HA port and, once a send waits, claims to
    hold everything (its first report = the master's max offset: RocketMQ takes it as an ack).
    Nothing was shipped to it, so the send hears FLUSH_SLAVE_TIMEOUT. A real slave broker
    then replicates and the next send hears SUCCESS."""
    async with running_cluster(
        tmp_path, brokerRole="SYNC_MASTER", haListenPort="0", slaveTimeout="500"
    ) as cluster:
        master = cluster.broker
        ha = master.ha
        assert ha is not None and ha.port is not None
        with trio.fail_after(WAIT_S):
            fake = await trio.open_tcp_stream("127.0.0.1", ha.port)
        async with fake:
            with trio.fail_after(WAIT_S):
                while ha.table.connection_count < 1:  # counted as a slave: sends wait
                    await trio.testing.wait_all_tasks_blocked(0.01)
            before = master.store.max_phys_offset
            answers = []

            async def send() -> None:
                answers.append(await cluster.send("HaFake", b"claimed"))

            async with trio.open_nursery() as n:
                n.start_soon(send)
                with trio.fail_after(WAIT_S):
                    await master.store.wait_appended_beyond(before)
                    while ha.waiting_puts < 1:
                        await trio.testing.wait_all_tasks_blocked(0.01)
                claim = master.store.max_phys_offset
                await fake.send_all(encode_offset_report(claim))
                await fake.send_all(encode_offset_report(claim))  # and again (a heartbeat)
            (resp,) = answers
            assert resp.code == ResponseCode.FLUSH_SLAVE_TIMEOUT, (resp.code, resp.remark)
            assert ha.table.push_to_slave_max_offset < claim
        with trio.fail_after(WAIT_S):
            while ha.table.connection_count:
                await trio.testing.wait_all_tasks_blocked(0.01)
        slave, _addr = await _start_slave(cluster, tmp_path / "slave")
        with trio.fail_after(WAIT_S):
            await ha.wait_for_slaves(1)
        for i in range(5):
            ok(await cluster.send("HaFake", f"real{i}".encode()))
        with trio.fail_after(WAIT_S):
            await slave.store.wait_appended_beyond(master.store.max_phys_offset - 1)


# ----------------------------------------------------------------------------- ACL on


async def test_acl_handshake_wrong_secret_gets_nothing(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    master = AuthMaster(tmp_path / "m", service_kw={"auth_secret": SECRET})
    await master.start(nursery)
    end = append_many(master.s, 0, 40)
    with trio.fail_after(WAIT_S):
        # a slave that does not know the secret: the challenge, then the master closes
        wrong = await trio.open_tcp_stream("127.0.0.1", master.port)
        async with wrong:
            challenge = bytearray()
            while len(challenge) < HA_AUTH_CHALLENGE_BYTES:
                challenge += await wrong.receive_some(HA_AUTH_CHALLENGE_BYTES - len(challenge))
            nonce = decode_challenge(bytes(challenge))
            await wrong.send_all(auth_answer("not-the-secret", nonce) + encode_offset_report(0))
            assert await _read_all(wrong) == b""
        # a Java-style slave (its offset at once, no answer): the challenge only, no frame
        java = await trio.open_tcp_stream("127.0.0.1", master.port)
        async with java:
            await java.send_all(encode_offset_report(0) * 4)  # 32 bytes: read as an answer
            got = await _read_all(java)
        assert len(got) == HA_AUTH_CHALLENGE_BYTES
    assert master.h.auth_failures == 2
    assert master.h.table.push_to_slave_max_offset == 0
    bad = AuthSlave(tmp_path / "bad", "wrong-secret")
    await bad.start(nursery, master.addr)
    good = AuthSlave(tmp_path / "good", SECRET)
    await good.start(nursery, master.addr)
    with trio.fail_after(WAIT_S):
        await good.wait_offset(end)
    assert good.s.max_phys_offset == end
    assert bad.s.max_phys_offset == 0 and bad.c.transferred_bytes == 0
    await bad.stop()
    await good.stop()
    await master.stop()


def test_fast_ha_rig_is_unchanged() -> None:
    # the rigs above rely on ha_testlib's short intervals (housekeeping well under WAIT_S)
    assert FAST_HA["ha_housekeeping_interval_ms"] / 1000 < WAIT_S
