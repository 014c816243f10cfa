"""The rocketmq data source's pure parts: offset specs, range splitting, the exact boundary
search behind timestamp ranges, micro-batch caps, and the wire decoder against hostile
frames (no Spark, no cluster)."""

from __future__ import annotations

import json
import random
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq_cluster.cluster.protocol.message import SYSFLAG_COMPRESSED
from rmq_cluster.cluster.remoting.codec import RemotingCommand, encode
from rmq_cluster.deploy.supervisor import ports_for_tests
from rmq_cluster.spark_jobs.mq_model import (
    EARLIEST,
    LATEST,
    QueueRange,
    SourceError,
    cap_offsets,
    first_true,
    inflate,
    parse_offset_spec,
    read_options,
    split_range,
)
from rmq_cluster.spark_jobs.mq_wire import MAX_FRAME_BYTES, Channel, WireError


def test_offset_specs() -> None:
    assert parse_offset_spec("earliest", "s") == EARLIEST
    assert parse_offset_spec(" LATEST ", "s") == LATEST
    assert parse_offset_spec('{"broker-a": {"0": 5, "3": -2}}', "s") == {
        ("broker-a", 0): 5, ("broker-a", 3): -2}
    for bad in ("{", "[]", '{"b": 1}', '{"b": {"x": 1}}', '{"b": {"0": -3}}',
                '{"b": {"0": 1.5}}', '{"b": {"0": true}}'):
        with pytest.raises(SourceError):
            parse_offset_spec(bad, "startingOffsets")


def test_read_options_refuse_what_they_cannot_use() -> None:
    base = {"namesrv": "127.0.0.1:9876", "topic": "T"}
    assert read_options(base).subscription == ("*", "TAG")
    assert read_options({**base, "TAGS": "a || b"}).subscription == ("a || b", "TAG")
    for extra in ({"tags": "a", "sql92": "x > 1"}, {"topic": "no spaces"}, {"namesrv": ""},
                  {"maxRecordsPerPartition": "0"}, {"pullBatchSize": "x"},
                  {"failOnDataLoss": "maybe"}, {"startingOffsets": "{"}):
        with pytest.raises(SourceError):
            read_options({**base, **extra})


@given(st.integers(0, 50), st.integers(0, 300), st.integers(1, 70))
def test_split_covers_the_range_exactly(start: int, n: int, step: int) -> None:
    r = QueueRange("T", "b", "h:1", 0, start, start + n)
    parts = split_range(r, step)
    offs = [o for p in parts for o in range(p.start, p.end)]
    assert offs == list(range(start, start + n))
    assert all(p.end - p.start <= step for p in parts)


@given(st.lists(st.integers(0, 20), max_size=40), st.integers(-1, 25), st.integers(-5, 45))
def test_first_true_finds_the_boundary_from_any_guess(
    deltas: list[int], ts: int, guess: int
) -> None:
    times = []
    t = 0
    for d in sorted(deltas):  # non-decreasing store times, equal runs included
        times.append(t + d)
    times.sort()
    probes = []

    def pred(i: int) -> bool:
        probes.append(i)
        assert 0 <= i < len(times)  # never probes past the queue
        return times[i] >= ts

    want = next((i for i, x in enumerate(times) if x >= ts), len(times))
    assert first_true(pred, 0, len(times), guess) == want
    assert len(probes) <= 4 * (len(times).bit_length() + 1)


@given(st.dictionaries(st.sampled_from(["a/0", "a/1", "b/0", "b/1"]), st.integers(0, 100)),
       st.dictionaries(st.sampled_from(["a/0", "a/1", "b/0", "b/1"]), st.integers(0, 100)),
       st.one_of(st.none(), st.integers(1, 150)))
def test_cap_offsets(start: dict[str, int], latest: dict[str, int], cap: int | None) -> None:
    end = cap_offsets(start, latest, cap)
    moved = 0
    for k in set(start) | set(latest):
        lo = start.get(k, 0)
        assert lo <= end.get(k, lo) <= max(lo, latest.get(k, lo))
        moved += end.get(k, lo) - lo
    waiting = sum(max(0, v - start.get(k, 0)) for k, v in latest.items())
    assert moved == (waiting if cap is None else min(cap, waiting))


