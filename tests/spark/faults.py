"""Fault injection on copies of real stores, at exact record offsets."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from rmq_cluster.spark_jobs.decode import (
    CQ_UNIT,
    CQ_UNIT_BYTES,
    decode_commitlog,
    decode_cq,
    list_segments,
)


def records(store: Path) -> list[tuple[int, int, str, int, int]]:
    """(phy_offset, size, topic, queue_id, queue_offset) of every record, in offset order."""
    out = []
    for s in list_segments(str(store / "commitlog")):
        for r in decode_commitlog(Path(s.path).read_bytes(), s.start):
            out.append((r[0], r[1], r[3], r[4], r[5]))
    return out


def copy_store(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def flip_body_byte(store: Path, phy: int, file_bytes: int, body_index: int = 0) -> None:
    seg = phy - phy % file_bytes
    path = store / "commitlog" / f"{seg:020d}"
    pos = phy - seg + 88 + body_index  # body starts after the 88-byte header
    with open(path, "r+b") as f:
        f.seek(pos)
        b = f.read(1)
        f.seek(pos)
        f.write(bytes([b[0] ^ 0xFF]))


def truncate_store(store: Path, cut: int, file_bytes: int) -> None:
    """Cut the CommitLog at ``cut`` (zeros after it, later files gone) and drop the CQ units at
    or beyond it, as a recovered broker would."""
    for s in list_segments(str(store / "commitlog")):
        if s.start >= cut:
            os.remove(s.path)
        elif s.start + s.length > cut:
            with open(s.path, "r+b") as f:
                f.truncate(cut - s.start)
                f.truncate(file_bytes)
    root = store / "consumequeue"
    for tdir in root.iterdir():
        for qdir in tdir.iterdir():
            for s in list_segments(str(qdir)):
                data = Path(s.path).read_bytes()
                units = [u for u in decode_cq(data, s.start) if u.phy_offset < cut]
                new = b"".join(CQ_UNIT.pack(u.phy_offset, u.size, u.tags_code) for u in units)
                Path(s.path).write_bytes(new.ljust(len(data), b"\0"))


def delete_segment(store: Path, start: int) -> None:
    os.remove(store / "commitlog" / f"{start:020d}")


def repoint_cq_unit(store: Path, topic: str, queue_id: int, index: int, phy: int) -> None:
    qdir = store / "consumequeue" / topic / str(queue_id)
    for s in list_segments(str(qdir)):
        first = s.start // CQ_UNIT_BYTES
        if first <= index < first + s.length // CQ_UNIT_BYTES:
            with open(s.path, "r+b") as f:
                f.seek((index - first) * CQ_UNIT_BYTES)
                _old_phy, size, tags = CQ_UNIT.unpack(f.read(CQ_UNIT_BYTES))
                f.seek((index - first) * CQ_UNIT_BYTES)
                f.write(CQ_UNIT.pack(phy, size, tags))
            return
    raise AssertionError(f"no cq unit {index}")


def build_dledger_node(
    root: Path, self_id: str, bodies: list[bytes], file_bytes: int, *, term: int = 1
) -> list[int]:
    """A DLedger store written by ``dledger.log_storage.FileLogStorage`` (root/dledger-<id>/):
    one entry per message whose body is a CommitLog record with PHYSICALOFFSET = pos + 48, as
    RocketMQ's DLedgerCommitLog writes it.  Returns the physical offset of every message."""
    from rmq_cluster.cluster.protocol.message import Message, MessageConst, encode_record
    from rmq_cluster.dledger.log_storage import BODY_OFFSET, FileLogStorage
    from rmq_cluster.dledger.messages import Entry

    st = FileLogStorage(root / f"dledger-{self_id}", data_file_bytes=file_bytes,
                        index_file_bytes=32 * 1024, fsync=False)  # fmt: skip
    pos, offsets, qoffs = 0, [], [0, 0]
    host = ("127.0.0.1", 10911)
    try:
        st.append([Entry(0, term, b"")])  # the leader's no-op
        pos = BODY_OFFSET
        for i, body in enumerate(bodies):
            qid = i % 2
            msg = Message("DlTopic", body, qid, properties={MessageConst.PROPERTY_KEYS: f"k{i}"},
                          store_host=host, born_host=host)  # fmt: skip
            size = len(encode_record(msg, queue_offset=0, phys_offset=0, store_timestamp=0))
            entry = BODY_OFFSET + size
            if entry + 8 > file_bytes - pos % file_bytes:
                pos += file_bytes - pos % file_bytes
            rec = encode_record(msg, queue_offset=qoffs[qid], phys_offset=pos + BODY_OFFSET,
                                store_timestamp=1_700_000_000_000 + i)  # fmt: skip
            st.append([Entry(i + 1, term, rec)])
            offsets.append(pos + BODY_OFFSET)
            qoffs[qid] += 1
            pos += entry
        st.sync()
    finally:
        st.close()
    return offsets
