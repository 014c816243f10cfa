"""Issue 33: Apache RocketMQ 5.3.1's own broker as the oracle for POP, FIFO pop and timers.

One Apache 5.x broker (beside our NameServer: Maven Central has no 5.x NameServer jar) and one
of ours per module, booted once, both fed ``pop_scenario.POP_SCENARIO`` at the same time (the
scenario mostly waits for revives and timers). Each step's answer must match field by field,
except clocks (``pop_scenario.ALLOWED``) and the listed ``deviations.POP_DEVIATIONS``; the
checkpoint and ack records both brokers wrote to ``rmq_sys_REVIVE_LOG_<cluster>`` must have
the same shape (tags and JSON keys), since either broker reads the other's revive log.
"""

from __future__ import annotations

import contextlib
import re
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from rmq_cluster.cluster.protocol import fastjson
from rmq_cluster.cluster.protocol.message import BLANK_MAGIC, SIZE_MAGIC, decode_record
from tests.interop import oracle, pop_scenario, scenario
from tests.interop.deviations import POP_DEVIATIONS, POP_KINDS

pytestmark = pytest.mark.slow  # a JVM broker + ours, ~40 s together on 2 cores

REVIVE_TOPIC = "rmq_sys_REVIVE_LOG_InteropCluster"  # oracle.broker_conf's cluster


@attrs.frozen
class Both:
    java: dict[str, dict[str, Any]]
    ours: dict[str, dict[str, Any]]
    java_revive: Counter[tuple[str, tuple[str, ...]]]
    ours_revive: Counter[tuple[str, tuple[str, ...]]]


def revive_shapes(store_dir: Path) -> Counter[tuple[str, tuple[str, ...]]]:
    """(tag, sorted JSON keys) of every record of the revive log topic in a CommitLog."""
    shapes: Counter[tuple[str, tuple[str, ...]]] = Counter()
    for path in sorted((store_dir / "commitlog").glob("[0-9]" * 20)):
        data = memoryview(path.read_bytes())
        pos = 0
        while pos + 8 <= len(data):
            size, magic = SIZE_MAGIC.unpack_from(data, pos)
            if size == 0 or magic == BLANK_MAGIC:
                break
            rec = decode_record(data, pos)
            pos += size
            if rec.topic != REVIVE_TOPIC:
                continue
            body = fastjson.loads(bytes(rec.body))
            shapes[(rec.properties.get("TAGS", ""), tuple(sorted(body)))] += 1
    return shapes


@pytest.fixture(scope="module")
def java5_classpath() -> str:
    try:
        return oracle.java_classpath(apache5=True)
    except oracle.OracleError as exc:
        pytest.fail(f"Apache RocketMQ 5's broker is not available: {exc}", pytrace=False)


@pytest.fixture(scope="module")
def both(java5_classpath: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Both]:
    with contextlib.ExitStack() as stack:
        # both boot at once (each stack is entered in its thread, closed here, failed or not)
        java_stack = stack.enter_context(contextlib.ExitStack())
        ours_stack = stack.enter_context(contextlib.ExitStack())
        with ThreadPoolExecutor(2) as pool:
            java_f = pool.submit(java_stack.enter_context, oracle.running_cluster(
                "java5", tmp_path_factory.mktemp("java5"), cp=java5_classpath))
            ours_f = pool.submit(ours_stack.enter_context, oracle.running_cluster(
                "ours", tmp_path_factory.mktemp("ours5")))
            java, ours = java_f.result(), ours_f.result()
        views: dict[str, dict[str, dict[str, Any]]] = {}

        async def run(name: str, cluster: oracle.Cluster) -> None:
            views[name] = await scenario.replay_async(
                cluster.namesrv_addr, cluster.broker_addr, pop_scenario.POP_SCENARIO)

        async def main() -> None:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(run, "java", java)
                nursery.start_soon(run, "ours", ours)

        trio.run(main)
        yield Both(views["java"], views["ours"], revive_shapes(java.store_dir),
                   revive_shapes(ours.store_dir))


def _deviation(step: str, field: str) -> tuple[str, str, str, str] | None:
    for entry in POP_DEVIATIONS:
        if re.fullmatch(entry[0], step) and re.fullmatch(entry[1], field):
            return entry
    return None


def _diffs(both: Both, step: str) -> list[tuple[str, Any, Any]]:
    return scenario.compare(step, both.java[step], both.ours[step], pop_scenario.ALLOWED)


@pytest.mark.parametrize("step", [s.name for s in pop_scenario.POP_SCENARIO])
def test_pop_step_matches_apache5(both: Both, step: str) -> None:
    java_code = both.java[step].get("code")
    assert isinstance(java_code, int), f"Apache's broker gave no answer to {step}: {java_code}"
    unexplained = [d for d in _diffs(both, step) if _deviation(step, d[0]) is None]
    assert not unexplained, "\n".join(
        [f"{step}: answers differ (fix it, or list it in deviations.POP_DEVIATIONS):"]
        + [f"  {f}: java={j!r} ours={o!r}" for f, j, o in unexplained])


#: Apache's ack record (``AckMsg``: its ackOffset, brokerName, consumerGroup, popTime, queueId,
#: startOffset, topic): its broker merges an ack that finds its checkpoint still buffered, so
#: the scenario may leave none in Apache's log; ours writes every ack.
APACHE_ACK_KEYS = ("ao", "bn", "c", "pt", "q", "so", "t")


def test_revive_log_records_have_apaches_shape(both: Both) -> None:
    """Checkpoints and acks: the same tags and JSON keys on both brokers (how many of each may
    differ: Apache buffers and merges acks into checkpoints before writing them)."""
    assert both.java_revive, "Apache's broker wrote no revive log record: nothing compared"
    java = set(both.java_revive)
    ours = set(both.ours_revive)
    assert {s for s in java if s[0] == "ck"} == {s for s in ours if s[0] == "ck"}, (
        f"java={dict(both.java_revive)} ours={dict(both.ours_revive)}")
    assert java <= ours and ours <= java | {("ack", APACHE_ACK_KEYS)}, (
        f"java={dict(both.java_revive)} ours={dict(both.ours_revive)}")


def test_every_pop_deviation_still_occurs(both: Both) -> None:
    """A fixed difference must leave POP_DEVIATIONS, so the list stays the truth."""
    assert {e[2] for e in POP_DEVIATIONS} <= POP_KINDS
    seen = {
        entry for step in both.java for field, _, _ in _diffs(both, step)
        if (entry := _deviation(step, field)) is not None
    }
    stale = [e for e in POP_DEVIATIONS if e not in seen and e[2] != "timing"]
    assert not stale, "deviations no longer observed:\n" + "\n".join(
        f"  {e[0]} / {e[1]}: {e[3]}" for e in stale)
