"""A DLedger send's held answer in its failed forms (``refused_answer``, wired by
``DLedgerCommitLog.answer_failures_with``) equals what the send processor's ``answer`` builds
for the status RocketMQ's DLedger broker maps the append code to (reference §7.7): the
refusal, with no msgId or offsets, for WAIT_QUORUM_ACK_TIMEOUT (OS_PAGECACHE_BUSY) and
TERM_CHANGED (UNKNOWN_ERROR); a refusal held stays as it is."""

from __future__ import annotations

import types

import pytest

from rmq_cluster.broker.processors.send import SendProcessor, refused_answer
from rmq_cluster.cluster.protocol.message import Message
from rmq_cluster.cluster.remoting.codec import FrameDecoder, RemotingCommand, encode
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode
from rmq_cluster.dledger.commitlog_adapter import put_status_of
from rmq_cluster.dledger.messages import ResponseCode as DLedgerCode
from rmq_cluster.store.commitlog import AppendMessageResult, PutMessageResult, PutMessageStatus


def _processor() -> SendProcessor:
    """A SendProcessor whose ``answer`` can run: it needs only ``ctrl.stats``."""
    proc = SendProcessor.__new__(SendProcessor)
    proc.ctrl = types.SimpleNamespace(stats=types.SimpleNamespace(put_total=0))  # type: ignore[assignment]
    proc._max_size = 4 * 1024 * 1024
    return proc


@pytest.mark.parametrize("code", [DLedgerCode.WAIT_QUORUM_ACK_TIMEOUT, DLedgerCode.TERM_CHANGED])
def test_failed_forms_are_the_general_paths_refusals(code: DLedgerCode) -> None:
    request = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"b": "T", "e": "1"})
    msg = Message(topic="T", body=b"x" * 10, queue_id=1, properties={"UNIQ_KEY": "ABC"})
    appended = AppendMessageResult(
        wrote_offset=4144, wrote_bytes=200, store_timestamp=1_700_000_000_000,
        logics_offset=9, msg_num=1, store_host_bytes=bytes([127, 0, 0, 1, 0, 0, 0x27, 0x1F]),
    )
    detail = f"DLedger append: {code.name}"
    status = put_status_of(code)
    general = _processor().answer(request, msg, PutMessageResult(status, appended, detail))
    (held,) = FrameDecoder().feed(
        encode(_processor().answer(request, msg, PutMessageResult(PutMessageStatus.PUT_OK,
                                                                  appended, "")), 7))
    failed = refused_answer(status, detail)(held, 10)
    assert encode(failed, 7) == encode(general, 7)
    assert failed.code == ResponseCode.SYSTEM_ERROR and "msgId" not in failed.ext_fields
    want = "UNKNOWN_ERROR" if code is DLedgerCode.TERM_CHANGED else "[PC_SYNCHRONIZED]"
    assert (failed.remark or "").startswith(want)
    # a held refusal is not rewritten
    assert refused_answer(status, detail)(general, 10) is general
