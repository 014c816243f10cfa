"""messages: DLedger code numbers and a bytes round trip for every message type."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq_cluster.dledger.messages import (
    DecodeError,
    Entry,
    HeartBeatRequest,
    HeartBeatResponse,
    LeadershipTransferRequest,
    PushEntryRequest,
    PushEntryResponse,
    PushType,
    ResponseCode,
    VoteRequest,
    VoteResponse,
    VoteResult,
    decode,
    encode,
)


def test_dledger_code_numbers() -> None:
    assert ResponseCode.SUCCESS == 200
    assert ResponseCode.NOT_LEADER == 404
    assert ResponseCode.INCONSISTENT_STATE == 406
    assert ResponseCode.INCONSISTENT_LEADER == 409
    assert ResponseCode.TERM_NOT_READY == 416
    assert ResponseCode.TERM_CHANGED == 501
    assert ResponseCode.WAIT_QUORUM_ACK_TIMEOUT == 502
    assert ResponseCode.LEADER_PENDING_FULL == 503
    assert ResponseCode.LEADER_TRANSFERRING == 506
    assert [r.name for r in VoteResult][:3] == ["UNKNOWN", "ACCEPT", "REJECT_UNKNOWN_LEADER"]
    assert {t.name for t in PushType} == {"APPEND", "COMMIT", "COMPARE", "TRUNCATE"}


ids = st.sampled_from(["n0", "n1", "n2"])
i64 = st.integers(-1, 2**62)
entries = st.lists(
    st.builds(Entry, st.integers(0, 2**40), st.integers(0, 2**40), st.binary(max_size=64)),
    max_size=5,
).map(tuple)

messages = st.one_of(
    st.builds(VoteRequest, st.just("g"), ids, ids, ids, i64, i64, i64, st.booleans(),
              st.booleans()),
    st.builds(VoteResponse, st.just("g"), ids, ids, ids, i64, st.sampled_from(VoteResult),
              st.booleans(), st.sampled_from(ResponseCode)),
    st.builds(HeartBeatRequest, st.just("g"), ids, ids, ids, i64, i64),
    st.builds(HeartBeatResponse, st.just("g"), ids, ids, ids, i64,
              st.sampled_from(ResponseCode)),
    st.builds(PushEntryRequest, st.just("g"), ids, ids, ids, i64, st.sampled_from(PushType),
              i64, i64, i64, entries),
    st.builds(PushEntryResponse, st.just("g"), ids, ids, ids, i64,
              st.sampled_from(ResponseCode), i64, i64, i64),
    st.builds(LeadershipTransferRequest, st.just("g"), ids, ids, ids, i64, ids, i64),
)


@given(messages)
def test_round_trip(msg: object) -> None:
    assert decode(encode(msg)) == msg  # type: ignore[arg-type]


@given(messages, st.data())
def test_truncated_or_garbled_bytes_never_crash(msg: object, data: st.DataObject) -> None:
    raw = bytearray(encode(msg))  # type: ignore[arg-type]
    cut = data.draw(st.integers(0, len(raw) - 1))
    with pytest.raises(DecodeError):
        decode(bytes(raw[:cut]))
    at = data.draw(st.integers(0, len(raw) - 1))
    raw[at] ^= 0xFF
    with contextlib.suppress(DecodeError):
        decode(bytes(raw))