def test_inflate_refuses_a_bomb() -> None:
    import zlib

    bomb = zlib.compress(b"\0" * (8 << 20))
    with pytest.raises(SourceError, match=r"b/0@1: .*maxBodyBytes=1048576"):
        inflate(bomb, SYSFLAG_COMPRESSED, 1 << 20, "b/0@1")
    assert inflate(zlib.compress(b"hello"), SYSFLAG_COMPRESSED, 5, "b/0@1") == b"hello"
    with pytest.raises(SourceError, match="b/0@1"):
        inflate(b"not zlib", SYSFLAG_COMPRESSED, 100, "b/0@1")


def _listen_below_32768() -> socket.socket:
    for _ in range(200):
        try:
            return socket.create_server(("127.0.0.1", random.randrange(*ports_for_tests())))
        except OSError:
            continue
    raise AssertionError("no free port below 32768")


@pytest.fixture
def hostile_server() -> Iterator[tuple[str, list[bytes]]]:
    """A TCP server on 127.0.0.1 answering each connection with the next scripted bytes,
    dripped one byte at a time when the script says so."""
    script: list[bytes] = []
    srv = _listen_below_32768()
    srv.settimeout(0.1)  # accept wakes to see stop (closing a listener does not wake it)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(5.0)
            with conn:
                conn.recv(65536)
                data = script.pop(0) if script else b""
                if data.startswith(b"DRIP"):
                    for b in data[4:]:
                        if stop.wait(0.05):
                            return
                        try:
                            conn.sendall(bytes([b]))
                        except OSError:
                            break
                else:
                    conn.sendall(data)
                    stop.wait(0.5)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield f"127.0.0.1:{srv.getsockname()[1]}", script
    finally:
        stop.set()
        srv.close()
        t.join(5)


def test_channel_bounds_time_and_size(hostile_server: tuple[str, list[bytes]]) -> None:
    addr, script = hostile_server
    script.append(struct.pack(">I", MAX_FRAME_BYTES) + b"\0" * 16)  # a frame over the limit
    with pytest.raises(WireError, match="exceeds the"), Channel(addr, 5.0) as ch:
        ch.call(11, {})
    script.append(b"DRIP" + b"\0\0\0\x40" + b"x" * 200)  # a drip that never completes a frame
    started = time.monotonic()
    with pytest.raises(WireError, match="deadline"), Channel(addr, 1.0) as ch:
        ch.call(11, {})
    assert time.monotonic() - started < 3.0  # one deadline per call, not one per recv
    with pytest.raises(WireError, match="closed"), Channel(addr, 5.0) as ch:
        ch.call(11, {})  # the script is empty: the server closes at once
    script.append(_frame({"code": 0, "opaque": "x", "flag": 1}))  # the codec refuses it
    with pytest.raises(WireError, match="opaque"), Channel(addr, 5.0) as ch:
        ch.call(11, {})


def _frame(header: dict[str, object], body: bytes = b"") -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack(">II", 4 + len(raw) + len(body), len(raw)) + raw + body


def test_channel_drops_stale_answers_and_requests(hostile_server: tuple[str, list[bytes]]
                                                 ) -> None:  # fmt: skip
    """The answer is the response with the call's opaque: an earlier call's late answer and a
    request from the peer are dropped; extFields come back as strings."""
    addr, script = hostile_server
    script.append(_frame({"code": 0, "opaque": 9, "flag": 1}, b"stale")
                  + _frame({"code": 40, "opaque": 1, "flag": 0}, b"a request")
                  + _frame({"code": 0, "opaque": 1, "flag": 1, "extFields": {"a": 1}}, b"xy"))
    with Channel(addr, 5.0) as ch:
        reply = ch.call(11, {"topic": "T", "n": 3, "b": True})
    assert (reply.code, reply.ext_fields, bytes(reply.body)) == (0, {"a": "1"}, b"xy")


