"""Sans-IO codec for RocketMQ 4.x remoting frames (docs/protocol/remoting.md).

Frame (big-endian)::

    int32 length            = 4 + headerLen + bodyLen (excludes itself)
    int32 type|headerLen    high byte: 0 JSON, 1 ROCKETMQ binary; low 24 bits: header length
    header                  JSON object, or the binary layout of §1.6
    body                    raw bytes

No I/O and no trio here: ``FrameDecoder.feed(bytes)`` returns every complete command, and
``encode(command)`` returns the bytes of one frame.  JSON headers go through orjson; where it
is not installed (a Spark executor that imports this module from the job archive, which ships
no compiled wheel) through the standard library's ``json``, with the same output and the same
refusals.
"""

from __future__ import annotations

import contextlib
import functools
import json
import mmap
import struct
from collections.abc import Iterable, Mapping
from typing import Any, Final

import attrs

from .codes import (
    CURRENT_VERSION,
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    SERIALIZE_JSON,
    SERIALIZE_ROCKETMQ,
    LanguageCode,
)

#: RocketMQ's ``com.rocketmq.remoting.frameMaxLength``: the largest frame, length word included.
MAX_FRAME_BYTES: Final = 16 * 1024 * 1024
#: A frame longer than this (length word included) is assembled in a buffer of its exact size
#: (``FrameDecoder``); one up to this long fits one read of the socket layer.
BIG_FRAME_BYTES: Final = 64 * 1024
#: Header length is a 24-bit field.
MAX_HEADER_BYTES: Final = 0xFFFFFF
#: extFields entries one request may carry (RocketMQ headers have < 30; C++ adds 3). More is
#: refused as a malformed frame: each entry costs a dict slot and an ACL signature input.
MAX_EXT_FIELDS: Final = 1024
_INT32_MIN: Final = -(2**31)
_INT32_MAX: Final = 2**31 - 1

_FRAME_PREFIX = struct.Struct(">II")
_UINT32 = struct.Struct(">I")
_BIN_FIXED = struct.Struct(">hbhii")  # code, language, version, opaque, flag
_BIN_INT32 = struct.Struct(">i")
_BIN_INT16 = struct.Struct(">h")

#: A big frame's buffer: private anonymous memory, its pages faulted in at once when mapped
#: (one call instead of a fault per page: as fast as a bytearray; the input budget charged the
#: whole frame when it admitted it).
_BIG_FRAME_MAP_FLAGS: Final = mmap.MAP_PRIVATE | getattr(mmap, "MAP_POPULATE", 0)

_LANGUAGE_BY_ORDINAL: Final = {lang.value: lang.name for lang in LanguageCode}
_LANGUAGE_NAMES: Final = frozenset(_LANGUAGE_BY_ORDINAL.values())


def _json_codec() -> tuple[Any, Any, tuple[type[BaseException], ...]]:
    """(dumps with sorted keys, loads, the errors a bad document raises): orjson's, else the
    standard library's (bytes in and out, compact, UTF-8 kept, deep nesting refused)."""
    try:
        import orjson
    except ImportError:
        pass
    else:
        dumps = functools.partial(orjson.dumps, option=orjson.OPT_SORT_KEYS)  # no Python frame
        return dumps, orjson.loads, (orjson.JSONDecodeError,)
    encoder = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return ((lambda obj: encoder.encode(obj).encode()), (lambda data: json.loads(bytes(data))),
            (ValueError, RecursionError))  # fmt: skip


_dumps_sorted, _loads, _JSON_ERRORS = _json_codec()


class ProtocolError(Exception):
    """A frame that is malformed or too large; the connection that sent it must be closed.

    Raised by ``FrameDecoder.feed``, ``commands`` holds the complete frames that came before the
    bad one in the same feed (a Java peer would have had them processed too).
    """

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        self.commands: list[RemotingCommand] = []


def _ext_fields_converter(value: Mapping[str, Any] | None) -> dict[str, str]:
    """A private str -> str copy (a command must not change when the caller's dict does)."""
    if not value:
        return {}
    out: dict[str, str] = {}
    for k, v in value.items():
        if type(k) is not str:
            raise ProtocolError(f"extFields key must be a string, got {type(k).__name__}")
        if v is not None:
            out[k] = v if type(v) is str else ext_value_to_str(v)
    return out


