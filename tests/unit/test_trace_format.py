"""The 4.x trace record format (cluster/protocol/trace.py) against bodies Apache's Java client
4.9.8 wrote into RMQ_SYS_TRACE_TOPIC (captured from tests/compat/test_java_client.py's trace
scenario), its round trip, and hostile bodies."""

from __future__ import annotations

import random

from rmq_cluster.client.tables import render_trace
from rmq_cluster.client.trace import split_bodies
from rmq_cluster.cluster.protocol.trace import (
    MAX_RECORDS_PER_BODY,
    NULL,
    EndTransactionRecord,
    PubRecord,
    SubAfterRecord,
    SubBeforeRecord,
    TraceType,
    clean,
    decode,
    encode,
    trace_keys,
    views_of,
)

MSG_ID = "FD000000000000000000000000000002745D4E0E2F2A937CA42B0042"
REQUEST = "FD000000000000000000000000000002745D4E0E2F2A937CA4980044"
#: what the 4.9.8 producer and push consumer wrote (two trace messages)
JAVA_PUB = ("Pub\x011795965619244\x01DefaultRegion\x01j4980-pg-trace\x01j4980-trace\x01" + MSG_ID
            + "\x01Traced\x01key-0 alt-0\x01127.0.0.1:13832\x0112\x0111\x010\x01"
            "7F000001000036080000000000006BF4\x01true\x02")
JAVA_SUB = ("SubBefore\x011795965619352\x01null\x01j4980-cg-trace\x01" + REQUEST + "\x01" + MSG_ID
            + "\x010\x01key-0 alt-0\x02"
            "SubAfter\x01" + REQUEST + "\x01" + MSG_ID + "\x012\x01true\x01key-0 alt-0\x010\x01"
            "1795965619354\x01j4980-cg-trace\x02")


def test_reads_what_apaches_java_client_writes() -> None:
    pub = decode(JAVA_PUB.encode())
    assert pub.skipped == 0
    assert pub.records == (PubRecord(
        timestamp=1795965619244, region="DefaultRegion", group="j4980-pg-trace",
        topic="j4980-trace", msg_id=MSG_ID, tags="Traced", keys="key-0 alt-0",
        store_host="127.0.0.1:13832", body_length=12, cost_ms=11, msg_type=0,
        offset_msg_id="7F000001000036080000000000006BF4", success=True),)
    sub = decode(JAVA_SUB.encode())
    assert sub.skipped == 0
    before, after = sub.records
    assert before == SubBeforeRecord(timestamp=1795965619352, region=NULL,
                                     group="j4980-cg-trace", request_id=REQUEST, msg_id=MSG_ID,
                                     retry_times=0, keys="key-0 alt-0")
    assert after == SubAfterRecord(request_id=REQUEST, msg_id=MSG_ID, cost_ms=2, success=True,
                                   keys="key-0 alt-0", context_code=0,
                                   timestamp=1795965619354, group="j4980-cg-trace")
    # byte for byte what the Java client wrote
    assert encode(pub.records).decode() == JAVA_PUB
    assert encode(sub.records).decode() == JAVA_SUB
    assert trace_keys(sub.records) == [MSG_ID, "key-0 alt-0"]


def test_views_and_mqadmins_table() -> None:
    msgs = [(decode(JAVA_PUB).records, "127.0.0.1"), (decode(JAVA_SUB).records, "127.0.0.2")]
    views = views_of(msgs, MSG_ID)
    assert [v.kind for v in views] == [TraceType.PUB, TraceType.SUB_BEFORE, TraceType.SUB_AFTER]
    assert views_of(msgs, "other") == []
    lines = render_trace(views).splitlines()
    assert lines[0].split() == ["#Type", "#ProducerGroup", "#ClientHost", "#SendTime",
                                "#CostTimes", "#Status"]
    assert lines[1].split()[:3] == ["Pub", "j4980-pg-trace", "127.0.0.1"]
    assert lines[1].split()[-2:] == ["11ms", "success"]
    assert lines[2] == ""
    assert lines[3].split()[1] == "#ConsumerGroup"
    assert lines[4].split()[:3] == ["Sub", "j4980-cg-trace", "127.0.0.2"]
    # mqadmin's printf widths: %-10s %-20s %-20s %-20s %-10s %-10s
    assert lines[4].index("j4980") == 11 and lines[4].index("127.0.0.2") == 32


def test_an_older_sub_after_takes_its_group_from_the_sub_before() -> None:
    old = JAVA_SUB.replace("\x011795965619354\x01j4980-cg-trace\x02", "\x02")
    (before, after) = decode(old).records
    assert isinstance(after, SubAfterRecord) and after.group is None and after.timestamp is None
    (_b, view) = views_of([((before,), "h1"), ((after,), "h2")], MSG_ID)
    assert view.group == "j4980-cg-trace" and view.timestamp == 1795965619352


def test_end_transaction_round_trip_and_clean_fields() -> None:
    rec = EndTransactionRecord(
        timestamp=5, region="DefaultRegion", group="TxG", topic="T", msg_id="M", tags=NULL,
        keys=clean("a\x01b\x02c"), store_host="127.0.0.1:10911", msg_type=1,
        transaction_id="X", transaction_state="COMMIT_MESSAGE", from_check=False)
    assert rec.keys == "a b c"
    assert decode(encode([rec])).records == (rec,)
    assert clean("") == clean(None) == NULL  # never an empty last field (Java's split)


def test_split_bodies_bounds_each_trace_message() -> None:
    records = [SubBeforeRecord(1, "r", "G", "req", f"m{i}", 0, "k" * 50) for i in range(30)]
    bodies = split_bodies(records, max_bytes=500)
    assert all(len(b) <= 500 for b, _r in bodies) and len(bodies) > 1
    assert [r for _b, rs in bodies for r in rs] == records
    assert [r for b, _rs in bodies for r in decode(b).records] == records


def test_hostile_bodies_never_raise() -> None:
    rng = random.Random(36)
    alphabet = ["\x01", "\x02", "Pub", "SubBefore", "SubAfter", "EndTransaction", "1", "-",
                "true", "x", "99999999999999999999", "\xff", "COMMIT_MESSAGE", "7"]
    for _ in range(2000):
        body = "".join(rng.choice(alphabet) for _ in range(rng.randrange(40)))
        out = decode(body.encode("utf-8", "surrogatepass"))
        assert all(r.kind in TraceType for r in out.records)
    assert decode(b"\xff\xfe\x02Pub\x01x\x02").skipped == 2  # garbage, a short Pub
    assert decode(b"Pub\x01" + b"1\x01" * 10 + b"9\x01x\x01true\x02").skipped == 1  # type 9
    many = decode(JAVA_SUB * (MAX_RECORDS_PER_BODY // 2 + 5))
    assert len(many.records) == MAX_RECORDS_PER_BODY and many.skipped == 10


def test_a_time_past_year_9999_prints() -> None:
    rec = SubAfterRecord("r", MSG_ID, 1, True, "k", 0, 9_999_999_999_999_999, "G")
    text = render_trace(views_of([((rec,), "h")], MSG_ID))
    assert "9999999999999999" in text
