"""A stateful Hypothesis fuzzer for the DLedger peer port (issue 31 item 2), against a live group.

Three brokers of one DLedger group (``clusterSecret`` set: the dLegerPeers ports are gated) and a
NameServer run in this process, in a Trio loop on a thread of their own, under a light send
load (a producer sending all the time, its acknowledged messages recorded).  The test thread
talks to their dLegerPeers ports over real sockets with blocking stdlib calls:

* **unauthenticated** -- arbitrary frames (every DLedger code and others, oneway or not, random
  ext fields), garbled and valid-looking DLedger bodies with random terms and indices, replays of
  real peer frames captured from the members' own transports -- sent with no handshake, after a
  HELLO only, after a handshake with a WRONG secret, and after a replayed proof.  The gate must
  close the connection, count it, and the frame must never reach the Raft core: no member's
  term or leader moves, its core counts nothing, its log end and commit index never go back.
* **authenticated** (the right secret, as a member would) -- garbled bodies and impossible
  messages (terms past any long, indices below -1, gaps, a push contradicting the committed
  log): the core must refuse and count each one and change nothing; and replays of real frames,
  which Raft tolerates (no term or leader change).

After every step no member has exited; at the end every acknowledged message reads back from
the leader.
"""

from __future__ import annotations

import secrets
import socket
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final, TypeVar

import pytest
import trio
from hypothesis import HealthCheck, assume, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from rmq_cluster.client.config import ClientConfig
from rmq_cluster.client.model import Message as WireMessage
from rmq_cluster.client.producer import Producer
from rmq_cluster.cluster.protocol.message import iter_records
from rmq_cluster.cluster.remoting.codec import FrameDecoder, RemotingCommand, encode
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode
from rmq_cluster.cluster.remoting.peer_auth import (
    CLIENT_LABEL,
    PEER_AUTH_HELLO,
    PEER_AUTH_PROVE,
    SERVER_LABEL,
    proof,
)
from rmq_cluster.dledger.core import MAX_TERM
from rmq_cluster.dledger.messages import (
    DecodeError,
    Entry,
    HeartBeatRequest,
    LeadershipTransferRequest,
    Message,
    PushEntryRequest,
    PushEntryResponse,
    PushType,
    VoteRequest,
    VoteResponse,
    VoteResult,
    decode,
)
from rmq_cluster.dledger.messages import (
    ResponseCode as DlCode,
)
from rmq_cluster.dledger.messages import encode as encode_message
from rmq_cluster.dledger.node import DLedgerNode, DLedgerRequestCode
from tests.integration.dledger.dledger_testlib import GROUP, Group, dledger_group
from tests.integration.security.loop_testlib import LoopThread

SECRET: Final = secrets.token_urlsafe(32)
WRONG_SECRET: Final = secrets.token_urlsafe(32)
IO_TIMEOUT_S: Final = 5.0
START_TIMEOUT_S: Final = 60.0
LOAD_INTERVAL_S: Final = 0.02
#: the sends the load must have had acknowledged before the read-back checks them (the load runs
#: beside the fuzz; a fuzz that ends sooner, or a loaded machine's slow sends, leave it running
#: until then, within ACKED_WAIT_S)
MIN_ACKED: Final = 11
ACKED_WAIT_S: Final = 60.0
CAPTURED_FRAMES: Final = 256
TOPIC: Final = "DlFuzzTopic"
#: Bounds the run (~30-60 s on a loaded 2-core machine, the group's start included).
FUZZ_EXAMPLES: Final = 30
FUZZ_STEPS: Final = 10
#: election timeout = heartBeatTimeIntervalMs x maxHeartBeatLeak = 3 s: a starved loop on a
#: busy machine does not start an election that would look like the fuzzer's doing
GROUP_PROPS: Final = {"clusterSecret": SECRET, "maxHeartBeatLeak": "12",
                      "autoCreateTopicEnable": "true"}
DLEDGER_CODES: Final = [int(c) for c in DLedgerRequestCode]

T = TypeVar("T")


# --------------------------------------------------------------------------- the live group


