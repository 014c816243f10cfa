"""A stateful Hypothesis fuzzer for the controller's ports (issue 31 item 1).

A live controller-mode group -- three controllers, a NameServer, two SYNC replicas of broker-a,
every node with a ``clusterSecret`` -- runs on a Trio loop in a background thread, under a light
send load whose acknowledged messages are recorded.  The test thread connects over real sockets
to the controllers' listen ports and Raft peer ports and sends:

* frames with random codes (every controller and DLedger code, the handshake's, any int),
  random or valid-looking headers (the controllers' field names, the group's real ids, epochs
  and addresses) and random, garbled or valid-looking bodies;
* replays of real frames captured from the live group (the brokers' requests to the controller,
  the controllers' Raft messages to each other);
* the forged election of issue 31 (REGISTER + HEARTBEAT + ALTER_SYNC_STATE_SET + ELECT_MASTER);
* raw garbage;

each unsigned, or after a handshake completed with a WRONG secret; and, as an authenticated
peer (the right secret), hostile reads and heartbeats.  After every step: no node exited; no
unauthenticated frame was answered; the controller's state as an authenticated client reads it
(GET_METADATA_INFO, GET_REPLICA_INFO, GET_SYNC_STATE_DATA) and every controller's Raft term are
what they were.  At the end every acknowledged message reads back from the master.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import socket
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest
import trio
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from rmq_cluster.cluster.protocol.controller import (
    ControllerRequestCode,
    GetReplicaInfoRequestHeader,
    ReplicaInfoResponseHeader,
    SyncStateSet,
    decode_replicas_table,
    encode_broker_names,
)
from rmq_cluster.cluster.protocol.controller_client import ControllerClient
from rmq_cluster.cluster.remoting.client_pool import RemotingClient, open_remoting_client
from rmq_cluster.cluster.remoting.codec import FrameDecoder, RemotingCommand, encode
from rmq_cluster.cluster.remoting.errors import RemotingError
from rmq_cluster.cluster.remoting.peer_auth import (
    PEER_AUTH_HELLO,
    PEER_AUTH_PROVE,
    peer_handshake,
)
from rmq_cluster.dledger.node import DLedgerRequestCode
from tests.integration.broker.conftest import Cluster
from tests.integration.controller.controller_testlib import (
    Controllers,
    Replica,
    controller_group,
    forge_election,
    heartbeat_request,
    master_and_slave,
    read_all,
    register_request,
    send_some,
)
from tests.integration.security.loop_testlib import LoopThread, connect

SECRET: Final = "fuzz-cluster-secret-0123456789abcdef"
WRONG_SECRET: Final = "not-the-cluster-secret-0123456789"
G: Final = "broker-a"
START_TIMEOUT_S: Final = 60.0
IO_TIMEOUT_S: Final = 3.0
LOAD_INTERVAL_S: Final = 0.05
#: the sends the load must have had acknowledged before it stops (a fuzz that ends sooner than
#: this on a fast machine leaves the load running until then): what the read-back checks
MIN_ACKED: Final = 21
ACKED_WAIT_S: Final = 60.0
MAX_CAPTURED: Final = 64
CODES: Final = [
    *(int(c) for c in ControllerRequestCode), *(int(c) for c in DLedgerRequestCode),
    PEER_AUTH_HELLO, PEER_AUTH_PROVE,
]
FIELDS: Final = [
    "clusterName", "brokerName", "brokerId", "brokerAddr", "brokerAddress", "epoch",
    "maxOffset", "confirmOffset", "heartbeatTimeoutMills", "electionPriority", "invokeTime",
    "masterBrokerId", "masterEpoch", "designateElect", "nonce", "proof",
]

State = tuple[Any, ...]


class LiveGroup(LoopThread):
    """The group on a Trio loop in a thread; the test thread calls into it with ``run``."""

    def __init__(self, tmp: Path) -> None:
        super().__init__("fuzz-controller", start_timeout_s=START_TIMEOUT_S, what="the group")
        self.tmp = tmp
        self.acked: list[bytes] = []
        self.sent = 0
        self.captured_ctl: list[bytes] = []
        self.captured_raft: list[tuple[int, bytes]] = []
        self.ctl: Controllers | None = None
        self.replicas: list[Replica] = []
        self.caller: Cluster | None = None
        self.cc: ControllerClient | None = None
        self.auth: RemotingClient | None = None
        self._loading = True
        self._idle: trio.Event | None = None
        self._enough: trio.Event | None = None  # set once MIN_ACKED sends were acknowledged

    # ------------------------------------------------------------------ the Trio side

    async def serve(self) -> None:
        self._idle, self._enough = trio.Event(), trio.Event()
        async with controller_group(
            self.tmp, secret=SECRET, heartbeat_timeout_ms=3000,
            raft_heartbeat_ms=300, raft_election_timeout_ms=3000,
        ) as (ctl, replicas, caller), open_remoting_client(
            node="fuzz-auth", handshake=peer_handshake(SECRET)
        ) as auth, trio.open_nursery() as nursery:
            self.ctl, self.replicas, self.caller, self.auth = ctl, replicas, caller, auth
            self.cc = ControllerClient(auth, ctl.addrs)
            await master_and_slave(replicas)
            self._capture()
            nursery.start_soon(self._load)
            await self.serving()
            nursery.cancel_scope.cancel()

    def _capture(self) -> None:
        """Record real frames: the brokers' controller requests, the controllers' Raft
        messages (bounded)."""
        for r in self.replicas:
            cc = r.manager.cc
            assert cc is not None
            cc.call = self._recording_call(cc.call)
        assert self.ctl is not None
        for m in self.ctl.members:
            assert m.node is not None and m.node.raft is not None
            t = m.node.raft.transport
            t.send = self._recording_send(t.send)

    def _recording_call(self, call: Any) -> Any:
        async def recorded(request: RemotingCommand, *args: Any) -> RemotingCommand:
            if len(self.captured_ctl) < MAX_CAPTURED:
                self.captured_ctl.append(encode(request, 1))
            return await call(request, *args)

        return recorded

    def _recording_send(self, send: Any) -> Any:
        def recorded(peer: str, data: bytes, code: int) -> None:
            if len(self.captured_raft) < MAX_CAPTURED:
                self.captured_raft.append((code, bytes(data)))
            send(peer, data, code)

        return recorded

    def master(self) -> Replica | None:
        return next((r for r in self.replicas if r.serving_as(True)), None)

    async def _load(self) -> None:
        assert self.caller is not None
        while True:
            await trio.sleep(LOAD_INTERVAL_S)
            m = self.master()
            if not self._loading:
                assert self._idle is not None
                self._idle.set()
                return
            if m is None:
                continue
            with trio.move_on_after(IO_TIMEOUT_S):
                self.acked += await send_some(self.caller, m.addr, 1, self.sent, "load")
            self.sent += 1
            if len(self.acked) >= MIN_ACKED:
                assert self._enough is not None
                self._enough.set()

    async def snapshot(self) -> State:
        """The controllers' state as an authenticated client reads it, and the Raft terms."""
        assert self.cc is not None and self.auth is not None and self.ctl is not None
        r = await self.cc.call(RemotingCommand.request(
            ControllerRequestCode.CONTROLLER_GET_REPLICA_INFO,
            GetReplicaInfoRequestHeader(broker_name=G).to_ext_fields()))
        info = ReplicaInfoResponseHeader.from_ext_fields(r.ext_fields)
        sss = SyncStateSet.decode(r.body)
        r = await self.cc.call(RemotingCommand.request(
            ControllerRequestCode.CONTROLLER_GET_SYNC_STATE_DATA, {},
            encode_broker_names([G])))
        table = decode_replicas_table(r.body)[G]
        metas = []
        for addr in self.ctl.addrs:
            meta = await self.auth.invoke(addr, RemotingCommand.request(
                ControllerRequestCode.CONTROLLER_GET_METADATA_INFO), IO_TIMEOUT_S)
            metas.append((meta.ext_fields.get("controllerLeaderId"),
                          meta.ext_fields.get("isLeader")))
        terms = tuple(m.node.raft.core.term for m in self.ctl.members
                      if m.node is not None and m.node.raft is not None)
        return (info, sss, table.master_broker_id, table.master_epoch,
                table.sync_state_set_epoch,
                sorted((v.broker_id, v.address) for v in table.in_sync),
                sorted((v.broker_id, v.address) for v in table.not_in_sync),
                tuple(metas), terms)

    def exited(self) -> list[str]:
        assert self.ctl is not None
        out = [m.addr for m in self.ctl.members
               if m.node is None or (m.done is not None and m.done.is_set())]
        out += [r.addr for r in self.replicas if r.done is None or r.done.is_set()]
        return out

    async def auth_call(self, request: RemotingCommand) -> None:
        assert self.auth is not None and self.ctl is not None
        leader = self.ctl.leader()
        if leader is not None:
            with contextlib.suppress(RemotingError):
                await self.auth.invoke(leader.addr, request, IO_TIMEOUT_S)

    async def read_back(self) -> tuple[list[bytes], list[bytes]]:
        assert self.caller is not None and self._enough is not None
        with trio.fail_after(ACKED_WAIT_S):  # the fuzz may end before the load had its sends
            await self._enough.wait()
        self._loading = False
        assert self._idle is not None
        await self._idle.wait()  # the send in flight ended (answered or timed out)
        m = self.master()
        assert m is not None, "no master at the end"
        return list(self.acked), await read_all(self.caller, m.addr)

    # ------------------------------------------------------------------ the test side

    def run(self, fn: Any, *args: Any) -> Any:
        if self.error is not None:
            raise AssertionError(f"the group's loop died: {self.error!r}")
        return trio.from_thread.run(fn, *args, trio_token=self._token)

    def run_sync(self, fn: Any, *args: Any) -> Any:
        return trio.from_thread.run_sync(fn, *args, trio_token=self._token)


