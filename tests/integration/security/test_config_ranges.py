"""Every numeric config key is range-checked at load and at run time, and a runtime change is
applied or refused, never accepted and ignored (issue 31, item 10).

* Every numeric key of the broker (BrokerConfig, MessageStoreConfig, HA, DLedger, controller
  mode), the NameServer and the controller, given a value just out of its range (and NaN /
  infinity for a float), is refused at load with the key named; at run time
  (UPDATE_BROKER_CONFIG, UPDATE_NAMESRV_CONFIG on live nodes over real sockets) likewise, and
  nothing changes.
* A real ``mqbroker`` process refuses to boot with an out-of-range value, naming the key.
* A send whose header asks for ``defaultTopicQueueNums=-1`` creates no topic with 0 queues.
* ``transactionCheckInterval`` changed at run time re-times the real broker process's check loop
  at once: a broker booted with a 60 s interval checks a half message within seconds, then at
  the new interval.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping
from pathlib import Path

import orjson
import pytest
import trio

from rmq_cluster.broker.config import NUMERIC_RANGES, load_broker_config
from rmq_cluster.broker.config_update import LIVE_KEYS, current_values
from rmq_cluster.cluster.config import ConfigError, load_config, parse_properties
from rmq_cluster.cluster.remoting.client_pool import open_remoting_client
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode
from rmq_cluster.cluster.remoting.connection import Connection
from rmq_cluster.controller import config as controller_config
from rmq_cluster.namesrv import config as namesrv_config
from rmq_cluster.namesrv.server import NamesrvServer
from tests.integration.broker.conftest import WAIT_S, ok, running_cluster
from tests.integration.broker.test_broker_process import _start, _stop
from tests.integration.broker.test_update_config_process import _boot

PREPARED = 0x4
#: Keys whose float values are parsed as floats (NaN and infinity are tried too).
FLOAT_KEYS = {"accessMessageInMemoryMaxRatio", "serverPartialFrameTimeoutSeconds",
              "metricsCacheSeconds"}


def out_of_range(table: Mapping[str, tuple[float, float]]) -> Iterator[tuple[str, str]]:
    """(key, value) pairs just outside each key's range, a huge one, and NaN / inf."""
    for key, (low, high) in table.items():
        is_float = key in FLOAT_KEYS
        step = 0.0005 if is_float else 1
        below, above = low - step, high + step
        yield key, repr(below) if is_float else str(int(below))
        yield key, repr(above) if is_float else str(int(above))
        yield key, "9" * 30
        if is_float:
            yield key, "nan"
            yield key, "inf"


def test_every_numeric_key_is_refused_out_of_range_at_load() -> None:
    cases = 0
    for key, value in out_of_range(NUMERIC_RANGES):
        with pytest.raises(ConfigError, match=key):
            load_broker_config({key: value})
        cases += 1
    for key, value in out_of_range(namesrv_config.NUMERIC_RANGES):
        with pytest.raises(ConfigError, match=key):
            load_config(namesrv_config.NamesrvConfig, {key: value})
    for key, value in out_of_range(controller_config.NUMERIC_RANGES):
        with pytest.raises(ConfigError, match=key):
            load_config(controller_config.ControllerConfig, {key: value}).config.validate()
    assert cases >= 3 * len(NUMERIC_RANGES)


async def _broker_config(cluster) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return parse_properties(bytes(ok(await cluster.call(RequestCode.GET_BROKER_CONFIG)).body)
                            .decode())


