"""``rmq-cluster produce | consume | <mqadmin command>``: the client's command-line tools.

``deploy/cli.py`` only wires these into its parser (``add_commands``); each command runs one
``trio.run``. ``--json`` prints JSON (one object per line for per-message output, then a
summary object); otherwise plain text. A progress line is drawn on a TTY only.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import trio

from rmq_cluster.client.admin import Admin
from rmq_cluster.client.config import ClientConfig
from rmq_cluster.client.consumer import PushConsumer
from rmq_cluster.client.errors import MQClientError
from rmq_cluster.client.model import (
    ConsumeFromWhere,
    ConsumeResult,
    Message,
    ReceivedMessage,
    SendResult,
)
from rmq_cluster.client.producer import Producer
from rmq_cluster.cluster.acl.secret_keys import mask_secrets
from rmq_cluster.cluster.protocol.route import ClusterInfo, TopicRouteData

#: A progress line is redrawn at most this often.
PROGRESS_INTERVAL_S = 0.2
#: produce: sends outstanding at once when not batching.
DEFAULT_PRODUCE_IN_FLIGHT = 64


def _out(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, sort_keys=True) + "\n")


class _Progress:
    def __init__(self, what: str, total: int | None) -> None:
        self.enabled = sys.stderr.isatty()
        self.what = what
        self.total = total
        self.last = 0.0

    def update(self, n: int, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self.last < PROGRESS_INTERVAL_S:
            return
        self.last = now
        total = f"/{self.total}" if self.total else ""
        sys.stderr.write(f"\r{self.what} {n}{total}")
        sys.stderr.flush()

    def finish(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")


def _client_config(args: argparse.Namespace) -> ClientConfig:
    return ClientConfig(namesrv_addr=args.namesrv or None,
                        instance_name=f"cli-{os.getpid()}",
                        access_key=getattr(args, "access_key", None) or None,
                        secret_key=getattr(args, "secret_key", None) or None)


def _add_ns(p: argparse.ArgumentParser) -> None:
    p.add_argument("-n", "--namesrv", default=os.environ.get("NAMESRV_ADDR"),
                   help="NameServer address(es), ';'-separated (default: $NAMESRV_ADDR)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--access-key", default=os.environ.get("RMQ_ACCESS_KEY"),
                   help="ACL accessKey: sign requests (default: $RMQ_ACCESS_KEY)")
    p.add_argument("--secret-key", default=os.environ.get("RMQ_SECRET_KEY"),
                   help="ACL secretKey (default: $RMQ_SECRET_KEY)")


# ====================================================================== produce


def _send_row(i: int, r: SendResult) -> dict[str, Any]:
    return {"i": i, "msgId": r.msg_id, "offsetMsgId": r.offset_msg_id, "status": r.status.value,
            "brokerName": r.queue.broker_name, "queueId": r.queue.queue_id,
            "queueOffset": r.queue_offset}


async def _produce(args: argparse.Namespace) -> int:
    body_base = (b"x" * args.size) if args.size > 0 else b"x"
    progress = _Progress("sent", args.count)
    sent = 0
    errors = 0
    start = time.monotonic()

    user_props: list[tuple[str, str]] = []
    for item in args.prop or ():
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise MQClientError(f"--prop needs KEY=VALUE, got {item!r}")
        user_props.append((name, value))

    def make(i: int) -> Message:
        tags = args.tags.format(i=i) if args.tags else None
        keys = args.keys.format(i=i) if args.keys else None
        props = {k: v.format(i=i) for k, v in user_props}
        return Message(args.topic, body_base, tags=tags, keys=keys, properties=props)

    async with Producer(args.group, client_config=_client_config(args)) as p:
        if args.batch and args.batch > 1:
            for first in range(0, args.count, args.batch):
                msgs = [make(i) for i in range(first, min(args.count, first + args.batch))]
                try:
                    r = await p.send_batch(msgs)
                except MQClientError as exc:
                    errors += len(msgs)
                    _report_error(args, first, exc)
                    continue
                for j, mid in enumerate(r.msg_id.split(",")):
                    if args.json:
                        row = _send_row(first + j, r)
                        row["msgId"] = mid
                        row["queueOffset"] = r.queue_offset + j
                        row["offsetMsgId"] = [*r.offset_msg_id.split(","), ""][j]
                        _out(row)
                sent += len(msgs)
                progress.update(sent)
        else:
            limit = trio.Semaphore(max(1, args.in_flight))
            rows: dict[int, dict[str, Any]] = {}

            async def one(i: int) -> None:
                nonlocal sent, errors
                try:
                    r = await p.send(make(i))
                    rows[i] = _send_row(i, r)
                    sent += 1
                    progress.update(sent)
                except MQClientError as exc:
                    errors += 1
                    _report_error(args, i, exc)
                finally:
                    limit.release()

            async with trio.open_nursery() as n:
                for i in range(args.count):
                    await limit.acquire()
                    n.start_soon(one, i)
            if args.json:
                for i in sorted(rows):
                    _out(rows[i])
    progress.update(sent, force=True)
    progress.finish()
    elapsed = time.monotonic() - start
    summary = {"topic": args.topic, "sent": sent, "errors": errors,
               "seconds": round(elapsed, 3), "msgsPerSec": round(sent / elapsed, 1) if elapsed
               else 0.0, "bodyBytes": len(body_base), "batch": args.batch or 1}
    if args.json:
        _out({"summary": summary})
    else:
        print(f"sent {sent} messages to {args.topic} in {elapsed:.2f}s "
              f"({summary['msgsPerSec']} msg/s), {errors} errors")
    return 0 if errors == 0 else 1


def _report_error(args: argparse.Namespace, i: int, exc: MQClientError) -> None:
    if args.json:
        _out({"i": i, "error": str(exc), "code": exc.code})
    else:
        print(f"send {i} failed: {exc}", file=sys.stderr)


# ====================================================================== consume


def _msg_row(m: ReceivedMessage) -> dict[str, Any]:
    return {"msgId": m.msg_id, "offsetMsgId": m.offset_msg_id, "topic": m.topic,
            "brokerName": m.queue.broker_name, "queueId": m.queue_id,
            "queueOffset": m.queue_offset, "keys": m.keys, "tags": m.tags,
            "bodyLength": len(m.body), "bodyCrc": m.checksum(),
            "reconsumeTimes": m.reconsume_times, "storeTimestamp": m.store_timestamp}


async def _consume(args: argparse.Namespace) -> int:
    got: dict[str, ReceivedMessage] = {}
    enough = trio.Event()
    activity = trio.Event()
    progress = _Progress("received", args.count)

    def listener(msgs: list[ReceivedMessage]) -> ConsumeResult:
        nonlocal activity
        for m in msgs:
            if m.msg_id in got:
                continue
            got[m.msg_id] = m
            if args.json:
                _out(_msg_row(m))
            else:
                r = _msg_row(m)
                print(f"{r['msgId']} q={r['brokerName']}:{r['queueId']} off={r['queueOffset']} "
                      f"keys={r['keys']} tags={r['tags']} crc={r['bodyCrc']}")
        progress.update(len(got))
        activity.set()
        activity = trio.Event()
        if args.count and len(got) >= args.count:
            enough.set()
        return ConsumeResult.SUCCESS

    start = time.monotonic()
    how = {"first": ConsumeFromWhere.FIRST_OFFSET, "last": ConsumeFromWhere.LAST_OFFSET}[args.start]
    consumer = PushConsumer(args.group, client_config=_client_config(args), listener=listener,
                            consume_from=how)
    if args.sql is not None:
        consumer.subscribe(args.topic, args.sql, expression_type="SQL92")
    else:
        consumer.subscribe(args.topic, args.subscription)
    async with consumer:
        while not enough.is_set():
            # stop after --timeout seconds without a new message
            with trio.move_on_after(args.timeout) as idle:
                async with trio.open_nursery() as n:
                    async def stop_when_enough() -> None:
                        await enough.wait()
                        n.cancel_scope.cancel()
                    n.start_soon(stop_when_enough)
                    await activity.wait()
                    n.cancel_scope.cancel()
            if idle.cancelled_caught:
                break
    progress.finish()
    elapsed = time.monotonic() - start
    summary = {"topic": args.topic, "group": args.group, "received": len(got),
               "seconds": round(elapsed, 3)}
    if args.json:
        _out({"summary": summary})
    else:
        print(f"received {len(got)} messages from {args.topic} in {elapsed:.2f}s")
    return 0 if not args.count or len(got) >= args.count else 1


# ====================================================================== admin


def _route_json(route: TopicRouteData) -> dict[str, Any]:
    return {
        "brokerDatas": [{"brokerName": b.broker_name, "cluster": b.cluster,
                         "brokerAddrs": {str(k): v for k, v in sorted(b.broker_addrs.items())}}
                        for b in route.broker_datas],
        "queueDatas": [{"brokerName": q.broker_name, "readQueueNums": q.read_queue_nums,
                        "writeQueueNums": q.write_queue_nums, "perm": q.perm,
                        "topicSysFlag": q.topic_sys_flag} for q in route.queue_datas],
        "orderTopicConf": route.order_topic_conf,
    }


def _cluster_json(info: ClusterInfo) -> dict[str, Any]:
    return {
        "clusters": {c: sorted(names) for c, names in sorted(info.cluster_addr_table.items())},
        "brokers": {name: {"cluster": b.cluster,
                           "brokerAddrs": {str(k): v for k, v in sorted(b.broker_addrs.items())}}
                    for name, b in sorted(info.broker_addr_table.items())},
    }


async def _admin(args: argparse.Namespace) -> int:
    async with Admin(client_config=_client_config(args)) as admin:
        result = await args.admin_fn(admin, args)
    if args.json:
        _out(result)
    else:
        _print_plain(result)
    return 0


def _print_plain(result: Any, indent: str = "") -> None:
    if isinstance(result, dict):
        for k, v in result.items():
            if isinstance(v, dict | list):
                print(f"{indent}{k}:")
                _print_plain(v, indent + "  ")
            else:
                print(f"{indent}{k}: {v}")
    elif isinstance(result, list):
        for item in result:
            if isinstance(item, dict):
                print(indent + "  ".join(f"{k}={v}" for k, v in item.items()))
            else:
                print(f"{indent}{item}")
    else:
        print(f"{indent}{result}")


async def _cluster_list(admin: Admin, args: argparse.Namespace) -> Any:
    info = await admin.cluster_list()
    out = _cluster_json(info)
    for b in out["brokers"].values():
        master = b["brokerAddrs"].get("0")
        if master:
            try:
                st = await admin.broker_status(master)
                b["version"] = st.get("brokerVersionDesc")
                b["putTps"] = st.get("putTps")
                b["getTps"] = st.get("getTransferedTps") or st.get("getTps")
            except MQClientError as exc:
                b["statusError"] = str(exc)
    return out


async def _topic_route(admin: Admin, args: argparse.Namespace) -> Any:
    return _route_json(await admin.topic_route(args.topic))


async def _topic_list(admin: Admin, args: argparse.Namespace) -> Any:
    return {"topics": await admin.topic_list()}


async def _update_topic(admin: Admin, args: argparse.Namespace) -> Any:
    addrs = await admin.update_topic(
        args.topic, cluster=args.cluster, broker_addr=args.broker,
        read_queue_nums=args.read_queues, write_queue_nums=args.write_queues, perm=args.perm,
        order=args.order)
    return {"topic": args.topic, "updated": addrs}


async def _consumer_progress(admin: Admin, args: argparse.Namespace) -> Any:
    rows, tps = await admin.consumer_progress(args.group)
    return {
        "group": args.group, "consumeTps": tps,
        "diffTotal": sum(r.diff for r in rows),
        "queues": [{"topic": r.queue.topic, "brokerName": r.queue.broker_name,
                    "queueId": r.queue.queue_id, "brokerOffset": r.broker_offset,
                    "consumerOffset": r.consumer_offset, "diff": r.diff,
                    "lastTimestamp": r.last_timestamp} for r in rows],
    }


def parse_timestamp_ms(text: str) -> int:
    """mqadmin's ``-s``: milliseconds, ``now``, ``-1`` (the end) or a local time as
    ``yyyy-MM-dd#HH:mm:ss:SSS`` (mqadmin's form) or ISO 8601."""
    t = text.strip()
    if t.lower() == "now":
        return int(time.time() * 1000)
    if t.lstrip("-").isdigit():
        return int(t)
    for fmt in ("%Y-%m-%d#%H:%M:%S:%f", "%Y-%m-%dT%H:%M:%S.%f", "%Y-%m-%dT%H:%M:%S",
                "%Y-%m-%d %H:%M:%S"):
        try:
            return int(datetime.datetime.strptime(t, fmt).timestamp() * 1000)
        except ValueError:
            continue
    try:
        return int(datetime.datetime.fromisoformat(t).timestamp() * 1000)
    except ValueError:
        raise MQClientError(
            f"bad timestamp {text!r}: use ms, now, -1 or yyyy-MM-dd#HH:mm:ss:SSS"
        ) from None


