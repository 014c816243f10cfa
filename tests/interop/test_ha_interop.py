"""Issue 22 part 3: classic HA across implementations. A Java SLAVE (Apache RocketMQ 4.9.7,
brokerId=1) replicates from our SYNC_MASTER and our ASYNC_MASTER, and our SLAVE from a Java
SYNC_MASTER. Checked each time:

* the slave's CommitLog is a byte-identical prefix of the master's (files compared up to the
  slave's max offset, after it caught up);
* SYNC: a send is answered SEND_OK only once the other implementation's slave acked it (the
  slave's max offset covers it when the answer comes); a paused slave (SIGSTOP: connection
  open, no acks) makes sends answer FLUSH_SLAVE_TIMEOUT after the timeout, a dead one
  (``kill -9``) SLAVE_NOT_AVAILABLE, both with the message stored (msgId and queueOffset
  present), as Java's SYNC_MASTER answers them; after the pause the slave catches up, and
  restarted on its store after the kill it resumes from its own offset;
* ASYNC: sends answer SEND_OK whatever the slave does.

Runs without ACL: our HA challenge under ``aclEnable`` is our own extension (ha/access.py),
which a Java node does not speak. The NameServer is ours in every case (the slave learns its
master's broker address from it); the master's HA address is configured on the slave
(``haMasterAddress``), which both implementations honour.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import attrs
import pytest
import trio

from rmq_cluster.cluster.protocol import fastjson
from rmq_cluster.cluster.remoting.client_pool import open_remoting_client
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode as RC
from rmq_cluster.cluster.remoting.codes import ResponseCode
from tests.interop import oracle, scenario

pytestmark = pytest.mark.slow  # boots one JVM broker per case

#: How long a SYNC put waits for the slave (slaveTimeout, read by both implementations). Step 1
#: wants each of 20 sends acked by the other kind's slave within it: 1 s was a JVM slave's (or
#: our master's) stall away on a loaded 2-core run; the paused step pays it once, not twice.
SLAVE_TIMEOUT_MS: Final = 3000
#: The slave reports its offset at least this often (both sides' haSendHeartbeatInterval); a
#: Java slave's first report waits for it.
HEARTBEAT_MS: Final = 1000
QUEUES: Final = 4
CATCH_UP_TIMEOUT_S: Final = 30.0
SEND_OK: Final = int(ResponseCode.SUCCESS)
FLUSH_SLAVE_TIMEOUT: Final = int(ResponseCode.FLUSH_SLAVE_TIMEOUT)
SLAVE_NOT_AVAILABLE: Final = int(ResponseCode.SLAVE_NOT_AVAILABLE)


@attrs.define
class Pair:
    master: oracle.Node
    slave: oracle.Node
    master_addr: str
    slave_addr: str
    master_store: Path
    slave_store: Path
    slave_kind: str
    slave_root: Path
    slave_conf: dict[str, object]
    cp: str
    #: every node started, stopped in reverse order at the end
    nodes: list[oracle.Node]

    def restart_slave(self) -> None:
        """The slave again, on its own store and conf (after ``slave.kill9()``)."""
        self.slave.stop()
        self.slave = oracle.start_broker(self.slave_kind, self.slave_root, self.slave_conf, self.cp)
        self.nodes.append(self.slave)
        self.slave_addr = self.slave.wait_boot().group(1)


@contextlib.contextmanager
def master_and_slave(
    root: Path, master_kind: str, slave_kind: str, role: str, cp: str
) -> Iterator[Pair]:
    """Our NameServer, a ``role`` master of ``master_kind`` and a SLAVE of ``slave_kind`` (same
    brokerName), all stopped on exit."""
    nodes: list[oracle.Node] = []
    try:
        ns, ns_addr = oracle.start_namesrv("ours", root / "namesrv")
        nodes.append(ns)
        ns.wait_boot()
        master_port = oracle.free_broker_port()
        common = {"haSendHeartbeatInterval": HEARTBEAT_MS}
        mconf = oracle.broker_conf(root / "master", master_port, ns_addr, {
            **common, "brokerRole": role,
            "slaveTimeout": SLAVE_TIMEOUT_MS,
        })
        master = oracle.start_broker(master_kind, root / "master", mconf, cp)
        nodes.append(master)
        master_addr = master.wait_boot().group(1)
        sconf = oracle.broker_conf(root / "slave", oracle.free_broker_port(), ns_addr, {
            **common, "brokerId": 1, "brokerRole": "SLAVE",
            "haMasterAddress": f"127.0.0.1:{master_port + 1}",
        })
        slave = oracle.start_broker(slave_kind, root / "slave", sconf, cp)
        nodes.append(slave)
        slave_addr = slave.wait_boot().group(1)
        yield Pair(
            master, slave, master_addr, slave_addr,
            Path(str(mconf["storePathRootDir"])), Path(str(sconf["storePathRootDir"])),
            slave_kind, root / "slave", sconf, cp, nodes,
        )
    finally:
        oracle.stop_nodes(nodes[::-1])


async def _max_offset(client: Any, addr: str) -> int:
    """commitLogMaxOffset from the broker's runtime info. A Java broker answers SYSTEM_ERROR
    (NoSuchElementException from its TPS statistics) until its stats sampler ran once after
    boot: asked again until the deadline."""
    with trio.move_on_after(CATCH_UP_TIMEOUT_S):
        while True:
            req = RemotingCommand.request(RC.GET_BROKER_RUNTIME_INFO, {})
            resp = await client.invoke(addr, req)
            if resp.code == SEND_OK:
                return int(fastjson.loads(bytes(resp.body))["table"]["commitLogMaxOffset"])
            assert "NoSuchElementException" in (resp.remark or ""), (addr, resp.code, resp.remark)
            await trio.sleep(0.1)
    raise AssertionError(f"{addr}: no runtime info within {CATCH_UP_TIMEOUT_S:g}s")


async def _send(client: Any, addr: str, n: int) -> RemotingCommand:
    ext = scenario.send_v2(scenario.TOPIC, n % QUEUES, 5000 + n, keys=f"ha{n}")
    req = RemotingCommand.request(RC.SEND_MESSAGE_V2, ext, scenario.body_of(n, 300 + n))
    return await client.invoke(addr, req, timeout=SLAVE_TIMEOUT_MS / 1000 + 10)


def _stored(resp: RemotingCommand) -> bool:
    """Java stores the message whatever the slave did (FLUSH_SLAVE_TIMEOUT and
    SLAVE_NOT_AVAILABLE are answered with its msgId and queue offset)."""
    return "msgId" in resp.ext_fields and "queueOffset" in resp.ext_fields


async def _wait_caught_up(client: Any, pair: Pair) -> int:
    """The master's max offset once the slave's equals it (a deadline, no fixed sleep)."""
    master_max = slave_max = -1
    with trio.move_on_after(CATCH_UP_TIMEOUT_S):
        while True:
            master_max = await _max_offset(client, pair.master_addr)
            slave_max = await _max_offset(client, pair.slave_addr)
            if master_max == slave_max:
                return master_max
            await trio.sleep(0.1)
    raise AssertionError(f"slave at {slave_max}, master at {master_max} after the deadline")


def _commitlog_prefix(store: Path, end: int) -> bytes:
    """CommitLog bytes [0, end) from the store's files (named by their start offsets)."""
    out = bytearray()
    for path in sorted((store / "commitlog").glob("[0-9]" * 20)):
        start = int(path.name)
        if start >= end:
            break
        assert start == len(out), f"{path.name}: a gap before it (have {len(out)} bytes)"
        with path.open("rb") as f:
            out += f.read(end - start)
    assert len(out) == end, f"{store}: only {len(out)} of {end} CommitLog bytes"
    return bytes(out)


