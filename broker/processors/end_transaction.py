"""END_TRANSACTION (37): commit or roll back a half message (``EndTransactionProcessor``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from ...cluster.acl.permission import PUB
from ...cluster.protocol.message import (
    SYSFLAG_TRANSACTION_COMMIT_TYPE,
    SYSFLAG_TRANSACTION_ROLLBACK_TYPE,
    MessageConst,
)
from ...cluster.remoting.codec import RemotingCommand
from ...cluster.remoting.codes import ResponseCode
from ...cluster.remoting.headers import EndTransactionRequestHeader, HeaderError
from ..transaction import HALF_TOPIC, end_message, op_message

if TYPE_CHECKING:
    from ..context import BrokerContext

COMMIT: Final = SYSFLAG_TRANSACTION_COMMIT_TYPE  # 8
ROLLBACK: Final = SYSFLAG_TRANSACTION_ROLLBACK_TYPE  # 12


class EndTransactionProcessor:
    def __init__(self, ctrl: BrokerContext) -> None:
        self.ctrl = ctrl

    def process(self, conn: Any, request: RemotingCommand) -> RemotingCommand | None:
        ctrl = self.ctrl
        try:
            h = EndTransactionRequestHeader.from_ext_fields(request.ext_fields)
        except HeaderError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"bad request header: {exc}")
        if ctrl.is_slave:
            return request.response(
                ResponseCode.SLAVE_NOT_AVAILABLE, "Can't commit or rollback the message on slave."
            )
        kind = h.commit_or_rollback
        if kind not in (COMMIT, ROLLBACK):
            return request.response(ResponseCode.SUCCESS)  # TRANSACTION_NOT_TYPE: nothing to do
        half = ctrl.store.lookup_message_by_offset(h.commit_log_offset)
        if half is None or half.topic != HALF_TOPIC:
            return request.response(
                ResponseCode.SYSTEM_ERROR, "Find prepared transaction message failed"
            )
        access = ctrl.topic_access
        real = half.properties.get(MessageConst.PROPERTY_REAL_TOPIC)
        if access is not None and real:  # aclEnable: PUB on the topic it is bound for
            denial = access(conn, request, (real,), PUB)
            if denial is not None:
                return denial
        pgroup = half.properties.get(MessageConst.PROPERTY_PRODUCER_GROUP)
        if pgroup is not None and pgroup != h.producer_group:
            return request.response(ResponseCode.SYSTEM_ERROR, "The producer group wrong")
        if half.queue_offset != h.tran_state_table_offset:
            return request.response(
                ResponseCode.SYSTEM_ERROR, "The transaction state table offset wrong"
            )
        if ctrl.transactions.is_resolved(half.queue_offset):
            return request.response(ResponseCode.SUCCESS)
        if kind == COMMIT:
            result = ctrl.store.append_message(end_message(half, COMMIT, ctrl.store_host))
            if result.result is None or not result.status.stored:
                return request.response(
                    ResponseCode.SYSTEM_ERROR, f"commit failed: {result.status.value}"
                )
        ctrl.store.append_message(op_message(half.queue_offset, ctrl.store_host, ctrl.now_ms()))
        ctrl.transactions.resolved(half.queue_offset)
        return request.response(ResponseCode.SUCCESS)