async def _reset_offset(admin: Admin, args: argparse.Namespace) -> Any:
    ts = parse_timestamp_ms(args.timestamp)
    moved = await admin.reset_offset_by_time(args.group, args.topic, ts, force=args.force)
    return {"group": args.group, "topic": args.topic, "timestamp": ts,
            "queues": [{"brokerName": mq.broker_name, "queueId": mq.queue_id, "offset": off}
                       for mq, off in sorted(moved.items(), key=lambda kv: kv[0])]}


async def _query_by_id(admin: Admin, args: argparse.Namespace) -> Any:
    if args.group or args.client_id:  # mqadmin: -g and -d push the message to that consumer
        if not (args.group and args.client_id):
            raise MQClientError("-g GROUP and -d CLIENT_ID go together")
        return await admin.consume_message_directly(
            args.group, args.client_id, args.msg_id, args.topic)
    msgs = await admin.query_msg_by_id(args.msg_id, args.topic)
    return {"messages": [_msg_row(m) | {"properties": dict(m.properties)} for m in msgs]}


async def _query_by_key(admin: Admin, args: argparse.Namespace) -> Any:
    msgs = await admin.query_msg_by_key(args.topic, args.key)
    return {"messages": [_msg_row(m) for m in msgs]}


async def _broker_status(admin: Admin, args: argparse.Namespace) -> Any:
    return dict(sorted((await admin.broker_status(args.broker)).items()))