# ------------------------------------------------------------------ raw sockets


def _connect(addr: str) -> socket.socket:
    return connect(addr, IO_TIMEOUT_S)


def _read_until_closed(sock: socket.socket) -> list[RemotingCommand]:
    """Every frame the node sends until it closes (or the timeout)."""
    decoder = FrameDecoder()
    got: list[RemotingCommand] = []
    try:
        while data := sock.recv(65536):
            got.extend(decoder.feed(data))
    except (OSError, ValueError):
        pass  # reset, timeout, or bytes that are no frame: nothing more to read
    return got


def _wrong_handshake(sock: socket.socket) -> None:
    """HELLO, then a PROVE under the wrong secret (the node closes after it)."""
    sock.sendall(encode(RemotingCommand.request(
        PEER_AUTH_HELLO, {"nonce": secrets.token_hex(16)}), 7))
    decoder = FrameDecoder()
    frames: list[RemotingCommand] = []
    while not frames:
        data = sock.recv(65536)
        if not data:
            raise ConnectionError("closed during the handshake")
        frames = list(decoder.feed(data))
    nonce = frames[0].ext_fields.get("nonce", "")
    sock.sendall(encode(RemotingCommand.request(
        PEER_AUTH_PROVE, {"proof": secrets.token_hex(32), "n": nonce}), 8))


