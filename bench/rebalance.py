"""The rebalance calls under load: Apache RocketMQ 4.9.7's broker and ours, side by side.

    python3 bench/rebalance.py [--seconds 15] [--consumers 3] [--queues 16] [--senders 4]
                               [--inflight 16] [--size 1024] [--repeats 1] [--kinds java,ours]
    python3 bench/rebalance.py --queue-adds --queues 1024 [--seconds 20] [--kinds java,ours]

What a 4.x push consumer asks its broker while queues move between the members of a group
(RebalanceImpl): the group's member list (GET_CONSUMER_LIST_BY_GROUP), the committed offset of
each queue it takes (QUERY_CONSUMER_OFFSET), the offsets it commits (UPDATE_CONSUMER_OFFSET),
and for orderly consumers the lock of its queues (LOCK_BATCH_MQ); the broker tells every member
when one joins or leaves (NOTIFY_CONSUMER_IDS_CHANGED, measured from the joining heartbeat's
sending to the notice reaching an existing member). For each kind (``--kinds``; tests/interop/
oracle.py starts the NameServer and Broker on free loopback ports and always stops them),
``--senders`` connections (in a process of their own) keep ``--inflight`` sends of
``--size`` bytes each in flight (the busy broker) while ``--consumers`` members of one group
run rebalance rounds back to back, and one more member joins and leaves again and again so the
notices flow; every call's latency is recorded. Request loops are bounded by ``--seconds``
and stop by themselves.

``--queue-adds`` replaces the rounds with what a 4.9.7 Consumer does when it takes every queue of
a new group (``_queue_adds``: a query per queue, one after the other, the offsets of the queues
taken so far committed oneway every 5 s, the pulls started once all are taken), the load
sending to all ``--queues``; it adds ``queues_added``, ``all_added_s`` (None unless every queue
was added in the window) and the pull answers by code.

Prints one JSON object: per kind and call, count, p50 / p99 / max in ms; the sends per second
the load reached; and ``ratios`` (ours / Java, p50 and p99: below 1 means we answer faster).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rmq_cluster.cluster.remoting.client_pool import open_remoting_client
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode as RC
from tests.interop import oracle
from tests.interop.scenario import send_v2

TOPIC = "RebalanceT"
GROUP = "RebalanceG"
CALL_TIMEOUT_S = 10.0
NOTIFY_TIMEOUT_S = 5.0


def _heartbeat(client_id: str) -> bytes:
    return orjson.dumps({
        "clientID": client_id,
        "producerDataSet": [],
        "consumerDataSet": [{
            "groupName": GROUP, "consumeType": "CONSUME_PASSIVELY",
            "messageModel": "CLUSTERING", "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
            "unitMode": False,
            "subscriptionDataSet": [{
                "classFilterMode": False, "topic": TOPIC, "subString": "*", "tagsSet": [],
                "codeSet": [], "subVersion": 1, "expressionType": "TAG",
            }],
        }],
    })


class Notices:
    """When NOTIFY_CONSUMER_IDS_CHANGED reached a member (perf_counter), and an event per
    wait for the next one."""

    def __init__(self) -> None:
        self.at: list[float] = []
        self.next = trio.Event()

    def arrived(self) -> None:
        self.at.append(time.perf_counter())
        self.next.set()


class Recorder:
    def __init__(self) -> None:
        self.ms: dict[str, list[float]] = defaultdict(list)
        self.errors: dict[str, int] = defaultdict(int)
        self.queues = 0
        self.always_max_offset = False  # --max-offset
        self.pulls: dict[int, int] = defaultdict(int)  # answers by code (--queue-adds)
        self.remarks: dict[int, str] = {}

    async def call(self, client: Any, addr: str, name: str, req: RemotingCommand) -> Any:
        t0 = time.perf_counter()
        try:
            resp = await client.invoke(addr, req, timeout=CALL_TIMEOUT_S)
        except Exception:
            self.errors[name] += 1
            return None
        self.ms[name].append((time.perf_counter() - t0) * 1000)
        if resp.code != 0 and name != "query_offset":  # 22: no offset committed yet
            self.errors[name] += 1
        return resp

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, values in sorted(self.ms.items()):
            values.sort()
            out[name] = {
                "count": len(values),
                "p50_ms": round(statistics.median(values), 3),
                "p99_ms": round(values[min(len(values) - 1, int(len(values) * 0.99))], 3),
                "max_ms": round(values[-1], 3),
                "errors": self.errors.get(name, 0),
            }
        return out


async def _sender(addr: str, end: float, inflight: int, body: bytes, sent: list[int],
                  queues: int) -> None:
    async with open_remoting_client() as client, trio.open_nursery() as nursery:
        async def one(i: int) -> None:
            n = 0
            while trio.current_time() < end:
                ext = send_v2(TOPIC, (i + n) % queues, 1000 + n)
                req = RemotingCommand.request(RC.SEND_MESSAGE_V2, ext, body)
                with contextlib.suppress(Exception):  # a refused send is still load
                    await client.invoke(addr, req, CALL_TIMEOUT_S)
                n += 1
                sent[0] += 1

        for i in range(inflight):
            nursery.start_soon(one, i)


async def _member(addr: str, idx: int, args: argparse.Namespace, end: float,
                  rec: Recorder, notices: Notices) -> None:
    """One consumer of the group: heartbeats, then rebalance rounds until ``end``."""
    client_id = f"127.0.0.1@bench-{idx}"

    def on_notify(conn: Any, request: RemotingCommand) -> None:
        notices.arrived()

    async with open_remoting_client({RC.NOTIFY_CONSUMER_IDS_CHANGED: on_notify}) as client:
        await rec.call(client, addr, "heartbeat",
                       RemotingCommand.request(RC.HEART_BEAT, body=_heartbeat(client_id)))
        n = 0
        while trio.current_time() < end:
            resp = await rec.call(client, addr, "consumer_list", RemotingCommand.request(
                RC.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": GROUP}))
            members = 1
            if resp is not None and resp.code == 0 and resp.body:
                members = max(1, len(orjson.loads(bytes(resp.body)).get("consumerIdList", [])))
            mine = [q for q in range(args.queues) if q % members == idx % members]
            for q in mine:
                ext = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": str(q)}
                await rec.call(client, addr, "query_offset",
                               RemotingCommand.request(RC.QUERY_CONSUMER_OFFSET, ext))
            mq = [{"topic": TOPIC, "brokerName": "broker-a", "queueId": q} for q in mine]
            lock = orjson.dumps({"consumerGroup": GROUP, "clientId": client_id, "mqSet": mq})
            await rec.call(client, addr, "lock_batch",
                           RemotingCommand.request(RC.LOCK_BATCH_MQ, body=lock))
            for q in mine:
                ext = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": str(q),
                       "commitOffset": str(n)}
                await rec.call(client, addr, "update_offset",
                               RemotingCommand.request(RC.UPDATE_CONSUMER_OFFSET, ext))
            n += 1


async def _churn(addr: str, end: float, rec: Recorder, notices: Notices) -> None:
    """A member that joins and leaves again and again: each join is answered, then timed until
    the existing members are told (NOTIFY_CONSUMER_IDS_CHANGED)."""
    client_id = "127.0.0.1@bench-churn"
    n = 0
    while trio.current_time() < end:
        async with open_remoting_client() as client:
            seen = len(notices.at)
            notices.next = trio.Event()
            joined = time.perf_counter()
            resp = await rec.call(client, addr, "heartbeat_join", RemotingCommand.request(
                RC.HEART_BEAT, body=_heartbeat(f"{client_id}-{n}")))
            with trio.move_on_after(NOTIFY_TIMEOUT_S):
                await notices.next.wait()
            if resp is not None and len(notices.at) > seen:
                rec.ms["notify_after_join"].append((notices.at[seen] - joined) * 1000)
            else:
                rec.errors["notify_after_join"] += 1
            await rec.call(client, addr, "unregister", RemotingCommand.request(
                RC.UNREGISTER_CLIENT, {"clientID": f"{client_id}-{n}", "consumerGroup": GROUP}))
        n += 1
        await trio.sleep(0.2)  # a pause between rounds, bounded by ``end``


PULL_SUSPEND_MS = 15000
PULL_SYS_FLAG = 2 | 4  # suspend, subscription in the header (a Java consumer's first pull)
#: A 4.x client commits the offsets of the queues it holds this often (oneway, one per queue:
#: MQClientInstance.persistAllConsumerOffset, persistConsumerOffsetInterval).
PERSIST_INTERVAL_S = 5.0


async def _pulls(client: Any, addr: str, end: float, rec: Recorder, q: int, offset: int) -> None:
    """One queue's pulls, long-polled, until ``end`` (a push consumer's pull of that queue)."""
    while trio.current_time() < end:
        ext = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": str(q),
               "queueOffset": str(offset), "maxMsgNums": "32",
               "sysFlag": str(PULL_SYS_FLAG), "commitOffset": "0",
               "suspendTimeoutMillis": str(PULL_SUSPEND_MS), "subscription": "*",
               "subVersion": "0", "expressionType": "TAG"}
        with trio.move_on_at(end):
            try:
                resp = await client.invoke(addr, RemotingCommand.request(
                    RC.PULL_MESSAGE, ext), timeout=PULL_SUSPEND_MS / 1000 + 5)
            except Exception:
                rec.errors["pull"] += 1
                return
            rec.pulls[resp.code] += 1
            if resp.code not in (0, 19, 20, 21):  # FOUND, NOT_FOUND, RETRY, MOVED
                rec.remarks.setdefault(resp.code, str(resp.remark)[:200])
                return
            offset = int((resp.ext_fields or {}).get("nextBeginOffset", offset))


async def _persist(client: Any, addr: str, end: float, offsets: dict[int, int]) -> None:
    """Every PERSIST_INTERVAL_S until ``end``: a oneway UPDATE_CONSUMER_OFFSET per queue held."""
    while True:
        await trio.sleep_until(min(end, trio.current_time() + PERSIST_INTERVAL_S))
        if trio.current_time() >= end:
            return
        for q, offset in list(offsets.items()):
            ext = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": str(q),
                   "commitOffset": str(offset)}
            with contextlib.suppress(Exception):  # a oneway's failure reaches no one
                await client.invoke_oneway(
                    addr, RemotingCommand.request(RC.UPDATE_CONSUMER_OFFSET, ext))


async def _offset_of(client: Any, addr: str, rec: Recorder, q: int) -> int:
    """Where a new group starts in queue ``q``: its committed offset (the broker answers 0 for
    a queue whose first message is in memory), else the queue's max offset (``--max-offset``:
    asked always, as for a queue whose first message is no longer in memory)."""
    ext = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": str(q)}
    resp = await rec.call(client, addr, "query_offset",
                          RemotingCommand.request(RC.QUERY_CONSUMER_OFFSET, ext))
    if (resp is not None and resp.code == 0 and resp.ext_fields
            and not rec.always_max_offset):
        return int(resp.ext_fields.get("offset", 0))
    ext = {"topic": TOPIC, "queueId": str(q)}
    resp = await rec.call(client, addr, "max_offset",
                          RemotingCommand.request(RC.GET_MAX_OFFSET, ext))
    return int((resp.ext_fields or {}).get("offset", 0)) if resp is not None else 0


async def _queue_adds(addr: str, end: float, rec: Recorder, added: list[float]) -> None:
    """``--queue-adds``: what a 4.9.7 push consumer does when a rebalance gives it every queue
    of a new group (RebalanceImpl.updateProcessQueueTableInRebalance, RebalancePushImpl.
    computePullFromWhereWithException, CONSUME_FROM_LAST_OFFSET): per queue, one after the
    other, QUERY_CONSUMER_OFFSET and, when no offset is committed, GET_MAX_OFFSET; meanwhile,
    every 5 s, the offsets of the queues taken so far committed oneway (persistAll); the
    pulls start once every queue is taken (dispatchPullRequest after the loop), long-polled
    in the background. ``added`` gets each queue's add time (s from the start)."""
    client_id = "127.0.0.1@bench-adds"
    offsets: dict[int, int] = {}
    async with open_remoting_client() as client, trio.open_nursery() as nursery:
        await rec.call(client, addr, "heartbeat",
                       RemotingCommand.request(RC.HEART_BEAT, body=_heartbeat(client_id)))
        nursery.start_soon(_persist, client, addr, end, offsets)
        t0 = time.perf_counter()
        q = 0
        while q < rec.queues and trio.current_time() < end:
            offsets[q] = await _offset_of(client, addr, rec, q)
            added.append(time.perf_counter() - t0)
            q += 1
        for q, offset in offsets.items():
            nursery.start_soon(_pulls, client, addr, end, rec, q, offset)


