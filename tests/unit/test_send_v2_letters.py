"""SEND_MESSAGE_V2's one-letter header has one table, ``SEND_V2_LETTER`` (issue 32, item 5):
the V2 header class, the client's request, the broker's fast parse and the name table all read
it, so they cannot drift apart."""

from __future__ import annotations

import attrs
from hypothesis import given
from hypothesis import strategies as st

from rmq_cluster.broker.processors.send import _fast_v2, _slow
from rmq_cluster.client import frames
from rmq_cluster.cluster.protocol.names import NAME_TABLE
from rmq_cluster.cluster.remoting.codes import RequestCode
from rmq_cluster.cluster.remoting.headers import (
    SEND_V2_LETTER,
    SendMessageRequestHeader,
    SendMessageRequestHeaderV2,
)


def test_one_table_names_every_field_once() -> None:
    long_names = [f.metadata["wire"] for f in attrs.fields(SendMessageRequestHeader)]
    letters = [f.metadata["wire"] for f in attrs.fields(SendMessageRequestHeaderV2)]
    assert list(SEND_V2_LETTER) == long_names
    assert list(SEND_V2_LETTER.values()) == letters == [chr(ord("a") + i) for i in range(14)]
    fields = {h.field for h in NAME_TABLE[RequestCode.SEND_MESSAGE_V2] if hasattr(h, "field")}
    assert fields == {SEND_V2_LETTER[n] for n in ("producerGroup", "topic", "defaultTopic",
                                                  "queueId")}  # fmt: skip


@given(
    queue_id=st.integers(0, 1023),
    sys_flag=st.integers(0, 0xFFF),
    reconsume=st.integers(0, 16),
    max_reconsume=st.none() | st.integers(1, 32),
    batch=st.booleans(),
)
def test_what_the_client_writes_the_broker_reads(
    queue_id: int, sys_flag: int, reconsume: int, max_reconsume: int | None, batch: bool
) -> None:
    cmd = frames.send_message(
        group="PG", topic="T", queue_id=queue_id, sys_flag=sys_flag, born_timestamp=1_700,
        flag=3, properties="KEYS\x01k", body=b"x", broker_name="b0", batch=batch,
        reconsume_times=reconsume, max_reconsume_times=max_reconsume,
    )
    assert set(cmd.ext_fields) <= set(SEND_V2_LETTER.values())
    fast = _fast_v2(cmd)
    assert fast is not None
    assert fast == _slow(cmd.code, cmd.ext_fields)
    assert (fast.producer_group, fast.topic, fast.queue_id, fast.sys_flag) == (
        "PG", "T", queue_id, sys_flag)
    assert (fast.reconsume_times, fast.max_reconsume_times, fast.batch) == (
        reconsume, max_reconsume, batch)
