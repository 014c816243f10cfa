"""Issue 22 part 1: the same requests to Apache RocketMQ 4.9.7 and to us, compared field by field.

Each scenario step (tests/interop/scenario.py) is one test: its response fields must be equal on
both sides except the ALLOWED ones (scenario.py: clocks and ports) and the listed deviations
(deviations.py: deliberate ones and open findings). The CommitLogs both brokers wrote are then
compared record by record.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.interop import scenario
from tests.interop.conftest import Replayed
from tests.interop.deviations import DEVIATIONS, STORE_DEVIATIONS

pytestmark = pytest.mark.slow  # boots a JVM NameServer + Broker (~10 s on 2 cores)

#: CommitLog fields the two brokers may differ in: their clocks.
STORE_ALLOWED = (
    (r".*", r"\.store_timestamp"),
    # the op message (transaction bookkeeping) is born in the broker, at its own time
    (r"RMQ_SYS_TRANS_OP_HALF_TOPIC", r"\.born_timestamp"),
)

#: Topics whose records a broker writes on a timer, so one CommitLog may hold a record the other
#: does not hold yet when the scenario ends: (topic regex, why). Compared field by field when
#: both brokers wrote it.
STORE_TIMED = (
    # send_back's message is scheduled at delay level 3 (10 s): it reaches %RETRY%<group> if
    # the steps after send_back took that long on one broker (a slow JVM, a loaded machine)
    (r"%RETRY%" + scenario.GROUP, "the delay level's 10 s ran out on one broker only"),
)


def _deviation(
    table: tuple[tuple[str, str, str, str], ...], step: str, field: str
) -> tuple[str, str, str, str] | None:
    for entry in table:
        if re.fullmatch(entry[0], step) and re.fullmatch(entry[1], field):
            return entry
    return None


def _explain(step: str, diffs: list[tuple[str, Any, Any]]) -> str:
    lines = [f"{step}: responses differ (add a fix, or an entry in deviations.py):"]
    lines += [f"  {f}: java={j!r} ours={o!r}" for f, j, o in diffs]
    return "\n".join(lines)


def _step_diffs(java: Replayed, ours: Replayed, step: str) -> list[tuple[str, Any, Any]]:
    return scenario.compare(step, java.views[step], ours.views[step])


@pytest.mark.parametrize("step", [s.name for s in scenario.SCENARIO])
def test_step_matches_java(java_replayed: Replayed, ours_replayed: Replayed, step: str) -> None:
    assert java_replayed.views[step].get("code") != "NO_ANSWER" or step in {
        "error_unknown_code_namesrv"
    }, f"the Java broker did not answer {step}: the scenario is wrong, not us"
    unexplained = [
        d for d in _step_diffs(java_replayed, ours_replayed, step)
        if _deviation(DEVIATIONS, step, d[0]) is None
    ]
    assert not unexplained, _explain(step, unexplained)


def _store_diffs(java: Replayed, ours: Replayed) -> list[tuple[str, str, Any, Any]]:
    def key(r: dict[str, Any]) -> tuple[Any, ...]:
        return (r[".topic"], r[".queue_id"], r[".queue_offset"])

    j = {key(r): r for r in java.commitlog}
    o = {key(r): r for r in ours.commitlog}
    out = []
    for k in sorted(set(j) | set(o), key=str):
        topic = str(k[0])
        where = f"{k[0]}/{k[1]}/{k[2]}"
        if k not in j or k not in o:
            if any(re.fullmatch(t, topic) for t, _ in STORE_TIMED):
                continue
            out.append((topic, "<record>", where if k in j else "<absent>",
                        where if k in o else "<absent>"))
            continue
        allowed = [re.compile(f) for t, f in STORE_ALLOWED if re.fullmatch(t, topic)]
        for field in sorted(set(j[k]) | set(o[k])):
            if any(a.fullmatch(field) for a in allowed):
                continue
            a, b = j[k].get(field, "<absent>"), o[k].get(field, "<absent>")
            if a != b:
                out.append((topic, f"{where} {field}", a, b))
    return out


def test_commitlogs_match_record_by_record(
    java_replayed: Replayed, ours_replayed: Replayed
) -> None:
    assert java_replayed.commitlog, "the Java broker's CommitLog is empty: nothing was compared"
    unexplained = [
        d for d in _store_diffs(java_replayed, ours_replayed)
        if _deviation(STORE_DEVIATIONS, d[0], d[1].split(" ")[-1]) is None
    ]
    assert not unexplained, "CommitLogs differ:\n" + "\n".join(
        f"  {t} {f}: java={a!r} ours={b!r}" for t, f, a, b in unexplained
    )


def test_every_listed_deviation_still_occurs(
    java_replayed: Replayed, ours_replayed: Replayed
) -> None:
    """A fixed finding must leave deviations.py, so the list stays the truth."""
    seen: set[tuple[str, str, str, str]] = set()
    for step in (s.name for s in scenario.SCENARIO):
        for field, _, _ in _step_diffs(java_replayed, ours_replayed, step):
            entry = _deviation(DEVIATIONS, step, field)
            if entry is not None:
                seen.add(entry)
    for topic, where, _, _ in _store_diffs(java_replayed, ours_replayed):
        entry = _deviation(STORE_DEVIATIONS, topic, where.split(" ")[-1])
        if entry is not None:
            seen.add(entry)
    stale = [e for e in (*DEVIATIONS, *STORE_DEVIATIONS) if e not in seen]
    assert not stale, "deviations no longer observed (fixed? remove them):\n" + "\n".join(
        f"  {e[0]} / {e[1]}: {e[3]}" for e in stale
    )


def _record(topic: str, queue_offset: int) -> dict[str, Any]:
    return {".topic": topic, ".queue_id": 0, ".queue_offset": queue_offset, ".body": "b"}


def _store_only(java: list[dict[str, Any]], ours: list[dict[str, Any]]) -> Any:
    return _store_diffs(Replayed(None, {}, java), Replayed(None, {}, ours))  # type: ignore[arg-type]


def test_a_timed_record_in_one_commitlog_only_is_no_difference() -> None:
    """(No JVM.) send_back's retry record, due 10 s later, may be in one CommitLog only when the
    scenario ends; any other record missing on one side is still a difference."""
    both = [_record(scenario.TOPIC, 0)]
    retry = _record("%RETRY%" + scenario.GROUP, 0)
    assert _store_only([*both, retry], both) == []
    assert _store_only(both, [*both, retry]) == []
    assert _store_only([*both, retry], [*both, {**retry, ".body": "other"}]) != []
    assert _store_only([*both, _record(scenario.TOPIC, 1)], both) != []


def test_query_by_key_waits_for_both_keyed_messages() -> None:
    """(No JVM.) The step must not stop at the first indexed message of the two with the key:
    one broker may index the second a moment later, and the views would differ."""
    (step,) = [s for s in scenario.SCENARIO if s.name == "query_by_key"]
    assert step.until is not None
    one = {"code": 0, "body[0].topic": scenario.TOPIC}
    two = {**one, "body[1].topic": scenario.TOPIC}
    assert not step.until(one) and step.until(two)
