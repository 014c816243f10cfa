"""Test helpers for the store: configs on tmp dirs and an *independent* record decoder.

The decoder is written from the layout table in docs/protocol/commitlog.md
(and remoting-protocol.md §5.1); it deliberately imports nothing from ``store`` or
``cluster.protocol`` so a shared mistake cannot hide.
"""

from __future__ import annotations

import os
import socket
import struct
import zlib
from typing import Any, Literal

from rmq_cluster.store.config import MessageStoreConfig

V1_MAGIC = 0xDAA320A7
EOF_MAGIC = 0xCBD43194


def small_config(root: Any, **overrides: Any) -> MessageStoreConfig:
    values: dict[str, Any] = dict(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=64 * 1024,
        mapped_file_size_consume_queue=20 * 64,
        max_hash_slot_num=64,
        max_index_num=256,
    )
    values.update(overrides)
    return MessageStoreConfig(**values)


def _host(raw: bytes) -> tuple[str, int]:
    return socket.inet_ntoa(raw[:4]), int.from_bytes(raw[4:8], "big", signed=True)


def decode_one(buf: bytes, pos: int) -> dict[str, Any]:
    """Field by field, following the table's offsets."""
    be: Literal["big"] = "big"

    def i32(off: int) -> int:
        return int.from_bytes(buf[pos + off : pos + off + 4], be, signed=True)

    def i64(off: int) -> int:
        return int.from_bytes(buf[pos + off : pos + off + 8], be, signed=True)

    rec: dict[str, Any] = {
        "total_size": i32(0),
        "magic": int.from_bytes(buf[pos + 4 : pos + 8], be),
        "body_crc": i32(8),
        "queue_id": i32(12),
        "flag": i32(16),
        "queue_offset": i64(20),
        "physical_offset": i64(28),
        "sys_flag": i32(36),
        "born_timestamp": i64(40),
        "born_host": _host(buf[pos + 48 : pos + 56]),
        "store_timestamp": i64(56),
        "store_host": _host(buf[pos + 64 : pos + 72]),
        "reconsume_times": i32(72),
        "prepared_transaction_offset": i64(76),
    }
    body_len = i32(84)
    p = pos + 88
    rec["body"] = buf[p : p + body_len]
    p += body_len
    topic_len = buf[p]
    p += 1
    rec["topic"] = buf[p : p + topic_len].decode()
    p += topic_len
    props_len = int.from_bytes(buf[p : p + 2], be, signed=True)
    p += 2
    raw_props = buf[p : p + props_len].decode("utf-8", "replace")
    p += props_len
    props = {}
    for entry in raw_props.split("\x02"):
        if "\x01" in entry:
            k, v = entry.split("\x01", 1)
            if k and v:
                props[k] = v
    rec["properties"] = props
    rec["computed_size"] = p - pos
    return rec


def decode_commitlog_dir(path: str, file_size: int) -> list[dict[str, Any]]:
    """Every record of a CommitLog directory, checking magic, size, CRC and offsets."""
    out: list[dict[str, Any]] = []
    names = sorted(n for n in os.listdir(path) if len(n) == 20)
    for name in names:
        start = int(name)
        with open(os.path.join(path, name), "rb") as f:
            buf = f.read()
        assert len(buf) == file_size
        pos = 0
        while pos + 8 <= len(buf):
            size = int.from_bytes(buf[pos : pos + 4], "big", signed=True)
            magic = int.from_bytes(buf[pos + 4 : pos + 8], "big")
            if magic == EOF_MAGIC:
                assert size == file_size - pos, "blank must cover the rest of the file"
                break
            if size == 0 and magic == 0:
                break
            assert magic == V1_MAGIC, f"bad magic at {start + pos}"
            rec = decode_one(buf, pos)
            assert rec["computed_size"] == size, f"size mismatch at {start + pos}"
            assert rec["body_crc"] == zlib.crc32(rec["body"]) & 0x7FFFFFFF
            assert rec["physical_offset"] == start + pos
            out.append(rec)
            pos += size
    return out


def java_hash(text: str) -> int:
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + struct.unpack(">H", data[i : i + 2])[0]) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def read_cq_dir(root: str, topic: str, queue_id: int) -> list[tuple[int, int, int]]:
    """(phyOffset, size, tagsCode) units of one ConsumeQueue (fillers included)."""
    d = os.path.join(root, "consumequeue", topic, str(queue_id))
    units: list[tuple[int, int, int]] = []
    for name in sorted(os.listdir(d)):
        with open(os.path.join(d, name), "rb") as f:
            buf = f.read()
        for pos in range(0, len(buf), 20):
            off, size, tags = struct.unpack(">qiq", buf[pos : pos + 20])
            if off < 0 or size <= 0:
                return units
            units.append((off, size, tags))
    return units


def crash(store: Any) -> None:
    """Drop a store like a killed process would: no flush, no checkpoint write, abort stays."""
    store.commitlog.queue.close()
    store.cqs.close()
    if store.index is not None:
        store.index.close()
    if store.checkpoint is not None:
        store.checkpoint.mf.close()
        store.checkpoint = None
    store.shutdown = True
    store._release_lock()


def read_index_entries(root: str, slots: int) -> list[tuple[int, int]]:
    """(keyHash, phyOffset) of every entry in every IndexFile, read from the raw files."""
    d = os.path.join(root, "index")
    out: list[tuple[int, int]] = []
    if not os.path.isdir(d):
        return out
    for name in sorted(os.listdir(d)):
        with open(os.path.join(d, name), "rb") as f:
            buf = f.read()
        count = struct.unpack(">i", buf[36:40])[0]
        base = 40 + slots * 4
        for n in range(1, count):
            kh, phys, _diff, _prev = struct.unpack(">iqii", buf[base + n * 20 : base + n * 20 + 20])
            out.append((kh, phys))
    return out


def index_hash(key: str) -> int:
    h = java_hash(key)
    return 0 if h == -(1 << 31) else abs(h)
