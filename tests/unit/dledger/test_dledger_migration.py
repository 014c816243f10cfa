"""From master/slave to DLedger on the existing CommitLog (issue 25, RocketMQ's
``dividedCommitlogOffset``): a store written by a plain (master/slave) broker, reopened with
``enableDLegerCommitLog=true`` as a single-member group, serves its old messages from the old
CommitLog, appends new ones to the DLedger log after it, and serves both after a restart."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import trio

from rmq_cluster.broker.config import load_broker_config
from rmq_cluster.cluster.protocol.message import iter_records, new_message
from rmq_cluster.dledger.commitlog_adapter import DLedgerCommitLog, open_dledger_store
from rmq_cluster.dledger.log_storage import BODY_OFFSET
from rmq_cluster.dledger.node import run_store_node
from rmq_cluster.store.message_store import GetMessageStatus, MessageStore
from tests.ports import free_port

WAIT_S = 20.0
TOPIC = "MigTopic"
FILE_BYTES = 64 * 1024
OLD = 150  # ~1 KiB each: the old CommitLog spans 3 files
NEW = 60


def _values(root: Path) -> dict[str, str]:
    return {
        "storePathRootDir": str(root), "brokerName": "b",
        "mappedFileSizeCommitLog": str(FILE_BYTES), "mappedFileSizeConsumeQueue": str(20 * 512),
    }


def _dledger_values(root: Path, port: int) -> dict[str, str]:
    return {
        **_values(root), "enableDLegerCommitLog": "true", "dLegerGroup": "g",
        "dLegerPeers": f"n0-127.0.0.1:{port}", "dLegerSelfId": "n0",
        "heartBeatTimeIntervalMs": "200",
    }


def _msg(i: int) -> Any:
    return new_message(TOPIC, b"%05d-" % i + b"." * 1000, i % 2, 0, {"KEYS": f"k{i}"}, 0,
                       1_700_000_000_000 + i, ("127.0.0.1", 40000), ("127.0.0.1", 10911), 0)


def _read_all(store: MessageStore, queue_id: int) -> list[bytes]:
    out: list[bytes] = []
    offset = store.get_min_offset_in_queue(TOPIC, queue_id)
    while True:
        res = store.get_message(TOPIC, queue_id, offset, 32)
        if res.status is not GetMessageStatus.FOUND:
            res.release()
            return out
        out += [r.body[:5] for r in iter_records(res.copy_body())]
        offset = res.next_begin_offset


def _expected(upto: int, queue_id: int) -> list[bytes]:
    return [b"%05d" % i for i in range(upto) if i % 2 == queue_id]


def _write_old(root: Path) -> int:
    settings = load_broker_config(_values(root)).settings
    store = MessageStore.open(settings.store)
    try:
        for i in range(OLD):
            assert store.append_message(_msg(i)).status.name == "PUT_OK"
        store.dispatch_all()
        end = store.max_phys_offset
    finally:
        store.close()
    return end


async def test_dledger_keeps_the_old_commitlog_readable_below_its_log(tmp_path: Path) -> None:
    root = tmp_path / "s"
    old_end = await trio.to_thread.run_sync(_write_old, root)
    divided = -(-old_end // FILE_BYTES) * FILE_BYTES
    assert divided >= 3 * FILE_BYTES
    port = free_port()
    settings = load_broker_config(_dledger_values(root, port)).settings

    def open_dl() -> tuple[MessageStore, DLedgerCommitLog]:
        return open_dledger_store(settings.store, settings.dledger)

    store, dl = await trio.to_thread.run_sync(open_dl)
    try:
        assert dl.view is not None and dl.view.divided_offset == divided
        # before the group elects anyone: the old messages are there
        for q in (0, 1):
            assert _read_all(store, q) == _expected(OLD, q)
        assert store.min_phys_offset == 0
        async with trio.open_nursery() as nursery:
            await nursery.start(functools.partial(run_store_node, dl, host="127.0.0.1"))
            node = dl.node
            assert node is not None
            with trio.fail_after(WAIT_S):
                await node.wait_for(lambda _n: dl.leader_ready)
            # queue offsets go on from the old ConsumeQueues
            for i in range(OLD, OLD + NEW):
                res = await store.put_message(_msg(i))
                assert res.status.name == "PUT_OK"
                assert res.result is not None
                assert res.result.wrote_offset >= divided + BODY_OFFSET
                assert res.result.logics_offset == i // 2
            storage = dl.storage
            assert storage is not None
            with trio.fail_after(WAIT_S):
                await node.wait_for(lambda _n: dl.applied_index >= storage.last_index())
            for q in (0, 1):
                assert _read_all(store, q) == _expected(OLD + NEW, q)
            # a key of an old message is found in the old CommitLog
            found = store.query_message(TOPIC, "k3", 32, 0, 2**62)
            assert [r.body[:5] for b in found.buffers for r in iter_records(bytes(b))] == [
                b"00003"
            ]
            for b in found.buffers:
                b.release()
            nursery.cancel_scope.cancel()
    finally:
        store.close()
    again, again_dl = await trio.to_thread.run_sync(open_dl)
    try:
        assert again_dl.view is not None and again_dl.view.divided_offset == divided
        for q in (0, 1):
            assert _read_all(again, q) == _expected(OLD + NEW, q)
    finally:
        again.close()
