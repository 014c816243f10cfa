"""Real processes: ``mqnamesrv``, a master and a slave ``mqbroker``; 10 000
messages produced through the Python client with many sends in flight, the master killed with
SIGKILL, and everything read back from the slave through the client (the route then lists only
the slave and the client falls back to it).

* SYNC_MASTER: every acknowledged (SEND_OK) message is on the slave.
* ASYNC_MASTER: the messages missing on the slave are exactly the acknowledged ones at or after
  the slave's last appended CommitLog offset (at most one record may be cut at that offset).
"""

from __future__ import annotations

import dataclasses
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import trio

from rmq_cluster.client import Message, Producer, PullConsumer, PullStatus, SendStatus
from rmq_cluster.cluster.protocol.message import decode_offset_msg_id
from rmq_cluster.cluster.protocol.route import KVTable, TopicRouteData
from rmq_cluster.cluster.remoting.client_pool import RemotingClient, open_remoting_client
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode
from tests import ports
from tests.integration.broker.test_broker_process import _start, _stop

READY_WAIT_S = 20.0
MESSAGES = 10_000
IN_FLIGHT = 256
TOPIC = "HaProcTopic"
QUEUES = 4
POLL_S = 0.05  # polling a real process over the wire, always under a deadline

pytestmark = pytest.mark.slow


def _free_broker_port(taken: set[int]) -> int:
    """A listen port of this worker's slice (tests/ports.py) whose fast port (-2) and HA port
    (+1) are free too."""
    return ports.free_port(neighbours=(-2, 1), taken=taken)


async def _poll(check: Callable[[], Awaitable[bool]]) -> None:
    """Ask a real process over the wire until ``check`` holds (bounded by READY_WAIT_S)."""
    with trio.fail_after(READY_WAIT_S):
        while True:
            if await check():
                return
            await trio.sleep(POLL_S)


def _broker_conf(
    path: Path, *, port: int, broker_id: int, role: str, store: Path
) -> Path:
    path.write_text(
        "brokerClusterName=HaProcCluster\nbrokerName=broker-ha\n"
        f"brokerId={broker_id}\nbrokerRole={role}\nflushDiskType=ASYNC_FLUSH\n"
        f"listenPort={port}\nbindAddress=127.0.0.1\nbrokerIP1=127.0.0.1\n"
        f"storePathRootDir={store}\nmappedFileSizeCommitLog=16777216\n"
        "autoCreateTopicEnable=true\ndefaultTopicQueueNums=4\n"
    )
    return path


async def _runtime_info(client: RemotingClient, addr: str) -> dict[str, str]:
    resp = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO))
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return dict(KVTable.decode(resp.body).table)


async def _route(client: RemotingClient, ns_addr: str) -> TopicRouteData | None:
    resp = await client.invoke(
        ns_addr, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC})
    )
    if resp.code != ResponseCode.SUCCESS:
        return None
    return TopicRouteData.decode(resp.body)


async def _create_topic(client: RemotingClient, addr: str) -> None:
    ext = {
        "topic": TOPIC,
        "defaultTopic": "TBW102",
        "readQueueNums": str(QUEUES),
        "writeQueueNums": str(QUEUES),
        "perm": "6",
        "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": "0",
        "order": "false",
    }
    resp = await client.invoke(
        addr, RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, ext)
    )
    assert resp.code == ResponseCode.SUCCESS, resp.remark


async def _slave_knows_topic(client: RemotingClient, addr: str) -> bool:
    resp = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG))
    return resp.code == ResponseCode.SUCCESS and TOPIC.encode() in bytes(resp.body)


@dataclasses.dataclass
class Outcome:
    acked: Acked
    found: dict[bytes, tuple[int, int]]
    slave_max: int
    master_max: int
    master_push2slave: int
    master_info: dict[str, str]
    produce_s: float
    consume_s: float
    total_s: float


class Acked:
    """What the producer was told: body -> (queue id, queue offset, CommitLog offset)."""

    def __init__(self) -> None:
        self.ok: dict[bytes, tuple[int, int, int]] = {}
        self.not_ok: dict[str, int] = {}