async def test_every_numeric_key_is_refused_out_of_range_at_run_time(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cluster:
        before = await _broker_config(cluster)
        for key, value in out_of_range(NUMERIC_RANGES):
            # beside a good live key: all or nothing
            body = f"brokerPermission=4\n{key}={value}\n".encode()
            resp = await cluster.call(RequestCode.UPDATE_BROKER_CONFIG, body=body)
            assert resp.code == ResponseCode.SYSTEM_ERROR, (key, value)
            assert key in (resp.remark or ""), (key, value, resp.remark)
        assert await _broker_config(cluster) == before
        assert cluster.broker.supervisor.failure is None
        ok(await cluster.send("RangeTopic", b"still serving"))


async def test_namesrv_refuses_every_numeric_key_out_of_range_at_run_time(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    config = namesrv_config.NamesrvConfig(
        kv_config_path=str(tmp_path / "kv.json"), config_store_path=str(tmp_path / "ns.props"),
        bind_address="127.0.0.1", listen_port=0,
    )
    ns = NamesrvServer(config)
    host, port = await nursery.start(ns.serve)
    async with open_remoting_client() as client:
        for key, value in out_of_range(namesrv_config.NUMERIC_RANGES):
            body = f"orderMessageEnable=true\n{key}={value}\n".encode()
            req = RemotingCommand.request(RequestCode.UPDATE_NAMESRV_CONFIG, None, body)
            resp = await client.invoke(f"{host}:{port}", req, WAIT_S)
            assert resp.code != ResponseCode.SUCCESS, (key, value)
            assert key in (resp.remark or ""), (key, value, resp.remark)
        assert ns.config == config
        # a key read at boot only: refused (it needs a restart), not stored and ignored
        for body in (b"serverMaxConnections=5\n", b"listenPort=1234\norderMessageEnable=true\n"):
            req = RemotingCommand.request(RequestCode.UPDATE_NAMESRV_CONFIG, None, body)
            resp = await client.invoke(f"{host}:{port}", req, WAIT_S)
            assert resp.code == ResponseCode.SYSTEM_ERROR, body
            assert "cannot change while the NameServer runs (it needs a restart)" in (
                resp.remark or ""), resp.remark
        assert ns.config == config
        # a live one is taken
        req = RemotingCommand.request(RequestCode.UPDATE_NAMESRV_CONFIG, None,
                                      b"brokerChannelExpiredTime=60000\n")
        ok(await client.invoke(f"{host}:{port}", req, WAIT_S))
        assert ns.config.broker_channel_expired_time_ms == 60_000


async def test_a_runtime_change_of_a_boot_time_key_is_refused(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cluster:
        before = await _broker_config(cluster)
        for key in ("registerNameServerPeriod", "clientHousekeepingInterval",
                    "flushConsumerOffsetInterval", "serverMaxConnections",
                    "haSendHeartbeatInterval", "fileReservedTime", "traceTopicEnable"):
            assert key not in LIVE_KEYS
            (now,) = current_values(cluster.broker.settings, [key]).values()
            value = "true" if key == "traceTopicEnable" else str(int(now) + 1)
            resp = await cluster.call(RequestCode.UPDATE_BROKER_CONFIG,
                                      body=f"{key}={value}\n".encode())
            assert resp.code == ResponseCode.SYSTEM_ERROR, key
            assert f"{key} cannot change while the broker runs (it needs a restart)" in (
                resp.remark or ""), resp.remark
            # the value it has is no change: accepted
            ok(await cluster.call(RequestCode.UPDATE_BROKER_CONFIG,
                                  body=f"{key}={now}\n".encode()))
        assert await _broker_config(cluster) == before
        # defaultTopicQueueNums is live: the auto-create template follows it
        ok(await cluster.call(RequestCode.UPDATE_BROKER_CONFIG, body=b"defaultTopicQueueNums=3\n"))
        ok(await cluster.send("ThreeQueues", b"x", extra={"d": "8"}))
        tc = cluster.broker.topics.select("ThreeQueues")
        assert tc is not None and tc.write_queue_nums == tc.read_queue_nums == 3


async def test_a_send_asking_for_no_queues_creates_no_empty_topic(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cluster:
        for asked in ("-1", "0"):
            resp = await cluster.send(f"Empty{asked.strip('-')}", b"x", extra={"d": asked})
            assert resp.code != ResponseCode.SUCCESS, asked
            assert "defaultTopicQueueNums" in (resp.remark or ""), resp.remark
            assert cluster.broker.topics.select(f"Empty{asked.strip('-')}") is None
        ok(await cluster.send("FourQueues", b"x", extra={"d": "4"}))
        tc = cluster.broker.topics.select("FourQueues")
        assert tc is not None and tc.write_queue_nums == 4


async def test_mqbroker_refuses_to_boot_with_a_value_out_of_range(tmp_path: Path) -> None:
    conf = tmp_path / "broker.properties"
    conf.write_text(
        "brokerName=broker-r\nlistenPort=0\nbindAddress=127.0.0.1\nbrokerIP1=127.0.0.1\n"
        f"storePathRootDir={tmp_path}/store\naccessMessageInMemoryMaxRatio=nan\n"
    )
    log = tmp_path / "broker.log"
    proc = None
    try:
        with pytest.raises(AssertionError, match="exited early"):
            proc = await _start(["-m", "rmq_cluster.broker", "-c", str(conf)], log,
                                b"boot success")
        assert "accessMessageInMemoryMaxRatio: nan is out of range" in log.read_text()
    finally:
        await _stop(proc)


#: The interval set at run time, and how many checks at it the test waits for.
LIVE_INTERVAL_MS = 300
LIVE_CHECKS = 4


async def test_transaction_check_interval_applies_live_in_a_real_broker(tmp_path: Path) -> None:
    conf = tmp_path / "broker-tx.properties"
    conf.write_text(
        "brokerClusterName=TxCluster\nbrokerName=broker-tx\nlistenPort=0\nhaListenPort=0\n"
        "bindAddress=127.0.0.1\nbrokerIP1=127.0.0.1\n"
        f"storePathRootDir={tmp_path}/store\nmappedFileSizeCommitLog=16777216\n"
        "transactionCheckInterval=60000\ntransactionTimeOut=0\ntransactionCheckMax=1000\n"
    )
    checks: list[float] = []
    enough = trio.Event()

    def on_check(conn: Connection, request: RemotingCommand) -> None:
        checks.append(trio.current_time())
        if len(checks) >= LIVE_CHECKS:
            enough.set()

    proc = None
    try:
        proc, addr = await _boot(conf, tmp_path / "tx.log")
        async with open_remoting_client({RequestCode.CHECK_TRANSACTION_STATE: on_check}) as rc:
            hb = orjson.dumps({"clientID": "p1", "producerDataSet": [{"groupName": "TXG"}]})
            ok(await rc.invoke(addr, RemotingCommand.request(RequestCode.HEART_BEAT, None, hb)))
            ext = {"a": "TXG", "b": "TxLive", "c": "TBW102", "d": "4", "e": "0",
                   "f": str(PREPARED), "g": "0", "h": "0",
                   "i": "TRAN_MSG\x01true\x02PGROUP\x01TXG\x02UNIQ_KEY\x01" + "C" * 32}
            ok(await rc.invoke(addr, RemotingCommand.request(
                RequestCode.SEND_MESSAGE_V2, ext, b"half")))
            changed_at = trio.current_time()
            update = RemotingCommand.request(
                RequestCode.UPDATE_BROKER_CONFIG, None,
                f"transactionCheckInterval={LIVE_INTERVAL_MS}\n".encode())
            ok(await rc.invoke(addr, update))
            # booted with a 60 s interval: without the live change the first check would come
            # a minute after boot
            with trio.fail_after(20 * LIVE_INTERVAL_MS / 1000 + 5):
                await enough.wait()
        gaps = [b - a for a, b in itertools.pairwise(checks)]
        assert checks[0] - changed_at < 5.0
        # at the new interval (a round can run late on a busy machine, never early)
        assert all(g >= LIVE_INTERVAL_MS / 1000 * 0.8 for g in gaps), gaps
        assert math.fsum(gaps) / len(gaps) < 10 * LIVE_INTERVAL_MS / 1000, gaps
    finally:
        await _stop(proc)
