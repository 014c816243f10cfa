"""DLedger RPC messages as frozen attrs values, plus a compact bytes codec.

Every message carries DLedger's ``RequestOrResponse`` base fields: ``group``, ``local_id``
(sender), ``remote_id`` (receiver), ``leader_id`` and ``term``; responses also carry ``code``
(a :class:`ResponseCode`, DLedger's numbers).  Votes answer with a :class:`VoteResult`
(DLedger's ``VoteResponse.RESULT`` names).  Pushes carry a :class:`PushType`
(COMPARE / TRUNCATE / APPEND / COMMIT, DLedger's ``PushEntryRequest.Type`` names).

Wire form (``encode`` / ``decode``): ``u32 header_len | JSON header | entries``; each entry is
``i64 index | i64 term | u32 body_len | body``.  The JSON header holds the message kind under
``"k"`` and the scalar fields; bodies never pass through JSON.  This fits in a remoting frame
body as-is.  Pure: no trio, no I/O.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Sequence
from typing import Any

import attrs
import orjson

MAX_ENTRIES_PER_MESSAGE = 100_000
"""Decoder bound on the entry count in one message (input validation)."""
MAX_HEADER_BYTES = 64 * 1024
"""Decoder bound on the JSON header length."""


class ResponseCode(enum.IntEnum):
    """DLedger's ``DLedgerResponseCode`` numbers."""

    UNKNOWN = -1
    SUCCESS = 200
    TIMEOUT = 300
    METADATA_ERROR = 301
    NETWORK_ERROR = 302
    UNSUPPORTED = 303
    UNKNOWN_GROUP = 400
    UNKNOWN_MEMBER = 401
    UNEXPECTED_MEMBER = 402
    EXPIRED_TERM = 403
    NOT_LEADER = 404
    NOT_FOLLOWER = 405
    INCONSISTENT_STATE = 406
    INCONSISTENT_TERM = 407
    INCONSISTENT_INDEX = 408
    INCONSISTENT_LEADER = 409
    INDEX_OUT_OF_RANGE = 410
    UNEXPECTED_ARGUMENT = 411
    REPEATED_REQUEST = 412
    REPEATED_PUSH = 413
    DISK_ERROR = 414
    DISK_FULL = 415
    TERM_NOT_READY = 416
    FALL_BEHIND_TOO_MUCH = 417
    TAKE_LEADERSHIP_FAILED = 418
    INDEX_LESS_THAN_LOCAL_BEGIN = 419
    INTERNAL_ERROR = 500
    TERM_CHANGED = 501
    WAIT_QUORUM_ACK_TIMEOUT = 502
    LEADER_PENDING_FULL = 503
    ILLEGAL_MEMBER_STATE = 504
    LEADER_NOT_READY = 505
    LEADER_TRANSFERRING = 506


class VoteResult(enum.Enum):
    """DLedger's ``VoteResponse.RESULT`` (serialized by name, as fastjson does)."""

    UNKNOWN = "UNKNOWN"
    ACCEPT = "ACCEPT"
    REJECT_UNKNOWN_LEADER = "REJECT_UNKNOWN_LEADER"
    REJECT_UNEXPECTED_LEADER = "REJECT_UNEXPECTED_LEADER"
    REJECT_EXPIRED_VOTE_TERM = "REJECT_EXPIRED_VOTE_TERM"
    REJECT_ALREADY_VOTED = "REJECT_ALREADY_VOTED"
    REJECT_ALREADY_HAS_LEADER = "REJECT_ALREADY_HAS_LEADER"
    REJECT_TERM_NOT_READY = "REJECT_TERM_NOT_READY"
    REJECT_TERM_SMALL_THAN_LEDGER = "REJECT_TERM_SMALL_THAN_LEDGER"
    REJECT_EXPIRED_LEDGER_TERM = "REJECT_EXPIRED_LEDGER_TERM"
    REJECT_SMALL_LEDGER_END_INDEX = "REJECT_SMALL_LEDGER_END_INDEX"
    REJECT_TAKING_LEADERSHIP = "REJECT_TAKING_LEADERSHIP"


