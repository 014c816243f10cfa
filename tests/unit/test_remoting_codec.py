"""The sans-IO codec: round trips, fuzz, split streams, and golden frames built by hand."""

from __future__ import annotations

import contextlib
import json
import struct

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq_cluster.cluster.remoting.codec import (
    MAX_FRAME_BYTES,
    FrameDecoder,
    ProtocolError,
    RemotingCommand,
    decode_frame,
    encode,
    encode_into,
)
from rmq_cluster.cluster.remoting.codes import (
    SERIALIZE_JSON,
    SERIALIZE_ROCKETMQ,
    LanguageCode,
    ResponseCode,
)

INT32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
INT16 = st.integers(min_value=-(2**15), max_value=2**15 - 1)
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
EXT = st.dictionaries(TEXT, TEXT, max_size=8)


@st.composite
def commands(draw: st.DrawFn) -> RemotingCommand:
    stype = draw(st.sampled_from([SERIALIZE_JSON, SERIALIZE_ROCKETMQ]))
    small = stype == SERIALIZE_ROCKETMQ
    remark = draw(st.none() | TEXT)
    if small and remark == "":
        remark = None  # the binary header cannot tell "" from null
    return RemotingCommand(
        code=draw(INT16 if small else INT32),
        language=draw(st.sampled_from([lang.name for lang in LanguageCode])),
        version=draw(INT16 if small else INT32),
        opaque=draw(INT32),
        flag=draw(st.integers(min_value=0, max_value=3)),
        remark=remark,
        ext_fields=draw(EXT),
        body=draw(st.binary(max_size=300)),
        serialize_type=stype,
    )


def _frame(header: bytes, body: bytes = b"", stype: int = 0) -> bytes:
    """A frame assembled from the reference's layout (§1.1), not by our encoder."""
    return (
        struct.pack(">II", 4 + len(header) + len(body), (stype << 24) | len(header)) + header + body
    )


# ----------------------------------------------------------------------------- properties


@given(commands())
def test_encode_decode_round_trip(cmd: RemotingCommand) -> None:
    decoded = FrameDecoder().feed(encode(cmd))
    assert decoded == [cmd]


@given(st.lists(commands(), min_size=1, max_size=6), st.data())
def test_stream_split_at_any_offsets_decodes_identically(
    cmds: list[RemotingCommand], data: st.DataObject
) -> None:
    stream = b"".join(encode(c) for c in cmds)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=12)))
    decoder = FrameDecoder()
    out: list[RemotingCommand] = []
    prev = 0
    for cut in [*cuts, len(stream)]:
        out += decoder.feed(stream[prev:cut])
        prev = cut
    assert out == cmds
    assert decoder.buffered == 0


def test_every_single_split_point_decodes_identically() -> None:
    cmds = [
        RemotingCommand.request(10, {"a": "g", "b": "T", "e": 3}, b"body-1"),
        RemotingCommand(code=0, opaque=7, flag=1, remark="ok", serialize_type=SERIALIZE_ROCKETMQ),
        RemotingCommand.request(34, body=b"x" * 100, oneway=True),
    ]
    stream = b"".join(encode(c, opaque=i) for i, c in enumerate(cmds))
    expected = FrameDecoder().feed(stream)
    for cut in range(len(stream) + 1):
        decoder = FrameDecoder()
        assert decoder.feed(stream[:cut]) + decoder.feed(stream[cut:]) == expected
    # and byte by byte
    decoder = FrameDecoder()
    got = [c for i in range(len(stream)) for c in decoder.feed(stream[i : i + 1])]
    assert got == expected


@given(st.lists(st.binary(max_size=64), max_size=20))
def test_byte_soup_only_ever_raises_protocol_error(chunks: list[bytes]) -> None:
    decoder = FrameDecoder()
    try:
        for chunk in chunks:
            decoder.feed(chunk)
    except ProtocolError:
        pass


@given(st.binary(max_size=200), st.sampled_from([0, 1, 2, 255]))
def test_framed_garbage_header_only_ever_raises_protocol_error(header: bytes, stype: int) -> None:
    with contextlib.suppress(ProtocolError):
        FrameDecoder().feed(_frame(header, b"", stype))


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | TEXT,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
        max_leaves=10,
    )
)
def test_any_json_header_only_ever_raises_protocol_error(value: object) -> None:
    try:
        header = orjson.dumps(value)
    except TypeError:
        return
    with contextlib.suppress(ProtocolError):
        FrameDecoder().feed(_frame(header))