async def _produce(
    ns_addr: str, *, pad: int = 0, on_acked: Callable[[int], None] | None = None
) -> Acked:
    acked = Acked()
    filler = b"x" * pad
    limit = trio.Semaphore(IN_FLIGHT)
    async with Producer("HaProcPG", namesrv_addr=ns_addr, retry_times_when_send_failed=0) as p:

        async def one(i: int) -> None:
            body = f"ha-{i:05d}".encode() + filler
            try:
                result = await p.send(Message(TOPIC, body))
            except Exception as exc:  # counted, the assertions only look at SEND_OK
                name = type(exc).__name__
                acked.not_ok[name] = acked.not_ok.get(name, 0) + 1
                return
            finally:
                limit.release()
            if result.status is SendStatus.SEND_OK:
                _host, phys = decode_offset_msg_id(result.offset_msg_id)
                acked.ok[body] = (result.queue.queue_id, result.queue_offset, phys)
                if on_acked is not None:
                    on_acked(len(acked.ok))
            else:
                acked.not_ok[result.status.value] = acked.not_ok.get(result.status.value, 0) + 1

        async with trio.open_nursery() as n:
            for i in range(MESSAGES):
                await limit.acquire()
                n.start_soon(one, i)
    return acked


async def _consume_all(ns_addr: str) -> dict[bytes, tuple[int, int]]:
    """Every message of the topic, read through the client's PullConsumer (body -> queue id,
    queue offset)."""
    found: dict[bytes, tuple[int, int]] = {}
    async with PullConsumer("HaProcCG", namesrv_addr=ns_addr, auto_commit=False) as consumer:
        queues = await consumer.fetch_queues(TOPIC)
        assert len(queues) == QUEUES
        for mq in queues:
            offset = 0
            while True:
                result = await consumer.pull(mq, offset, max_nums=32)
                if result.status is not PullStatus.FOUND:
                    assert result.status is PullStatus.NO_NEW_MSG, result
                    break
                for m in result.messages:
                    found[m.body] = (mq.queue_id, m.queue_offset)
                offset = result.next_begin_offset
    return found


async def _run_scenario(
    tmp_path: Path, role: str, *, pad: int = 0, freeze_slave_after: int | None = None
) -> Outcome:
    """``freeze_slave_after``: SIGSTOP the slave once that many sends were acked (it resumes,
    with SIGCONT, only after the master was killed), so the slave really lags."""
    started = time.monotonic()
    taken: set[int] = set()
    ns_port = _free_broker_port(taken)
    master_port = _free_broker_port(taken)
    slave_port = _free_broker_port(taken)
    ns_addr = f"127.0.0.1:{ns_port}"
    master_addr = f"127.0.0.1:{master_port}"
    slave_addr = f"127.0.0.1:{slave_port}"
    ns_conf = tmp_path / "namesrv.properties"
    ns_conf.write_text(
        f"listenPort={ns_port}\nbindAddress=127.0.0.1\nkvConfigPath={tmp_path}/kvConfig.json\n"
    )
    master_conf = _broker_conf(
        tmp_path / "master.properties",
        port=master_port,
        broker_id=0,
        role=role,
        store=tmp_path / "master",
    )
    slave_conf = _broker_conf(
        tmp_path / "slave.properties",
        port=slave_port,
        broker_id=1,
        role="SLAVE",
        store=tmp_path / "slave",
    )
    boot = b"boot success. serializeType=JSON and name server is " + ns_addr.encode()
    ns_proc = master = slave = None
    try:
        ns_proc = await _start(
            ["-m", "rmq_cluster.namesrv", "-c", str(ns_conf)], tmp_path / "ns.log", b"boot success"
        )
        master = await _start(
            ["-m", "rmq_cluster.broker", "-c", str(master_conf), "-n", ns_addr],
            tmp_path / "m.log",
            boot,
        )
        async with open_remoting_client(node="ha-proc-test") as client:
            await _create_topic(client, master_addr)
            slave = await _start(
                ["-m", "rmq_cluster.broker", "-c", str(slave_conf), "-n", ns_addr],
                tmp_path / "s.log",
                boot,
            )
            # the slave connected over HA, copied the topic (SlaveSynchronize), and the route
            # lists both brokers
            with trio.fail_after(READY_WAIT_S):
                while True:
                    info = await _runtime_info(client, master_addr)
                    route = await _route(client, ns_addr)
                    if (
                        info.get("haConnectionCount") == "1"
                        and await _slave_knows_topic(client, slave_addr)
                        and route is not None
                        and route.broker_datas
                        and set(route.broker_datas[0].broker_addrs) == {0, 1}
                    ):
                        break
                    await trio.sleep(POLL_S)

            frozen = False

            def on_acked(count: int) -> None:
                nonlocal frozen
                if freeze_slave_after is not None and count >= freeze_slave_after and not frozen:
                    assert slave is not None
                    slave.send_signal(signal.SIGSTOP)
                    frozen = True

            t0 = time.monotonic()
            acked = await _produce(ns_addr, pad=pad, on_acked=on_acked)
            produce_s = time.monotonic() - t0
            master_info = await _runtime_info(client, master_addr)

            master.send_signal(signal.SIGKILL)
            with trio.fail_after(10):
                await master.wait()
            if frozen:
                slave.send_signal(signal.SIGCONT)

            async def slave_saw_master_go() -> bool:
                # it read what was already on its HA socket, then the end of the stream
                info = await _runtime_info(client, slave_addr)
                return info.get("haClientConnected") == "false"

            async def route_lists_only_the_slave() -> bool:
                # the NameServer drops the master when its connection closes
                route = await _route(client, ns_addr)
                return bool(
                    route is not None
                    and route.broker_datas
                    and route.broker_datas[0].broker_addrs == {1: slave_addr}
                )

            # every record is the same size; the slave may end with part of one (frames cut
            # records), which it never dispatches
            record_size = int(master_info["commitLogMaxOffset"]) // MESSAGES

            async def slave_dispatched() -> bool:  # its ConsumeQueues caught up
                info = await _runtime_info(client, slave_addr)
                return int(info["dispatchBehindBytes"]) < record_size

            await _poll(slave_saw_master_go)
            await _poll(route_lists_only_the_slave)
            # the slave's last appended offset (it can get nothing more: its master is dead)
            slave_max = int((await _runtime_info(client, slave_addr))["commitLogMaxOffset"])
            await _poll(slave_dispatched)

        t1 = time.monotonic()
        found = await _consume_all(ns_addr)
        consume_s = time.monotonic() - t1
        return Outcome(
            acked=acked,
            found=found,
            slave_max=slave_max,
            master_max=int(master_info["commitLogMaxOffset"]),
            master_push2slave=int(master_info.get("haPush2SlaveMaxOffset", "0")),
            master_info=master_info,
            produce_s=produce_s,
            consume_s=consume_s,
            total_s=time.monotonic() - started,
        )
    finally:
        if slave is not None and slave.returncode is None:
            slave.send_signal(signal.SIGCONT)  # a stopped process would not die of SIGKILL late
        await _stop(slave)
        await _stop(master)
        await _stop(ns_proc)