async def _measure(addr: str, args: argparse.Namespace) -> dict[str, Any]:
    rec = Recorder()
    notices = Notices()
    async with open_remoting_client() as client:
        ext = {"topic": TOPIC, "defaultTopic": "TBW102", "readQueueNums": str(args.queues),
               "writeQueueNums": str(args.queues), "perm": "6", "topicFilterType": "SINGLE_TAG",
               "topicSysFlag": "0", "order": "false"}
        resp = await client.invoke(addr, RemotingCommand.request(RC.UPDATE_AND_CREATE_TOPIC, ext))
        if resp.code != 0:
            raise SystemExit(f"creating {TOPIC}: code {resp.code} {resp.remark}")
    # the load runs in a process of its own: its loop must not delay the measured calls
    load = await trio.lowlevel.open_process(
        [sys.executable, __file__, "--load", addr, "--seconds", str(args.seconds + 1),
         "--senders", str(args.senders), "--inflight", str(args.inflight),
         "--size", str(args.size), "--queues", str(args.queues)]
        + (["--queue-adds"] if args.queue_adds else []), stdout=subprocess.PIPE,
    )
    try:
        await trio.sleep(1.0)  # the load is on before the first round
        end = trio.current_time() + args.seconds
        added: list[float] = []
        rec.queues = args.queues
        rec.always_max_offset = args.max_offset
        async with trio.open_nursery() as nursery:
            if args.queue_adds:
                nursery.start_soon(_queue_adds, addr, end, rec, added)
            for idx in range(args.consumers if not args.queue_adds else 0):
                nursery.start_soon(_member, addr, idx, args, end, rec, notices)
            if not args.queue_adds:
                nursery.start_soon(_churn, addr, end, rec, notices)
        with trio.fail_after(CALL_TIMEOUT_S + 5):
            await load.wait()
        assert load.stdout is not None
        sent = int((await load.stdout.receive_some()).decode().strip() or 0)
    finally:
        if load.returncode is None:
            load.kill()  # our own child, by its handle
            await load.wait()
    out = {"calls": rec.summary(), "sends_per_s": round(sent / (args.seconds + 1), 1)}
    if args.queue_adds:
        out["queues_added"] = len(added)
        out["pull_answers_by_code"] = {str(k): v for k, v in sorted(rec.pulls.items())}
        out["pull_refusals"] = {str(k): v for k, v in rec.remarks.items()}
        out["all_added_s"] = round(added[-1], 2) if len(added) == args.queues else None
    return out


