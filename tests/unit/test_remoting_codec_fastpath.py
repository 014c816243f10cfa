"""The codec's fast paths against its careful ones (differential, over Hypothesis input).

* ``decode_header_json`` checks what Java, C++ and Go clients send (ints, a known language
  name, string extFields values) cheaply and builds the command without the attrs constructor;
  anything else goes to ``_decode_header_json_lenient``. Both must give equal commands, or both
  refuse with ``ProtocolError``, for any JSON header, SEND_MESSAGE_V2's in particular.
* ``_wire_command`` (slot setters) must build what the attrs constructor builds.
* ``RemotingCommand.response`` must copy and coerce extFields as the constructor does.
"""

from __future__ import annotations

from typing import Any

import attrs
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmq_cluster.cluster.remoting.codec import (
    FrameDecoder,
    ProtocolError,
    RemotingCommand,
    _decode_header_json_lenient,
    _wire_command,
    decode_header_json,
    encode,
)
from rmq_cluster.cluster.remoting.codes import SERIALIZE_JSON, LanguageCode, RequestCode

INT32 = st.integers(-(2**31), 2**31 - 1)
ODD_INTS = st.sampled_from([2**31, -(2**31) - 1, 2**40, -(2**63)])
NUMBERS = st.one_of(INT32, ODD_INTS, st.booleans(), st.floats(allow_nan=False, width=32))
SCALARS = st.one_of(st.none(), NUMBERS, st.text(max_size=12))
#: a language as a client other than Java may write it
ODD_LANGUAGES = st.one_of(
    st.sampled_from(["java", "cpp", "Go", "", "J"]), st.integers(-2, 20), st.none(),
    st.booleans(), st.floats(allow_nan=False),
)
#: an int32 header field as a careless peer may write it
ODD_INT_FIELD = st.one_of(ODD_INTS, st.booleans(), st.text(max_size=6), INT32.map(str),
                          INT32.map(lambda i: f" {i} "), st.none(), st.floats(allow_nan=False))


def _ext_values() -> st.SearchStrategy[Any]:
    return st.one_of(st.text(max_size=20), st.text(max_size=20), SCALARS)


SEND_V2_EXT = st.fixed_dictionaries(
    {
        "a": st.text(min_size=1, max_size=20),
        "b": st.text(min_size=1, max_size=20),
        "c": st.just("TBW102"),
        "d": INT32.map(str),
        "e": INT32.map(str),
        "f": INT32.map(str),
        "g": st.integers(0, 2**62).map(str),
        "h": INT32.map(str),
        "i": st.text(max_size=60),
        "j": INT32.map(str),
        "k": st.sampled_from(["false", "true"]),
    },
    optional={"l": INT32.map(str), "m": st.sampled_from(["false", "true", "1", "0"]),
              "n": st.text(max_size=10)},
)


ODD_VALUES = st.one_of(
    SCALARS, st.lists(INT32, max_size=2), st.dictionaries(st.text(max_size=2),
                                                                 INT32, max_size=2))


@st.composite
def headers(draw: st.DrawFn) -> dict[str, Any]:
    """A JSON header as a peer might send it: a client's well-formed header (SEND_MESSAGE_V2's
    or any other extFields) with up to three fields made odd: a missing field, a number out
    of int32 or written as a string, another language spelling or an ordinal, a non-string
    remark, extFields values that are numbers, booleans or null, extFields not an object."""
    header: dict[str, Any] = {
        "code": draw(INT32),
        "flag": draw(INT32),
        "language": draw(st.sampled_from([lang.name for lang in LanguageCode])),
        "opaque": draw(INT32),
        "serializeTypeCurrentRPC": "JSON",
        "version": draw(INT32),
    }
    if draw(st.booleans()):
        header["extFields"] = draw(SEND_V2_EXT)
    elif draw(st.booleans()):
        header["extFields"] = draw(st.dictionaries(st.text(max_size=8), st.text(max_size=8),
                                                   max_size=8))
    if draw(st.booleans()):
        header["remark"] = draw(st.text(max_size=20))
    for _ in range(draw(st.integers(0, 3))):
        odd = draw(st.sampled_from(["drop", "int", "language", "remark", "ext_value", "ext"]))
        if odd == "drop":
            header.pop(draw(st.sampled_from(sorted(header))), None)
        elif odd == "int":
            header[draw(st.sampled_from(["code", "flag", "opaque", "version"]))] = draw(
                ODD_INT_FIELD)
        elif odd == "language":
            header["language"] = draw(ODD_LANGUAGES)
        elif odd == "remark":
            header["remark"] = draw(SCALARS)
        elif odd == "ext_value":
            ext = header.get("extFields")
            if type(ext) is dict:  # a C++ client's numbers, a fastjson boolean, a null
                ext[draw(st.sampled_from("adekmz"))] = draw(SCALARS)
        else:
            header["extFields"] = draw(ODD_VALUES)
    return header


def _outcome(fn: Any, *args: Any) -> RemotingCommand | type[ProtocolError]:
    try:
        return fn(*args)
    except ProtocolError:
        return ProtocolError


@settings(max_examples=400)
@given(headers())
def test_fast_decode_equals_lenient_decode(header: dict[str, Any]) -> None:
    data = orjson.dumps(header)
    fast = _outcome(decode_header_json, data, b"body")
    careful = _outcome(_decode_header_json_lenient, orjson.loads(data), b"body")
    assert fast == careful
    if isinstance(fast, RemotingCommand):
        assert type(fast.ext_fields) is dict
        assert all(type(k) is str and isinstance(v, str) for k, v in fast.ext_fields.items())


@given(SEND_V2_EXT, INT32, st.binary(max_size=64))
def test_send_v2_frame_round_trip(ext: dict[str, str], opaque: int, body: bytes) -> None:
    """A Java SEND_MESSAGE_V2 request through encode and the stream decoder: the command the
    careful path builds, field for field."""
    request = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext, body)
    frame = encode(request, opaque)
    (decoded,) = FrameDecoder().feed(frame)
    expected = attrs.evolve(request, opaque=opaque)
    assert decoded == expected
    header_len = int.from_bytes(frame[4:8], "big") & 0xFFFFFF
    assert decoded == _decode_header_json_lenient(orjson.loads(frame[8 : 8 + header_len]), body)


@given(INT32, st.sampled_from(["JAVA", "CPP", "GO"]), INT32, INT32, INT32,
       st.one_of(st.none(), st.text(max_size=8)),
       st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=4),
       st.binary(max_size=8), st.sampled_from([0, 1]))
def test_wire_command_equals_constructor(
    code: int, language: str, version: int, opaque: int, flag: int, remark: str | None,
    ext: dict[str, str], body: bytes, stype: int,
) -> None:
    built = _wire_command(code, language, version, opaque, flag, remark, dict(ext), body, stype)
    assert built == RemotingCommand(code, language, version, opaque, flag, remark, ext, body,
                                    stype)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        built.code = 1  # type: ignore[misc]


@given(st.dictionaries(st.text(max_size=6), st.one_of(st.text(max_size=6), st.integers(),
                                                      st.booleans(), st.none()), max_size=6))
def test_response_ext_fields_as_constructor(ext: dict[str, Any]) -> None:
    request = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"a": "g"}, b"x")
    answer = request.response(0, None, ext)
    expected = RemotingCommand(0, ext_fields=ext).ext_fields
    assert answer.ext_fields == expected
    assert answer.serialize_type == SERIALIZE_JSON
    ext["late!"] = "change"  # the answer keeps its own copy
    assert answer.ext_fields == expected