@attrs.frozen(slots=True)
class RemotingCommand:
    """One request or response. ``ext_fields`` always maps strings to strings."""

    code: int
    language: str = "JAVA"
    version: int = CURRENT_VERSION
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: dict[str, str] = attrs.field(factory=dict, converter=_ext_fields_converter)
    body: bytes | bytearray | memoryview = b""
    serialize_type: int = SERIALIZE_JSON

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    @classmethod
    def request(
        cls,
        code: int,
        ext_fields: Mapping[str, Any] | None = None,
        body: bytes | bytearray | memoryview = b"",
        *,
        oneway: bool = False,
        language: str = "JAVA",
        version: int = CURRENT_VERSION,
    ) -> RemotingCommand:
        return cls(
            code=int(code),
            language=language,
            version=version,
            flag=FLAG_ONEWAY if oneway else 0,
            ext_fields=ext_fields,
            body=body,
        )

    def response(
        self,
        code: int = 0,
        remark: str | None = None,
        ext_fields: Mapping[str, Any] | None = None,
        body: bytes | bytearray | memoryview = b"",
    ) -> RemotingCommand:
        """The response to this request: same opaque and serialize type, response bit set.
        (Built without the attrs constructor: one per request answered. ``ext_fields`` is
        copied as the constructor's converter would; anything but str -> str goes through it.)"""
        ext: dict[str, str]
        if not ext_fields:
            ext = {}
        else:
            ext = dict(ext_fields)
            try:  # (``_all_str`` of the keys and of the values, written out: every answer's)
                "".join(ext)
                "".join(ext.values())
            except TypeError:
                ext = _ext_fields_converter(ext_fields)
        return _wire_command(
            int(code), "JAVA", CURRENT_VERSION, self.opaque, FLAG_RESPONSE, remark, ext, body,
            self.serialize_type,
        )


def _all_str(items: Iterable[Any]) -> bool:
    """Whether every item is a ``str`` (a subclass counts): ``str.join`` checks them in C,
    several times faster than a Python loop over an extFields dict."""
    try:
        "".join(items)
    except TypeError:
        return False
    return True


def ext_value_to_str(value: Any) -> str:
    """Coerce one extFields value the way a Java ``toString()`` would print it."""
    if isinstance(value, str):
        return value
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int | float):
        return str(value)
    raise ProtocolError(
        f"extFields value must be a string, number or boolean, got {type(value).__name__}"
    )


# --------------------------------------------------------------------------- encoding


def encode_header_json(cmd: RemotingCommand, opaque: int) -> bytes:
    header: dict[str, Any] = {
        "code": cmd.code,
        "flag": cmd.flag,
        "language": cmd.language,
        "opaque": opaque,
        "serializeTypeCurrentRPC": "JSON",
        "version": cmd.version,
    }
    if cmd.ext_fields:
        header["extFields"] = cmd.ext_fields
    if cmd.remark is not None:
        header["remark"] = cmd.remark
    out: bytes = _dumps_sorted(header)
    return out


def encode_header_binary(cmd: RemotingCommand, opaque: int) -> bytes:
    try:
        language = LanguageCode[cmd.language].value
    except KeyError:
        language = LanguageCode.OTHER.value
    parts = [_BIN_FIXED.pack(cmd.code, language, cmd.version, opaque, cmd.flag)]
    remark = cmd.remark.encode() if cmd.remark else b""
    parts.append(_BIN_INT32.pack(len(remark)))
    parts.append(remark)
    ext = bytearray()
    for key, value in cmd.ext_fields.items():
        kb = key.encode()
        vb = value.encode()
        ext += _BIN_INT16.pack(len(kb))
        ext += kb
        ext += _BIN_INT32.pack(len(vb))
        ext += vb
    parts.append(_BIN_INT32.pack(len(ext)))
    parts.append(bytes(ext))
    return b"".join(parts)