def _assert_identical_prefix(pair: Pair, end: int) -> None:
    assert end > 0
    master = _commitlog_prefix(pair.master_store, end)
    slave = _commitlog_prefix(pair.slave_store, end)
    if master != slave:
        first = next(i for i, (a, b) in enumerate(zip(master, slave, strict=True)) if a != b)
        raise AssertionError(f"CommitLogs differ first at byte {first} of {end}")
    # and they hold the messages sent (not two equal runs of zeros)
    assert len(scenario.read_commitlog(pair.slave_store)) >= 1


async def _create_topic(client: Any, addr: str) -> None:
    create = {
        "topic": scenario.TOPIC, "defaultTopic": "TBW102", "readQueueNums": str(QUEUES),
        "writeQueueNums": str(QUEUES), "perm": "6", "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": "0", "order": "false",
    }
    resp = await client.invoke(addr, RemotingCommand.request(RC.UPDATE_AND_CREATE_TOPIC, create))
    assert resp.code == SEND_OK, resp.remark


async def _wait_slave_streaming(client: Any, pair: Pair) -> None:
    """Until a send is acked by the slave (a SYNC master answers SLAVE_NOT_AVAILABLE until the
    slave's first report: a Java slave sends it after haSendHeartbeatInterval)."""
    with trio.move_on_after(CATCH_UP_TIMEOUT_S):
        n = 0
        while True:
            resp = await _send(client, pair.master_addr, 900 + n)
            if resp.code == SEND_OK:
                return
            assert resp.code in (SLAVE_NOT_AVAILABLE, FLUSH_SLAVE_TIMEOUT), (resp.code, resp.remark)
            n += 1
            await trio.sleep(0.2)
    raise AssertionError("the slave never acked a SYNC send")