class LiveGroup(LoopThread):
    """The group on a Trio loop in a background thread, with a producer and frame capture."""

    def __init__(self, tmp: Path) -> None:
        super().__init__("fuzz-dledger", start_timeout_s=START_TIMEOUT_S, what="group")
        self.tmp = tmp
        self.group: Group | None = None
        self.acked: list[bytes] = []
        self.send_errors = 0
        self._enough: trio.Event | None = None  # set once MIN_ACKED sends were acknowledged
        self.captured: deque[tuple[str, bytes, int]] = deque(maxlen=CAPTURED_FRAMES)
        self.peers: dict[str, str] = {}  # self id -> dLegerPeers address

    async def serve(self) -> None:
        self._enough = trio.Event()
        async with dledger_group(self.tmp, **GROUP_PROPS) as group:
            self.group = group
            await group.leader()
            for m in group.members:
                self._capture(m.self_id, m.store.node)
            self.peers = dict(p.split("-", 1) for p in group.members[0].peers.split(";"))
            async with trio.open_nursery() as nursery:
                load_started = trio.Event()
                nursery.start_soon(self._load, group, load_started)
                await load_started.wait()
                await self.serving()
                nursery.cancel_scope.cancel()

    def _capture(self, self_id: str, node: DLedgerNode | None) -> None:
        """Record every frame ``node`` sends (its transport's ``send``), for replays."""
        assert node is not None
        transport: Any = node.transport
        real = transport.send

        def send(peer: str, data: bytes, code: int) -> None:
            self.captured.append((peer, data, code))
            real(peer, data, code)

        transport.send = send

    async def _load(self, group: Group, started: trio.Event) -> None:
        cc = ClientConfig(namesrv_addr=group.ns_addr, poll_namesrv_interval_s=0.2)
        async with Producer("PGFuzz", client_config=cc, send_timeout_s=10.0) as producer:
            for i in range(10**9):
                body = b"fuzz-%06d" % i
                try:
                    await producer.send(WireMessage(TOPIC, body), timeout=10.0)
                except Exception:  # an unacknowledged send is allowed; it is not checked
                    self.send_errors += 1
                else:
                    self.acked.append(body)
                    started.set()
                    if len(self.acked) >= MIN_ACKED:
                        assert self._enough is not None
                        self._enough.set()
                await trio.sleep(LOAD_INTERVAL_S)

    def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the group's loop (a consistent view of its state)."""
        assert self._token is not None
        return trio.from_thread.run_sync(fn, trio_token=self._token)

    def snapshot(self) -> dict[str, dict[str, Any]]:
        def take() -> dict[str, dict[str, Any]]:
            assert self.group is not None
            out = {}
            for m in self.group.members:
                node = m.store.node
                assert node is not None and node.peer_gate is not None
                core = node.core
                out[m.self_id] = {
                    "running": m.running, "term": core.term, "leader": core.leader_id,
                    "commit": core.commit, "last": core.storage.last_index(),
                    "rejected": core.rejected, "undecodable": node.dropped_inbound,
                    "refused": node.peer_gate.refused,
                }
            return out

        return self.call(take)

    def wait_acked(self) -> list[bytes]:
        """The sends acknowledged so far, once there are at least MIN_ACKED of them."""
        async def wait() -> list[bytes]:
            assert self._enough is not None
            with trio.fail_after(ACKED_WAIT_S):  # the fuzz may end before the load had them
                await self._enough.wait()
            return list(self.acked)

        assert self._token is not None
        return trio.from_thread.run(wait, trio_token=self._token)

    def read_acked_back(self) -> list[bytes]:
        async def read() -> list[bytes]:
            assert self.group is not None
            leader = await self.group.leader()
            out: list[bytes] = []
            for q in range(8):
                offset = 0
                while True:
                    ext = {
                        "consumerGroup": "CGFuzz", "topic": TOPIC, "queueId": str(q),
                        "queueOffset": str(offset), "maxMsgNums": "1000", "sysFlag": "4",
                        "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*",
                        "subVersion": "0",
                    }
                    resp = await self.group.client.invoke(
                        leader.addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, ext), 5.0)
                    if resp.code != ResponseCode.SUCCESS:
                        break
                    out += [r.body for r in iter_records(bytes(resp.body))]
                    offset = int(resp.ext_fields["nextBeginOffset"])
            return out

        assert self._token is not None
        return trio.from_thread.run(read, trio_token=self._token)