# ----------------------------------------------------------------------------- golden frames


def test_cpp_client_request_decodes() -> None:
    # As the C++ client 2.0 writes SEND_MESSAGE_V2: alphabetical keys, numbers unquoted in
    # extFields, remark "", and a trailing newline inside the header (reference §1.2, §10).
    header = (
        b'{"code":310,"extFields":{"a":"PG","b":"TopicTest","c":"TBW102","d":4,"e":3,"f":0,'
        b'"g":"1700000000000","h":0,"i":"UNIQ_KEY\\u0001AB\\u0002WAIT\\u0001true","j":"0",'
        b'"k":"0","l":16,"m":"0"},"flag":0,"language":"CPP","opaque":5,"remark":"","version":333}\n'
    )
    body = b"hello"
    (cmd,) = FrameDecoder().feed(_frame(header, body))
    assert cmd.code == 310
    assert cmd.language == "CPP"
    assert cmd.version == 333
    assert cmd.opaque == 5
    assert cmd.flag == 0 and not cmd.is_response and not cmd.is_oneway
    assert cmd.remark == ""
    assert cmd.body == body
    assert cmd.ext_fields["d"] == "4"
    assert cmd.ext_fields["e"] == "3"
    assert cmd.ext_fields["l"] == "16"
    assert cmd.ext_fields["g"] == "1700000000000"
    assert cmd.ext_fields["i"] == "UNIQ_KEY\x01AB\x02WAIT\x01true"
    assert all(isinstance(v, str) for v in cmd.ext_fields.values())


def test_java_request_with_booleans_and_ordinal_language_decodes() -> None:
    header = (
        b'{"code":105,"extFields":{"topic":"T","acceptStandardJsonOnly":true,"x":false},'
        b'"flag":0,"language":0,"opaque":-2147483648,"serializeTypeCurrentRPC":"JSON","version":407}'
    )
    (cmd,) = FrameDecoder().feed(_frame(header))
    assert cmd.language == "JAVA"
    assert cmd.opaque == -(2**31)
    assert cmd.ext_fields == {"topic": "T", "acceptStandardJsonOnly": "true", "x": "false"}


def test_our_response_obeys_the_reference_rules() -> None:
    request = RemotingCommand(code=310, opaque=99, ext_fields={"a": "g"})
    response = request.response(0, None, {"msgId": "AB", "queueId": 3, "queueOffset": 7})
    frame = encode(response)
    length, word = struct.unpack_from(">II", frame)
    assert length == len(frame) - 4
    assert word >> 24 == 0  # JSON, so C++ 2.0 reading the word unmasked sees the plain length
    header_len = word & 0xFFFFFF
    header_bytes = frame[8 : 8 + header_len]
    assert b" " not in header_bytes  # compact
    header = json.loads(header_bytes)
    assert list(header) == sorted(header)  # keys sorted like fastjson
    assert "remark" not in header  # nulls omitted
    assert header["flag"] & 1 == 1
    assert header["opaque"] == 99
    assert header["language"] == "JAVA"
    assert isinstance(header["version"], int)
    assert header["extFields"] == {"msgId": "AB", "queueId": "3", "queueOffset": "7"}
    assert list(header["extFields"]) == sorted(header["extFields"])
    assert frame[8 + header_len :] == b""


def test_response_equals_the_constructed_command_and_owns_its_fields() -> None:
    request = RemotingCommand(code=310, opaque=41, ext_fields={"a": "g"}, serialize_type=1)
    for ext in ({"msgId": "AB", "queueId": "3"}, {"n": 5, "b": True, "gone": None}, None, {}):
        fields = dict(ext) if ext is not None else None
        fast = request.response(ResponseCode.SUCCESS, "r", fields, b"x")
        slow = RemotingCommand(code=0, opaque=41, flag=1, remark="r", ext_fields=ext, body=b"x",
                               serialize_type=1)
        assert fast == slow
        assert type(fast.code) is int
        if fields:
            fields["later"] = "change"
            assert "later" not in fast.ext_fields  # a private copy, as the constructor makes
    with pytest.raises(ProtocolError):
        request.response(0, None, {"bad": object()})