class PushType(enum.Enum):
    """DLedger's ``PushEntryRequest.Type``."""

    APPEND = "APPEND"
    COMMIT = "COMMIT"
    COMPARE = "COMPARE"
    TRUNCATE = "TRUNCATE"


@attrs.frozen(slots=True)
class Entry:
    """One log entry as the core sees it (``index`` 0-based, ``term`` >= 1).

    An empty ``body`` is the no-op a new leader appends to commit its term (the CommitLog
    adapter must skip it).
    """

    index: int
    term: int
    body: bytes


_set_index, _set_term, _set_body = (Entry.__dict__[n].__set__ for n in ("index", "term", "body"))
_new_object = object.__new__


def make_entry(index: int, term: int, body: bytes) -> Entry:
    """``Entry(index, term, body)`` through the slot descriptors: the same frozen object for
    about half the cost of the attrs ``__init__`` (the per-message paths build many)."""
    e: Entry = _new_object(Entry)
    _set_index(e, index)
    _set_term(e, term)
    _set_body(e, body)
    return e


@attrs.frozen(slots=True)
class VoteRequest:
    group: str
    local_id: str
    remote_id: str
    leader_id: str  # the candidate (DLedger puts the candidate in leaderId)
    term: int
    ledger_end_index: int
    ledger_end_term: int
    pre_vote: bool = False
    """Pre-vote probe: nobody changes state; ``term`` is the term the candidate would use."""
    take_leadership: bool = False
    """Leadership transfer: bypass the voters' leader lease."""


@attrs.frozen(slots=True)
class VoteResponse:
    group: str
    local_id: str
    remote_id: str
    leader_id: str
    term: int
    vote_result: VoteResult
    pre_vote: bool = False
    code: ResponseCode = ResponseCode.SUCCESS


@attrs.frozen(slots=True)
class HeartBeatRequest:
    group: str
    local_id: str
    remote_id: str
    leader_id: str
    term: int
    commit_index: int = -1
    """min(leader's committed index, this peer's acknowledged index)."""


@attrs.frozen(slots=True)
class HeartBeatResponse:
    group: str
    local_id: str
    remote_id: str
    leader_id: str
    term: int
    code: ResponseCode = ResponseCode.SUCCESS


@attrs.frozen(slots=True)
class PushEntryRequest:
    group: str
    local_id: str
    remote_id: str
    leader_id: str
    term: int
    type: PushType
    prev_index: int
    prev_term: int
    commit_index: int
    entries: tuple[Entry, ...] = ()


@attrs.frozen(slots=True)
class PushEntryResponse:
    group: str
    local_id: str
    remote_id: str
    leader_id: str
    term: int
    code: ResponseCode
    index: int
    """SUCCESS: the index up to which the follower now matches; else the rejected prev_index."""
    begin_index: int = 0
    end_index: int = -1
    """The follower's ledger end (a hint for the leader's back-off)."""


@attrs.frozen(slots=True)
class LeadershipTransferRequest:
    """Leader -> transferee: your log is caught up, take leadership now (term + 1)."""

    group: str
    local_id: str
    remote_id: str
    leader_id: str
    term: int
    transferee_id: str
    take_leadership_ledger_index: int


Message = (
    VoteRequest
    | VoteResponse
    | HeartBeatRequest
    | HeartBeatResponse
    | PushEntryRequest
    | PushEntryResponse
    | LeadershipTransferRequest
)

_KINDS: dict[str, type[Any]] = {
    "vote": VoteRequest,
    "vote_resp": VoteResponse,
    "hb": HeartBeatRequest,
    "hb_resp": HeartBeatResponse,
    "push": PushEntryRequest,
    "push_resp": PushEntryResponse,
    "transfer": LeadershipTransferRequest,
}
_KIND_OF: dict[type[Any], str] = {cls: kind for kind, cls in _KINDS.items()}
_U32 = struct.Struct(">I")
_ENTRY_HEAD = struct.Struct(">qqI")


class DecodeError(ValueError):
    """Malformed message bytes."""


