"""Reads from a slave (RocketMQ 4.9 ``suggestWhichBrokerId``): with slaveReadEnable a master
sends a consumer that lags more than accessMessageInMemoryMaxRatio % of RAM to the group's
whichBrokerWhenConsumeSlowly (1); a slave sends it back to the group's brokerId (0) once it is
no longer behind (its ratio is 10 points less); without slaveReadEnable the suggestion is always
the master and a slave still serves the pull. The client follows the suggestion."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from rmq_cluster.broker.node import BrokerNode
from rmq_cluster.client import MessageQueue, PullConsumer, PullStatus
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode
from tests.integration.broker.conftest import (
    WAIT_S,
    Cluster,
    _run_broker,
    broker_settings,
    messages,
    ok,
    running_cluster,
)

TOPIC = "SlaveReadTopic"
COUNT = 100
BODY = b"x" * 200
#: Pretend RAM: the master's threshold is 40 % of it (4000 bytes), the slave's 30 % (3000).
FAKE_RAM_BYTES = 10_000


@pytest.fixture(autouse=True)
def _small_ram(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("rmq_cluster.broker.processors.pull.TOTAL_MEMORY_BYTES", FAKE_RAM_BYTES)


async def _start_slave(
    cluster: Cluster, store_dir: Path, **props: str
) -> tuple[BrokerNode, str]:
    settings = broker_settings(
        store_dir, cluster.ns_addr, brokerId="1", brokerRole="SLAVE", haListenPort="0", **props
    )
    slave = BrokerNode(settings)
    host, port = await cluster.nursery.start(_run_broker, slave, trio.CancelScope(), trio.Event())
    return slave, f"{host}:{port}"


def _pull_request(offset: int) -> RemotingCommand:
    return RemotingCommand.request(
        RequestCode.PULL_MESSAGE,
        {
            "consumerGroup": "CG",
            "topic": TOPIC,
            "queueId": "0",
            "queueOffset": str(offset),
            "maxMsgNums": "32",
            "sysFlag": "4",
            "commitOffset": "0",
            "suspendTimeoutMillis": "0",
            "subscription": "*",
            "subVersion": "0",
        },
    )


async def _pull(cluster: Cluster, addr: str, offset: int) -> tuple[int, int]:
    """(messages, suggestWhichBrokerId) of one pull at ``offset``."""
    resp = await cluster.client.invoke(addr, _pull_request(offset), WAIT_S)
    assert resp.code == ResponseCode.SUCCESS, (resp.code, resp.remark)
    return len(messages(resp)), int(resp.ext_fields["suggestWhichBrokerId"])


async def _fill_and_replicate(
    cluster: Cluster, tmp_path: Path, **slave_props: str
) -> tuple[BrokerNode, str]:
    for _ in range(COUNT):
        ok(await cluster.send(TOPIC, BODY))
    slave, slave_addr = await _start_slave(cluster, tmp_path / "slave", **slave_props)
    end = cluster.broker.store.max_phys_offset
    with trio.fail_after(WAIT_S):
        await slave.store.wait_appended_beyond(end - 1)
        await slave.wait_until(lambda b: b.slave_sync_count >= 1)  # it knows the topic
    if slave.store.dispatch_behind_bytes > 0:
        slave.store.dispatch()
    return slave, slave_addr


async def test_slave_read_enable_master_suggests_slave_when_lagging_slave_sends_back(
    tmp_path: Path,
) -> None:
    async with running_cluster(
        tmp_path, brokerRole="ASYNC_MASTER", haListenPort="0", slaveReadEnable="true"
    ) as cluster:
        _slave, slave_addr = await _fill_and_replicate(cluster, tmp_path, slaveReadEnable="true")
        # far behind (~68 records of ~330 bytes after the last one pulled): go to the slave
        assert await _pull(cluster, cluster.addr, 0) == (32, 1)
        # at the tail (last record pulled is the last one): stay on the master
        assert await _pull(cluster, cluster.addr, COUNT - 4) == (4, 0)
        # the slave serves the lagging consumer and keeps it while it lags (30 % there) ...
        assert await _pull(cluster, slave_addr, 0) == (32, 1)
        # ... and sends it back to the master (the group's brokerId) once it caught up
        assert await _pull(cluster, slave_addr, COUNT - 4) == (4, 0)


async def test_without_slave_read_enable_always_the_master_and_the_slave_still_serves(
    tmp_path: Path,
) -> None:
    async with running_cluster(tmp_path, brokerRole="ASYNC_MASTER", haListenPort="0") as cluster:
        _slave, slave_addr = await _fill_and_replicate(cluster, tmp_path)
        assert await _pull(cluster, cluster.addr, 0) == (32, 0)
        assert await _pull(cluster, slave_addr, 0) == (32, 0)  # 4.x: served, suggests master


async def test_client_follows_the_suggestion_to_the_slave_and_back(tmp_path: Path) -> None:
    async with running_cluster(
        tmp_path, brokerRole="ASYNC_MASTER", haListenPort="0", slaveReadEnable="true"
    ) as cluster:
        slave, _slave_addr = await _fill_and_replicate(cluster, tmp_path, slaveReadEnable="true")
        master = cluster.broker
        # the route lists both brokers of the group
        with trio.fail_after(WAIT_S):
            await slave.wait_until(lambda b: b.register_count >= 1)
        async with PullConsumer("CG", namesrv_addr=cluster.ns_addr, auto_commit=False) as c:
            mq = MessageQueue(TOPIC, master.bcfg.broker_name, 0)
            await c.instance.update_route(TOPIC)
            assert set(c.instance.broker_addrs[mq.broker_name]) == {0, 1}
            got: list[bytes] = []
            served_by: list[tuple[int, int]] = []
            offset = 0
            with trio.fail_after(WAIT_S):
                while True:
                    before = (master.stats.get_total, slave.stats.get_total)
                    result = await c.pull(mq, offset, max_nums=32)
                    if result.status is not PullStatus.FOUND:
                        break
                    served_by.append(
                        (master.stats.get_total - before[0], slave.stats.get_total - before[1])
                    )
                    got += [m.body for m in result.messages]
                    offset = result.next_begin_offset
        assert len(got) == COUNT
        # records are 324 bytes: pull 1 (0-31) on the master leaves ~22 KB behind -> 1;
        # pull 2 (32-63) on the slave, ~12 KB behind -> stay; pull 3 (64-95) on the slave,
        # 1.6 KB behind (< 3000) -> back to 0; pull 4 (96-99) on the master again
        assert served_by == [(32, 0), (0, 32), (0, 32), (4, 0)]
        assert c.pull_api.suggested[mq] == 0


async def test_slave_never_moves_an_offset_it_may_just_not_have_yet(tmp_path: Path) -> None:
    async with running_cluster(tmp_path, brokerRole="ASYNC_MASTER", haListenPort="0") as cluster:
        _slave, slave_addr = await _fill_and_replicate(cluster, tmp_path)
        beyond = COUNT + 50  # e.g. consumed on the master past what the slave received
        on_master = await cluster.client.invoke(cluster.addr, _pull_request(beyond), WAIT_S)
        assert on_master.code == ResponseCode.PULL_OFFSET_MOVED
        # corrected to the queue's end, as Apache RocketMQ 4.9.7 answers (tests/interop)
        assert on_master.ext_fields["nextBeginOffset"] == str(COUNT)
        on_slave = await cluster.client.invoke(slave_addr, _pull_request(beyond), WAIT_S)
        assert on_slave.code == ResponseCode.PULL_RETRY_IMMEDIATELY
        assert on_slave.ext_fields["nextBeginOffset"] == str(beyond)  # kept
        assert on_slave.ext_fields["suggestWhichBrokerId"] == "0"
