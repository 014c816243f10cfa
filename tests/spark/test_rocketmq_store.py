"""The ``storePath`` reader without Spark, on the stores of a real SYNC_MASTER + slave run
(conftest ``real_stores``: 16 KiB CommitLog files, so reads cross segments): every message
with its keys, body, queue and dense offsets; master and slave give the same rows; ranges and
timestamps as the broker path defines them; a damaged store is refused with where it is."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from rmq_cluster.cluster.acl.signing import Credentials
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.spark_jobs.mq_io import plan_read, read_range, signed
from rmq_cluster.spark_jobs.mq_model import SourceError, read_options
from tests.spark.real_cluster import QUEUES, TOPICS

N = 300


def _body(i: int) -> bytes:
    return (f"msg-{i}-".encode() * (i % 37 + 3))[: 40 + (i * 53) % 700]


def _expected(topic: str) -> dict[int, list[tuple[int, str, bytes]]]:
    out: dict[int, list[tuple[int, str, bytes]]] = {}
    for i in range(N):
        if TOPICS[i % len(TOPICS)] == topic:
            q = out.setdefault((i // 2) % QUEUES, [])
            q.append((len(q), f"key{i}", _body(i)))
    return out


def _rows(**opts: str) -> list[tuple[Any, ...]]:
    o = read_options(opts)
    return [row for r in plan_read(o) for row in read_range(r, o)]


def _by_queue(rows: list[tuple[Any, ...]]) -> dict[int, list[tuple[int, str, bytes]]]:
    out: dict[int, list[tuple[int, str, bytes]]] = {}
    for r in rows:
        out.setdefault(r[2], []).append((r[3], r[6], r[8]))
    return {k: sorted(v) for k, v in out.items()}


def test_store_files_read_exactly(real_stores: dict[str, Any]) -> None:
    for topic in TOPICS:
        rows = _rows(topic=topic, storePath=str(real_stores["master"]), broker="broker-a",
                     maxRecordsPerPartition="40")  # fmt: skip
        assert _by_queue(rows) == _expected(topic)
        assert {r[1] for r in rows} == {"broker-a"} and {r[0] for r in rows} == {topic}
        slave = _rows(topic=topic, storePath=json.dumps({"broker-a": str(real_stores["slave"])}))
        assert sorted(slave, key=lambda r: (r[2], r[3])) == sorted(rows, key=lambda r: (r[2], r[3]))


def test_store_ranges_and_times(real_stores: dict[str, Any]) -> None:
    root = str(real_stores["master"])
    part = _rows(topic="DiffA", storePath=root, startingOffsets='{"local": {"0": 10}}',
                 endingOffsets='{"local": {"0": 20, "1": 5}}')  # fmt: skip
    want = _expected("DiffA")
    assert _by_queue(part) == {0: want[0][10:20], 1: want[1][:5]}
    everything = _rows(topic="DiffA", storePath=root)
    stamps = sorted(r[11] for r in everything)
    cut = stamps[len(stamps) // 2]
    later = _rows(topic="DiffA", storePath=root, startingTimestamp=str(cut))
    earlier = _rows(topic="DiffA", storePath=root, endingTimestamp=str(cut))
    assert len(later) + len(earlier) == len(everything)
    assert all(r[11] >= cut for r in later)
    assert all(r[11] < cut for r in earlier)
    with pytest.raises(SourceError, match="no ConsumeQueue"):
        _rows(topic="NoSuchTopic", storePath=root)
    with pytest.raises(SourceError, match="not a broker store"):
        _rows(topic="DiffA", storePath=str(Path(root) / "consumequeue"))
    with pytest.raises(SourceError, match="sql92"):
        read_options({"topic": "DiffA", "storePath": root, "sql92": "a > 1"})


def test_a_damaged_store_is_refused_with_where(real_stores: dict[str, Any],
                                               tmp_path: Path) -> None:  # fmt: skip
    root = tmp_path / "store"
    shutil.copytree(real_stores["master"], root)
    o = read_options({"topic": "DiffB", "storePath": str(root)})
    r = next(r for r in plan_read(o) if r.queue_id == 1)
    first = next(iter(read_range(r, o)))
    seg = sorted((root / "commitlog").iterdir())[0]
    start = int(seg.name)
    data = bytearray(seg.read_bytes())
    data[first[4] - start + 100] ^= 0xFF  # a byte of its body: the CRC no longer holds
    seg.write_bytes(bytes(data))
    with pytest.raises(SourceError, match=r"local/1@0: bad record .*CRC"):
        list(read_range(r, o))


def test_signed_matches_the_clients_signing() -> None:
    ext = {"topic": "T", "queueId": 3, "flag": True, "none": None}
    body = b"payload"
    ours = signed(ext, body, "ak0001", "sk0001")
    cmd = RemotingCommand.request(11, {"topic": "T", "queueId": "3", "flag": "true"}, body=body)
    theirs = Credentials("ak0001", "sk0001").sign(cmd).ext_fields
    assert dict(ours) == dict(theirs)
    assert signed(ext, body, None, None) is ext
    for bad in ({"accessKey": "a"}, {"secretKey": "s"}, {"accessKey": "x" * 300, "secretKey": "s"}):
        with pytest.raises(SourceError, match="accessKey"):
            read_options({"namesrv": "127.0.0.1:1", "topic": "T", **bad})
