"""The leader's fast paths agree with the general ones, through a real single-member
a store over a DLedgerCommitLog (its peer port on 127.0.0.1, its files in a temp dir):

* sends whose answers are held on the commit watermark (``append_marked`` + ``held.hold``,
  the broker's send path), proposed alone (``append_marked``) and without waiting
  (``append_message``),
  applied from the leader's stash by ``apply_committed_range``, leave ConsumeQueue and
  IndexFile bytes identical to what a member that parses every committed record (recovery of a
  copy of the same DLedger files with no ConsumeQueues) builds;
* a held answer is released exactly once, as SUCCESS; a refused send holds nothing.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Any

import trio

from rmq_cluster.broker.config import load_broker_config
from rmq_cluster.cluster.protocol.message import MessageConst, new_message
from rmq_cluster.cluster.remoting.codec import FrameDecoder, RemotingCommand
from rmq_cluster.dledger.commitlog_adapter import DLedgerCommitLog, open_dledger_store
from rmq_cluster.dledger.node import run_store_node
from rmq_cluster.store.commitlog import PutMessageStatus
from rmq_cluster.store.message_store import MessageStore
from tests.ports import free_port


class _Receiver:
    """A connection as ``HeldAnswers`` sees it: records the answers released to it."""

    def __init__(self) -> None:
        self.answers: list[RemotingCommand] = []

    def _held_released(self, frames: bytearray, n: int) -> None:
        got = FrameDecoder().feed(frames)
        assert len(got) == n
        self.answers.extend(got)

WAIT_S = 20.0
TOPIC = "ApplyPaths"
MESSAGES = 120
USED_PREFIX_BYTES = 4 * 1024 * 1024
"""More than this test writes into any DLedger file."""


def _open(root: Path, port: int) -> tuple[MessageStore, DLedgerCommitLog]:
    values = {
        "storePathRootDir": str(root), "brokerName": "b", "enableDLegerCommitLog": "true",
        "dLegerGroup": "g", "dLegerPeers": f"n0-127.0.0.1:{port}", "dLegerSelfId": "n0",
        "heartBeatTimeIntervalMs": "200",  # elected in ~1 s instead of ~6 s
        # small ConsumeQueue and IndexFile files: the test hashes them whole
        "mappedFileSizeConsumeQueue": str(20 * 1000), "maxHashSlotNum": "1000",
        "maxIndexNum": "4000",
    }
    settings = load_broker_config(values).settings
    return open_dledger_store(settings.store, settings.dledger)


def _digest(root: Path, sub: str) -> list[tuple[str, str]]:
    """(relative path, sha256) of every file under root/sub; IndexFile names are creation
    timestamps, so those are compared by content and order only."""
    out = []
    for path in sorted(p for p in (root / sub).rglob("*") if p.is_file()):
        name = str(path.relative_to(root)) if sub != "index" else "index"
        out.append((name, hashlib.sha256(path.read_bytes()).hexdigest()))
    return out


def _copy_sparse(src: Path, dst: Path) -> None:
    """Copy a DLedger store dir; the 1 GiB data and 160 MB index files only up to their last
    non-zero byte (then extended sparsely), not byte by byte."""
    for path in src.rglob("*"):
        target = dst / path.relative_to(src)
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(USED_PREFIX_BYTES)
        with open(target, "wb") as f:
            f.write(head.rstrip(b"\0"))
            f.truncate(size)


def _message(i: int) -> Any:
    props = {
        MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: f"AC11000100002A9F{i:016X}",
        MessageConst.PROPERTY_TAGS: f"tag{i % 3}",
    }
    if i % 4 == 0:
        props[MessageConst.PROPERTY_KEYS] = f"k{i} shared"
    if i % 25 == 7:
        props[MessageConst.PROPERTY_DELAY_TIME_LEVEL] = "3"  # goes to the schedule topic
    return new_message(
        TOPIC, b"body-%d" % i * (1 + i % 5), i % 4, 0, props, 0, 1_700_000_000_000 + i,
        ("127.0.0.1", 40000 + i % 7), ("127.0.0.1", 10911), 0,
    )


async def test_fast_apply_matches_record_parsing_and_sinks_finish_once(tmp_path: Path) -> None:
    port = free_port()
    leader_root = tmp_path / "leader"
    store, dl = await trio.to_thread.run_sync(_open, leader_root, port)
    receiver = _Receiver()
    held = 0
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(functools.partial(run_store_node, dl, host="127.0.0.1"))
            node = dl.node
            assert node is not None
            with trio.fail_after(WAIT_S):
                await node.wait_for(lambda _n: dl.leader_ready)
            for i in range(MESSAGES):
                msg = _message(i)
                if i % 3 == 0:
                    result, on, key = dl.append_marked(msg, False, True)
                    assert result.status is PutMessageStatus.PUT_OK and key > 0
                    assert on is dl.commit.held  # the quorum commit, keyed by index + 1
                    ok = RemotingCommand.request(0, {"i": str(i)}).response(0)
                    on.hold(receiver, i, ok, key)
                    held += 1
                elif i % 3 == 1:
                    result, on, key = dl.append_marked(msg, False, False)
                    assert on is dl.commit.held and key > 0  # (DLedger waits regardless)
                else:
                    assert store.append_message(msg).status is PutMessageStatus.PUT_OK
                if i % 10 == 9:
                    await trio.lowlevel.checkpoint()  # the driver commits in several Readies
            last = node.core.storage.last_index()
            with trio.fail_after(WAIT_S):
                await node.wait_for(
                    lambda _n: dl.applied_index >= last and len(receiver.answers) == held
                )
            # a refused send gets no key: nothing to hold
            dl.leader_ready = False
            refused, on, key = dl.append_marked(_message(0), False, True)
            assert refused.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and on is None
            dl.leader_ready = True
            assert dl.commit.held.waiting == 0
            nursery.cancel_scope.cancel()
    finally:
        store.close()
    assert [a.code for a in receiver.answers] == [0] * held
    assert sorted(a.opaque for a in receiver.answers) == list(range(0, MESSAGES, 3))

    # a copy of the DLedger files with no ConsumeQueue/IndexFile: recovery parses every record
    parsed_root = tmp_path / "parsed"
    parsed_root.mkdir()
    dledger_dir = next(p.name for p in leader_root.iterdir() if p.name.startswith("dledger-"))
    _copy_sparse(leader_root / dledger_dir, parsed_root / dledger_dir)
    parsed, parsed_dl = await trio.to_thread.run_sync(_open, parsed_root, port)
    try:
        assert parsed_dl.applied_index == last
    finally:
        parsed.close()
    queues = _digest(leader_root, "consumequeue")
    assert len(queues) >= 5  # 4 queues of the topic + the schedule topic's
    assert queues == _digest(parsed_root, "consumequeue")
    assert _digest(leader_root, "index") == _digest(parsed_root, "index")