def throw(addr: str, payload: bytes, wrong_secret: bool) -> list[RemotingCommand]:
    """Send ``payload`` unauthenticated (or after a wrong-secret handshake); every frame the
    node answered besides the handshake's HELLO."""
    sock = _connect(addr)
    try:
        try:
            if wrong_secret:
                _wrong_handshake(sock)
            sock.sendall(payload)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the node closed first: its right
        return [f for f in _read_until_closed(sock) if f.opaque not in (7,)]
    finally:
        sock.close()


def frame(header: dict[str, Any], body: bytes) -> bytes:
    h = json.dumps(header).encode()
    return struct.pack(">II", 4 + len(h) + len(body), len(h)) + h + body


# ------------------------------------------------------------------ strategies

values = st.one_of(
    st.sampled_from(["broker-a", "c", "TestCluster", "1", "2", "3", "0", "-1", "true",
                     "127.0.0.1:1", "2147483647", "9223372036854775807", ""]),
    st.integers(-(2**63), 2**63).map(str), st.text(max_size=30),
)
headers = st.fixed_dictionaries({
    "code": st.one_of(st.sampled_from(CODES), st.integers(-(2**31), 2**31 - 1)),
    "language": st.sampled_from(["JAVA", "PYTHON", "GO"]),
    "version": st.integers(0, 500),
    "opaque": st.integers(100, 2**31 - 1),
    "flag": st.sampled_from([0, 0, 2, 1, 3]),
    "extFields": st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=8), values,
                                 max_size=10),
})
bodies = st.one_of(
    st.binary(max_size=256),
    st.builds(lambda ids, e: SyncStateSet(frozenset(ids), e).encode(),
              st.sets(st.integers(0, 5), max_size=4), st.integers(0, 5)),
    st.lists(st.sampled_from(["broker-a", "x"]), max_size=3).map(encode_broker_names),
    st.just(b'{"syncStateSet":[1,2,3],"syncStateSetEpoch":'),
)
ports = st.sampled_from(["leader", "follower", "raft"])