def encode(cmd: RemotingCommand, opaque: int | None = None) -> bytes:
    """One frame for ``cmd``; ``opaque`` overrides its own (requests get theirs when sent)."""
    out = bytearray()
    encode_into(out, cmd, opaque)
    return bytes(out)


def _body_view(body: Any) -> bytes | bytearray | memoryview:
    if type(body) is bytes or type(body) is bytearray:
        return body
    try:
        view = memoryview(body)
    except TypeError:
        raise ProtocolError(f"body must be bytes-like, got {type(body).__name__}") from None
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def encode_into(out: bytearray, cmd: RemotingCommand, opaque: int | None = None) -> None:
    """Append one frame for ``cmd`` to ``out`` (lets a writer coalesce many frames in one send).

    Everything is checked before the first byte is appended: on error ``out`` is unchanged.
    """
    body = encode_head_into(out, cmd, opaque)
    if body:
        out += body


def encode_head_into(
    out: bytearray, cmd: RemotingCommand, opaque: int | None = None
) -> bytes | bytearray | memoryview:
    """Append the frame for ``cmd`` to ``out`` but its body, and return the body (a byte view:
    the frame's last bytes, for the caller to send right after ``out``'s, e.g. as a buffer of
    its own in a scatter-gather send instead of a copy into ``out``).

    Everything is checked before the first byte is appended: on error ``out`` is unchanged.
    """
    op = cmd.opaque if opaque is None else opaque
    if not _INT32_MIN <= op <= _INT32_MAX:
        raise ProtocolError(f"opaque {op} does not fit in int32")
    if not (_INT32_MIN <= cmd.code <= _INT32_MAX and _INT32_MIN <= cmd.flag <= _INT32_MAX):
        raise ProtocolError("code and flag must fit in int32")
    if cmd.remark is not None and type(cmd.remark) is not str:
        raise ProtocolError(f"remark must be a string, got {type(cmd.remark).__name__}")
    try:
        if cmd.serialize_type == SERIALIZE_ROCKETMQ:
            if not (-32768 <= cmd.code <= 32767 and -32768 <= cmd.version <= 32767):
                raise ProtocolError("code and version must fit in int16 for the ROCKETMQ header")
            header = encode_header_binary(cmd, op)
        else:
            if not _INT32_MIN <= cmd.version <= _INT32_MAX:
                raise ProtocolError("version must fit in int32")
            header = encode_header_json(cmd, op)
    except (TypeError, ValueError, UnicodeError) as exc:  # orjson.JSONEncodeError is a TypeError
        raise ProtocolError(f"header not encodable: {exc}") from None
    body = _body_view(cmd.body)
    body_len = len(body)
    length = 4 + len(header) + body_len
    if length + 4 > MAX_FRAME_BYTES:
        raise ProtocolError(f"frame of {length + 4} bytes exceeds the {MAX_FRAME_BYTES}-byte limit")
    out += _FRAME_PREFIX.pack(length, (cmd.serialize_type << 24) | len(header))
    out += header
    return body