# --------------------------------------------------------------------------- raw peer sockets

_opaque = iter(range(1, 1 << 30))


class RawPeer:
    """A blocking connection to a dLegerPeers port."""

    def __init__(self, addr: str) -> None:
        host, _, port = addr.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=IO_TIMEOUT_S)
        self.decoder = FrameDecoder()
        self.closed = False

    def send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError:  # the gate closed it already
            self.closed = True

    def call(self, cmd: RemotingCommand) -> RemotingCommand | None:
        opaque = next(_opaque)
        self.send(encode(cmd, opaque))
        while not self.closed:
            data = self._recv()
            for got in self.decoder.feed(data):
                if got.opaque == opaque:
                    return got
        return None

    def _recv(self) -> bytes:
        try:
            data = self.sock.recv(65536)
        except OSError:
            data = b""
        if not data:
            self.closed = True
        return data

    def wait_closed(self) -> bool:
        """Read until the other end closes (True) or IO_TIMEOUT_S passes (False)."""
        deadline = time.monotonic() + IO_TIMEOUT_S
        while not self.closed and time.monotonic() < deadline:
            self._recv()
        return self.closed

    def handshake(self, secret: str, *, replayed_proof: bytes | None = None) -> bool:
        """Our half of the peer handshake with ``secret`` (or a replayed proof): True when
        the server accepted it."""
        nonce = secrets.token_bytes(16)
        hello = self.call(RemotingCommand.request(PEER_AUTH_HELLO, {"nonce": nonce.hex()}))
        if hello is None or hello.code != ResponseCode.SUCCESS:
            return False
        server_nonce = bytes.fromhex(hello.ext_fields["nonce"])
        assert bytes.fromhex(hello.ext_fields["proof"]) == proof(
            SECRET, SERVER_LABEL, nonce, server_nonce)  # the server knows the real secret
        mine = replayed_proof or proof(secret, CLIENT_LABEL, server_nonce, nonce)
        done = self.call(RemotingCommand.request(PEER_AUTH_PROVE, {"proof": mine.hex()}))
        return done is not None and done.code == ResponseCode.SUCCESS

    def close(self) -> None:
        self.sock.close()


# --------------------------------------------------------------------------- strategies

ids = st.sampled_from(["n0", "n1", "n2", "n9", ""])
ints = st.one_of(st.integers(-2, 40), st.integers(-(1 << 63), (1 << 63) - 1))
entries = st.lists(st.builds(Entry, ints, ints, st.binary(max_size=16)), max_size=4).map(tuple)
dledger_messages = st.one_of(
    st.builds(PushEntryRequest, st.just(GROUP), ids, ids, ids, ints, st.sampled_from(PushType),
              ints, ints, ints, entries),
    st.builds(PushEntryResponse, st.just(GROUP), ids, ids, ids, ints, st.sampled_from(DlCode),
              ints, ints, ints),
    st.builds(HeartBeatRequest, st.just(GROUP), ids, ids, ids, ints, ints),
    st.builds(VoteRequest, st.just(GROUP), ids, ids, ids, ints, ints, ints, st.booleans(),
              st.booleans()),
    st.builds(VoteResponse, st.just(GROUP), ids, ids, ids, ints, st.sampled_from(VoteResult),
              st.booleans()),
    st.builds(LeadershipTransferRequest, st.just(GROUP), ids, ids, ids, ints, ids, ints),
)
garbled = st.binary(max_size=256).filter(lambda b: _undecodable(b))
bodies = st.one_of(garbled, dledger_messages.map(encode_message))
codes = st.one_of(st.sampled_from(DLEDGER_CODES), st.integers(-(1 << 31), (1 << 31) - 1))
frames = st.builds(
    lambda code, ext, body, oneway: RemotingCommand.request(code, ext, body, oneway=oneway),
    codes, st.dictionaries(st.text(max_size=8), st.text(max_size=16), max_size=3), bodies,
    st.booleans(),
)


def _undecodable(body: bytes) -> bool:
    try:
        decode(body)
    except DecodeError:
        return True
    return False


