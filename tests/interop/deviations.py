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
    (r"query_by_(uniq_)?key", r"ext\.indexLastUpdateTimestamp", "deliberate",
     "not a behaviour difference: both answer the last indexed message's store time, which is "
     "each broker's own clock (the physical offsets agree)"),
)

#: The same for the two CommitLogs after the scenario, record by record, keyed by
#: (topic, queue id, queue offset): (topic regex, field regex, kind, note).
STORE_DEVIATIONS: Final[tuple[tuple[str, str, str, str], ...]] = (
    (r"OFFSET_MOVED_EVENT", r"\.born_timestamp", "deliberate",
     "not a behaviour difference: the broker writes the event at its own time (its clock)"),
)