async def _consumer_status(admin: Admin, args: argparse.Namespace) -> Any:
    return {"group": args.group,
            "clients": await admin.consumer_status(args.group, args.client_id)}


async def _broker_addrs(admin: Admin, args: argparse.Namespace) -> list[str]:
    return [args.broker] if args.broker else await admin.master_addrs(args.cluster)


async def _get_broker_config(admin: Admin, args: argparse.Namespace) -> Any:
    out = {}
    for addr in await _broker_addrs(admin, args):
        # masked here too: a broker of another make may answer with its secrets
        out[addr] = mask_secrets(dict(sorted((await admin.get_broker_config(addr)).items())))
    return out[args.broker] if args.broker else out


async def _update_broker_config(admin: Admin, args: argparse.Namespace) -> Any:
    addrs = await _broker_addrs(admin, args)
    for addr in addrs:
        await admin.update_broker_config(addr, {args.key: args.value})
    return {"updated": addrs, "key": args.key, "value": args.value}


# ====================================================================== wiring


def _runner(fn: Callable[[argparse.Namespace], Any]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        try:
            return int(trio.run(fn, args))
        except MQClientError as exc:
            if getattr(args, "json", False):
                _out({"error": str(exc), "code": exc.code, "remark": exc.remark})
            else:
                print(f"error: {exc}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            return 130

    return run


def add_commands(sub: Any) -> None:
    """Add produce, consume and the mqadmin-named commands to ``sub`` (argparse subparsers);
    each parser gets ``func(args) -> exit code``."""
    p = sub.add_parser("produce", help="send messages through the client")
    _add_ns(p)
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-g", "--group", default="rmq-cli-producer")
    p.add_argument("--count", type=int, default=1)
    p.add_argument("--size", type=int, default=128, help="body bytes")
    p.add_argument("--tags", help="tag ({i} is the message index)")
    p.add_argument("--keys", help="keys ({i} is the message index)")
    p.add_argument("--prop", action="append", metavar="KEY=VALUE",
                   help="a user property, repeatable ({i} is the message index); "
                        "consumers select on them with --sql")
    p.add_argument("--batch", type=int, default=0, help="send batches of K messages")
    p.add_argument("--in-flight", type=int, default=DEFAULT_PRODUCE_IN_FLIGHT)
    p.set_defaults(func=_runner(_produce))

    p = sub.add_parser("consume", help="receive messages with a push consumer")
    _add_ns(p)
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-g", "--group", required=True)
    p.add_argument("-s", "--subscription", default="*", help="tag expression, e.g. 'A || B'")
    p.add_argument("--sql", default=None, metavar="EXPR",
                   help="SQL92 selector on message properties instead of tags, e.g. "
                        "\"a BETWEEN 1 AND 5\" (the broker needs enablePropertyFilter=true)")
    p.add_argument("--count", type=int, default=0, help="stop after N messages (0: no limit)")
    p.add_argument("--timeout", type=float, default=10.0,
                   help="stop after this many seconds without a new message")
    p.add_argument("--from", dest="start", choices=("first", "last"), default="first",
                   help="where a group without a committed offset starts")
    p.set_defaults(func=_runner(_consume))

    def admin_cmd(name: str, help_text: str, fn: Callable[..., Any]) -> argparse.ArgumentParser:
        ap = sub.add_parser(name, help=help_text)
        _add_ns(ap)
        ap.set_defaults(func=_runner(_admin), admin_fn=fn)
        return ap

    admin_cmd("clusterList", "brokers of every cluster", _cluster_list)
    ap = admin_cmd("topicRoute", "a topic's route", _topic_route)
    ap.add_argument("-t", "--topic", required=True)
    admin_cmd("topicList", "every topic the NameServer knows", _topic_list)
    ap = admin_cmd("updateTopic", "create or update a topic", _update_topic)
    ap.add_argument("-t", "--topic", required=True)
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("-c", "--cluster")
    where.add_argument("-b", "--broker", help="broker address ip:port")
    ap.add_argument("-r", "--read-queues", type=int, default=8)
    ap.add_argument("-w", "--write-queues", type=int, default=8)
    ap.add_argument("-p", "--perm", type=int, default=6)
    ap.add_argument("-o", "--order", action="store_true")
    ap = admin_cmd("consumerProgress", "a group's offsets against the brokers'",
                   _consumer_progress)
    ap.add_argument("-g", "--group", required=True)
    ap = admin_cmd("queryMsgById", "a message by broker msgId (or client id with -t)",
                   _query_by_id)
    ap.add_argument("-i", "--msg-id", required=True)
    ap.add_argument("-t", "--topic")
    ap.add_argument("-g", "--group", help="with -d: have that consumer consume the message "
                    "(CONSUME_MESSAGE_DIRECTLY through its broker)")
    ap.add_argument("-d", "--client-id", help="the consumer's client id (with -g)")
    ap = admin_cmd("queryMsgByKey", "messages by key", _query_by_key)
    ap.add_argument("-t", "--topic", required=True)
    ap.add_argument("-k", "--key", required=True)
    ap = admin_cmd("resetOffsetByTime", "move a group's offsets on a topic to a time",
                   _reset_offset)
    ap.add_argument("-g", "--group", required=True)
    ap.add_argument("-t", "--topic", required=True)
    ap.add_argument("-s", "--timestamp", required=True,
                    help="ms, now, -1 (the end) or yyyy-MM-dd#HH:mm:ss:SSS")
    ap.add_argument("-f", "--force", type=lambda v: v.lower() != "false", default=True,
                    metavar="true|false", help="also move offsets forward (default true)")
    ap = admin_cmd("brokerStatus", "a broker's runtime info", _broker_status)
    ap.add_argument("-b", "--broker", required=True, help="broker address ip:port")
    ap = admin_cmd("consumerStatus", "running info of a group's consumers (asked through "
                   "their broker)", _consumer_status)
    ap.add_argument("-g", "--group", required=True)
    ap.add_argument("-i", "--client-id", help="only this client")
    for name, help_text, fn in (
        ("getBrokerConfig", "a running broker's config", _get_broker_config),
        ("updateBrokerConfig", "change a running broker's config key (persisted to its "
         "config file)", _update_broker_config),
    ):
        ap = admin_cmd(name, help_text, fn)
        where = ap.add_mutually_exclusive_group(required=True)
        where.add_argument("-b", "--broker", help="broker address ip:port")
        where.add_argument("-c", "--cluster", help="every master of this cluster")
        if fn is _update_broker_config:
            ap.add_argument("-k", "--key", required=True, help="e.g. brokerPermission")
            ap.add_argument("-v", "--value", required=True)