async def _sync_scenario(pair: Pair) -> None:
    async with open_remoting_client(node="interop-ha") as client:
        await _create_topic(client, pair.master_addr)
        await _wait_slave_streaming(client, pair)
        # 1. every SEND_OK comes after the slave stored the message
        for n in range(20):
            resp = await _send(client, pair.master_addr, n)
            assert resp.code == SEND_OK, (n, resp.code, resp.remark)
            master_max = await _max_offset(client, pair.master_addr)
            slave_max = await _max_offset(client, pair.slave_addr)
            assert slave_max >= master_max, f"SEND_OK {n} before the slave had it"
        _assert_identical_prefix(pair, await _wait_caught_up(client, pair))

        # 2. a paused slave (connected, silent): FLUSH_SLAVE_TIMEOUT, the message stored
        pair.slave.pause()
        try:
            for n in range(20, 21):  # one send waits the whole slaveTimeout
                t0 = trio.current_time()
                resp = await _send(client, pair.master_addr, n)
                waited = trio.current_time() - t0
                assert resp.code == FLUSH_SLAVE_TIMEOUT, (n, resp.code, resp.remark)
                assert _stored(resp), resp.ext_fields
                assert waited >= SLAVE_TIMEOUT_MS / 1000 * 0.9, waited
        finally:
            pair.slave.resume()
        # the slave catches up with what was stored meanwhile, and acks again
        _assert_identical_prefix(pair, await _wait_caught_up(client, pair))
        resp = await _send(client, pair.master_addr, 22)
        assert resp.code == SEND_OK, (resp.code, resp.remark)

        # 3. a dead slave: SLAVE_NOT_AVAILABLE once the master saw the connection end
        # (sends before that wait out the timeout), the message stored
        pair.slave.kill9()
        codes: list[int] = []
        with trio.move_on_after(CATCH_UP_TIMEOUT_S):
            n = 23
            while not codes or codes[-1] != SLAVE_NOT_AVAILABLE:
                resp = await _send(client, pair.master_addr, n)
                codes.append(resp.code)
                assert _stored(resp), resp.ext_fields
                n += 1
        assert codes and codes[-1] == SLAVE_NOT_AVAILABLE, codes
        assert set(codes) <= {FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE}, codes

        # 4. the slave back on its store: it reconnects from its own (non-zero) offset, gets
        # what it missed, and acks again
        # (in a thread: its boot wait blocks for seconds, and the loop must go on reading, e.g.
        # the old slave's connection closing, not find it all at once when the boot is done)
        await trio.to_thread.run_sync(pair.restart_slave)
        await _wait_slave_streaming(client, pair)
        _assert_identical_prefix(pair, await _wait_caught_up(client, pair))
        resp = await _send(client, pair.master_addr, 1000)
        assert resp.code == SEND_OK, (resp.code, resp.remark)


async def _async_scenario(pair: Pair) -> None:
    async with open_remoting_client(node="interop-ha") as client:
        await _create_topic(client, pair.master_addr)
        for n in range(20):
            resp = await _send(client, pair.master_addr, n)
            assert resp.code == SEND_OK, (n, resp.code, resp.remark)
        _assert_identical_prefix(pair, await _wait_caught_up(client, pair))
        # an ASYNC master does not wait for its slave: a paused one changes nothing
        pair.slave.pause()
        try:
            for n in range(20, 25):
                resp = await _send(client, pair.master_addr, n)
                assert resp.code == SEND_OK, (n, resp.code, resp.remark)
        finally:
            pair.slave.resume()
        _assert_identical_prefix(pair, await _wait_caught_up(client, pair))


@pytest.mark.parametrize(
    ("master_kind", "slave_kind"),
    [("ours", "java"), ("java", "ours")],
    ids=["ours-sync-master_java-slave", "java-sync-master_our-slave"],
)
def test_sync_master_with_the_other_slave(
    master_kind: str, slave_kind: str, java_classpath: str, tmp_path: Path
) -> None:
    with master_and_slave(tmp_path, master_kind, slave_kind, "SYNC_MASTER", java_classpath) as p:
        trio.run(_sync_scenario, p)


def test_java_slave_of_our_async_master(java_classpath: str, tmp_path: Path) -> None:
    with master_and_slave(tmp_path, "ours", "java", "ASYNC_MASTER", java_classpath) as p:
        trio.run(_async_scenario, p)