def impossible_for(target: str, sender: str, term: int, kind: int, n: int) -> Message:
    """A well-formed message no correct member could send ``target`` (``term``: its term)."""
    if kind == 0:  # the frame: entry 0 contradicts the committed log, in term + 1
        return PushEntryRequest(GROUP, sender, target, sender, term + 1, PushType.APPEND, -1, 0,
                                0, (Entry(0, term + 1, b"forged"),))
    if kind == 1:
        return HeartBeatRequest(GROUP, sender, target, sender, MAX_TERM + 1 + n, 0)
    if kind == 2:
        return PushEntryRequest(GROUP, sender, target, sender, term, PushType.APPEND, -2 - n, 0,
                                0)
    if kind == 3:  # entries not following prev
        return PushEntryRequest(GROUP, sender, target, sender, term, PushType.APPEND, n, term,
                                0, (Entry(n + 2, term, b"gap"),))
    return VoteRequest(GROUP, sender, target, sender, term + 1, -5 - n, 1)


# --------------------------------------------------------------------------- the machine


def _oneway(code: int, body: bytes) -> RemotingCommand:
    return RemotingCommand.request(code, {}, body, oneway=True)


class DLedgerPortFuzz(RuleBasedStateMachine):
    live: LiveGroup

    def __init__(self) -> None:
        super().__init__()
        self.before = self.live.snapshot()
        self.baseline = {k: (v["term"], v["leader"]) for k, v in self.before.items()}
        self.real_proof: bytes | None = None

    def _target(self, index: int) -> tuple[str, str]:
        ids_ = sorted(self.live.peers)
        pid = ids_[index % len(ids_)]
        return pid, self.live.peers[pid]

    def _unauthenticated(self, index: int, frames_: list[RemotingCommand], mode: str) -> None:
        pid, addr = self._target(index)
        refused = self.live.snapshot()[pid]["refused"]
        peer = RawPeer(addr)
        try:
            shook = False
            if mode == "wrong_secret":
                shook = peer.handshake(WRONG_SECRET)
            elif mode == "replayed_proof" and self.real_proof is not None:
                shook = peer.handshake(SECRET, replayed_proof=self.real_proof)
            elif mode == "hello_only":
                peer.call(RemotingCommand.request(PEER_AUTH_HELLO,
                                                  {"nonce": secrets.token_hex(16)}))
            assert not shook, f"{mode}: the gate accepted a handshake without the secret"
            for f in frames_:
                peer.send(encode(f, next(_opaque)))
            if frames_ or mode in ("wrong_secret", "replayed_proof"):
                assert peer.wait_closed(), f"{mode}: the gate left the connection open"
                assert self.live.snapshot()[pid]["refused"] > refused
        finally:
            peer.close()

    @initialize()
    def capture_a_real_proof(self) -> None:
        """Authenticate once for real and keep the proof (replayed later, on other nonces)."""
        _pid, addr = self._target(0)
        peer = RawPeer(addr)
        try:
            nonce = secrets.token_bytes(16)
            hello = peer.call(RemotingCommand.request(PEER_AUTH_HELLO, {"nonce": nonce.hex()}))
            assert hello is not None and hello.code == ResponseCode.SUCCESS
            server_nonce = bytes.fromhex(hello.ext_fields["nonce"])
            self.real_proof = proof(SECRET, CLIENT_LABEL, server_nonce, nonce)
            done = peer.call(RemotingCommand.request(PEER_AUTH_PROVE,
                                                     {"proof": self.real_proof.hex()}))
            assert done is not None and done.code == ResponseCode.SUCCESS
        finally:
            peer.close()

    @rule(index=st.integers(0, 2), frames_=st.lists(frames, min_size=1, max_size=4),
          mode=st.sampled_from(["none", "hello_only", "wrong_secret", "replayed_proof"]))
    def arbitrary_frames(self, index: int, frames_: list[RemotingCommand], mode: str) -> None:
        self._unauthenticated(index, frames_, mode)

    @rule(index=st.integers(0, 2), picks=st.lists(st.integers(0, CAPTURED_FRAMES), min_size=1,
                                                   max_size=6),
          mode=st.sampled_from(["none", "hello_only", "wrong_secret"]))
    def replayed_real_frames(self, index: int, picks: list[int], mode: str) -> None:
        captured = self.live.call(lambda: list(self.live.captured))
        assume(captured)
        chosen = [captured[p % len(captured)] for p in picks]
        self._unauthenticated(index, [_oneway(code, data) for _peer, data, code in chosen], mode)

    @rule(index=st.integers(0, 2), kind=st.integers(0, 4), n=st.integers(0, 1000),
          garbage=st.one_of(st.none(), garbled))
    def signed_impossible(self, index: int, kind: int, n: int, garbage: bytes | None) -> None:
        """With the right secret: the core (not the gate) must refuse, count, change nothing."""
        pid, addr = self._target(index)
        state = self.live.snapshot()[pid]
        counted = state["rejected"] + state["undecodable"]
        sender = next(p for p in sorted(self.live.peers) if p != pid)
        body = garbage if garbage is not None else encode_message(
            impossible_for(pid, sender, state["term"], kind, n))
        peer = RawPeer(addr)
        try:
            assert peer.handshake(SECRET)
            peer.send(encode(_oneway(int(DLedgerRequestCode.PUSH), body), next(_opaque)))
            deadline = time.monotonic() + IO_TIMEOUT_S
            while True:
                now = self.live.snapshot()[pid]
                if now["rejected"] + now["undecodable"] > counted:
                    break
                assert time.monotonic() < deadline, "the core did not refuse an impossible frame"
                time.sleep(0.01)
        finally:
            peer.close()
        self.before = self.live.snapshot()  # counted as expected: the new baseline

    @rule(index=st.integers(0, 2), picks=st.lists(st.integers(0, CAPTURED_FRAMES), min_size=1,
                                                   max_size=6))
    def signed_replays(self, index: int, picks: list[int]) -> None:
        """Duplicated real frames from an authenticated peer: Raft shrugs them off."""
        captured = self.live.call(lambda: list(self.live.captured))
        assume(captured)
        _pid, addr = self._target(index)
        peer = RawPeer(addr)
        try:
            assert peer.handshake(SECRET)
            for p in picks:
                _peer, data, code = captured[p % len(captured)]
                peer.send(encode(_oneway(code, data), next(_opaque)))
            # a barrier: an admin request answered after the frames before it were delivered
            answer = peer.call(RemotingCommand.request(
                int(DLedgerRequestCode.LEADERSHIP_TRANSFER), {}, b"{}"))
            assert answer is not None and answer.code == int(DlCode.SUCCESS)  # (DLedger's 200)
        finally:
            peer.close()
        self.before = self.live.snapshot()

    @invariant()
    def nothing_changed_that_should_not(self) -> None:
        now = self.live.snapshot()
        for pid, state in now.items():
            old = self.before[pid]
            assert state["running"], f"{pid} exited"
            assert (state["term"], state["leader"]) == self.baseline[pid], (pid, state)
            assert state["rejected"] == old["rejected"], (pid, "an unauthenticated frame "
                                                          "reached the core", state)
            assert state["undecodable"] == old["undecodable"], (pid, state)
            assert state["commit"] >= old["commit"] and state["last"] >= old["commit"], (
                pid, old, state)
        self.before = now


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveGroup]:
    group = LiveGroup(tmp_path_factory.mktemp("fuzz-dledger"))
    try:
        group.start()
        yield group
    finally:
        group.stop()


@pytest.mark.slow
def test_fuzz_dledger_peer_port(live: LiveGroup) -> None:
    DLedgerPortFuzz.live = live
    runner = DLedgerPortFuzz.TestCase
    runner.settings = settings(
        max_examples=FUZZ_EXAMPLES, stateful_step_count=FUZZ_STEPS, deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    runner().runTest()
    final = live.snapshot()
    assert all(s["running"] for s in final.values())
    assert sum(s["refused"] for s in final.values()) > 0
    acked = live.wait_acked()
    assert len(acked) >= MIN_ACKED
    got = set(live.read_acked_back())
    missing = [b for b in acked if b not in got]
    assert not missing, (len(missing), missing[:5])
    print(f"acked={len(acked)} send_errors={live.send_errors} "
          f"refused={ {k: s['refused'] for k, s in final.items()} } "
          f"core_rejected={ {k: s['rejected'] + s['undecodable'] for k, s in final.items()} }")
