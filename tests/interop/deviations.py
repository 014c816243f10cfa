"""Every known difference between Apache RocketMQ 4.9.7's answers and ours, one entry each.

``(step regex, field regex, kind, note)``. ``kind`` is ``"deliberate"`` (we differ on purpose:
README, "Deviations from Apache RocketMQ") or ``"finding"`` (a difference to fix; open until it is
fixed, then the entry must go: the tests fail on an entry that no longer matches anything, so
this list stays exact). A difference matched by no entry fails the tests.
"""

from __future__ import annotations

from typing import Final

DEVIATIONS: Final[tuple[tuple[str, str, str, str], ...]] = (
    # ---------------------------------------------------------------- deliberate
    ("create_topic", r"remark", "deliberate",
     "Java leaves its default remark 'not set any response code' on a SUCCESS; no client reads "
     "a success remark, we send none"),
    ("error_unknown_code_namesrv", r"code|remark", "deliberate",
     "Java's NameServer never answers an unknown request code (the caller times out); ours "
     "answers REQUEST_CODE_NOT_SUPPORTED as Java's broker does"),
    ("runtime_info", r"body\.table\.(ha\w+|remoting\w+|brokerActive|scheduleMessageOffset)",
     "deliberate", "GET_BROKER_RUNTIME_INFO: our extra keys (HA, remoting limits, liveness)"),
    # ---------------------------------------------------------------- clocks
    (r"query_by_(uniq_)?key(_batch_plain)?", r"ext\.indexLastUpdateTimestamp", "deliberate",
     "not a behaviour difference: both answer the last indexed message's store time, which is "
     "each broker's own clock (the physical offsets agree)"),
)

#: The same for the two CommitLogs after the scenario, record by record, keyed by
#: (topic, queue id, queue offset): (topic regex, field regex, kind, note).
STORE_DEVIATIONS: Final[tuple[tuple[str, str, str, str], ...]] = (
    (r"OFFSET_MOVED_EVENT", r"\.born_timestamp", "deliberate",
     "not a behaviour difference: the broker writes the event at its own time (its clock)"),
)

#: Apache RocketMQ 5.3.1's broker against ours on the POP and timer scenario
#: (tests/interop/pop_scenario.py, test_pop_differential.py): (step regex, field regex, kind,
#: note), read as DEVIATIONS is. ``"version"``: Apache's 5.x send path differs from 4.9.7's,
#: which ours follows (the 4.x differential holds it); the rest as above.
POP_DEVIATIONS: Final[tuple[tuple[str, str, str, str], ...]] = (
    # ---------------------------------------------------------------- 4.9 send path
    (r"send_.*", r"ext\.transactionId", "version",
     "5.x answers every send with transactionId (the UNIQ_KEY); 4.9.7 and ours only a "
     "transactional one"),
    (r"pop_.*", r"body\[\d+\]\.properties\.(MSG_REGION|TRACE_ON|WAIT)", "version",
     "5.x stores MSG_REGION, TRACE_ON and WAIT with every message; 4.9.7 and ours keep them "
     "out of the record"),
    (r"(send|pop)_.*", r"ext\.msgId|body\[\d+\]\.(commitlog_offset|store_size)", "version",
     "follows from the line above: 5.x's records are longer, so physical offsets differ"),
    (r"send_timer", r"ext\.queueOffset", "deliberate",
     "a timer message's send answers its offset in rmq_sys_wheel_timer; Apache also passes "
     "its POP checkpoints through that topic, ours does not (the revive scan reads the ck "
     "records itself), so the count of earlier records differs"),
    # ---------------------------------------------------------------- POP
    (r"ack_bad_extra_info", r"code|remark", "deliberate",
     "an unparsable extraInfo: Apache answers SYSTEM_ERROR with the Java exception; ours "
     "MESSAGE_ILLEGAL naming what is wrong"),
    (r"create_.*topic|change_invisible_second", r"remark", "deliberate",
     "Java's default remark 'not set any response code' on a SUCCESS (as create_topic)"),
    (r"pop_retry", r"ext\.reviveQid|body\[\d+\]\.properties\.POP_CK", "deliberate",
     "not a behaviour difference: each broker takes the revive queues in turn per pop call, "
     "and the steps before polled the retry topic a different number of times"),
    (r"pop_retry_again", r".*", "deliberate",
     "a message whose invisible time runs out after retryMaxTimes pops: Apache's broker puts "
     "it back into the retry topic forever (its clients and proxy dead-letter it); ours moves "
     "it to %DLQ%<group> at that revive, so a consumer that dies mid-message cannot bounce "
     "it without end"),
    (r"dlq_max_offset", r"code|remark|ext\.offset", "deliberate",
     "the same: Apache has no %DLQ% topic for the group, ours holds the message there"),
    (r"pop_timer", r"ext\.reviveQid", "timing",
     "the revive queue taken in turn: whether the two brokers agree depends on how often the "
     "steps before polled while waiting for the timer, so it differs in some runs only"),
)

#: Kinds a POP deviation may have; a "timing" one depends on how a run's waits fell, so it is
#: allowed but not required to occur.
POP_KINDS: Final = frozenset({"deliberate", "finding", "version", "timing"})

#: Apache RocketMQ 5.3.1's Proxy (cluster mode, before its 5.3.1 broker) against ``mqproxy``
#: on the gRPC scenario (tests/interop/proxy_scenario.py, test_proxy_differential.py):
#: (step regex, field regex, kind, note), read as POP_DEVIATIONS is.
PROXY_DEVIATIONS: Final[tuple[tuple[str, str, str, str], ...]] = (
    # ---------------------------------------------------------------- sends
    (r"send_(normal|fifo|delay)", r"entries\[\d+\]\.transaction_id", "version",
     "Apache's 5.x answers every send with a transaction id (the message id, as its broker's "
     "transactionId); ours only a transactional one (the id of its half message), the only one "
     "an SDK reads"),
    (r"send_(wrong_type|missing_topic)", r"entries\[\d+\]\.status\.code", "deliberate",
     "a refused send (a wrong message type, a topic that does not exist): Apache answers the "
     "top status only; ours also each entry's own status (the same code; the SDKs read the top "
     "one)"),
    # ---------------------------------------------------------------- receive and ack
    (r"receive_(normal|fifo|delay|orderly|orderly_again)",
     r"answer\[\d+\]\.message\.system_properties\.invisible_duration", "deliberate",
     "ours names the invisible time the receive asked for in each message; Apache leaves it "
     "unset"),
    (r"receive_(fifo|orderly|orderly_again)",
     r"answer\[\d+\]\.message\.user_properties\.__SHARDINGKEY", "deliberate",
     "Apache also shows the message group's stored key as a user property; ours shows it only "
     "as message_group (a user may not set that key)"),
    ("receive_invisible_not_a_duration", r"answer\[0\]\.status\.code", "deliberate",
     "an invisible_duration that is no valid Duration (here seconds and nanos of opposite "
     "signs): Apache answers INTERNAL_SERVER_ERROR (protobuf's Durations.toMillis throws), ours "
     "ILLEGAL_INVISIBLE_TIME"),
    ("ack_bad_receipt_handle", r"(entries\[\d+\]\.)?status\.code", "deliberate",
     "an unparsable receipt handle: Apache answers INTERNAL_SERVER_ERROR, ours "
     "INVALID_RECEIPT_HANDLE (the v2 code for it)"),
)

PROXY_KINDS: Final = POP_KINDS