def _check_positions(acked: Acked, found: dict[bytes, tuple[int, int]]) -> None:
    for body, (qid, qoff) in found.items():
        if body in acked.ok:
            assert acked.ok[body][:2] == (qid, qoff), body


async def test_sync_master_killed_every_acked_message_is_on_the_slave(tmp_path: Path) -> None:
    r = await _run_scenario(tmp_path, "SYNC_MASTER")
    acked, found = r.acked, r.found
    print(
        f"SYNC_MASTER: acked={len(acked.ok)} not_ok={acked.not_ok} found={len(found)} "
        f"slave_max={r.slave_max} master_max={r.master_max} "
        f"produce={r.produce_s:.2f}s consume={r.consume_s:.2f}s total={r.total_s:.2f}s"
    )
    assert len(acked.ok) >= MESSAGES * 0.99, acked.not_ok  # the slave was in sync throughout
    # the haStatus-like line of the master: the slave acked everything, in sync
    slave_line = r.master_info["haSlave0"]
    assert f"ackOffset={r.master_max} diff=0 inSync=true" in slave_line, slave_line
    missing = set(acked.ok) - set(found)
    assert not missing, sorted(missing)[:10]
    _check_positions(acked, found)


async def test_async_master_killed_missing_are_exactly_after_the_slave_offset(
    tmp_path: Path,
) -> None:
    r = await _run_scenario(tmp_path, "ASYNC_MASTER", pad=1024, freeze_slave_after=MESSAGES // 4)
    acked, found, slave_max = r.acked, r.found, r.slave_max
    print(
        f"ASYNC_MASTER: acked={len(acked.ok)} not_ok={acked.not_ok} found={len(found)} "
        f"slave_max={slave_max} master_max={r.master_max} "
        f"push2slave={r.master_push2slave} "
        f"produce={r.produce_s:.2f}s consume={r.consume_s:.2f}s total={r.total_s:.2f}s"
    )
    assert len(acked.ok) == MESSAGES, acked.not_ok  # ASYNC answers without waiting for a slave
    assert slave_max >= r.master_push2slave  # what the slave acked it has
    before = {b for b, (_q, _o, phys) in acked.ok.items() if phys < slave_max}
    after = {b for b, (_q, _o, phys) in acked.ok.items() if phys >= slave_max}
    # nothing at or past the slave's offset can be there
    assert not (after & set(found))
    # everything before it is, except at most the one record cut at the slave's offset
    missing_before = before - set(found)
    if missing_before:
        last_start = max(acked.ok[b][2] for b in before)
        assert missing_before == {b for b in before if acked.ok[b][2] == last_start}
    assert set(found) <= set(acked.ok)  # nothing invented
    _check_positions(acked, found)
