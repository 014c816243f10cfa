"""DLedger's admin request LEADERSHIP_TRANSFER (51005), as its admin tool sends it (pure).

DLedger's ``LeadershipTransferCommand`` sends a *two-way* remoting request with code
``LEADERSHIP_TRANSFER`` to a peer's dLegerPeers port; the body is the JSON of
``LeadershipTransferRequest``: the ``RequestOrResponse`` base fields (``group``, ``remoteId``,
``localId``, ``leaderId``, ``term``) plus ``transferId`` (the current leader), ``transfereeId``
(the peer that should lead) and ``takeLeadershipLedgerIndex``.  The answer is a remoting
response with code 200 (``DLedgerResponseCode.SUCCESS``: the frame arrived) whose body is the
JSON of ``LeadershipTransferResponse`` (the base fields, its ``code`` the DLedger outcome).

Our peers exchange their own LeadershipTransferRequest between themselves as *oneway* frames on
the same code (``dledger/messages.py`` encoding): the shell tells them apart by the oneway flag.

Every field is checked before use (types, lengths, ids); a malformed request is answered
UNEXPECTED_ARGUMENT with a remark and changes nothing.
"""

from __future__ import annotations

from typing import Any, Final

import attrs
import orjson

from .messages import ResponseCode

MAX_ADMIN_BODY_BYTES: Final = 4096
"""A transfer request is a few short strings; anything longer is refused unread."""
MAX_ID_CHARS: Final = 64
MAX_GROUP_CHARS: Final = 255
DEFAULT_TRANSFER_TIMEOUT_S: Final = 10.0
"""How long a leader works on one admin transfer (catch-up, hand-over, retries) before it
answers TAKE_LEADERSHIP_FAILED."""


class AdminRequestError(ValueError):
    """A malformed admin request (the remark of the UNEXPECTED_ARGUMENT answer)."""


@attrs.frozen
class TransferCommand:
    """A validated admin LeadershipTransferRequest."""

    group: str
    transferee_id: str
    transfer_id: str = ""
    remote_id: str = ""
    local_id: str = ""
    term: int = -1
    take_leadership_ledger_index: int = -1


@attrs.frozen
class TransferAnswer:
    """What the peer answers: DLedger's outcome, who leads now and in which term."""

    code: ResponseCode
    group: str
    leader_id: str = ""
    term: int = -1
    local_id: str = ""
    remote_id: str = ""
    remark: str = ""

    def to_json(self) -> bytes:
        body: dict[str, Any] = {
            "group": self.group,
            "remoteId": self.remote_id,
            "localId": self.local_id,
            "code": int(self.code),
            "leaderId": self.leader_id,
            "term": self.term,
        }
        if self.remark:
            body["remark"] = self.remark
        return orjson.dumps(body)

    @classmethod
    def from_json(cls, data: bytes | bytearray | memoryview) -> TransferAnswer:
        obj = _object(data)
        try:
            code = ResponseCode(_int(obj, "code", ResponseCode.UNKNOWN))
        except ValueError:
            code = ResponseCode.UNKNOWN
        return cls(
            code,
            _str(obj, "group", MAX_GROUP_CHARS),
            _str(obj, "leaderId", MAX_ID_CHARS),
            _int(obj, "term", -1),
            _str(obj, "localId", MAX_ID_CHARS),
            _str(obj, "remoteId", MAX_ID_CHARS),
            _str(obj, "remark", 1024),
        )


def _object(data: bytes | bytearray | memoryview) -> dict[str, Any]:
    if len(data) > MAX_ADMIN_BODY_BYTES:
        raise AdminRequestError(f"body of {len(data)} bytes, at most {MAX_ADMIN_BODY_BYTES}")
    if not data:
        raise AdminRequestError("empty body: a LeadershipTransferRequest JSON is required")
    try:
        obj = orjson.loads(bytes(data))
    except orjson.JSONDecodeError as exc:
        raise AdminRequestError(f"body is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise AdminRequestError("body is not a JSON object")
    return obj


def _str(obj: dict[str, Any], key: str, max_chars: int) -> str:
    value = obj.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise AdminRequestError(f"{key} must be a string")
    if len(value) > max_chars:
        raise AdminRequestError(f"{key} longer than {max_chars} characters")
    if any(not ch.isprintable() for ch in value):
        raise AdminRequestError(f"{key} holds control characters")
    return value


def _int(obj: dict[str, Any], key: str, default: int) -> int:
    value = obj.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise AdminRequestError(f"{key} must be an integer")
    try:
        out = int(value)
    except ValueError:
        raise AdminRequestError(f"{key} must be an integer") from None
    if not -(1 << 63) <= out < (1 << 63):
        raise AdminRequestError(f"{key} out of the long range")
    return out


def parse_transfer_request(data: bytes | bytearray | memoryview) -> TransferCommand:
    """The JSON body of an admin LEADERSHIP_TRANSFER -> a :class:`TransferCommand`."""
    obj = _object(data)
    group = _str(obj, "group", MAX_GROUP_CHARS)
    if not group:
        raise AdminRequestError("group is required")
    transferee = _str(obj, "transfereeId", MAX_ID_CHARS)
    if not transferee:
        raise AdminRequestError("transfereeId is required")
    return TransferCommand(
        group=group,
        transferee_id=transferee,
        transfer_id=_str(obj, "transferId", MAX_ID_CHARS),
        remote_id=_str(obj, "remoteId", MAX_ID_CHARS),
        local_id=_str(obj, "localId", MAX_ID_CHARS),
        term=_int(obj, "term", -1),
        take_leadership_ledger_index=_int(obj, "takeLeadershipLedgerIndex", -1),
    )


def transfer_request_json(
    group: str, transferee_id: str, *, transfer_id: str = "", remote_id: str = "",
    local_id: str = "rmq-cluster-admin", term: int = -1,
) -> bytes:
    """The body DLedger's admin tool sends (for our CLI and tests)."""
    return orjson.dumps({
        "group": group,
        "remoteId": remote_id or transfer_id,
        "localId": local_id,
        "leaderId": transfer_id,
        "term": term,
        "transferId": transfer_id,
        "transfereeId": transferee_id,
        "takeLeadershipLedgerIndex": -1,
    })