_ENUMS: dict[str, type[enum.Enum]] = {
    "ResponseCode": ResponseCode,
    "VoteResult": VoteResult,
    "PushType": PushType,
}
_SCALARS: dict[str, type] = {"int": int, "str": str, "bool": bool}
# per class: (field name, enum class or None, scalar type or None), "entries" excluded
_SPECS: dict[type[Any], tuple[tuple[str, type[enum.Enum] | None, type | None], ...]] = {
    cls: tuple(
        (f.name, _ENUMS.get(str(f.type)), _SCALARS.get(str(f.type)))
        for f in attrs.fields(cls)
        if f.name != "entries"
    )
    for cls in _KINDS.values()
}


def encode_entries(entries: Sequence[Entry]) -> bytes:
    """The binary entries part of a push (what :func:`encode` appends to the header)."""
    parts: list[bytes] = []
    pack = _ENTRY_HEAD.pack
    for e in entries:
        parts.append(pack(e.index, e.term, len(e.body)))
        parts.append(e.body)
    return b"".join(parts)


def encode(msg: Message, entries_blob: bytes | None = None) -> bytes:
    """Message -> bytes (JSON header + binary entries).  ``entries_blob``: the push's entries
    already encoded by :func:`encode_entries` (a leader sends the same entries to each peer)."""
    cls = type(msg)
    header: dict[str, Any] = {"k": _KIND_OF[cls]}
    for name, enum_cls, _ in _SPECS[cls]:
        value = getattr(msg, name)
        header[name] = value.value if enum_cls is not None else value
    if not isinstance(msg, PushEntryRequest) or not msg.entries:
        head = orjson.dumps(header)
        return _U32.pack(len(head)) + head
    header["n"] = len(msg.entries)
    head = orjson.dumps(header)
    if entries_blob is None:
        entries_blob = encode_entries(msg.entries)
    return b"".join((_U32.pack(len(head)), head, entries_blob))


def decode(data: bytes | bytearray | memoryview) -> Message:
    """bytes -> Message; raises :class:`DecodeError` on anything malformed."""
    buf = memoryview(data)
    if len(buf) < _U32.size:
        raise DecodeError("short message")
    (hlen,) = _U32.unpack_from(buf, 0)
    if hlen > MAX_HEADER_BYTES or _U32.size + hlen > len(buf):
        raise DecodeError(f"bad header length {hlen}")
    try:
        header = orjson.loads(buf[_U32.size : _U32.size + hlen])
        cls = _KINDS[header.pop("k")]
    except (orjson.JSONDecodeError, KeyError, AttributeError, TypeError) as exc:
        raise DecodeError(f"bad header: {exc}") from exc
    pos = _U32.size + hlen
    kwargs: dict[str, Any] = {}
    try:
        for name, enum_cls, scalar in _SPECS[cls]:
            if name not in header:
                continue
            value = header[name]
            if enum_cls is not None:
                value = enum_cls(value)
            elif scalar is not None and type(value) is not scalar:
                raise DecodeError(f"{name}: expected {scalar.__name__}, got {value!r}")
            kwargs[name] = value
        if cls is PushEntryRequest:
            count = header.get("n", 0)
            if type(count) is not int or not 0 <= count <= MAX_ENTRIES_PER_MESSAGE:
                raise DecodeError(f"bad entry count {count!r}")
            entries = []
            unpack = _ENTRY_HEAD.unpack_from
            end = len(buf)
            head = _ENTRY_HEAD.size
            # slicing bytes copies once; a memoryview slice would need bytes() on top
            src: Any = data if type(data) is bytes else buf
            for _ in range(count):
                if pos + head > end:
                    raise DecodeError("truncated entry header")
                index, term, blen = unpack(src, pos)
                pos += head
                if pos + blen > end:
                    raise DecodeError("truncated entry body")
                body = src[pos : pos + blen]
                if type(body) is not bytes:
                    body = bytes(body)
                entries.append(make_entry(index, term, body))
                pos += blen
            kwargs["entries"] = tuple(entries)
        msg = cls(**kwargs)
    except DecodeError:
        raise
    except (TypeError, ValueError) as exc:
        raise DecodeError(f"bad field: {exc}") from exc
    if pos != len(buf):
        raise DecodeError("trailing bytes")
    return msg