def test_binary_rocketmq_header_golden() -> None:
    # Hand-built per reference §1.6: code i16, language byte, version i16, opaque i32, flag i32,
    # remark (i32 len + bytes), extFields (i32 total, then i16 keyLen + key, i32 valLen + value).
    ext = struct.pack(">h", 5) + b"topic" + struct.pack(">i", 2) + b"T1"
    header = (
        struct.pack(">hbhii", 105, 9, 317, 12, 0)
        + struct.pack(">i", 3)
        + b"hey"
        + struct.pack(">i", len(ext))
        + ext
    )
    (cmd,) = FrameDecoder().feed(_frame(header, b"B", stype=1))
    assert (cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag) == (105, "GO", 317, 12, 0)
    assert cmd.remark == "hey"
    assert cmd.ext_fields == {"topic": "T1"}
    assert cmd.body == b"B"
    assert cmd.serialize_type == SERIALIZE_ROCKETMQ
    # answered in kind
    response = cmd.response(0)
    assert encode(response)[4] == SERIALIZE_ROCKETMQ


# ----------------------------------------------------------------------------- limits and errors


def test_frame_over_the_limit_is_refused_before_buffering_it() -> None:
    decoder = FrameDecoder()
    with pytest.raises(ProtocolError, match="exceeds"):
        decoder.feed(struct.pack(">I", MAX_FRAME_BYTES))  # + 4 for the length word
    with pytest.raises(ProtocolError, match="already failed"):
        decoder.feed(b"\x00")


def test_frame_at_the_limit_decodes() -> None:
    body = b"z" * (MAX_FRAME_BYTES - 4 - 4 - 200)
    cmd = RemotingCommand(code=1, body=body)
    frame = encode(cmd)
    assert len(frame) <= MAX_FRAME_BYTES
    (out,) = FrameDecoder().feed(frame)
    assert out.body == body


def test_encoding_a_too_large_frame_raises() -> None:
    with pytest.raises(ProtocolError):
        encode(RemotingCommand(code=1, body=b"z" * MAX_FRAME_BYTES))


@pytest.mark.parametrize(
    ("frame", "reason"),
    [
        (struct.pack(">I", 2) + b"\x00\x00", "shorter than its header word"),
        (_frame(b"not json"), "not valid JSON"),
        (_frame(b"[1,2]"), "not a JSON object"),
        (_frame(b'{"flag":0}'), "no 'code'"),
        (_frame(b'{"code":"x"}'), "not an integer"),
        (_frame(b'{"code":1,"extFields":{"a":[1]}}'), "extFields value"),
        (_frame(b'{"code":1,"extFields":"s"}'), "must be an object"),
        (_frame(b'{"code":1,"remark":5}'), "remark"),
        (_frame(b"{}", stype=7), "unknown serialize type"),
        (struct.pack(">II", 8, 100) + b"abcd", "exceeds the frame"),
    ],
)
def test_malformed_frames_name_the_problem(frame: bytes, reason: str) -> None:
    with pytest.raises(ProtocolError, match=reason):
        FrameDecoder().feed(frame)


def test_decode_frame_without_length_word() -> None:
    frame = encode(RemotingCommand(code=7, opaque=3, remark="r"))
    assert decode_frame(frame[4:]).remark == "r"


def test_frames_before_a_bad_one_are_handed_back_with_the_error() -> None:
    good = encode(RemotingCommand(code=5, opaque=1))
    with pytest.raises(ProtocolError) as info:
        FrameDecoder().feed(good + _frame(b"not json"))
    assert [c.code for c in info.value.commands] == [5]


@pytest.mark.parametrize(
    "cmd",
    [
        RemotingCommand(code=1, body="text"),  # type: ignore[arg-type]
        RemotingCommand(code=1, remark=ValueError("x")),  # type: ignore[arg-type]
        RemotingCommand(code=2**40),
        RemotingCommand(code=1, ext_fields={"k": "\ud800"}),
    ],
)
def test_unencodable_commands_raise_and_write_nothing(cmd: RemotingCommand) -> None:
    out = bytearray(b"prefix")
    with pytest.raises(ProtocolError):
        encode_into(out, cmd)
    assert out == b"prefix"


def test_wide_memoryview_body_is_sent_as_bytes() -> None:
    import array

    body = memoryview(array.array("i", [1, 2, 3]))
    (cmd,) = FrameDecoder().feed(encode(RemotingCommand(code=1, body=body)))
    assert cmd.body == body.tobytes()


def test_command_does_not_alias_the_callers_dict() -> None:
    ext = {"k": "v"}
    cmd = RemotingCommand.request(1, ext)
    ext["k"] = "changed"
    assert cmd.ext_fields == {"k": "v"}
    with pytest.raises(ProtocolError, match="key must be a string"):
        RemotingCommand.request(1, {1: "v"})  # type: ignore[dict-item]
