"""A stateful Hypothesis fuzzer for the HA port (issue 31, "What it must show"), against real
processes: ``rmq-cluster up --acl`` with one master and its slave (ASYNC_MASTER, then
SYNC_MASTER), so the master challenges every peer (ha/access.py), under a light send load.

The fuzzer connects to the master's HA port as a stranger (an address outside
``haAllowedSlaveAddresses``: refused at accept), as an unauthenticated peer (garbage, partial
answers, wrong HMACs, answers replayed from an earlier session for a new nonce, whole replayed
sessions, Java-style offset reports, garbled and huge offsets, bursts of peers that never
answer, past HA_MAX_PENDING_HANDSHAKES) and as a signed peer that knows the secret (the answer
a real slave computes for that nonce, then partial, garbled, negative, huge and over-acking
reports). The replayed material is what this fuzzer's own signed sessions sent: byte for byte
what the real slave sends for the same nonce (the answer is HMAC(secret, nonce)).

Throughout: no node exits, no unauthenticated connection is ever counted as a slave, and the
refusals show in the master's runtime-info counters (haRefusedConnections, haAuthFailures,
haOverAcks). With the real slave stopped (SIGSTOP) and
only forged acks arriving, push2SlaveMaxOffset never covers a message sent meanwhile: a
SYNC_MASTER send answers FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE, never SEND_OK. At the end
every SEND_OK message of the load is read back, by its CommitLog offset, from the master and,
once it caught up, from the slave. A second test holds 400 unanswered handshakes and reads the
master's real RSS from /proc.

The fake-master half is not here: a slave learns its master from the NameServers (whose
registrations need the admin account under ``--acl``) or from ``haMasterAddress`` in its own
config, so a stranger has no way to point a slave at itself.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

import attrs
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from rmq_cluster.client import frames
from rmq_cluster.cluster.protocol.message import decode_offset_msg_id, decode_record
from rmq_cluster.cluster.protocol.route import KVTable
from rmq_cluster.cluster.remoting.codec import FrameDecoder, RemotingCommand, encode
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode
from rmq_cluster.deploy.testing import pid_running
from rmq_cluster.ha.access import (
    HA_AUTH_ANSWER_BYTES,
    HA_AUTH_CHALLENGE_BYTES,
    auth_answer,
    decode_challenge,
)
from rmq_cluster.ha.protocol import MAX_OFFSET, OFFSET_REPORT
from rmq_cluster.ha.protocol import FrameDecoder as HAFrameDecoder
from rmq_cluster.ha.service import HA_AUTH_TIMEOUT_S, HA_MAX_PENDING_HANDSHAKES
from tests.integration.security.acl_cluster_testlib import ADMIN, AclCluster, acl_cluster

pytestmark = pytest.mark.slow

MASTER: Final = "broker-a"
SLAVE: Final = "broker-a-s"
TOPIC: Final = "HaFuzz"
QUEUES: Final = 4
#: Examples x steps per replication mode: ~15-25 s of fuzzing each on a busy 2-core machine.
FUZZ_EXAMPLES: Final = 8
FUZZ_STEPS: Final = 20
#: Forged-ack rounds with the slave stopped, at most, per example (each costs ~slaveTimeout).
MAX_PAUSES_PER_EXAMPLE: Final = 1
SLAVE_TIMEOUT_MS: Final = 1000
IO_TIMEOUT_S: Final = 5.0
#: A signed peer reads the master's stream this long per step (it is not a real slave).
SIGNED_READ_S: Final = 0.05
WAIT_S: Final = 30.0
POLL_S: Final = 0.05  # polling a real process over the wire, always under a deadline
#: The light load: one send in flight, one every LOAD_INTERVAL_S.
LOAD_INTERVAL_S: Final = 0.02
#: A loopback address other than 127.0.0.1 (Linux routes all of 127/8 to lo): the stranger.
STRANGER_IP: Final = "127.0.0.2"
NOT_SEND_OK: Final = (ResponseCode.FLUSH_SLAVE_TIMEOUT, ResponseCode.SLAVE_NOT_AVAILABLE)
#: An offset no CommitLog of this test reaches (a first report there is refused at once).
UNREACHABLE_OFFSET: Final = 1 << 40


# ----------------------------------------------------------------------------- the wire


class Rpc:
    """One blocking remoting connection signing every request as the cluster's admin."""

    def __init__(self, addr: str) -> None:
        host, port = addr.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=IO_TIMEOUT_S)
        self.sock.settimeout(IO_TIMEOUT_S)
        self.decoder = FrameDecoder()
        self.opaque = 0

    def send(self, cmd: RemotingCommand) -> int:
        self.opaque += 1
        self.sock.sendall(encode(ADMIN.sign(cmd), self.opaque))
        return self.opaque

    def answer(self, opaque: int) -> RemotingCommand:
        while True:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("the broker closed a healthy connection")
            for got in self.decoder.feed(data):
                if got.opaque == opaque:
                    return got

    def call(self, cmd: RemotingCommand) -> RemotingCommand:
        return self.answer(self.send(cmd))

    def close(self) -> None:
        self.sock.close()


