"""Issue 22 part 2: a store one implementation wrote, ``kill -9``-ed in the middle of a flood of
sends, is recovered and served by the other (Apache RocketMQ 4.9.7's broker or ours) booted on a
copy of it, and by ours again on the original:

* the first messages (keys, tags, user properties, several queues) are pulled back field for
  field as the writer served them (store timestamps and the store host aside);
* every send the writer acknowledged before it died is there, at the queue and queue offset its
  answer named, with its body (what was in flight may or may not be);
* the IndexFile answers queries by key (one key per message, and a key all of them share) and
  the ConsumeQueue serves pulls from offset 0;
* the copy also gets a torn record after its last one (half a record, as a kill in the middle
  of a write leaves it): the recovering broker ends the CommitLog before it, and its next
  message goes there, at the next offset of its queue.
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
from pathlib import Path
from typing import Any, Final

import attrs
import pytest
import trio

from rmq_cluster.cluster.remoting.client_pool import open_remoting_client
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode as RC
from rmq_cluster.cluster.remoting.errors import RemotingError
from tests.interop import oracle, scenario

pytestmark = pytest.mark.slow  # boots a JVM NameServer + Broker

MESSAGES: Final = 20
QUEUES: Final = 4
#: Concurrent senders of the flood, and how many of its sends are acked before the kill.
FLOOD_SENDERS: Final = 4
KILL_AFTER_ACKS: Final = 150
PULL_BATCH: Final = 32
RECOVERY_TIMEOUT_S: Final = 30.0
#: How long the writer may take to serve the first messages it acked, and how often to look.
SERVED_TIMEOUT_S: Final = 10.0
SERVED_POLL_S: Final = 0.05
CALL_ERRORS: Final = (
    RemotingError, OSError, trio.BrokenResourceError, trio.ClosedResourceError,
)


@attrs.frozen
class Acked:
    """One flood send the dead broker acknowledged."""

    queue_id: int
    queue_offset: int
    body: bytes


async def _create_topic(client: Any, broker: str) -> None:
    create = {
        "topic": scenario.TOPIC, "defaultTopic": "TBW102", "readQueueNums": str(QUEUES),
        "writeQueueNums": str(QUEUES), "perm": "6", "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": "0", "order": "false",
    }
    req = RemotingCommand.request(RC.UPDATE_AND_CREATE_TOPIC, create)
    resp = await client.invoke(broker, req)
    assert resp.code == 0, resp.remark


async def _fill_and_read(broker: str) -> dict[int, dict[str, Any]]:
    """MESSAGES sends with keys, tags and user properties over QUEUES queues; what the broker
    then serves, by CommitLog offset."""
    async with open_remoting_client(node="interop-store") as client:
        await _create_topic(client, broker)
        for n in range(MESSAGES):
            ext = scenario.send_v2(
                scenario.TOPIC, n % QUEUES, 100 + n, keys=f"key{n} every", tags=f"Tag{n % 3}",
                extra={"userProp": f"value-{n}", "color": ("red", "blue")[n % 2]},
            )
            body = scenario.body_of(n, 100 + n)
            req = RemotingCommand.request(RC.SEND_MESSAGE_V2, ext, body)
            resp = await client.invoke(broker, req)
            assert resp.code == 0, resp.remark
        # Apache's broker builds its ConsumeQueues in a thread of its own (ReputMessageService):
        # a pull right after the last send may not see it yet; read until all are served
        with trio.fail_after(SERVED_TIMEOUT_S):
            while True:
                records = await _read_all(client, broker)
                if len(records) >= MESSAGES:
                    break
                await trio.sleep(SERVED_POLL_S)  # polling the broker, bounded by the deadline
    return {int(rec["commitlog_offset"]): rec for rec in records}


async def _read_all(client: Any, broker: str) -> list[dict[str, Any]]:
    """Every record of every queue, pulled from offset 0 in batches (store timestamps left
    out: the recovering broker may not be the one that stored them)."""
    out: list[dict[str, Any]] = []
    for q in range(QUEUES):
        offset = 0
        while True:
            req = RemotingCommand.request(
                RC.PULL_MESSAGE, scenario.pull(scenario.TOPIC, q, offset, max_nums=PULL_BATCH)
            )
            resp = await client.invoke(broker, req)
            if resp.code != 0:
                break
            view = scenario.flatten_response(resp, "records")
            i = 0
            while f"body[{i}].commitlog_offset" in view:
                rec = {
                    k.split(".", 1)[1]: v for k, v in view.items() if k.startswith(f"body[{i}].")
                }
                rec.pop("store_timestamp", None)
                out.append(rec)
                i += 1
            nxt = int(resp.ext_fields["nextBeginOffset"])
            if i == 0 or nxt <= offset:
                break
            offset = nxt
    return out


async def _flood_until_killed(broker: str, node: oracle.Node) -> dict[str, Acked]:
    """FLOOD_SENDERS tasks send as fast as answers come; once KILL_AFTER_ACKS sends were acked,
    the broker gets SIGKILL with sends in flight. The acked sends, by key."""
    acked: dict[str, Acked] = {}
    numbers = itertools.count(10_000)
    killed = trio.Event()
    async with open_remoting_client(node="interop-flood") as client:

        async def sender() -> None:
            while True:
                n = next(numbers)
                q = n % QUEUES
                ext = scenario.send_v2(scenario.TOPIC, q, n, keys=f"flood{n}", tags="Flood")
                body = scenario.body_of(n, 200 + n % 300)
                req = RemotingCommand.request(RC.SEND_MESSAGE_V2, ext, body)
                try:
                    resp = await client.invoke(broker, req, timeout=10)
                except CALL_ERRORS:
                    assert killed.is_set(), "a send failed before the kill"
                    return
                assert resp.code == 0, (resp.code, resp.remark)
                acked[f"flood{n}"] = Acked(q, int(resp.ext_fields["queueOffset"]), body)
                if len(acked) >= KILL_AFTER_ACKS and not killed.is_set():
                    os.kill(node.pid, signal.SIGKILL)  # kill -9, others' sends in flight
                    killed.set()

        async with trio.open_nursery() as nursery:
            for _ in range(FLOOD_SENDERS):
                nursery.start_soon(sender)
    node.kill9()  # reap
    return acked


async def _recovered(broker: str, acked: dict[str, Acked]) -> list[dict[str, Any]]:
    """Everything the recovered broker serves, once every acked key is among it (it recovers and
    re-dispatches at boot, so pulls are repeated until then or the deadline)."""
    async with open_remoting_client(node="interop-store") as client:
        records: list[dict[str, Any]] = []
        with trio.move_on_after(RECOVERY_TIMEOUT_S):
            while True:
                records = await _read_all(client, broker)
                keys = {r.get("properties.KEYS") for r in records}
                if keys >= acked.keys():
                    break
                await trio.sleep(0.2)
        return records


async def _query_key(broker: str, key: str, want: int) -> list[int]:
    """CommitLog offsets QUERY_MESSAGE finds for ``key`` (the index builds asynchronously:
    asked again until ``want`` are found or the deadline)."""
    async with open_remoting_client(node="interop-store") as client:
        ext = {"topic": scenario.TOPIC, "key": key, "maxNum": "64", "beginTimestamp": "0",
               "endTimestamp": str(2**63 - 1)}
        offs: list[int] = []
        with trio.move_on_after(RECOVERY_TIMEOUT_S):
            while True:
                resp = await client.invoke(broker, RemotingCommand.request(RC.QUERY_MESSAGE, ext))
                view = scenario.flatten_response(resp, "records")
                offs = sorted(int(v) for k, v in view.items() if k.endswith(".commitlog_offset"))
                if len(offs) >= want:
                    return offs
                await trio.sleep(0.2)
        return offs


def tear_tail(store: Path) -> int:
    """Write the first half of a copy of the last record after it, as a write cut off by
    ``kill -9`` in the middle of a record leaves it (the record's header claims its full
    size, the rest is the file's zeros). Where the recovered CommitLog must end."""
    last = scenario.read_commitlog(store)[-1]
    start, size = int(last[".commitlog_offset"]), int(last[".store_size"])
    end = start + size
    files = sorted((store / "commitlog").glob("[0-9]" * 20))
    path = next(f for f in reversed(files) if int(f.name) <= start)
    with path.open("r+b") as f:
        f.seek(start - int(path.name))
        record = f.read(size)
        assert end - int(path.name) + size <= path.stat().st_size, "no room after the record"
        f.seek(end - int(path.name))
        f.write(record[: size // 2])
    return end


async def _send_after_recovery(broker: str) -> dict[str, str]:
    async with open_remoting_client(node="interop-store") as client:
        ext = scenario.send_v2(scenario.TOPIC, 1, 99_999, keys="after-recovery")
        req = RemotingCommand.request(RC.SEND_MESSAGE_V2, ext, b"written after recovery")
        resp = await client.invoke(broker, req)
        assert resp.code == 0, (resp.code, resp.remark)
        return dict(resp.ext_fields)


def _check_recovered(
    who: str, broker: str, served: dict[int, dict[str, Any]], acked: dict[str, Acked],
    torn_at: int | None = None,
) -> None:
    records = trio.run(_recovered, broker, acked)
    if torn_at is not None:  # nothing of the torn record was taken for a message
        assert max(int(r["commitlog_offset"]) + int(r["store_size"]) for r in records) == torn_at
    by_offset = {int(r["commitlog_offset"]): r for r in records}
    # the first messages: field for field as their writer served them
    for offset, rec in served.items():
        got = by_offset.get(offset)
        assert got is not None, f"{who}: the record at {offset} is gone"
        diffs = {k: (v, got.get(k)) for k, v in rec.items()
                 if k != "store_host" and got.get(k) != v}
        assert not diffs, f"{who}: record at {offset}: (writer, {who}) {diffs}"
    # every acked flood send: at its queue and offset, with its body
    by_key = {r.get("properties.KEYS"): r for r in records}
    missing = sorted(acked.keys() - by_key.keys())
    assert not missing, f"{who}: {len(missing)} acked sends lost, e.g. {missing[:5]}"
    for key, ack in acked.items():
        rec = by_key[key]
        assert (int(rec["queue_id"]), int(rec["queue_offset"])) == (ack.queue_id, ack.queue_offset)
        assert int(rec["body_len"]) == len(ack.body)
        assert rec["body"] == ack.body.decode()[:64]
    # the IndexFile: a key all the first messages share, and one of each
    assert trio.run(_query_key, broker, "every", MESSAGES) == sorted(served), who
    assert trio.run(_query_key, broker, "key7", 1) == [sorted(served)[7]], who
    flood_key = sorted(acked)[len(acked) // 2]
    assert len(trio.run(_query_key, broker, flood_key, 1)) == 1, (who, flood_key)
    # and it goes on writing where the recovered queue ends (after a torn record: over it)
    answer = trio.run(_send_after_recovery, broker)
    in_queue_1 = sum(1 for r in records if int(r["queue_id"]) == 1)
    assert int(answer["queueOffset"]) == in_queue_1, (who, answer, in_queue_1)
    if torn_at is not None:
        assert trio.run(_query_key, broker, "after-recovery", 1) == [torn_at], who


def _write_then_kill(kind: str, root: Path, cp: str | None, copy_to: Path) -> tuple[
    dict[int, dict[str, Any]], dict[str, Acked]
]:
    """A cluster of ``kind`` takes the first messages and the flood, dies by ``kill -9``; its
    store is copied to ``copy_to``; ours recovers the original in place when it wrote it."""
    with oracle.running_cluster(kind, root, cp=cp) as writer:
        served = trio.run(_fill_and_read, writer.broker_addr)
        assert len(served) == MESSAGES
        acked = trio.run(_flood_until_killed, writer.broker_addr, writer.broker)
        assert len(acked) >= KILL_AFTER_ACKS
        shutil.copytree(writer.store_dir, copy_to / "store")  # the abort file comes along
        if kind == "ours":  # the same implementation recovers its own store
            writer.restart_broker()
            _check_recovered("ours again", writer.broker_addr, served, acked)
    return served, acked


def test_java_broker_recovers_our_store_after_kill9_mid_write(
    java_classpath: str, tmp_path: Path
) -> None:
    served, acked = _write_then_kill("ours", tmp_path / "ours", None, tmp_path / "java")
    torn_at = tear_tail(tmp_path / "java" / "store")
    with oracle.running_cluster("java", tmp_path / "java", cp=java_classpath) as java:
        _check_recovered("java", java.broker_addr, served, acked, torn_at)


def test_our_broker_recovers_java_store_after_kill9_mid_write(
    java_classpath: str, tmp_path: Path
) -> None:
    served, acked = _write_then_kill("java", tmp_path / "java", java_classpath, tmp_path / "ours")
    torn_at = tear_tail(tmp_path / "ours" / "store")
    with oracle.running_cluster("ours", tmp_path / "ours") as ours:
        _check_recovered("ours", ours.broker_addr, served, acked, torn_at)
