"""Synthetic stores for tests and the bench: CommitLog (+ ConsumeQueue, consumer offsets) in
RocketMQ's layout, and DLedger data files wrapping CommitLog records (§1, §7.6, §7.7).

Records are encoded with ``cluster.protocol.message.encode_record``; placement (blanks, file
rolls, preallocated zero tails) is done here, the way the broker's CommitLog does it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence

import attrs

from ..cluster.protocol.message import (
    BLANK,
    BLANK_MAGIC,
    END_FILE_MIN_BLANK_LENGTH,
    Message,
    MessageConst,
    encode_record,
)
from ..dledger.log_storage import BLANK_MAGIC as DL_BLANK_MAGIC
from ..dledger.log_storage import BODY_OFFSET as DL_BODY_OFFSET
from ..dledger.log_storage import encode_entry
from .decode import CQ_UNIT, CQ_UNIT_BYTES

STORE_HOST = ("127.0.0.1", 10911)


@attrs.frozen
class Msg:
    topic: str
    queue_id: int
    body: bytes
    keys: str | None = None


@attrs.frozen
class Placed:
    phy_offset: int
    size: int
    topic: str
    queue_id: int
    queue_offset: int


def _name(offset: int) -> str:
    return f"{offset:020d}"


def _encode(m: Msg, qoff: int, phy: int, ts: int) -> bytes:
    props = {MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: f"U{phy:016X}"}
    if m.keys:
        props[MessageConst.PROPERTY_KEYS] = m.keys
    msg = Message(m.topic, m.body, m.queue_id, properties=props, born_timestamp=ts,
                  born_host=STORE_HOST, store_host=STORE_HOST)  # fmt: skip
    return encode_record(msg, queue_offset=qoff, phys_offset=phy, store_timestamp=ts)


def write_commitlog_store(
    root: str, msgs: Iterable[Msg], file_size: int, *, preallocate: bool = True,
    consumer_offsets: dict[str, dict[int, int]] | None = None, start_ts: int = 1_700_000_000_000,
) -> list[Placed]:
    """Write ``commitlog/``, ``consumequeue/`` and ``config/consumerOffset.json`` under root."""
    cl = os.path.join(root, "commitlog")
    os.makedirs(cl, exist_ok=True)
    placed: list[Placed] = []
    qoffs: dict[tuple[str, int], int] = {}
    file_start, pos = 0, 0
    f = open(os.path.join(cl, _name(0)), "wb")  # noqa: SIM115
    try:
        for i, m in enumerate(msgs):
            qoff = qoffs.get((m.topic, m.queue_id), 0)
            rec = _encode(m, qoff, file_start + pos, start_ts + i)
            if pos + len(rec) + END_FILE_MIN_BLANK_LENGTH > file_size:
                f.write(BLANK.pack(file_size - pos, BLANK_MAGIC))
                f.truncate(file_size)
                f.close()
                file_start += file_size
                pos = 0
                f = open(os.path.join(cl, _name(file_start)), "wb")  # noqa: SIM115
                rec = _encode(m, qoff, file_start, start_ts + i)
            if len(rec) + END_FILE_MIN_BLANK_LENGTH > file_size:
                raise ValueError("record larger than a file")
            f.write(rec)
            placed.append(Placed(file_start + pos, len(rec), m.topic, m.queue_id, qoff))
            qoffs[(m.topic, m.queue_id)] = qoff + 1
            pos += len(rec)
        if preallocate:
            f.truncate(file_size)
    finally:
        f.close()
    write_consume_queues(root, placed)
    if consumer_offsets:
        os.makedirs(os.path.join(root, "config"), exist_ok=True)
        with open(os.path.join(root, "config", "consumerOffset.json"), "w") as fh:
            json.dump({"offsetTable": consumer_offsets}, fh)
    return placed


def write_consume_queues(root: str, placed: Sequence[Placed], *, cq_file_units: int = 1000) -> None:
    by_q: dict[tuple[str, int], list[Placed]] = {}
    for p in placed:
        by_q.setdefault((p.topic, p.queue_id), []).append(p)
    for (topic, qid), ps in by_q.items():
        d = os.path.join(root, "consumequeue", topic, str(qid))
        os.makedirs(d, exist_ok=True)
        fbytes = cq_file_units * CQ_UNIT_BYTES
        for start in range(0, len(ps), cq_file_units):
            chunk = ps[start : start + cq_file_units]
            data = b"".join(CQ_UNIT.pack(p.phy_offset, p.size, 0) for p in chunk)
            with open(os.path.join(d, _name(start * CQ_UNIT_BYTES)), "wb") as fh:
                fh.write(data.ljust(fbytes, b"\0"))


def write_dledger_store(
    root: str, self_id: str, msgs: Iterable[Msg], file_size: int, *, term: int = 1,
    preallocate: bool = True, start_ts: int = 1_700_000_000_000,
) -> list[Placed]:
    """``root/dledger-<id>/data/``: one entry per message, body = CommitLog record at pos+48."""
    d = os.path.join(root, f"dledger-{self_id}", "data")
    os.makedirs(d, exist_ok=True)
    placed: list[Placed] = []
    qoffs: dict[tuple[str, int], int] = {}
    file_start, pos, chain = 0, 0, 0
    f = open(os.path.join(d, _name(0)), "wb")  # noqa: SIM115
    try:
        for i, m in enumerate(msgs):
            qoff = qoffs.get((m.topic, m.queue_id), 0)
            rec = _encode(m, qoff, file_start + pos + DL_BODY_OFFSET, start_ts + i)
            if pos + len(rec) + DL_BODY_OFFSET + 8 > file_size:
                f.write(DL_BLANK_MAGIC.to_bytes(4, "big", signed=True)
                        + (file_size - pos).to_bytes(4, "big"))  # fmt: skip
                f.truncate(file_size)
                f.close()
                file_start += file_size
                pos = 0
                f = open(os.path.join(d, _name(file_start)), "wb")  # noqa: SIM115
                rec = _encode(m, qoff, file_start + DL_BODY_OFFSET, start_ts + i)
            entry, chain = encode_entry(i, term, file_start + pos, rec, chain)
            f.write(entry)
            placed.append(
                Placed(file_start + pos + DL_BODY_OFFSET, len(rec), m.topic, m.queue_id, qoff)
            )
            qoffs[(m.topic, m.queue_id)] = qoff + 1
            pos += len(entry)
        if preallocate:
            f.truncate(file_size)
    finally:
        f.close()
    write_consume_queues(root, placed)
    return placed


def make_msgs(n: int, *, body_size: int = 100, topics: Sequence[str] = ("T0", "T1"),
              queues: int = 2) -> list[Msg]:  # fmt: skip
    out = []
    for i in range(n):
        t = topics[i % len(topics)]
        body = (f"m{i}-".encode() * (body_size // 3 + 1))[:body_size]
        out.append(Msg(t, (i // len(topics)) % queues, body, keys=f"k{i}"))
    return out