def _runtime_info(rpc: Rpc) -> dict[str, str]:
    resp = rpc.call(RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO))
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return dict(KVTable.decode(resp.body).table)


def _send_frame(i: int) -> tuple[RemotingCommand, bytes]:
    body = f"ha-fuzz-{i:06d}".encode()
    cmd = frames.send_message(
        group="HaFuzzPG", topic=TOPIC, queue_id=i % QUEUES, sys_flag=0,
        born_timestamp=int(time.time() * 1000), flag=0, properties="", body=body,
        broker_name=MASTER,
    )
    return cmd, body


def _phys_end(resp: RemotingCommand) -> int:
    """The CommitLog offset a SEND answer names (its message starts there)."""
    _host, phys = decode_offset_msg_id(resp.ext_fields["msgId"])
    return phys


def _connect_ha(port: int, source_ip: str = "127.0.0.1") -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(IO_TIMEOUT_S)
    sock.bind((source_ip, 0))
    sock.connect(("127.0.0.1", port))
    return sock


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    got = bytearray()
    while len(got) < n:
        data = sock.recv(n - len(got))
        if not data:
            break
        got += data
    return bytes(got)


def _read_until_closed(sock: socket.socket) -> bytes:
    """Everything until the master closes (a reset counts as closed); TimeoutError if it
    keeps the connection open past IO_TIMEOUT_S."""
    got = bytearray()
    with contextlib.suppress(ConnectionResetError):
        while data := sock.recv(65536):
            got += data
    return bytes(got)


def _quiet_send(sock: socket.socket, data: bytes) -> None:
    """Send, ignoring that the master may have closed already (that is its right)."""
    with contextlib.suppress(OSError):
        sock.sendall(data)


def _report(offset: int) -> bytes:
    """An 8-byte offset report, any signed 64-bit value (negative ones are malformed)."""
    return OFFSET_REPORT.pack(offset)


# ----------------------------------------------------------------------------- the group


@attrs.define
class Tally:
    """What the fuzzer expects the master to have counted (lower bounds)."""

    refused: int = 0
    auth_failures: int = 0
    over_acks: int = 0
    forged_acks: int = 0
    pauses: int = 0
    #: how often each rule ran (printed: what the fuzzer really did)
    steps: dict[str, int] = attrs.field(factory=dict)


class Load(threading.Thread):
    """The light send load: one signed send at a time to the master; SEND_OK ones recorded
    as CommitLog offset -> body."""

    def __init__(self, addr: str) -> None:
        super().__init__(name="ha-fuzz-load", daemon=True)
        self.addr = addr
        self.stop = threading.Event()
        self.acked: dict[int, bytes] = {}
        self.other: dict[int, int] = {}  # response code -> count (not SEND_OK)
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            rpc = Rpc(self.addr)
            try:
                i = 0
                while not self.stop.wait(LOAD_INTERVAL_S):
                    cmd, body = _send_frame(i)
                    resp = rpc.call(cmd)
                    if resp.code == ResponseCode.SUCCESS:
                        self.acked[_phys_end(resp)] = body
                    else:
                        self.other[resp.code] = self.other.get(resp.code, 0) + 1
                    i += 1
            finally:
                rpc.close()
        except BaseException as exc:  # handed to the test
            self.error = exc


@attrs.define
class Group:
    cluster: AclCluster
    sync: bool
    secret: str
    master_rpc: Rpc
    slave_rpc: Rpc
    load: Load
    tally: Tally = attrs.field(factory=Tally)
    #: answers a real slave gave for a nonce, and whole signed sessions (replay material)
    answers: list[tuple[bytes, bytes]] = attrs.field(factory=list)
    sessions: list[bytes] = attrs.field(factory=list)

    @property
    def ha_port(self) -> int:
        return self.cluster.ha_port(MASTER)

    def master_info(self) -> dict[str, str]:
        return _runtime_info(self.master_rpc)

    def assert_alive(self) -> None:
        for name in (MASTER, SLAVE):
            assert pid_running(self.cluster.pid(name)), f"{name} exited"


