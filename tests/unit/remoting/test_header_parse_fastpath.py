"""A header's generated parser (``from_ext_fields``) against its careful one, over Hypothesis
extFields: the bulk fast path reads the required strings and integers at once and hands
anything unusual to the careful parser, so both give equal headers, or both refuse with the
same ``HeaderError`` (the same field, the same problem)."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmq_cluster.cluster.remoting import headers
from rmq_cluster.cluster.remoting.headers import (
    CommandHeader,
    HeaderError,
    PullMessageRequestHeader,
)

ALL = sorted(
    (c for c in vars(headers).values()
     if isinstance(c, type) and issubclass(c, CommandHeader) and c is not CommandHeader
     and attrs.has(c)),
    key=lambda c: c.__name__,
)  # fmt: skip
#: an integer field as a peer may write it: plain, signed, padded, underscored, non-ASCII
#: digits, out of range, empty, not a string
ODD_INT = st.one_of(
    st.integers(-(2**64), 2**64).map(str),
    st.sampled_from(["", " 7 ", "+3", "1_000", "٣", "0x10", "-", "9" * 30, "true", "1.5"]),
    st.integers(-5, 5), st.booleans(), st.none(), st.floats(allow_nan=False),
)  # fmt: skip
#: mostly what clients send (so the fast path runs to its end), now and then anything
INT_FIELD = st.one_of(*[st.integers(-(2**64), 2**64).map(str)] * 6, ODD_INT)
ODD_STR = st.one_of(st.text(max_size=8), st.integers(-5, 5), st.booleans(), st.none())
STR_FIELD = st.one_of(*[st.text(max_size=8)] * 6, ODD_STR)


def _outcome(parse: Any, ext: dict[str, Any]) -> Any:
    try:
        return ("ok", parse(ext))
    except HeaderError as exc:
        return ("error", exc.field, exc.problem)


@settings(max_examples=500)
@given(st.sampled_from(ALL), st.data())
def test_fast_and_careful_agree(cls: type, data: st.DataObject) -> None:
    ext: dict[str, Any] = {}
    for _name, wire, kind, _required, _default in headers._spec(cls):
        if data.draw(st.integers(0, 19)) == 0:
            continue  # absent
        ext[wire] = data.draw(INT_FIELD if kind in ("int", "long") else STR_FIELD)
    parse = headers._compile_parser(cls)
    assert _outcome(parse, ext) == _outcome(parse.__globals__["careful"], ext)


PULL_EXT = st.fixed_dictionaries({
    "consumerGroup": st.text(min_size=1, max_size=10),
    "topic": st.text(min_size=1, max_size=10),
    "queueId": st.integers(-(2**31), 2**31 - 1).map(str),
    "queueOffset": st.integers(-(2**63), 2**63 - 1).map(str),
    "maxMsgNums": st.integers(0, 64).map(str),
    "sysFlag": st.integers(0, 15).map(str),
    "commitOffset": st.integers(-1, 2**40).map(str),
    "suspendTimeoutMillis": st.integers(0, 20_000).map(str),
    "subVersion": st.integers(0, 2**42).map(str),
}, optional={"subscription": st.text(max_size=10), "expressionType": st.just("TAG")})


@given(PULL_EXT)
def test_a_pull_header_as_clients_send_it_parses_alike(ext: dict[str, str]) -> None:
    parse = headers._compile_parser(PullMessageRequestHeader)
    fast = parse(ext)
    assert fast == parse.__globals__["careful"](ext)
    assert fast == PullMessageRequestHeader.from_ext_fields(ext)
    assert fast.queue_offset == int(ext["queueOffset"])


def test_an_integer_out_of_its_range_is_refused_by_name() -> None:
    ext = {"consumerGroup": "G", "topic": "T", "queueId": "1", "queueOffset": "0",
           "maxMsgNums": "32", "sysFlag": "0", "commitOffset": "0",
           "suspendTimeoutMillis": "0", "subVersion": "0"}  # fmt: skip
    for field, kind, bad in (("queueId", "int", str(2**31)), ("queueOffset", "long", str(2**63))):
        with pytest.raises(HeaderError) as caught:
            PullMessageRequestHeader.from_ext_fields({**ext, field: bad})
        assert (caught.value.field, caught.value.problem) == (
            field, f"is out of range for {kind}: {bad}")