def make_machine(group: LiveGroup, baseline: State) -> type[RuleBasedStateMachine]:
    class ControllerPortFuzzer(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.baseline = baseline

        def _addr(self, which: str) -> str:
            ctl = group.ctl
            assert ctl is not None
            leader = group.run_sync(ctl.leader)
            others = [m for m in ctl.members if m is not leader]
            if which == "leader" and leader is not None:
                return str(leader.addr)
            member = others[0] if others else ctl.members[0]
            if which == "raft" and member.node is not None and member.node.peer_address:
                host, port = member.node.peer_address
                return f"{host}:{port}"
            return str(member.addr)

        def _throw(self, which: str, payload: bytes, wrong: bool, code: int | None) -> None:
            answered = throw(self._addr(which), payload, wrong)
            if code != PEER_AUTH_HELLO:
                assert not answered, (which, code, answered)

        @rule(which=ports, header=headers, body=bodies, wrong=st.booleans())
        def random_frame(self, which: str, header: dict[str, Any], body: bytes,
                         wrong: bool) -> None:
            self._throw(which, frame(header, body), wrong, header["code"])

        @rule(i=st.integers(0, MAX_CAPTURED - 1), cut=st.integers(0, 64), wrong=st.booleans(),
              raft=st.booleans())
        def replay(self, i: int, cut: int, wrong: bool, raft: bool) -> None:
            if raft and group.captured_raft:
                code, data = group.captured_raft[i % len(group.captured_raft)]
                payload = encode(RemotingCommand.request(code, {}, data, oneway=True), 101)
                self._throw("raft", payload, wrong, code)
            elif group.captured_ctl:
                payload = group.captured_ctl[i % len(group.captured_ctl)]
                if cut:  # a garbled copy: one byte flipped
                    pos = cut % len(payload)
                    payload = payload[:pos] + bytes([payload[pos] ^ 0x5A]) + payload[pos + 1:]
                self._throw("leader", payload, wrong, None)

        @rule(which=ports, junk=st.binary(max_size=512), wrong=st.booleans())
        def garbage(self, which: str, junk: bytes, wrong: bool) -> None:
            self._throw(which, junk, wrong, None)

        @rule(wrong=st.booleans())
        def forged_election(self, wrong: bool) -> None:
            fake = "127.0.0.1:1"
            for request in (register_request(G, 3, fake),
                            heartbeat_request(G, 3, fake, max_offset=10**12, epoch=1)):
                self._throw("leader", encode(request, 102), wrong, None)
            outcomes = group.run(self._forge)
            assert all(o.startswith("refused") for o in outcomes), outcomes

        @staticmethod
        async def _forge() -> list[str]:
            assert group.ctl is not None
            leader = group.ctl.leader()
            if leader is None:
                return []
            async with open_remoting_client(node="stranger") as stranger:
                return await forge_election(stranger, leader.addr, "127.0.0.1:1")

        @rule(code=st.sampled_from([int(ControllerRequestCode.CONTROLLER_GET_REPLICA_INFO),
                                    int(ControllerRequestCode.CONTROLLER_GET_SYNC_STATE_DATA),
                                    int(ControllerRequestCode.CONTROLLER_GET_METADATA_INFO),
                                    int(ControllerRequestCode.BROKER_HEARTBEAT),
                                    int(ControllerRequestCode.GET_BROKER_EPOCH_CACHE), 1, 999]),
              ext=st.dictionaries(st.sampled_from(FIELDS), values, max_size=8), body=bodies)
        def authenticated_hostile(self, code: int, ext: dict[str, str], body: bytes) -> None:
            """As a peer that knows the secret: hostile reads and heartbeats get answers (or
            refusals) and change nothing a heartbeat may not."""
            group.run(group.auth_call, RemotingCommand.request(code, ext, body))

        @invariant()
        def nobody_exited_and_nothing_changed(self) -> None:
            assert not group.run_sync(group.exited)
            assert group.run(group.snapshot) == self.baseline

    return ControllerPortFuzzer


@pytest.fixture
def live_group(tmp_path: Path) -> Iterator[LiveGroup]:
    group = LiveGroup(tmp_path)
    try:
        group.start()
        yield group
    finally:
        group.stop()


@pytest.mark.slow
def test_fuzz_controller_ports(live_group: LiveGroup) -> None:
    baseline = live_group.run(live_group.snapshot)
    machine = make_machine(live_group, baseline)
    run_state_machine_as_test(machine, settings=settings(
        max_examples=12, stateful_step_count=12, deadline=None, derandomize=True,
        suppress_health_check=list(HealthCheck),
    ))
    acked, got = live_group.run(live_group.read_back)
    assert len(acked) >= MIN_ACKED, len(acked)
    missing = set(acked) - set(got)
    assert not missing, (len(missing), sorted(missing)[:5])
    assert not live_group.run_sync(live_group.exited)
    ctl = live_group.ctl
    assert ctl is not None
    refused = sum(m.node.listen_gate.refused + m.node.peer_gate.refused
                  for m in ctl.members if m.node is not None
                  and m.node.listen_gate is not None and m.node.peer_gate is not None)
    assert refused > 0
