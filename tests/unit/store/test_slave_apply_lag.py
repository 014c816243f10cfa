"""The slave's replication-lag histogram: per replicated record, the ms from the master storing
it to the slave dispatching it (readable there); masters keep none."""

from __future__ import annotations

from pathlib import Path

from rmq_cluster.cluster.protocol.message import Message
from rmq_cluster.store.config import BrokerRole
from rmq_cluster.store.dispatcher import LAG_HISTOGRAM_BUCKETS
from rmq_cluster.store.message_store import MessageStore
from tests.unit.store.store_testlib import small_config

HOST = ("127.0.0.1", 10911)
T0 = 1_700_000_000_000


def _msg(i: int) -> Message:
    return Message(topic="T", body=bytes([i % 256]) * 300, queue_id=i % 2,
                   properties={"TAGS": "a", "UNIQ_KEY": f"U{i:08d}"}, born_timestamp=T0,
                   born_host=HOST, store_host=HOST)


def test_slave_counts_each_record_by_its_lag(tmp_path: Path) -> None:
    now = [T0]
    master = MessageStore.open(small_config(tmp_path / "m"), clock_ms=lambda: now[0])
    try:
        assert master.dispatcher.lag_histogram is None
        for i in range(30):
            now[0] = T0 + i  # record i stored at T0 + i
            master.append_message(_msg(i))
        raw = b"".join(bytes(mf.view[: mf.wrote]) for mf in master.commitlog.queue.files)
    finally:
        master.close()
    slave_now = [T0 + 40]
    slave = MessageStore.open(
        small_config(tmp_path / "s", broker_role=BrokerRole.SLAVE), clock_ms=lambda: slave_now[0]
    )
    try:
        hist = slave.dispatcher.lag_histogram
        assert hist == [0] * LAG_HISTOGRAM_BUCKETS
        slave.append_raw(0, raw[: len(raw) // 2])  # half, cut inside a record
        slave.dispatch_all()
        first = sum(hist)
        assert 0 < first < 30
        assert [hist[40 - i] for i in range(first)] == [1] * first  # record i: 40 - i ms
        slave_now[0] = T0 + 500  # the rest much later: the top bucket
        slave.append_raw(len(raw) // 2, raw[len(raw) // 2 :])
        slave.dispatch_all()
        assert sum(hist) == 30
        assert hist[-1] == 30 - first
    finally:
        slave.close()
