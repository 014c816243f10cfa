"""One send path for every store (issue 32, item 1): the store's put names the watermark a
send's answer waits for and its key there (``MessageStore.append_marked``), and the one
``SendProcessor.process`` holds the answer on it -- the file CommitLog's flush and slave-ack
watermarks keyed by end offset, DLedger's quorum commit keyed by entry index + 1
(``tests/unit/dledger/test_dledger_apply_paths.py`` checks DLedger's side on a live node).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from rmq_cluster.cluster.protocol.message import Message
from rmq_cluster.ha.config import HAConfig
from rmq_cluster.ha.service import HAService
from rmq_cluster.store.commitlog import PutMessageStatus
from rmq_cluster.store.config import BrokerRole, FlushDiskType, MessageStoreConfig
from rmq_cluster.store.message_store import MessageStore

ROOT = Path(__file__).resolve().parents[3]
PRODUCT = ("cluster", "client", "namesrv", "broker", "ha", "dledger", "store", "controller",
           "proxy")  # fmt: skip
#: the primitive itself (``Watermark.hold`` hands its call on to ``HeldAnswers.hold``)
PRIMITIVE = frozenset({"cluster/remoting/held.py", "store/watermark.py"})


def hold_calls(root: Path) -> list[str]:
    """``path:line`` of every ``<x>.hold(...)`` call in product code outside the primitive."""
    out = []
    for folder in PRODUCT:
        for path in sorted((root / folder).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if rel in PRIMITIVE:
                continue
            for node in ast.walk(ast.parse(path.read_text(), rel)):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr == "hold"):  # fmt: skip
                    out.append(f"{rel}:{node.lineno}")
    return out


def test_answers_are_held_in_one_place() -> None:
    """Only the one send processor holds answers on a watermark: no second send processor
    (DLedger's had its own until its put named its watermark too)."""
    calls = hold_calls(ROOT)
    assert [c.split(":")[0] for c in calls] == ["broker/processors/send.py"], calls


def test_the_checker_sees_a_planted_hold(tmp_path: Path) -> None:
    (tmp_path / "broker").mkdir()
    (tmp_path / "broker" / "other.py").write_text("def f(w, c):\n    return w.held.hold(c)\n")
    assert hold_calls(tmp_path) == ["broker/other.py:2"]


def _store(tmp_path: Path, flush: FlushDiskType, role: BrokerRole) -> MessageStore:
    return MessageStore.open(MessageStoreConfig(
        store_path_root_dir=str(tmp_path), mapped_file_size_commit_log=1024 * 1024,
        flush_disk_type=flush, broker_role=role,
    ))  # fmt: skip


def _msg(i: int) -> Message:
    return Message(topic="T", body=b"m%d" % i, queue_id=0)


def test_an_async_store_names_no_watermark(tmp_path: Path) -> None:
    store = _store(tmp_path, FlushDiskType.ASYNC_FLUSH, BrokerRole.ASYNC_MASTER)
    try:
        result, held, _key = store.append_marked(_msg(0), False, True)
        assert result.status is PutMessageStatus.PUT_OK and held is None
    finally:
        store.close()


def test_sync_flush_holds_on_the_flush_watermark_at_the_end_offset(tmp_path: Path) -> None:
    store = _store(tmp_path, FlushDiskType.SYNC_FLUSH, BrokerRole.ASYNC_MASTER)
    try:
        result, held, key = store.append_marked(_msg(0), False, True)
        assert result.status is PutMessageStatus.PUT_OK and result.result is not None
        assert held is store.flush_watermark.held and key == result.result.end_offset
        assert held.mark < key
        # a producer that does not wait (WAIT=false) is answered at once
        result, held, _key = store.append_marked(_msg(1), False, False)
        assert result.status is PutMessageStatus.PUT_OK and held is None
    finally:
        store.close()


@pytest.mark.parametrize("flush", [FlushDiskType.ASYNC_FLUSH, FlushDiskType.SYNC_FLUSH])
def test_sync_master_holds_on_the_slaves_ack(tmp_path: Path, flush: FlushDiskType) -> None:
    """SYNC_MASTER with a slave in the ack table: the ack watermark (with SYNC_FLUSH too: the
    lower of flush and ack); with no slave the status says so (SLAVE_NOT_AVAILABLE, which
    still waits for the flush under SYNC_FLUSH)."""
    store = _store(tmp_path, flush, BrokerRole.SYNC_MASTER)
    try:
        ha = HAService(store, HAConfig(ha_listen_port=0), host="127.0.0.1")
        store.attach_replicas(ha)  # (ha.run does it)
        result, held, _key = store.append_marked(_msg(0), False, True)
        assert result.status is PutMessageStatus.SLAVE_NOT_AVAILABLE
        assert held is (None if flush is FlushDiskType.ASYNC_FLUSH
                        else store.flush_watermark.held)  # fmt: skip
        ha.table.add(1, "slave", 0)
        result, held, key = store.append_marked(_msg(1), False, True)
        assert result.status is PutMessageStatus.PUT_OK and result.result is not None
        both = store.both_watermark
        expected = ha.ack_watermark if both is None else both
        assert held is expected.held and key == result.result.end_offset
    finally:
        store.close()


def test_inline_dispatch_when_the_reput_is_caught_up(tmp_path: Path) -> None:
    """``INLINE_DISPATCH`` (off by default): a single put dispatched by the put itself when the
    reput had caught up; not when it lags (the reput task's, as always)."""
    store = _store(tmp_path, FlushDiskType.ASYNC_FLUSH, BrokerRole.ASYNC_MASTER)
    try:
        store.append_marked(_msg(0), False, True)  # (its queue's file made by the first dispatch)
        store.dispatch()
        store.services_running = True
        store.inline_dispatch = True
        result, _held, _key = store.append_marked(_msg(1), False, True)
        assert result.status is PutMessageStatus.PUT_OK
        cq = store.cqs.find("T", 0)
        assert cq is not None and cq.max_offset_in_queue == 2
        assert store.dispatcher.reput_from == store.commitlog.max_offset
        store.services_running = False  # (a store whose services stopped: no inline dispatch)
        store.append_marked(_msg(2), False, True)
        assert cq.max_offset_in_queue == 2
    finally:
        store.close()