def _secret(cluster: AclCluster) -> str:
    """The secret the master's HA challenge is answered with: the broker's ``clusterSecret``
    when its config has one, else ``aclSecretKey`` (what ``up --acl`` gives every broker)."""
    values: dict[str, str] = {}
    for line in (cluster.dir / "conf" / f"{MASTER}.properties").read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.lstrip().startswith("#"):
            values[key.strip()] = value.strip()
    secret = values.get("clusterSecret") or values.get("aclSecretKey")
    assert secret, "the master's config holds no HA secret"
    return secret


def _until(check: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(POLL_S)  # another process must act: polled, under the deadline


def _create_topic(rpc: Rpc) -> None:
    resp = rpc.call(RemotingCommand.request(
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        {"topic": TOPIC, "defaultTopic": "TBW102", "readQueueNums": str(QUEUES),
         "writeQueueNums": str(QUEUES), "perm": "6", "topicFilterType": "SINGLE_TAG"},
    ))
    assert resp.code == ResponseCode.SUCCESS, resp.remark


@pytest.fixture(params=["ASYNC", "SYNC"])
def group(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Group]:
    mode = request.param
    props = {"slaveTimeout": str(SLAVE_TIMEOUT_MS), "haAllowedSlaveAddresses": "127.0.0.1"}
    with acl_cluster(tmp_path, profile={"base": "single", "slaves_per_master": 1,
                                        "replication": mode},
                     broker_properties=props) as cluster:
        slave_pid = cluster.pid(SLAVE)
        master_rpc = Rpc(cluster.addr(MASTER))
        slave_rpc = Rpc(cluster.addr(SLAVE))
        load = Load(cluster.addr(MASTER))
        try:
            _until(lambda: _runtime_info(master_rpc).get("haConnectionCount") == "1",
                   "the slave to connect")
            _create_topic(master_rpc)
            load.start()
            yield Group(cluster, mode == "SYNC", _secret(cluster), master_rpc, slave_rpc, load)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(slave_pid, signal.SIGCONT)  # a stopped slave would outlive SIGKILL
            load.stop.set()
            load.join(WAIT_S)
            master_rpc.close()
            slave_rpc.close()


# ----------------------------------------------------------------------------- the machine


@attrs.define
class Peer:
    """One fuzzer connection to the master's HA port."""

    sock: socket.socket
    nonce: bytes
    signed: bool = False
    sent: bytearray = attrs.field(factory=bytearray)  # what we sent after the challenge
    decoder: HAFrameDecoder = attrs.field(factory=HAFrameDecoder)
    received_end: int = -1  # end of the last frame the master sent us

    def send(self, data: bytes) -> None:
        self.sent += data
        _quiet_send(self.sock, data)


reports = st.one_of(
    st.integers(0, 1 << 20),
    st.integers(0, MAX_OFFSET),
    st.integers(-(1 << 63), -1),  # malformed
    st.sampled_from([0, MAX_OFFSET, 1 << 62, (1 << 32) - 1]),
)


def fuzz_machine(g: Group) -> type[RuleBasedStateMachine]:
    def counted(fn: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(fn)
        def step(self: RuleBasedStateMachine, **kwargs: Any) -> None:
            g.tally.steps[fn.__name__] = g.tally.steps.get(fn.__name__, 0) + 1
            fn(self, **kwargs)

        return step

    class HaPortFuzzer(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.peers: list[Peer] = []  # unauthenticated, still open
            self.signed: list[Peer] = []
            self.pauses = 0

        # ------------------------------------------------------------------ helpers

        def _challenged(self) -> Peer:
            sock = _connect_ha(g.ha_port)
            challenge = _recv_exact(sock, HA_AUTH_CHALLENGE_BYTES)
            return Peer(sock, decode_challenge(challenge))

        def _refused(self, peer: Peer) -> None:
            """An unauthenticated peer: the master closes it and sends nothing after the
            challenge; counted as a failed handshake."""
            with contextlib.suppress(OSError):
                peer.sock.shutdown(socket.SHUT_WR)
            got = _read_until_closed(peer.sock)
            peer.sock.close()
            assert got == b"", f"an unauthenticated peer received {got[:64]!r}"
            g.tally.auth_failures += 1

        def _drain(self, peer: Peer, seconds: float) -> bool:
            """Read what the master streams for ``seconds``; False once it closed."""
            peer.sock.settimeout(seconds)
            try:
                data = peer.sock.recv(1 << 20)
            except TimeoutError:
                return True
            except OSError:
                return False
            finally:
                peer.sock.settimeout(IO_TIMEOUT_S)
            if not data:
                return False
            for frame in peer.decoder.feed(data):
                peer.received_end = max(peer.received_end, frame.end)
            return True

        def _close_signed(self, peer: Peer) -> None:
            """Close a signed peer; return once the master no longer counts it as a slave."""
            self.signed.remove(peer)
            g.sessions.append(bytes(peer.sent))
            peer.sock.close()
            _until(lambda: int(g.master_info()["haConnectionCount"]) <= 1 + len(self.signed),
                   "the master to drop a closed fuzzer slave")

        # ------------------------------------------------------------------ strangers

        @rule()
        @counted
        def stranger(self) -> None:
            sock = _connect_ha(g.ha_port, STRANGER_IP)
            try:
                _quiet_send(sock, _report(0))
                assert _read_until_closed(sock) == b"", "a refused peer received bytes"
            finally:
                sock.close()
            g.tally.refused += 1

        # ------------------------------------------------------------------ unauthenticated

        @precondition(lambda self: len(self.peers) < 8)
        @rule(data=st.binary(max_size=HA_AUTH_ANSWER_BYTES - 1))
        @counted
        def open_and_start_answering(self, data: bytes) -> None:
            peer = self._challenged()
            peer.send(data)  # not a whole answer yet: the master waits
            self.peers.append(peer)

        @precondition(lambda self: bool(self.peers))
        @rule(pick=st.integers(0), data=st.binary(max_size=HA_AUTH_ANSWER_BYTES - 1))
        @counted
        def partial_answer_then_close(self, pick: int, data: bytes) -> None:
            peer = self.peers.pop(pick % len(self.peers))
            peer.send(data[: max(0, HA_AUTH_ANSWER_BYTES - 1 - len(peer.sent))])
            self._refused(peer)

        @precondition(lambda self: bool(self.peers))
        @rule(pick=st.integers(0), kind=st.sampled_from(
            ["random", "wrong-secret", "other-nonce", "replayed", "java-reports", "session"]),
            junk=st.binary(min_size=HA_AUTH_ANSWER_BYTES, max_size=96), tail=st.lists(reports))
        @counted
        def wrong_answer(self, pick: int, kind: str, junk: bytes, tail: list[int]) -> None:
            """Complete the answer wrongly, then offset reports (forged acks)."""
            peer = self.peers.pop(pick % len(self.peers))
            if kind == "wrong-secret":
                answer = auth_answer(g.secret + "x", peer.nonce)
            elif kind == "other-nonce":
                answer = auth_answer(g.secret, bytes(reversed(peer.nonce)))
            elif kind == "replayed" and g.answers:
                answer = g.answers[len(junk) % len(g.answers)][1]
            elif kind == "session" and g.sessions:
                answer = g.sessions[len(junk) % len(g.sessions)]
            elif kind == "java-reports":
                answer = b"".join(_report(o) for o in [*tail, 0, 0, 0, 0])
            else:
                answer = junk
            if peer.sent:  # the bytes already sent are the answer's first ones
                answer = junk
            peer.send(answer + b"".join(_report(o) for o in tail))
            self._refused(peer)

        @rule(nonce_pick=st.integers(0), tail=st.lists(reports, max_size=4))
        @counted
        def replayed_session(self, nonce_pick: int, tail: list[int]) -> None:
            """A captured signed session (a real slave's answer and reports) replayed on a new
            connection: its answer was for another nonce."""
            peer = self._challenged()
            if g.answers:
                peer.send(g.answers[nonce_pick % len(g.answers)][1])
            if g.sessions:
                peer.send(g.sessions[nonce_pick % len(g.sessions)])
            peer.send(b"\x00" * max(0, HA_AUTH_ANSWER_BYTES - len(peer.sent)))
            peer.send(b"".join(_report(o) for o in tail))
            self._refused(peer)

        @rule(n=st.integers(1, HA_MAX_PENDING_HANDSHAKES + 8))
        @counted
        def handshake_burst(self, n: int) -> None:
            """``n`` peers that connect and never answer (beyond HA_MAX_PENDING_HANDSHAKES
            pending, closed at accept); then they go, and the master takes new peers again."""
            burst: list[socket.socket] = []
            challenged = 0
            try:
                for _ in range(n):
                    sock = _connect_ha(g.ha_port)
                    burst.append(sock)
                    got = _recv_exact(sock, HA_AUTH_CHALLENGE_BYTES)
                    if got:
                        decode_challenge(got)
                        challenged += 1
            finally:
                for sock in burst:
                    sock.close()
            g.tally.refused += n - challenged
            g.tally.auth_failures += challenged + len(self.peers)
            for peer in self.peers:  # held too: they go with the burst
                peer.sock.close()
            self.peers.clear()
            _until(lambda: int(g.master_info()["haAuthFailures"]) >= g.tally.auth_failures,
                   "the master to count the burst's handshakes as failed")

        # ------------------------------------------------------------------ signed

        @precondition(lambda self: len(self.signed) < 3)
        @rule(start=st.sampled_from(["zero", "end", "inside", "past-end", "far", "negative"]),
              frac=st.floats(0, 1), split=st.integers(0, 40))
        @counted
        def signed_open(self, start: str, frac: float, split: int) -> None:
            """A peer that knows the secret: the answer a real slave gives, then its first
            report (where it starts), possibly cut across two sends."""
            peer = self._challenged()
            answer = auth_answer(g.secret, peer.nonce)
            g.answers.append((peer.nonce, answer))
            master_max = int(g.master_info()["commitLogMaxOffset"])
            first = {
                "zero": 0, "end": master_max, "inside": int(master_max * frac),
                "past-end": master_max + 1 + int(frac * 4096),
                "far": min(MAX_OFFSET, UNREACHABLE_OFFSET + int(frac * MAX_OFFSET)),
                "negative": max(-MAX_OFFSET - 1, -1 - int(frac * MAX_OFFSET)),
            }[start]
            data = answer + _report(first)
            peer.send(data[:split])
            peer.send(data[split:])
            if first < 0 or first >= UNREACHABLE_OFFSET:  # malformed, or ahead of the master
                assert _read_until_closed(peer.sock) == b""
                peer.sock.close()
                return
            peer.signed = True
            self.signed.append(peer)
            # just past the master's end, it may have caught up by the time the report is read
            if not self._drain(peer, SIGNED_READ_S):
                assert first > master_max, "a signed slave starting in the log was dropped"
                self._close_signed(peer)

        @precondition(lambda self: bool(self.signed))
        @rule(pick=st.integers(0), cut=st.integers(1, 7), offset=st.integers(0, 1 << 20))
        @counted
        def signed_partial_report(self, pick: int, cut: int, offset: int) -> None:
            """Part of a report, then (another step) the rest: nothing happens in between."""
            peer = self.signed[pick % len(self.signed)]
            whole = _report(min(offset, max(peer.received_end, 0)))
            peer.send(whole[:cut])
            if self._drain(peer, SIGNED_READ_S):
                peer.send(whole[cut:])
            if not self._drain(peer, SIGNED_READ_S):
                self._close_signed(peer)

        @precondition(lambda self: bool(self.signed))
        @rule(pick=st.integers(0))
        @counted
        def signed_acks_what_it_got(self, pick: int) -> None:
            peer = self.signed[pick % len(self.signed)]
            self._drain(peer, SIGNED_READ_S)
            if peer.received_end >= 0:
                peer.send(_report(peer.received_end))
            if not self._drain(peer, SIGNED_READ_S):
                self._close_signed(peer)

        @precondition(lambda self: bool(self.signed))
        @rule(pick=st.integers(0), beyond=st.integers(1, 1 << 40))
        @counted
        def signed_over_ack(self, pick: int, beyond: int) -> None:
            """An ack past anything the master has: the connection is closed and counted."""
            peer = self.signed[pick % len(self.signed)]
            master_max = int(g.master_info()["commitLogMaxOffset"])
            peer.send(_report(min(MAX_OFFSET, master_max + (1 << 41) + beyond)))
            _read_until_closed(peer.sock)  # the stream it was sent, then the close
            self._close_signed(peer)
            g.tally.over_acks += 1

        @precondition(lambda self: bool(self.signed))
        @rule(pick=st.integers(0), value=st.integers(-(1 << 63), -1))
        @counted
        def signed_negative_report(self, pick: int, value: int) -> None:
            peer = self.signed[pick % len(self.signed)]
            peer.send(_report(value))
            _read_until_closed(peer.sock)
            self._close_signed(peer)

        # ------------------------------------------------------------------ forged acks

        @precondition(lambda self: self.pauses < MAX_PAUSES_PER_EXAMPLE)
        @rule(kinds=st.lists(st.sampled_from(["junk", "replayed", "none"]), min_size=1,
                             max_size=4))
        @counted
        def forged_acks_while_slave_stopped(self, kinds: list[str]) -> None:
            self.pauses += 1
            for peer in list(self.signed):
                self._close_signed(peer)
            forged_acks_while_slave_stopped(g, kinds)

        # ------------------------------------------------------------------ invariants

        @invariant()
        def nodes_alive_and_only_signed_peers_are_slaves(self) -> None:
            g.assert_alive()
            count = int(g.master_info()["haConnectionCount"])
            assert count <= 1 + len(self.signed), (count, len(self.signed))

        def teardown(self) -> None:
            for peer in self.peers:
                peer.sock.close()
                g.tally.auth_failures += 1  # closed before a whole answer: "no answer"
            for peer in list(self.signed):
                self._close_signed(peer)

    return HaPortFuzzer


def forged_acks_while_slave_stopped(g: Group, kinds: list[str]) -> None:
    """Stop the real slave; with only forged acks arriving (unauthenticated peers reporting
    the master's end and beyond), a message sent now is never covered by push2SlaveMaxOffset,
    and a SYNC_MASTER answers it FLUSH_SLAVE_TIMEOUT or SLAVE_NOT_AVAILABLE."""
    _until(lambda: int(g.master_info()["haConnectionCount"]) <= 1, "fuzzer slaves to go")
    slave_pid = g.cluster.pid(SLAVE)
    os.kill(slave_pid, signal.SIGSTOP)
    try:
        forged = []
        master_max = int(g.master_info()["commitLogMaxOffset"])
        for kind in kinds:
            sock = _connect_ha(g.ha_port)
            nonce = decode_challenge(_recv_exact(sock, HA_AUTH_CHALLENGE_BYTES))
            if kind == "replayed" and g.answers:
                _quiet_send(sock, g.answers[-1][1])
            elif kind == "junk":
                _quiet_send(sock, auth_answer(g.secret, nonce)[::-1])
            forged.append(sock)  # "none": no answer, only reports (read as an answer)
        master = g.master_rpc
        cmd, _body = _send_frame(10**6 + g.tally.pauses)
        opaque = master.send(cmd)
        master.sock.settimeout(POLL_S)
        try:
            while True:
                for sock in forged:  # the master's end and far beyond: forged acks
                    _quiet_send(sock, _report(master_max) + _report(MAX_OFFSET))
                    g.tally.forged_acks += 1
                try:
                    resp = master.answer(opaque)
                    break
                except TimeoutError:
                    continue
        finally:
            master.sock.settimeout(IO_TIMEOUT_S)
        end = _phys_end(resp) if resp.code in (ResponseCode.SUCCESS, *NOT_SEND_OK) else -1
        info = g.master_info()
        if g.sync:
            assert resp.code in NOT_SEND_OK, (resp.code, resp.remark)
        else:
            assert resp.code == ResponseCode.SUCCESS, (resp.code, resp.remark)
        assert end >= 0
        assert int(info["haPush2SlaveMaxOffset"]) <= end, info["haPush2SlaveMaxOffset"]
        for sock in forged:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_WR)
            _read_until_closed(sock)
            sock.close()
            g.tally.auth_failures += 1
    finally:
        os.kill(slave_pid, signal.SIGCONT)
    g.tally.pauses += 1
    _until(lambda: int(g.master_info()["haPush2SlaveMaxOffset"]) > end,
           "the resumed slave to ack the message sent while it was stopped")


# ----------------------------------------------------------------------------- the test


def _read_back(rpc: Rpc, phys: int) -> bytes:
    resp = rpc.call(RemotingCommand.request(RequestCode.VIEW_MESSAGE_BY_ID,
                                            {"offset": str(phys)}))
    assert resp.code == ResponseCode.SUCCESS, (phys, resp.code, resp.remark)
    return decode_record(resp.body).body


def test_ha_port_fuzz(group: Group) -> None:
    g = group
    started = time.monotonic()
    run_state_machine_as_test(
        fuzz_machine(g),
        settings=settings(
            max_examples=FUZZ_EXAMPLES,
            stateful_step_count=FUZZ_STEPS,
            deadline=None,
            database=None,
            phases=(Phase.generate,),  # a live cluster does not replay identically: no shrink
            suppress_health_check=list(HealthCheck),
        ),
    )
    if g.tally.pauses == 0:
        forged_acks_while_slave_stopped(g, ["junk", "replayed", "none"])
    fuzz_s = time.monotonic() - started
    g.load.stop.set()
    g.load.join(WAIT_S)
    assert g.load.error is None, repr(g.load.error)
    g.assert_alive()
    # the master counted every refusal
    info = g.master_info()
    assert int(info["haRefusedConnections"]) >= g.tally.refused
    assert int(info["haOverAcks"]) >= g.tally.over_acks

    def counted() -> bool:
        return int(g.master_info()["haAuthFailures"]) >= g.tally.auth_failures

    _until(counted, f"haAuthFailures >= {g.tally.auth_failures}")
    # every acked message is on the master and, once it caught up, on the slave
    master_max = int(info["commitLogMaxOffset"])
    _until(lambda: int(_runtime_info(g.slave_rpc)["commitLogMaxOffset"]) >= master_max,
           "the slave to catch up")
    acked = dict(g.load.acked)
    assert acked, g.load.other
    for phys, body in sorted(acked.items()):
        assert _read_back(g.master_rpc, phys) == body
        assert _read_back(g.slave_rpc, phys) == body
    g.assert_alive()
    print(f"{'SYNC' if g.sync else 'ASYNC'}: fuzz {fuzz_s:.1f}s, tally={g.tally}, "
          f"acked={len(acked)}, not acked={g.load.other}, master info: "
          f"refused={info['haRefusedConnections']} authFailures={info['haAuthFailures']} "
          f"overAcks={info['haOverAcks']}")


# ----------------------------------------------------------------------------- held handshakes

#: Connections that connect, read the challenge and never answer.
HELD_HANDSHAKES: Final = 400
#: What one such connection may cost the master in resident memory, at most (measured from
#: /proc: a socket, a task and a small read buffer; a 256 KiB buffer apiece fails it).
MAX_RSS_PER_HELD_HANDSHAKE_BYTES: Final = 64 * 1024


def _rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def test_held_handshakes_cost_bounded_memory(tmp_path: Path) -> None:
    """Peers from an allowed address that open the HA port and never answer the challenge:
    the master's real RSS grows by less than MAX_RSS_PER_HELD_HANDSHAKE_BYTES apiece, and those
    beyond HA_MAX_PENDING_HANDSHAKES are closed at accept and counted."""
    with acl_cluster(tmp_path, profile={"base": "single"}) as cluster:
        pid = cluster.pid(MASTER)
        port = cluster.ha_port(MASTER)
        rpc = Rpc(cluster.addr(MASTER))
        held: list[socket.socket] = []
        challenged = 0
        try:
            before = _rss_bytes(pid)
            started = time.monotonic()
            for _ in range(HELD_HANDSHAKES):
                sock = _connect_ha(port)
                held.append(sock)
                got = _recv_exact(sock, HA_AUTH_CHALLENGE_BYTES)
                if got:
                    decode_challenge(got)
                    challenged += 1
                # else closed at accept: too many handshakes under way
            during = _rss_bytes(pid)
            # none of the challenged ones timed out meanwhile: all were held at once
            all_held = time.monotonic() - started < HA_AUTH_TIMEOUT_S
            info = _runtime_info(rpc)
        finally:
            for sock in held:
                sock.close()
            rpc.close()
        grown = during - before
        print(f"held handshakes: {challenged} challenged, rss {before >> 20} -> "
              f"{during >> 20} MiB ({grown // max(1, challenged)} bytes each); "
              f"refused={info['haRefusedConnections']}")
        assert challenged > 0
        if all_held:
            assert challenged <= HA_MAX_PENDING_HANDSHAKES
        assert grown < challenged * MAX_RSS_PER_HELD_HANDSHAKE_BYTES
        assert int(info["haRefusedConnections"]) == HELD_HANDSHAKES - challenged
        assert pid_running(pid)