#: What a ``FixedAnswer`` writes into its template without escaping: a remark or an extFields
#: key of ASCII letters, digits and ``_`` (anything else goes through the encoder).
_PLAIN_JSON_CHARS: Final = frozenset(
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
#: Remarks one ``FixedAnswer`` keeps a template for (a pull's are its dozen statuses).
MAX_FIXED_ANSWER_REMARKS: Final = 64


def _plain(text: str) -> bool:
    return bool(text) and text.isascii() and not set(text.encode()) - _PLAIN_JSON_CHARS


class FixedAnswer:
    """The JSON header of answers whose extFields hold the same keys every time, each an
    integer written as a string (a pull's: ``suggestWhichBrokerId``, ``nextBeginOffset``, ...),
    with a remark from a small vocabulary: the header's fixed part encoded once per remark, the
    code, opaque and values (``int``) filled in by one ``%``. ``frame_head`` is byte for byte
    the frame ``encode_head_into`` writes for ``request.response(code, remark, ext, body)``
    with a JSON header (tests/unit/remoting/test_fixed_answer.py checks it); None where it
    cannot say so (a remark to escape, a code or opaque out of int32, a frame over the limit):
    then encode the answer as any other."""

    __slots__ = ("_keys", "_templates")

    def __init__(self, ext_keys: Iterable[str]) -> None:
        keys = tuple(sorted(ext_keys))
        if not keys or not all(map(_plain, keys)):
            raise ValueError(f"extFields keys must be plain names: {keys!r}")
        self._keys = keys
        self._templates: dict[str, bytes] = {}

    def _template(self, remark: str) -> bytes | None:
        template = self._templates.get(remark)
        if template is None:
            if not _plain(remark) or len(self._templates) >= MAX_FIXED_ANSWER_REMARKS:
                return None
            ext = ",".join(f'"{k}":"%d"' for k in self._keys)
            template = self._templates[remark] = (
                '{"code":%d,"extFields":{' + ext + '},"flag":' + str(FLAG_RESPONSE)
                + ',"language":"JAVA","opaque":%d,"remark":"' + remark
                + '","serializeTypeCurrentRPC":"JSON","version":' + str(CURRENT_VERSION) + "}"
            ).encode()
        return template

    def frame_head(
        self, code: int, opaque: int, remark: str, values: tuple[int, ...], body_len: int
    ) -> bytes | None:
        """The frame's length words and JSON header (its body follows), ``values`` in the
        sorted order of the keys; None: encode it the general way."""
        template = self._templates.get(remark) or self._template(remark)
        if (
            template is None
            or len(values) != len(self._keys)
            or not (_INT32_MIN <= code <= _INT32_MAX and _INT32_MIN <= opaque <= _INT32_MAX)
        ):
            return None
        header = template % (code, *values, opaque)
        length = 4 + len(header) + body_len
        if length + 4 > MAX_FRAME_BYTES:
            return None
        return _FRAME_PREFIX.pack(length, (SERIALIZE_JSON << 24) | len(header)) + header


# --------------------------------------------------------------------------- decoding

_new_command = object.__new__


def _slot_setters() -> tuple[Any, ...]:
    """``RemotingCommand``'s slot descriptors' ``__set__``, in field order: filling a frozen
    instance through them is one C call per field (``object.__setattr__`` looks each up)."""
    names = tuple(f.name for f in attrs.fields(RemotingCommand))
    expected = ("code", "language", "version", "opaque", "flag", "remark", "ext_fields",
                "body", "serialize_type")
    if names != expected:  # (a field added or moved: _wire_command must follow)
        raise RuntimeError(f"RemotingCommand fields changed: {names}")
    return tuple(RemotingCommand.__dict__[name].__set__ for name in names)


(_set_code, _set_language, _set_version, _set_opaque, _set_flag, _set_remark, _set_ext,
 _set_body, _set_stype) = _slot_setters()


def _wire_command(
    code: int,
    language: str,
    version: int,
    opaque: int,
    flag: int,
    remark: str | None,
    ext_fields: dict[str, str],
    body: bytes | bytearray | memoryview,
    serialize_type: int,
) -> RemotingCommand:
    """A command from values the decoder already checked (skips the ext_fields copy)."""
    cmd = _new_command(RemotingCommand)
    _set_code(cmd, code)
    _set_language(cmd, language)
    _set_version(cmd, version)
    _set_opaque(cmd, opaque)
    _set_flag(cmd, flag)
    _set_remark(cmd, remark)
    _set_ext(cmd, ext_fields)
    _set_body(cmd, body)
    _set_stype(cmd, serialize_type)
    return cmd


def _as_int(value: Any, name: str, lo: int = _INT32_MIN, hi: int = _INT32_MAX) -> int:
    if type(value) is int and lo <= value <= hi:
        return value
    if isinstance(value, bool):
        raise ProtocolError(f"header field {name!r} must be an integer")
    if isinstance(value, int):
        result = value
    elif isinstance(value, str):
        try:
            result = int(value.strip())
        except ValueError:
            raise ProtocolError(f"header field {name!r} is not an integer: {value!r}") from None
    else:
        raise ProtocolError(f"header field {name!r} must be an integer")
    if not lo <= result <= hi:
        raise ProtocolError(f"header field {name!r} out of range: {result}")
    return result


def _language_name(value: Any) -> str:
    if isinstance(value, str):
        return value if value in _LANGUAGE_NAMES else value.upper()
    if isinstance(value, int) and not isinstance(value, bool):
        return _LANGUAGE_BY_ORDINAL.get(value, "OTHER")
    if value is None:
        return "OTHER"
    raise ProtocolError("header field 'language' must be a string or an ordinal")


def decode_header_json(data: bytes | bytearray | memoryview, body: bytes) -> RemotingCommand:
    try:
        header = _loads(data)
    except _JSON_ERRORS as exc:
        raise ProtocolError(f"header is not valid JSON: {exc}") from None
    if type(header) is not dict:
        raise ProtocolError("header is not a JSON object")
    get = header.get
    code = get("code")
    version = get("version", 0)
    opaque = get("opaque", 0)
    flag = get("flag", 0)
    language = get("language")
    remark = get("remark")
    ext = get("extFields")
    # Fast path: what Java, C++ and Go clients send (ints, a known language name, string values).
    if (
        type(code) is int
        and type(version) is int
        and type(opaque) is int
        and type(flag) is int
        and min(code, version, opaque, flag) >= _INT32_MIN
        and max(code, version, opaque, flag) <= _INT32_MAX
        and type(language) is str
        and language in _LANGUAGE_NAMES
        and (remark is None or type(remark) is str)
        and (ext is None or type(ext) is dict)
    ):
        if ext is None:
            ext = {}
        else:
            if len(ext) > MAX_EXT_FIELDS:
                raise ProtocolError(f"{len(ext)} extFields exceed the limit of {MAX_EXT_FIELDS}")
            if not _all_str(ext.values()):  # C++ sends numbers, fastjson may send booleans
                ext = {k: ext_value_to_str(v) for k, v in ext.items() if v is not None}
        return _wire_command(
            code, language, version, opaque, flag, remark, ext, body, SERIALIZE_JSON
        )
    return _decode_header_json_lenient(header, body)


def _decode_header_json_lenient(header: dict[str, Any], body: bytes) -> RemotingCommand:
    """Numbers as strings, extFields numbers/booleans, language ordinals: coerce or reject."""
    if "code" not in header:
        raise ProtocolError("header has no 'code'")
    ext = header.get("extFields")
    if ext is None:
        ext_fields: dict[str, str] = {}
    elif type(ext) is dict:
        if len(ext) > MAX_EXT_FIELDS:
            raise ProtocolError(f"{len(ext)} extFields exceed the limit of {MAX_EXT_FIELDS}")
        ext_fields = {k: ext_value_to_str(v) for k, v in ext.items() if v is not None}
    else:
        raise ProtocolError("header field 'extFields' must be an object")
    remark = header.get("remark")
    if remark is not None and type(remark) is not str:
        raise ProtocolError("header field 'remark' must be a string")
    return RemotingCommand(
        code=_as_int(header["code"], "code"),
        language=_language_name(header.get("language")),
        version=_as_int(header.get("version", 0), "version"),
        opaque=_as_int(header.get("opaque", 0), "opaque"),
        flag=_as_int(header.get("flag", 0), "flag"),
        remark=remark,
        ext_fields=ext_fields,
        body=body,
        serialize_type=SERIALIZE_JSON,
    )


def _utf8(data: bytes | memoryview, what: str) -> str:
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        raise ProtocolError(f"{what} is not valid UTF-8") from None


def decode_header_binary(data: bytes | bytearray | memoryview, body: bytes) -> RemotingCommand:
    mv = memoryview(data)
    n = len(mv)
    if n < _BIN_FIXED.size + 8:
        raise ProtocolError(f"binary header of {n} bytes is shorter than the fixed part")
    code, language, version, opaque, flag = _BIN_FIXED.unpack_from(mv, 0)
    pos = _BIN_FIXED.size
    (remark_len,) = _BIN_INT32.unpack_from(mv, pos)
    pos += 4
    if remark_len < 0 or pos + remark_len + 4 > n:
        raise ProtocolError(f"binary header remark length {remark_len} overruns the header")
    remark = _utf8(mv[pos : pos + remark_len], "remark") if remark_len else None
    pos += remark_len
    (ext_len,) = _BIN_INT32.unpack_from(mv, pos)
    pos += 4
    if ext_len < 0 or pos + ext_len != n:
        raise ProtocolError(f"binary header extFields length {ext_len} does not match the header")
    ext_fields: dict[str, str] = {}
    while pos < n:
        if len(ext_fields) >= MAX_EXT_FIELDS:
            raise ProtocolError(f"binary extFields exceed the limit of {MAX_EXT_FIELDS}")
        if pos + 2 > n:
            raise ProtocolError("binary extFields key length truncated")
        (klen,) = _BIN_INT16.unpack_from(mv, pos)
        pos += 2
        if klen < 0 or pos + klen + 4 > n:
            raise ProtocolError("binary extFields key overruns the header")
        key = _utf8(mv[pos : pos + klen], "extFields key")
        pos += klen
        (vlen,) = _BIN_INT32.unpack_from(mv, pos)
        pos += 4
        if vlen < 0 or pos + vlen > n:
            raise ProtocolError("binary extFields value overruns the header")
        ext_fields[key] = _utf8(mv[pos : pos + vlen], "extFields value")
        pos += vlen
    return RemotingCommand(
        code=code,
        language=_LANGUAGE_BY_ORDINAL.get(language, "OTHER"),
        version=version,
        opaque=opaque,
        flag=flag,
        remark=remark,
        ext_fields=ext_fields,
        body=body,
        serialize_type=SERIALIZE_ROCKETMQ,
    )


def decode_frame(frame: bytes | memoryview) -> RemotingCommand:
    """Decode one frame without its leading length word (what Netty hands RocketMQ's decoder)."""
    mv = memoryview(frame)
    if len(mv) < 4:
        raise ProtocolError(f"frame of {len(mv)} bytes has no header-length word")
    (word,) = _UINT32.unpack_from(mv, 0)
    stype = word >> 24
    header_len = word & 0xFFFFFF
    if header_len > len(mv) - 4:
        raise ProtocolError(f"header length {header_len} exceeds the frame ({len(mv) - 4} bytes)")
    header = mv[4 : 4 + header_len]
    body = bytes(mv[4 + header_len :])
    if stype == SERIALIZE_JSON:
        return decode_header_json(header, body)
    if stype == SERIALIZE_ROCKETMQ:
        return decode_header_binary(header, body)
    raise ProtocolError(f"unknown serialize type {stype}")


class FrameDecoder:
    """Incremental decoder: feed it whatever the socket gave, get every complete command back.

    Memory: frames up to ``big_frame_bytes`` are assembled in one small bytearray (what a read
    brings, at most twice its capacity). A longer frame stays there for the read that carried
    its length word; from its next read on (a server's input budget admits it first, see
    input_budget.py) it is assembled in an anonymous ``mmap`` of exactly its size: one
    allocation, never grown or copied while it fills, and unmapped (given back to the OS,
    whatever the allocator keeps) as soon as the frame is decoded or ``release`` is called.

    After a ``ProtocolError`` the stream is out of sync; the decoder refuses further input.
    """

    __slots__ = ("_big", "_big_fill", "_broken", "_buf", "big_frame_bytes", "max_frame_bytes")

    def __init__(
        self, max_frame_bytes: int = MAX_FRAME_BYTES, big_frame_bytes: int = BIG_FRAME_BYTES
    ) -> None:
        self._buf = bytearray()
        self._big: mmap.mmap | None = None  # the big frame being filled, without length word
        self._big_fill = 0  # bytes of it received
        self._broken: str | None = None
        self.max_frame_bytes = max_frame_bytes
        self.big_frame_bytes = big_frame_bytes

    @property
    def buffered(self) -> int:
        """Bytes held of the partial frame (its length word included); 0: none."""
        if self._big is not None:
            return 4 + self._big_fill
        return len(self._buf)

    @property
    def allocated(self) -> int:
        """Bytes the decoder's buffers take: the small buffer's capacity and the big frame's
        mapping (whole pages)."""
        big = 0 if self._big is None else -(-len(self._big) // mmap.PAGESIZE) * mmap.PAGESIZE
        return self._buf.__alloc__() + big

    def release(self) -> None:
        """Drop every buffer (the connection ended): the memory goes back at once."""
        self._buf = bytearray()
        big, self._big, self._big_fill = self._big, None, 0
        if big is not None:
            _unmap(big)

    def feed(self, data: bytes | bytearray | memoryview) -> list[RemotingCommand]:
        if self._broken is not None:
            raise ProtocolError(f"decoder already failed: {self._broken}")
        out: list[RemotingCommand] = []
        try:
            if self._big is None and len(self._buf) >= 4:
                self._start_big()
            if self._big is not None:
                data = self._fill_big(self._big, data, out)
                if not data:
                    return out
            self._feed_small(data, out)
        except ProtocolError as exc:
            self._broken = str(exc)
            exc.commands = out  # the good frames before the bad one, to serve before closing
            raise
        return out

    def _start_big(self) -> None:
        """A partial frame is held whose length is known: past ``big_frame_bytes``, move it
        into a mapping of exactly its size (its first read is the only one held here)."""
        buf = self._buf
        (length,) = _UINT32.unpack_from(buf, 0)
        if length + 4 <= self.big_frame_bytes:
            return
        big = mmap.mmap(-1, length, flags=_BIG_FRAME_MAP_FLAGS)
        held = len(buf) - 4
        big[:held] = buf[4:]
        self._big, self._big_fill, self._buf = big, held, bytearray()

    def _fill_big(
        self, big: mmap.mmap, data: bytes | bytearray | memoryview, out: list[RemotingCommand]
    ) -> bytes | bytearray | memoryview:
        """Copy ``data`` into the big frame ``big``; once complete, decode it into ``out`` and
        unmap it. What follows the frame in ``data`` (empty while the frame is incomplete)."""
        fill, size = self._big_fill, len(big)
        n = min(size - fill, len(data))
        big[fill : fill + n] = data[:n]
        fill += n
        if fill < size:
            self._big_fill = fill
            return b""
        self._big, self._big_fill = None, 0
        try:
            with memoryview(big) as frame:
                out.append(decode_frame(frame))
        finally:
            _unmap(big)
        return data[n:]

    def _feed_small(self, data: bytes | bytearray | memoryview, out: list[RemotingCommand]) -> None:
        buf = self._buf
        buf += data
        pos = 0
        end = len(buf)
        unpack = _UINT32.unpack_from
        while end - pos >= 4:
            (length,) = unpack(buf, pos)
            if length < 4:
                raise ProtocolError(f"frame length {length} is shorter than its header word")
            if length + 4 > self.max_frame_bytes:
                raise ProtocolError(
                    f"frame of {length + 4} bytes exceeds the {self.max_frame_bytes}-byte limit"
                )
            frame_end = pos + 4 + length
            if frame_end > end:
                break
            (word,) = unpack(buf, pos + 4)
            header_len = word & 0xFFFFFF
            body_start = pos + 8 + header_len
            if body_start > frame_end:
                raise ProtocolError(
                    f"header length {header_len} exceeds the frame ({length - 4} bytes)"
                )
            header = buf[pos + 8 : body_start]
            if body_start < frame_end:  # one copy (``bytes(buf[a:b])`` makes two)
                with memoryview(buf) as view:
                    body = view[body_start:frame_end].tobytes()
            else:
                body = b""
            stype = word >> 24
            if stype == SERIALIZE_JSON:
                out.append(decode_header_json(header, body))
            elif stype == SERIALIZE_ROCKETMQ:
                out.append(decode_header_binary(header, body))
            else:
                raise ProtocolError(f"unknown serialize type {stype}")
            pos = frame_end
        if pos:
            del buf[:pos]


def _unmap(big: mmap.mmap) -> None:
    """Unmap ``big`` now; if a view of it is still alive, it goes with the last view."""
    with contextlib.suppress(BufferError):
        big.close()
