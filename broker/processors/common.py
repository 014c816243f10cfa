"""Pieces every broker processor shares: remarks, header errors, put-result mapping."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any, Final, TypeVar

from ...cluster.protocol.message import MessageConst, StoredMessage
from ...cluster.remoting.codec import RemotingCommand
from ...cluster.remoting.codes import ResponseCode
from ...cluster.remoting.headers import HeaderError
from ...store.commitlog import PutMessageStatus

FAQ_URL: Final = "http://rocketmq.apache.org/docs/faq/"
#: Java's ``FAQUrl.suggestTodo``: what its remarks end with.
FAQ_SUGGEST: Final = f"\nSee {FAQ_URL} for further details."
#: Extra extFields every send response carries (the Java client reads the map unconditionally).
MSG_REGION_DEFAULT: Final = "DefaultRegion"
TRACE_ON_DEFAULT: Final = "true"

_PUT_STATUS_CODES: Final = {
    PutMessageStatus.PUT_OK: (ResponseCode.SUCCESS, None),
    PutMessageStatus.FLUSH_DISK_TIMEOUT: (ResponseCode.FLUSH_DISK_TIMEOUT, None),
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: (ResponseCode.FLUSH_SLAVE_TIMEOUT, None),
    PutMessageStatus.SLAVE_NOT_AVAILABLE: (ResponseCode.SLAVE_NOT_AVAILABLE, None),
    PutMessageStatus.IN_SYNC_REPLICAS_NOT_ENOUGH: (
        ResponseCode.SYSTEM_ERROR, "in-sync replicas not enough"
    ),
    PutMessageStatus.CREATE_MAPEDFILE_FAILED: (
        ResponseCode.SYSTEM_ERROR,
        "create mapped file failed, server is busy or broken.",
    ),
    PutMessageStatus.MESSAGE_ILLEGAL: (
        ResponseCode.MESSAGE_ILLEGAL,
        "the message is illegal, maybe msg body or properties length not matched. "
        "msg body length limit 4M, msg properties length limit 32k.",
    ),
    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: (
        ResponseCode.MESSAGE_ILLEGAL,
        "the message is illegal, maybe msg body or properties length not matched. "
        "msg body length limit 4M, msg properties length limit 32k.",
    ),
    PutMessageStatus.SERVICE_NOT_AVAILABLE: (
        ResponseCode.SERVICE_NOT_AVAILABLE,
        "service not available now. It may be caused by one of the following reasons: "
        "the broker's disk is full, messages are put to the slave, message store has been "
        "shut down, etc.",
    ),
    PutMessageStatus.OS_PAGECACHE_BUSY: (
        ResponseCode.SYSTEM_ERROR,
        "[PC_SYNCHRONIZED]broker busy, start flow control for a while",
    ),
    PutMessageStatus.UNKNOWN_ERROR: (ResponseCode.SYSTEM_ERROR, "UNKNOWN_ERROR"),
}


def put_status_code(status: PutMessageStatus, detail: str = "") -> tuple[int, str | None]:
    code, remark = _PUT_STATUS_CODES.get(status, (ResponseCode.SYSTEM_ERROR, status.value))
    if remark is not None and detail:
        remark = f"{remark} ({detail})"
    return int(code), remark


#: What a processor that read a message by offset or id asks the ACL (``AclGuard.topic_access``):
#: (conn, request, the message's topics, PUB or SUB) -> None, or the denial to answer with.
#: The controller sets ``ctrl.topic_access`` when aclEnable=true; None costs nothing.
TopicAccess = Callable[[Any, RemotingCommand, Iterable[str], int], "RemotingCommand | None"]


def message_topics(msg: StoredMessage) -> tuple[str, ...]:
    """The topics a stored message belongs to: its own and, for a delayed or half message
    (SCHEDULE_TOPIC_XXXX, RMQ_SYS_TRANS_HALF_TOPIC), the real topic it is bound for."""
    real = msg.properties.get(MessageConst.PROPERTY_REAL_TOPIC)
    if real and real != msg.topic:
        return (msg.topic, real)
    return (msg.topic,)


R = TypeVar("R")


def header_errors(fn: Callable[..., R]) -> Callable[..., R]:
    """A processor whose header does not parse answers SYSTEM_ERROR naming the field."""

    @functools.wraps(fn)
    def sync_wrapper(self: Any, conn: Any, request: RemotingCommand) -> Any:
        try:
            return fn(self, conn, request)
        except HeaderError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"bad request header: {exc}")

    return sync_wrapper
