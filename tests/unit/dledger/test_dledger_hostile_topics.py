"""The DLedger CommitLog holds the store's path guard too: a send with a topic that could never
name a ConsumeQueue directory is refused (MESSAGE_ILLEGAL), and a committed record that carries
one (a damaged log, an old version, another implementation's leader) is skipped by apply and
recovery, counted, never raised: no directory outside the store, the node keeps applying."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest
import trio

from rmq_cluster.cluster.protocol.message import encode_record, new_message
from rmq_cluster.store.commitlog import PutMessageStatus
from tests.ports import free_port
from tests.unit.dledger.test_dledger_apply_paths import WAIT_S, _open

HOSTILE = ["../../evil", "/tmp/abs-evil-dledger", "..", "a/b"]


def _msg(topic: str, body: bytes = b"x", queue_id: int = 0):  # type: ignore[no-untyped-def]
    return new_message(
        topic, body, queue_id, 0, {}, 0, 1_700_000_000_000, ("127.0.0.1", 40000),
        ("127.0.0.1", 10911), 0,
    )


@pytest.mark.parametrize("hostile", HOSTILE)
async def test_hostile_topic_refused_and_a_hostile_record_skipped(
    tmp_path: Path, hostile: str
) -> None:
    root = tmp_path / "store"
    store, dl = await trio.to_thread.run_sync(_open, root, free_port())
    try:
        async with trio.open_nursery() as nursery:
            from rmq_cluster.dledger.node import run_store_node

            await nursery.start(functools.partial(run_store_node, dl, host="127.0.0.1"))
            node = dl.node
            assert node is not None
            with trio.fail_after(WAIT_S):
                await node.wait_for(lambda _n: dl.leader_ready)
            refused = store.append_message(_msg(hostile))
            assert refused.status is PutMessageStatus.MESSAGE_ILLEGAL
            assert store.append_message(_msg("Good")).status is PutMessageStatus.PUT_OK
            last = node.core.storage.last_index()
            with trio.fail_after(WAIT_S):
                await node.wait_for(lambda _n: dl.applied_index >= last)
            nursery.cancel_scope.cancel()
        # a committed record naming a hostile topic reaches apply: skipped, counted, no raise
        record = encode_record(
            _msg(hostile), queue_offset=0, phys_offset=0, store_timestamp=1_700_000_000_001
        )
        skipped = store.dispatcher.skipped_records
        assert dl._dispatch_record(record, 1 << 20) is True
        assert store.dispatcher.skipped_records == skipped + 1
    finally:
        store.close()
    _only_good_queues_and_nothing_outside(root, tmp_path)


def _only_good_queues_and_nothing_outside(root: Path, tmp_path: Path) -> None:
    assert sorted(os.listdir(root / "consumequeue")) == ["Good"]
    assert not (tmp_path / "evil").exists()
    assert not Path("/tmp/abs-evil-dledger").exists()