async def _load(addr: str, args: argparse.Namespace) -> None:
    """``--load``: the senders alone, for ``--seconds``; prints how many sends were made."""
    sent = [0]
    end = trio.current_time() + args.seconds
    async with trio.open_nursery() as nursery:
        for _ in range(args.senders):
            nursery.start_soon(_sender, addr, end, args.inflight, b"x" * args.size, sent,
                               args.queues if args.queue_adds else 4)
    print(sent[0], flush=True)


def run_kind(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    cp = oracle.java_classpath() if kind == "java" else None
    with tempfile.TemporaryDirectory(prefix=f"rebalance-{kind}-") as tmp, \
            oracle.running_cluster(kind, Path(tmp), cp=cp, quick_jvm=False) as cluster:
        return trio.run(_measure, cluster.broker_addr, args)


def ratios(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if not runs.get("java") or not runs.get("ours"):
        return out
    for call in runs["ours"][0]["calls"]:
        for stat in ("p50_ms", "p99_ms"):
            j = statistics.mean(r["calls"].get(call, {}).get(stat, 0) for r in runs["java"])
            o = statistics.mean(r["calls"].get(call, {}).get(stat, 0) for r in runs["ours"])
            if j:
                out[f"{call}.{stat}"] = round(o / j, 2)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=15.0)
    p.add_argument("--consumers", type=int, default=3)
    p.add_argument("--queues", type=int, default=16)
    p.add_argument("--senders", type=int, default=4)
    p.add_argument("--inflight", type=int, default=16)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--kinds", default="java,ours")
    p.add_argument("--queue-adds", action="store_true",
                   help="instead of the rounds: one consumer takes all --queues of a new group "
                        "as a 4.9.7 push consumer does (a query per queue, offsets committed "
                        "every 5 s, pulls once all are taken) while the load sends to every "
                        "queue")
    p.add_argument("--max-offset", action="store_true",
                   help="--queue-adds: a GET_MAX_OFFSET after every query (the path of a new "
                        "group whose queues' first messages are no longer in memory)")
    p.add_argument("--load", metavar="ADDR", help=argparse.SUPPRESS)  # the load process
    args = p.parse_args()
    if args.load:
        trio.run(_load, args.load, args)
        return
    kinds = [k for k in args.kinds.split(",") if k]
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
    for rep in range(args.repeats):
        order = kinds if rep % 2 == 0 else kinds[::-1]  # alternate who goes first
        for kind in order:
            runs[kind].append(run_kind(kind, args))
    print(orjson.dumps({"args": vars(args), "runs": runs, "ratios": ratios(runs)}).decode())


if __name__ == "__main__":
    main()
