"""The broker's name gate: every request's names are checked before any processor sees it.

``NameGate.wrap(processors)`` puts ``names.check_request`` in front of each processor whose code
carries a name (``names.NAME_TABLE``), keeping plain ``def`` processors plain (answered inline)
and ``async def`` ones async. A request with a bad topic, group or queue id is answered with
SYSTEM_ERROR (what RocketMQ's ``msgCheck`` answers for a bad topic) and a remark naming the
field; nothing else happens. Valid names are remembered in a bounded ``NameCache``, so the send
hot path costs a few set lookups.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from ...cluster.logging import get_logger
from ...cluster.protocol.names import NAME_TABLE, NameCache, check_request
from ...cluster.remoting.codec import RemotingCommand
from ...cluster.remoting.codes import RequestCode, ResponseCode
from ...cluster.remoting.headers import SEND_V2_LETTER
from ...cluster.remoting.processors import AnyProcessor, Processor, checked

#: Requests whose bad topic RocketMQ answers in its own words (``TopicValidator``): the header
#: field holding the topic, and whether the answer is a send's (with MSG_REGION / TRACE_ON).
_JAVA_TOPIC_CHECKS: Final[dict[int, tuple[str, bool]]] = {
    RequestCode.SEND_MESSAGE: ("topic", True),
    RequestCode.SEND_MESSAGE_V2: (SEND_V2_LETTER["topic"], True),
    RequestCode.SEND_BATCH_MESSAGE: (SEND_V2_LETTER["topic"], True),
    RequestCode.UPDATE_AND_CREATE_TOPIC: ("topic", False),
}
_JAVA_TOPIC_CHARS: Final = re.compile(r"[%|a-zA-Z0-9_-]+")
JAVA_TOPIC_MAX_LENGTH: Final = 127
#: The extFields every answer to a send carries in RocketMQ, refusals too.
SEND_ANSWER_EXT: Final = {"MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}


def java_topic_remark(topic: str | None) -> str | None:
    """RocketMQ 4.9's ``TopicValidator.validateTopic`` remark for ``topic``, or None if that
    rule accepts it (our own rules, checked too, may still refuse it)."""
    if topic is None or not topic.strip():
        return "The specified topic is blank."
    if _JAVA_TOPIC_CHARS.fullmatch(topic) is None:
        return "The specified topic contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
    if len(topic) > JAVA_TOPIC_MAX_LENGTH:
        return "The specified topic is longer than topic max length."
    return None


def refusal_remark(request: RemotingCommand, bad: str) -> str:
    """The remark the gate answers for ``request`` whose names ``check_request`` refused with
    ``bad``: RocketMQ's own words when its topic rule refuses the topic of a send or a topic
    creation (what a RocketMQ client or tool expects to read), else ``bad``."""
    java = _JAVA_TOPIC_CHECKS.get(request.code)
    if java is not None:
        topic = request.ext_fields.get(java[0])
        remark = java_topic_remark(topic) if topic is not None else None
        if remark is not None:
            return remark
    return bad


def refusal(request: RemotingCommand, bad: str) -> RemotingCommand:
    """The gate's SYSTEM_ERROR answer; a send's carries MSG_REGION / TRACE_ON as RocketMQ's
    refused sends do."""
    java = _JAVA_TOPIC_CHECKS.get(request.code)
    ext = dict(SEND_ANSWER_EXT) if java is not None and java[1] else None
    return request.response(ResponseCode.SYSTEM_ERROR, refusal_remark(request, bad), ext)


class NameGate:
    def __init__(self, *, node: str = "broker") -> None:
        self.log = get_logger(node=node, role="names")
        self.cache = NameCache()
        #: requests refused for a bad name
        self.refused = 0

    def check(self, conn: Any, request: RemotingCommand) -> RemotingCommand | None:
        """None to go on, else the answer refusing ``request``."""
        bad = check_request(request, self.cache)
        if bad is None:
            return None
        self.refused += 1
        self.log.info(
            "request refused: bad name",
            peer=getattr(conn, "peer", "?"),
            code=request.code,
            reason=bad,
        )
        return refusal(request, bad)

    def wrap_one(self, processor: AnyProcessor) -> Processor:
        return checked(processor, self.check)

    def wrap(self, processors: Mapping[int, AnyProcessor]) -> dict[int, AnyProcessor]:
        """Every processor whose code carries a name, gated; the others as they are."""
        return {
            code: self.wrap_one(p) if code in NAME_TABLE else p
            for code, p in processors.items()
        }