def test_the_pull_loop_runs_from_the_job_archive_alone(tmp_path: Path) -> None:
    """What an executor imports for a read or a write (everything but the pyspark glue) comes
    from the archive ``replica-diff --package`` builds: no site-packages, no Trio, no orjson;
    the remoting codec runs there on the standard library's JSON and writes the same bytes as
    with orjson, and reads them back."""
    from rmq_cluster.spark_jobs.package import build_package

    archive = tmp_path / "rmq_spark.zip"
    build_package(str(archive))
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "import rmq_cluster.spark_jobs.mq_io as io, rmq_cluster.spark_jobs.mq_model as m;"
        "import rmq_cluster.spark_jobs.mq_store;"
        "o = m.read_options({'namesrv': '127.0.0.1:1', 'topic': 'T'});"
        "assert 'Signature' in io.signed({'topic': 'T'}, b'', 'ak', 'sk');"  # ACL: the signing rule
        "from rmq_cluster.cluster.remoting import codec;"
        "import rmq_cluster.spark_jobs.mq_wire as w;"
        "f = w.request_frame(11, {'topic': 'Té', 'z': 1, 'a': True}, b'b', 5);"
        "c = codec.FrameDecoder().feed(f)[0];"
        "assert (c.ext_fields, c.language, bytes(c.body)) == ("
        "    {'topic': 'Té', 'z': '1', 'a': 'true'}, 'PYTHON', b'b'), c;"
        "assert 'trio' not in sys.modules and 'orjson' not in sys.modules;"
        "print(io.__file__); print(f.hex())\n"
        "for h in (b'[' * 100000, b'{\"code\": NaN}', b'{\"code\": 1', b'\\xff'):\n"
        "    try: codec.decode_frame(len(h).to_bytes(4, 'big') + h)\n"
        "    except codec.ProtocolError: pass\n"
        "    else: raise SystemExit(f'accepted {h[:20]!r}')\n"
    )
    done = subprocess.run([sys.executable, "-S", "-c", code, str(archive)], capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    where, frame = done.stdout.split()
    assert where.startswith(str(archive))
    cmd = RemotingCommand.request(11, {"topic": "Té", "z": 1, "a": True}, b"b",
                                  language="PYTHON")  # fmt: skip
    assert bytes.fromhex(frame) == encode(cmd, 5)  # orjson here: the same bytes


def test_read_from_picks_each_groups_replica() -> None:
    """``readFrom``: the master, or the first slave; the other one when the route lists only
    it (a master gone: its slave); a route naming a replica id that is not a number is
    refused."""
    from rmq_cluster.spark_jobs.mq_io import parse_route

    def route(addrs: dict[str, dict[str, str]]) -> bytes:
        return json.dumps({
            "brokerDatas": [{"brokerName": b, "brokerAddrs": a} for b, a in addrs.items()],
            "queueDatas": [{"brokerName": b, "readQueueNums": 4, "writeQueueNums": 4,
                            "perm": 6} for b in addrs]}).encode()  # fmt: skip

    r = parse_route(route({"a": {"0": "m:1", "2": "s2:1", "1": "s1:1"}, "b": {"1": "sb:1"}}))
    assert (r.read_addr("a", "master"), r.read_addr("a", "slave")) == ("m:1", "s1:1")
    assert (r.read_addr("b", "master"), r.read_addr("b", "slave")) == ("sb:1", "sb:1")
    assert set(r.read_queues) == {"a", "b"} and set(r.write_queues) == {"a"}
    assert read_options({"namesrv": "h:1", "topic": "T", "READFROM": "Slave"}).read_from == "slave"
    with pytest.raises(SourceError, match="readfrom"):
        read_options({"namesrv": "h:1", "topic": "T", "readFrom": "leader"})
    with pytest.raises(SourceError, match="TopicRouteData"):
        parse_route(route({"a": {"x": "m:1"}}))
