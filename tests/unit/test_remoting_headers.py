"""Typed headers: validation names the bad field; SEND_MESSAGE_V2's letters map to long names."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq_cluster.cluster.remoting.codes import RequestCode
from rmq_cluster.cluster.remoting.headers import (
    ALL_HEADERS,
    HeaderError,
    PullMessageRequestHeader,
    RegisterBrokerRequestHeader,
    SendMessageRequestHeader,
    SendMessageRequestHeaderV2,
    parse_send_header,
)

CPP_V2 = {
    "a": "PG",
    "b": "TopicTest",
    "c": "TBW102",
    "d": 4,
    "e": 3,
    "f": 0,
    "g": "1700000000000",
    "h": 0,
    "i": "TAGS\x01A",
    "j": "0",
    "k": "0",
    "l": 16,
    "m": "1",
    "AccessKey": "",
    "OnsChannel": "ALIYUN",
    "Signature": "x",
}


def test_cpp_send_v2_header_parses_with_numbers_and_0_1_booleans() -> None:
    header = parse_send_header(RequestCode.SEND_MESSAGE_V2, CPP_V2)
    assert header == SendMessageRequestHeader(
        producer_group="PG",
        topic="TopicTest",
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=3,
        sys_flag=0,
        born_timestamp=1_700_000_000_000,
        flag=0,
        properties="TAGS\x01A",
        reconsume_times=0,
        unit_mode=False,
        max_reconsume_times=16,
        batch=True,
    )


def test_v1_and_v2_carry_the_same_fields() -> None:
    v1 = parse_send_header(RequestCode.SEND_MESSAGE_V2, CPP_V2)
    v2 = v1.to_v2()
    ext = v2.to_ext_fields()
    assert set(ext) <= set("abcdefghijklmn")
    assert ext["d"] == "4" and ext["m"] == "true"
    assert SendMessageRequestHeaderV2.from_ext_fields(ext).to_v1() == v1
    assert parse_send_header(RequestCode.SEND_MESSAGE, v1.to_ext_fields()) == v1
    assert [f.name for f in attrs.fields(SendMessageRequestHeader)] == [
        f.name for f in attrs.fields(SendMessageRequestHeaderV2)
    ]


def test_missing_required_field_is_named() -> None:
    ext = dict(CPP_V2)
    del ext["b"]
    with pytest.raises(HeaderError) as info:
        parse_send_header(RequestCode.SEND_MESSAGE_V2, ext)
    assert info.value.field == "b"
    assert "required" in str(info.value)


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("queueId", "x", "not an integer"),
        ("queueOffset", "1.5", "not an integer"),
        ("queueId", str(2**31), "out of range"),
        ("sysFlag", "", "required"),
    ],
)
def test_bad_values_are_named(field: str, value: str, problem: str) -> None:
    ext = {
        "consumerGroup": "G",
        "topic": "T",
        "queueId": "0",
        "queueOffset": "0",
        "maxMsgNums": "32",
        "sysFlag": "6",
        "commitOffset": "0",
        "suspendTimeoutMillis": "15000",
        "subVersion": "0",
    }
    ext[field] = value
    with pytest.raises(HeaderError, match=problem) as info:
        PullMessageRequestHeader.from_ext_fields(ext)
    assert info.value.field == field


def test_boolean_parsing() -> None:
    base = {
        "brokerName": "b",
        "brokerAddr": "a:1",
        "clusterName": "c",
        "haServerAddr": "a:2",
        "brokerId": "0",
    }
    for raw, want in [("true", True), ("TRUE", True), ("1", True), ("false", False), ("0", False)]:
        assert (
            RegisterBrokerRequestHeader.from_ext_fields({**base, "compressed": raw}).compressed
            is want
        )
    assert RegisterBrokerRequestHeader.from_ext_fields(base).compressed is False
    with pytest.raises(HeaderError, match="not a boolean"):
        RegisterBrokerRequestHeader.from_ext_fields({**base, "compressed": "yes"})


@given(st.sampled_from(ALL_HEADERS), st.data())
def test_every_header_round_trips(cls: type, data: st.DataObject) -> None:
    kwargs = {}
    for f in attrs.fields(cls):
        kind = f.metadata["kind"]
        strat = {
            "str": st.text(max_size=10),
            "int": st.integers(-(2**31), 2**31 - 1),
            "long": st.integers(-(2**63), 2**63 - 1),
            "bool": st.booleans(),
        }[kind]
        if not f.metadata["required"]:
            strat = st.none() | strat if f.default is None else strat
        kwargs[f.name] = data.draw(strat)
    header = cls(**kwargs)
    ext = header.to_ext_fields()
    assert all(isinstance(v, str) for v in ext.values())
    again = cls.from_ext_fields(ext)
    # "" for an optional non-string field reads back as absent
    assert again == header or any(v == "" for v in ext.values())


def test_unknown_keys_are_ignored() -> None:
    header = RegisterBrokerRequestHeader.from_ext_fields(
        {
            "brokerName": "b",
            "brokerAddr": "a:1",
            "clusterName": "c",
            "haServerAddr": "a:2",
            "brokerId": 1,
            "Signature": "s",
        }
    )
    assert header.broker_id == 1
