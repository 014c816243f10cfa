"""The slave side: append_raw of the master's bytes gives a byte-identical CommitLog and the
same ConsumeQueue and Index; read_raw feeds it."""

from __future__ import annotations

import filecmp
import os
from pathlib import Path

import pytest

from rmq_cluster.cluster.protocol.message import Message, encode_batch
from rmq_cluster.store.commitlog import PutMessageStatus
from rmq_cluster.store.config import BrokerRole
from rmq_cluster.store.message_store import MessageStore
from tests.unit.store.store_testlib import read_cq_dir, small_config

HOST = ("127.0.0.1", 10911)


def fill(master: MessageStore, n: int) -> None:
    for i in range(n):
        if i % 10 == 9:
            items = [(0, b"b" * 100, {"UNIQ_KEY": f"B{i}-{j}"}) for j in range(5)]
            master.append_messages(Message(topic="T", body=encode_batch(items), queue_id=1,
                                           store_host=HOST))
        else:
            master.append_message(Message(topic="T", body=bytes([i % 250 + 1]) * (i * 37 % 3000),
                                          queue_id=i % 3, store_host=HOST,
                                          properties={"KEYS": f"k{i}", "TAGS": "a"}))


def replicate(master: MessageStore, slave: MessageStore, start: int, chunk: int) -> None:
    pos = start
    while pos < master.max_phys_offset:
        view = master.read_raw(pos, chunk)
        assert view is not None and len(view) > 0
        # frames may end mid-record: dispatch must wait for the rest
        slave.append_raw(pos, bytes(view))
        view.release()
        slave.dispatch_all()
        pos = slave.max_phys_offset


@pytest.mark.parametrize("chunk", [32 * 1024, 1000, 333])
def test_slave_is_byte_identical(tmp_path: Path, chunk: int) -> None:
    mcfg = small_config(tmp_path / "m")
    scfg = small_config(tmp_path / "s", broker_role=BrokerRole.SLAVE)
    master = MessageStore.open(mcfg)
    slave = MessageStore.open(scfg)
    try:
        fill(master, 300)
        master.dispatch_all()
        replicate(master, slave, 0, chunk)
        assert slave.max_phys_offset == master.max_phys_offset
        assert slave.dispatch_behind_bytes == 0
        with pytest.raises(ValueError):
            slave.append_raw(12345, b"x")
        assert slave.append_message(Message(topic="T", body=b"x")).status is (
            PutMessageStatus.SERVICE_NOT_AVAILABLE
        )
        found = slave.query_message("T", "k5", 10, 0, 2**62)
        assert len(found.buffers) == 1
        found.copy_body()
    finally:
        master.close()
        slave.close()
    names = sorted(os.listdir(mcfg.commit_log_dir))
    assert names == sorted(os.listdir(scfg.commit_log_dir))
    for name in names:
        assert filecmp.cmp(
            os.path.join(mcfg.commit_log_dir, name), os.path.join(scfg.commit_log_dir, name),
            shallow=False,
        )
    for q in range(3):
        assert read_cq_dir(str(tmp_path / "m"), "T", q) == read_cq_dir(str(tmp_path / "s"), "T", q)


def test_slave_starting_at_masters_last_file(tmp_path: Path) -> None:
    mcfg = small_config(tmp_path / "m")
    master = MessageStore.open(mcfg)
    slave = MessageStore.open(small_config(tmp_path / "s", broker_role=BrokerRole.SLAVE))
    try:
        fill(master, 200)
        start = master.commitlog.queue.files[-1].file_from
        assert start > 0
        fill(master, 100)
        master.dispatch_all()
        replicate(master, slave, start, 32 * 1024)
        assert slave.min_phys_offset == start
        # queue offsets match the master's for what the slave holds
        for q in range(3):
            assert slave.get_max_offset_in_queue("T", q) == master.get_max_offset_in_queue("T", q)
        first = slave.get_min_offset_in_queue("T", 0)
        assert first > 0
        r = slave.get_message("T", 0, first, 5)
        rm = master.get_message("T", 0, first, 5)
        assert [bytes(b) for b in r.buffers] == [bytes(b) for b in rm.buffers]
        r.release()
        rm.release()
        # promoted: queue offsets continue
        slave.role = BrokerRole.ASYNC_MASTER
        slave.rebuild_queue_offsets()
        res = slave.append_message(Message(topic="T", body=b"new", queue_id=0, store_host=HOST))
        assert res.result is not None
        assert res.result.logics_offset == master.get_max_offset_in_queue("T", 0)
    finally:
        master.close()
        slave.close()
