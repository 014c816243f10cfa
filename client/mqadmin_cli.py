"""``rmq-cluster <mqadmin command>``: the admin tools, under mqadmin's command names and flags.

Each command runs one ``trio.run`` through ``client/admin.py`` and prints mqadmin's layout
(``#``-headed tables, ``Key: value`` message views; ``client/tables.py``), or with ``--json``
JSON as ``client/tables.py`` documents: one object, or JSON lines for the record streams
(consumeMessage, printMsg, statsAll, clusterRT).

Exit codes: 0 success, 1 failure (a one-line ``error: ...`` on stderr, or the error object with
``--json``), 2 usage (argparse).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime
import functools
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import trio

from ..cluster.acl.secret_keys import mask_secrets
from ..cluster.cli_args import at_most, non_negative
from ..cluster.protocol.names import (
    RETRY_GROUP_TOPIC_PREFIX,
    validate_group,
    validate_topic,
)
from ..cluster.protocol.route import ClusterInfo, TopicRouteData
from ..cluster.protocol.trace import DEFAULT_TRACE_TOPIC
from .admin import (
    DLQ_GROUP_TOPIC_PREFIX,
    GROUP_GET_NUMS,
    QUERY_MAX_NUM,
    TOOLS_CONSUMER_GROUP,
    TOPIC_PUT_NUMS,
    Admin,
)
from .cli_common import add_ns, client_config, msg_row, out, runner
from .errors import MQBrokerError, MQClientError
from .model import (
    Message,
    MessageQueue,
    PullStatus,
    ReceivedMessage,
    SendStatus,
    retry_topic,
)
from .producer import Producer
from .tables import (
    Col,
    human_time,
    json_lines,
    render_kv,
    render_table,
    render_trace,
    trace_json,
)

#: mqadmin's page size when it reads queues (printMsg, consumeMessage).
PULL_BATCH = 32
#: consumeMessage's default message count (mqadmin ``-c``).
CONSUME_MESSAGE_DEFAULT_COUNT = 128
#: clusterRT defaults (mqadmin): messages per round, body size, seconds between rounds.
CLUSTER_RT_AMOUNT = 100
CLUSTER_RT_SIZE = 128
CLUSTER_RT_INTERVAL_S = 10
#: the largest clusterRT -a / -s we accept (a round is a tool's probe, not a load test)
CLUSTER_RT_MAX_AMOUNT = 100_000
CLUSTER_RT_MAX_SIZE = 4 * 1024 * 1024
#: mqadmin's producer group for sendMessage and clusterRT.
TOOLS_PRODUCER_GROUP = "PID_TOOLS_SEND"


class UsageError(MQClientError):
    """Options that parse but do not go together (exit code 2, as argparse's errors)."""


@attrs.frozen
class Output:
    """A command's answer: ``data`` for ``--json`` (one object, or the records of a stream
    when ``lines``) and ``text`` in mqadmin's layout."""

    data: Any
    text: str
    lines: bool = False


# ====================================================================== shared


def bool_arg(text: str) -> bool:
    """mqadmin's ``true|false`` option values (anything else is a usage error)."""
    t = text.strip().lower()
    if t not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"expected true or false, not {text!r}")
    return t == "true"


def _topic(text: str) -> str:
    bad = validate_topic(text.strip())
    if bad is not None:
        raise argparse.ArgumentTypeError(bad)
    return text.strip()


def _group(text: str) -> str:
    bad = validate_group(text.strip())
    if bad is not None:
        raise argparse.ArgumentTypeError(bad)
    return text.strip()


def body_view(body: bytes) -> tuple[str, str]:
    """(text, encoding): UTF-8 text when the body is printable text, else base64."""
    try:
        text = bytes(body).decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and all(c.isprintable() or c in "\t\r\n" for c in text):
        return text, "text"
    return base64.b64encode(bytes(body)).decode("ascii"), "base64"


def message_json(m: ReceivedMessage) -> dict[str, Any]:
    body, encoding = body_view(m.body)
    return msg_row(m) | {
        "properties": dict(m.properties), "body": body, "bodyEncoding": encoding,
        "commitLogOffset": m.commitlog_offset, "bornTimestamp": m.born_timestamp,
        "bornHost": f"{m.born_host[0]}:{m.born_host[1]}",
        "storeHost": f"{m.store_host[0]}:{m.store_host[1]}", "sysFlag": m.sys_flag,
    }


def message_view(m: ReceivedMessage) -> str:
    """mqadmin's message view (queryMsgById / queryMsgByOffset); the body printed inline
    rather than written to a file."""
    body, encoding = body_view(m.body)
    return render_kv([
        ("OffsetID:", m.offset_msg_id),
        ("Topic:", m.topic),
        ("Tags:", f"[{m.tags or ''}]"),
        ("Keys:", f"[{m.keys or ''}]"),
        ("Queue ID:", m.queue_id),
        ("Queue Offset:", m.queue_offset),
        ("CommitLog Offset:", m.commitlog_offset),
        ("Reconsume Times:", m.reconsume_times),
        ("Born Timestamp:", human_time(m.born_timestamp)),
        ("Store Timestamp:", human_time(m.store_timestamp)),
        ("Born Host:", f"{m.born_host[0]}:{m.born_host[1]}"),
        ("Store Host:", f"{m.store_host[0]}:{m.store_host[1]}"),
        ("System Flag:", m.sys_flag),
        ("Properties:", _java_map(m.properties)),
        ("Message Body:" if encoding == "text" else "Message Body(base64):", body),
    ])


def _java_map(props: Any) -> str:
    """A map as Java prints it: ``{k=v, k2=v2}``."""
    return "{" + ", ".join(f"{k}={v}" for k, v in props.items()) + "}"


def message_line(m: ReceivedMessage) -> str:
    """mqadmin's ``MSGID: <id> <MessageExt> BODY: <body>`` line (printMsg, consumeMessage)."""
    body, _encoding = body_view(m.body)
    ext = (f"MessageExt [brokerName={m.queue.broker_name}, queueId={m.queue_id}, "
           f"queueOffset={m.queue_offset}, sysFlag={m.sys_flag}, "
           f"bornTimestamp={m.born_timestamp}, storeTimestamp={m.store_timestamp}, "
           f"msgId={m.offset_msg_id}, commitLogOffset={m.commitlog_offset}, "
           f"reconsumeTimes={m.reconsume_times}, topic={m.topic}, "
           f"properties={_java_map(m.properties)}]")
    return f"MSGID: {m.msg_id} {ext} BODY: {body}"


async def _admin(args: argparse.Namespace) -> int:
    try:
        async with Admin(client_config=client_config(args)) as admin:
            result: Output = await args.admin_fn(admin, args)
    except UsageError as exc:
        print(f"{args.command_name}: usage error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        if result.lines:
            sys.stdout.write(json_lines(result.data))
        else:
            out(result.data)
    else:
        sys.stdout.write(result.text)
    return 0


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


async def _broker_addrs(admin: Admin, args: argparse.Namespace) -> list[str]:
    return [args.broker] if args.broker else await admin.master_addrs(args.cluster)


# ====================================================================== cluster and topics


def _ratio(text: str | None) -> str:
    try:
        return f"{float(text or ''):.4f}"
    except ValueError:
        return ""


def _first_float(text: str | None) -> float:
    try:
        return float((text or "0").split()[0])
    except (ValueError, IndexError):
        return 0.0


async def _cluster_list(admin: Admin, args: argparse.Namespace) -> Output:
    info = await admin.cluster_list()
    data = _cluster_json(info)
    rows = []
    now = time.time() * 1000
    for cluster, names in sorted(info.cluster_addr_table.items()):
        if args.cluster and cluster != args.cluster:
            continue
        for name in sorted(names):
            bd = info.broker_addr_table.get(name)
            if bd is None:
                continue
            for bid, addr in sorted(bd.broker_addrs.items()):
                row: dict[str, Any] = {"cluster": cluster, "brokerName": name, "brokerId": bid,
                                       "addr": addr}
                try:
                    st = await admin.broker_status(addr)
                except MQClientError as exc:
                    row["statusError"] = str(exc)
                    st = {}
                earliest = int(st.get("earliestMessageTimeStamp", "0") or 0)
                row |= {
                    "version": st.get("brokerVersionDesc", ""),
                    "inTps": _first_float(st.get("putTps")),
                    "outTps": _first_float(st.get("getTransferedTps") or st.get("getTps")),
                    "sendQueue": st.get("sendThreadPoolQueueSize", "0"),
                    "sendQueueWaitMs": st.get("sendThreadPoolQueueHeadWaitTimeMills", "0"),
                    "pullQueue": st.get("pullThreadPoolQueueSize", "0"),
                    "pullQueueWaitMs": st.get("pullThreadPoolQueueHeadWaitTimeMills", "0"),
                    "pageCacheLockTimeMills": st.get("pageCacheLockTimeMills", "0"),
                    "hour": round((now - earliest) / 3_600_000, 2) if earliest > 0 else 0.0,
                    "space": _ratio(st.get("commitLogDiskRatio")),
                }
                if bid == 0 and name in data["brokers"]:  # the master's figures, as before
                    data["brokers"][name] |= {"version": row["version"],
                                              "putTps": st.get("putTps"),
                                              "getTps": st.get("getTransferedTps")
                                              or st.get("getTps")}
                rows.append(row)
    data["rows"] = rows
    text = render_table(
        [Col("Cluster Name", 16), Col("Broker Name", 22), Col("BID", 4), Col("Addr", 22),
         Col("Version", 16), Col("InTPS(LOAD)", 19, True), Col("OutTPS(LOAD)", 19, True),
         Col("PCWait(ms)", 10, True), Col("Hour", 5, True), Col("SPACE", 6, True)],
        [(r["cluster"], r["brokerName"], r["brokerId"], r["addr"], r["version"],
          f"{r['inTps']:.2f}({r['sendQueue']},{r['sendQueueWaitMs']}ms)",
          f"{r['outTps']:.2f}({r['pullQueue']},{r['pullQueueWaitMs']}ms)",
          r["pageCacheLockTimeMills"], f"{r['hour']:.2f}", r["space"]) for r in rows])
    return Output(data, text)


async def _topic_route(admin: Admin, args: argparse.Namespace) -> Output:
    route = await admin.topic_route(args.topic)
    data = _route_json(route)
    addrs = {b.broker_name: b for b in route.broker_datas}
    rows = []
    for q in sorted(route.queue_datas, key=lambda q: q.broker_name):
        bd = addrs.get(q.broker_name)
        rows.append((bd.cluster if bd else "", q.broker_name,
                     (bd.master_addr if bd else None) or "", q.read_queue_nums,
                     q.write_queue_nums, q.perm))
    if not getattr(args, "table", False):  # mqadmin prints the route as indented JSON
        return Output(data, json.dumps(data, indent=2) + "\n")
    text = render_table([Col("ClusterName", 24), Col("BrokerName", 24), Col("BrokerAddr", 22),
                         Col("ReadQueue", 10), Col("WriteQueue", 10), Col("Perm", 4)], rows)
    if route.order_topic_conf:
        text += f"\norderTopicConf: {route.order_topic_conf}\n"
    return Output(data, text)


async def _topic_list(admin: Admin, args: argparse.Namespace) -> Output:
    topics = await admin.topic_list()
    # mqadmin topicList prints the bare names, one a line (no header)
    return Output({"topics": topics}, "".join(t + "\n" for t in topics))


def _topic_config_text(topic: str, r: int, w: int, perm: int, order: bool) -> str:
    perm_text = ("R" if perm & 4 else "-") + ("W" if perm & 2 else "-") + (
        "X" if perm & 1 else "-")
    return (f"TopicConfig [topicName={topic}, readQueueNums={r}, writeQueueNums={w}, "
            f"perm={perm_text}, topicFilterType=SINGLE_TAG, topicSysFlag=0, "
            f"order={str(order).lower()}]\n")


async def _update_topic(admin: Admin, args: argparse.Namespace) -> Output:
    addrs = await admin.update_topic(
        args.topic, cluster=args.cluster, broker_addr=args.broker,
        read_queue_nums=args.read_queues, write_queue_nums=args.write_queues, perm=args.perm,
        order=args.order)
    data: dict[str, Any] = {"topic": args.topic, "updated": addrs, "order": args.order}
    text = "".join(f"create topic to {a} success.\n" for a in addrs)
    if args.order:
        route = await admin.topic_route(args.topic)
        data["orderConf"] = route.order_topic_conf
        text += f"set cluster orderConf. isOrder=true, orderConf=[{route.order_topic_conf}]\n"
    text += _topic_config_text(args.topic, args.read_queues, args.write_queues, args.perm,
                               args.order)
    return Output(data, text)


async def _delete_topic(admin: Admin, args: argparse.Namespace) -> Output:
    data = await admin.delete_topic(args.topic, args.cluster)
    text = (f"delete topic [{args.topic}] from cluster [{args.cluster}] success.\n"
            f"delete topic [{args.topic}] from NameServer success.\n")
    return Output(data, text)


async def _topic_status(admin: Admin, args: argparse.Namespace) -> Output:
    rows = await admin.topic_stats(args.topic)
    data = {"topic": args.topic, "queues": [
        {"brokerName": r.queue.broker_name, "queueId": r.queue.queue_id,
         "minOffset": r.min_offset, "maxOffset": r.max_offset,
         "lastUpdateTimestamp": r.last_update_timestamp} for r in rows]}
    text = render_table(
        [Col("Broker Name", 32), Col("QID", 4), Col("Min Offset", 20), Col("Max Offset", 20),
         Col("Last Updated")],
        [(r.queue.broker_name, r.queue.queue_id, r.min_offset, r.max_offset,
          human_time(r.last_update_timestamp)) for r in rows])
    return Output(data, text)


def _wipe(add: bool) -> Callable[[Admin, argparse.Namespace], Any]:
    async def run(admin: Admin, args: argparse.Namespace) -> Output:
        done = await admin.wipe_write_perm(args.broker_name, add=add)
        verb = "add" if add else "wipe"
        data = {"brokerName": args.broker_name,
                "namesrvs": [{"namesrv": ns, "topicCount": n} for ns, n in done]}
        text = "".join(f"{verb} write perm of broker[{args.broker_name}] in name server[{ns}]"
                       f" OK, {n}\n" for ns, n in done)
        return Output(data, text)
    return run


# ====================================================================== groups and clients


def _sub_group_text(c: dict[str, Any]) -> str:
    keys = ("groupName", "consumeEnable", "consumeFromMinEnable", "consumeBroadcastEnable",
            "retryQueueNums", "retryMaxTimes", "brokerId", "whichBrokerWhenConsumeSlowly",
            "notifyConsumerIdsChangedEnable")
    parts = [f"{k}={str(c[k]).lower() if isinstance(c[k], bool) else c[k]}" for k in keys]
    return "SubscriptionGroupConfig [" + ", ".join(parts) + "]\n"


async def _update_sub_group(admin: Admin, args: argparse.Namespace) -> Output:
    config = {
        "groupName": args.group, "consumeEnable": args.consume_enable,
        "consumeFromMinEnable": args.consume_from_min_enable,
        "consumeBroadcastEnable": args.consume_broadcast_enable,
        "retryQueueNums": args.retry_queue_nums, "retryMaxTimes": args.retry_max_times,
        "brokerId": args.broker_id,
        "whichBrokerWhenConsumeSlowly": args.which_broker_when_consume_slowly,
        "notifyConsumerIdsChangedEnable": args.notify_consumer_ids_changed,
    }
    if args.consume_message_orderly:  # RocketMQ 5 (5.x proxies pop orderly for the group)
        config["consumeMessageOrderly"] = True
    addrs = await _broker_addrs(admin, args)
    await admin.update_sub_group(config, addrs)
    text = "".join(f"create subscription group to {a} success.\n" for a in addrs)
    return Output({"updated": addrs, "config": config}, text + _sub_group_text(config))


async def _delete_sub_group(admin: Admin, args: argparse.Namespace) -> Output:
    addrs = await _broker_addrs(admin, args)
    await admin.delete_sub_group(args.group, addrs)
    text = "".join(f"delete subscription group [{args.group}] from broker [{a}] success.\n"
                   for a in addrs)
    deleted_topics = []
    if args.cluster:  # as mqadmin: the group's retry and dead-letter topics go too
        for topic in (retry_topic(args.group), DLQ_GROUP_TOPIC_PREFIX + args.group):
            await admin.delete_topic(topic, args.cluster)
            deleted_topics.append(topic)
            text += f"delete topic [{topic}] from cluster [{args.cluster}] success.\n"
    return Output({"group": args.group, "deleted": addrs, "deletedTopics": deleted_topics},
                  text)


#: mqadmin's words for a consumer's consumeType.
_CONSUME_TYPE = {"CONSUME_PASSIVELY": "PUSH", "CONSUME_ACTIVELY": "PULL", "CONSUME_POP": "POP"}


async def _group_summary(admin: Admin, group: str) -> dict[str, Any]:
    """One line of ``consumerProgress`` without -g: what mqadmin's shows for a group (its
    offsets' total diff and TPS, its online consumers; OFFLINE without any)."""
    row: dict[str, Any] = {"group": group, "count": 0, "version": "OFFLINE", "type": "",
                           "model": "", "consumeTps": 0, "diffTotal": 0}
    with contextlib.suppress(MQClientError):
        queues, tps = await admin.consumer_progress(group)
        row.update(consumeTps=int(tps), diffTotal=sum(r.diff for r in queues))
    with contextlib.suppress(MQClientError):
        cc = await admin.consumer_connection(group)
        conns = cc.get("connectionSet") or []
        if conns:
            row.update(count=len(conns), version=str(min(int(c.get("version") or 0)
                                                         for c in conns)),
                       type=_CONSUME_TYPE.get(str(cc.get("consumeType")), ""),
                       model=str(cc.get("messageModel") or ""))
    return row


async def _every_group_progress(admin: Admin) -> Output:
    groups = sorted(t[len(RETRY_GROUP_TOPIC_PREFIX):] for t in await admin.topic_list()
                    if t.startswith(RETRY_GROUP_TOPIC_PREFIX))
    rows = [await _group_summary(admin, g) for g in groups]
    lines = [f"{'#Group':<64}  {'#Count':<6}  {'#Version':<24} {'#Type':<5}  {'#Model':<14}  "
             f"{'#TPS':<7}  #Diff Total"]  # mqadmin's widths
    lines += [f"{r['group']:<64}  {r['count']:<6d}  {r['version']:<24} {r['type']:<5}  "
              f"{r['model']:<14}  {r['consumeTps']:<7d}  {r['diffTotal']:d}" for r in rows]
    return Output({"groups": rows}, "\n".join(lines) + "\n")


async def _consumer_progress(admin: Admin, args: argparse.Namespace) -> Output:
    if args.group is None:  # mqadmin: every group (a %RETRY% topic names each)
        return await _every_group_progress(admin)
    rows, tps = await admin.consumer_progress(args.group)
    diff_total = sum(r.diff for r in rows)
    data = {
        "group": args.group, "consumeTps": tps, "diffTotal": diff_total,
        "queues": [{"topic": r.queue.topic, "brokerName": r.queue.broker_name,
                    "queueId": r.queue.queue_id, "brokerOffset": r.broker_offset,
                    "consumerOffset": r.consumer_offset, "diff": r.diff,
                    "lastTimestamp": r.last_timestamp} for r in rows],
    }
    text = render_table(
        [Col("Topic", 64), Col("Broker Name", 32), Col("QID", 4), Col("Broker Offset", 20),
         Col("Consumer Offset", 20), Col("Diff", 20), Col("LastTime")],
        [(r.queue.topic, r.queue.broker_name, r.queue.queue_id, r.broker_offset,
          r.consumer_offset, r.diff, human_time(r.last_timestamp, millis=False))
         for r in rows])
    text += f"\nConsume TPS: {tps:.2f}\nDiff Total: {diff_total}\n"
    return Output(data, text)


def _connections_table(conns: Sequence[dict[str, Any]]) -> str:
    return render_table(
        [Col("ClientId", 32), Col("ClientAddr", 22), Col("Language", 8), Col("Version")],
        [(c.get("clientId"), c.get("clientAddr"), c.get("language"), c.get("version"))
         for c in conns])


async def _consumer_connection(admin: Admin, args: argparse.Namespace) -> Output:
    cc = await admin.consumer_connection(args.group)
    conns = sorted(cc.get("connectionSet") or [], key=lambda c: str(c.get("clientId")))
    subs = cc.get("subscriptionTable") or {}
    data = {"group": args.group, "connections": conns,
            "subscriptions": [{"topic": t, "subString": (s or {}).get("subString")}
                              for t, s in sorted(subs.items())],
            "consumeType": cc.get("consumeType"), "messageModel": cc.get("messageModel"),
            "consumeFromWhere": cc.get("consumeFromWhere")}
    text = _connections_table(conns)
    text += "\nBelow is subscription:\n"
    text += render_table([Col("Topic", 48), Col("SubExpression")],
                         [(s["topic"], s["subString"]) for s in data["subscriptions"]])
    text += (f"\nConsumeType: {data['consumeType']}\nMessageModel: {data['messageModel']}\n"
             f"ConsumeFromWhere: {data['consumeFromWhere']}\n")
    return Output(data, text)


async def _producer_connection(admin: Admin, args: argparse.Namespace) -> Output:
    conns = await admin.producer_connection(args.group, args.topic)
    return Output({"group": args.group, "topic": args.topic, "connections": conns},
                  _connections_table(conns))


async def _consumer_status(admin: Admin, args: argparse.Namespace) -> Output:
    clients = await admin.consumer_status(args.group, args.client_id)
    text = ""
    for c in clients:
        info = c["runningInfo"]
        text += f"#Consumer: {c['clientId']}\n\n#Consumer Properties#\n"
        text += render_kv(((str(k), v) for k, v in sorted((info.get("properties") or {})
                                                           .items())), 40)
        text += "\n#Consumer Subscription#\n"
        text += render_table([Col("Topic", 40), Col("SubExpression")],
                             [(s.get("topic"), s.get("subString"))
                              for s in info.get("subscriptionSet") or []])
        text += "\n#Consumer Offset#\n"
        text += render_table(
            [Col("Topic", 32), Col("Broker Name", 32), Col("QID", 4),
             Col("Consumer Offset", 20)],
            [(r["topic"], r["brokerName"], r["queueId"], r.get("commitOffset"))
             for r in info.get("mqTable") or []])
        text += "\n"
    return Output({"group": args.group, "clients": clients}, text)


# ====================================================================== messages


async def _query_by_id(admin: Admin, args: argparse.Namespace) -> Output:
    if args.group or args.client_id:  # mqadmin: -g and -d push the message to that consumer
        if not (args.group and args.client_id):
            raise UsageError("-g GROUP and -d CLIENT_ID go together")
        result = await admin.consume_message_directly(
            args.group, args.client_id, args.msg_id, args.topic)
        return Output(result, render_kv((f"{k}:", v) for k, v in sorted(result.items())))
    msgs = await admin.query_msg_by_id(args.msg_id, args.topic)
    return Output({"messages": [message_json(m) for m in msgs]},
                  "\n".join(message_view(m) for m in msgs))


async def _query_by_key(admin: Admin, args: argparse.Namespace) -> Output:
    msgs = await admin.query_msg_by_key(args.topic, args.key)
    lines = [f"{'#Message ID':<50} {'#QID':>4} {'#Offset':>40}"]  # mqadmin's widths
    lines += [f"{m.msg_id:<50} {m.queue_id:>4d} {m.queue_offset:>40d}" for m in msgs]
    text = "\n".join(lines) + "\n"
    return Output({"messages": [message_json(m) for m in msgs]}, text)


async def _query_msg_trace(admin: Admin, args: argparse.Namespace) -> Output:
    views = await admin.query_msg_trace(args.msg_id, args.trace_topic, args.max_num)
    return Output([trace_json(v) for v in views], render_trace(views), lines=True)


async def _query_by_offset(admin: Admin, args: argparse.Namespace) -> Output:
    mq = MessageQueue(args.topic, args.broker_name, args.queue_id)
    await admin.queues_of(args.topic, args.broker_name)  # the route, and the broker in it
    result = await admin.pull(mq, args.offset, 1)
    msgs = [m for m in result.messages if m.queue_offset == args.offset]
    if not msgs:
        raise MQClientError(
            f"no message at offset {args.offset} of {args.topic}/{args.broker_name}/"
            f"{args.queue_id} ({result.status.value}; queue offsets "
            f"{result.min_offset}..{result.max_offset})")
    return Output({"messages": [message_json(m) for m in msgs]}, message_view(msgs[0]))


async def _reset_offset(admin: Admin, args: argparse.Namespace) -> Output:
    ts = parse_timestamp_ms(args.timestamp)
    moved = await admin.reset_offset_by_time(args.group, args.topic, ts, force=args.force)
    queues = [{"brokerName": mq.broker_name, "queueId": mq.queue_id, "offset": off}
              for mq, off in sorted(moved.items(), key=lambda kv: kv[0])]
    text = render_table([Col("brokerName", 32), Col("queueId", 8), Col("offset")],
                        [(q["brokerName"], q["queueId"], q["offset"]) for q in queues])
    return Output({"group": args.group, "topic": args.topic, "timestamp": ts,
                   "queues": queues}, text)


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


async def _send_message(admin: Admin, args: argparse.Namespace) -> Output:
    if args.queue_id is not None and not args.broker_name:
        raise UsageError("-i QUEUE_ID needs -b BROKER_NAME")
    msg = Message(args.topic, args.body.encode("utf-8"), tags=args.tags or None,
                  keys=args.keys or None)
    async with Producer(TOOLS_PRODUCER_GROUP, instance=admin.instance) as producer:
        queue = None
        if args.broker_name:
            queues = [q for q in await producer.queues_for(args.topic)
                      if q.broker_name == args.broker_name
                      and (args.queue_id is None or q.queue_id == args.queue_id)]
            if not queues:
                raise MQClientError(f"topic {args.topic!r} has no queue "
                                    f"{args.broker_name}/{args.queue_id}")
            queue = queues[0]
        result = await producer.send(msg, queue=queue)
    data = {"brokerName": result.queue.broker_name, "queueId": result.queue.queue_id,
            "sendStatus": result.status.value, "msgId": result.msg_id,
            "offsetMsgId": result.offset_msg_id, "queueOffset": result.queue_offset}
    text = render_table(
        [Col("Broker Name", 32), Col("QID", 4), Col("Send Result", 20), Col("MsgId")],
        [(data["brokerName"], data["queueId"], data["sendStatus"], data["msgId"])])
    return Output(data, text)


async def _read_queue(admin: Admin, mq: MessageQueue, begin: int, end: int, limit: int | None,
                      expression: str, group: str) -> list[ReceivedMessage]:
    """Messages of ``mq`` from offset ``begin`` up to (not including) ``end``, at most
    ``limit``."""
    got: list[ReceivedMessage] = []
    offset = begin
    while offset < end and (limit is None or len(got) < limit):
        want = min(PULL_BATCH, end - offset)
        result = await admin.pull(mq, offset, want, expression=expression, group=group)
        if result.status is PullStatus.FOUND:
            got += [m for m in result.messages if m.queue_offset < end]
        if result.next_begin_offset <= offset:  # nothing more (or an offset moved back)
            break
        offset = result.next_begin_offset
    return got if limit is None else got[:limit]


async def _offset_range(admin: Admin, mq: MessageQueue, begin_ms: int | None,
                        end_ms: int | None, group: str) -> tuple[int, int]:
    api = admin.pull_api(group)
    lo = await api.min_offset(mq)
    hi = await api.max_offset(mq)
    if begin_ms is not None:
        lo = max(lo, await api.search_offset(mq, begin_ms))
    if end_ms is not None:
        hi = min(hi, await api.search_offset(mq, end_ms))
    return lo, hi


async def _consume_message(admin: Admin, args: argparse.Namespace) -> Output:
    if (args.queue_id is not None or args.offset is not None) and not args.broker_name:
        raise UsageError("-i QUEUE_ID and -o OFFSET need -b BROKER_NAME")
    group = args.group or TOOLS_CONSUMER_GROUP
    begin_ms = parse_timestamp_ms(args.begin) if args.begin else None
    end_ms = parse_timestamp_ms(args.end) if args.end else None
    queues = await admin.queues_of(args.topic, args.broker_name)
    if args.queue_id is not None:
        queues = [q for q in queues if q.queue_id == args.queue_id]
        if not queues:
            raise MQClientError(f"no queue {args.queue_id} on {args.broker_name}")
    msgs: list[ReceivedMessage] = []
    for mq in queues:
        remaining = args.count - len(msgs)
        if remaining <= 0:
            break
        lo, hi = await _offset_range(admin, mq, begin_ms, end_ms, group)
        if args.offset is not None:
            lo = max(lo, args.offset)
        msgs += await _read_queue(admin, mq, lo, hi, remaining, "*", group)
    text = "".join(message_line(m) + "\n" for m in msgs)
    text += f"Consume ok, {len(msgs)} messages\n"
    return Output([message_json(m) for m in msgs], text, lines=True)


async def _print_msg(admin: Admin, args: argparse.Namespace) -> Output:
    begin_ms = parse_timestamp_ms(args.begin) if args.begin else None
    end_ms = parse_timestamp_ms(args.end) if args.end else None
    text = ""
    records = []
    for mq in await admin.queues_of(args.topic):
        lo, hi = await _offset_range(admin, mq, begin_ms, end_ms, TOOLS_CONSUMER_GROUP)
        text += (f"minOffset={lo}, maxOffset={hi}, MessageQueue [topic={mq.topic}, "
                 f"brokerName={mq.broker_name}, queueId={mq.queue_id}]\n")
        for m in await _read_queue(admin, mq, lo, hi, None, args.sub_expression,
                                   TOOLS_CONSUMER_GROUP):
            row = message_json(m)
            if not args.print_body:
                row.pop("body")
                row.pop("bodyEncoding")
            records.append(row)
            line = message_line(m)
            text += (line if args.print_body else line.rsplit(" BODY: ", 1)[0]) + "\n"
    return Output(records, text, lines=True)


# ====================================================================== brokers


async def _broker_status(admin: Admin, args: argparse.Namespace) -> Output:
    table = dict(sorted((await admin.broker_status(args.broker)).items()))
    return Output(table, "".join(f"{k:<32}: {v}\n" for k, v in table.items()))


async def _get_broker_config(admin: Admin, args: argparse.Namespace) -> Output:
    found = {}
    for addr in await _broker_addrs(admin, args):
        # masked here too: a broker of another make may answer with its secrets
        found[addr] = mask_secrets(dict(sorted((await admin.get_broker_config(addr)).items())))
    text = ""
    for addr, cfg in found.items():
        text += f"============{addr}============\n"
        text += "".join(f"{k:<50}=  {v}\n" for k, v in cfg.items())
    return Output(found[args.broker] if args.broker else found, text)


async def _update_broker_config(admin: Admin, args: argparse.Namespace) -> Output:
    addrs = await _broker_addrs(admin, args)
    for addr in addrs:
        await admin.update_broker_config(addr, {args.key: args.value})
    return Output({"updated": addrs, "key": args.key, "value": args.value},
                  "".join(f"update broker config success, {a}\n" for a in addrs))


async def _stats_all(admin: Admin, args: argparse.Namespace) -> Output:
    records: list[dict[str, Any]] = []
    for topic in await admin.topic_list():
        if topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)):
            continue
        if args.topic and topic != args.topic:
            continue
        try:
            route = await admin.topic_route(topic)
        except MQClientError:
            continue
        masters = [bd.master_addr for bd in route.broker_datas if bd.master_addr]
        in_tps = 0.0
        in_day = 0
        groups: set[str] = set()
        for addr in masters:
            try:
                st = await admin.view_broker_stats(addr, TOPIC_PUT_NUMS, topic)
                in_tps += float(st.get("statsMinute", {}).get("tps", 0.0))
                in_day += int(st.get("statsDay", {}).get("sum", 0))
            except MQBrokerError:
                pass  # as mqadmin: a broker without figures for it adds nothing
            with contextlib.suppress(MQBrokerError):
                groups.update(await admin.topic_consumed_by(topic, addr))
        if not groups:
            if not args.active or in_day > 0:
                records.append({"topic": topic, "group": None, "accumulation": 0,
                                "inTps": round(in_tps, 2), "outTps": None,
                                "inMsg24Hour": in_day, "outMsg24Hour": None})
            continue
        for group in sorted(groups):
            out_tps = 0.0
            out_day = 0
            for addr in masters:
                try:
                    st = await admin.view_broker_stats(addr, GROUP_GET_NUMS, f"{topic}@{group}")
                    out_tps += float(st.get("statsMinute", {}).get("tps", 0.0))
                    out_day += int(st.get("statsDay", {}).get("sum", 0))
                except MQBrokerError:
                    pass
            try:
                rows, _tps = await admin.consumer_progress(group)
                accumulation = sum(r.diff for r in rows if r.queue.topic == topic)
            except MQClientError:
                accumulation = 0
            if args.active and in_day == 0 and out_day == 0:
                continue
            records.append({"topic": topic, "group": group, "accumulation": accumulation,
                            "inTps": round(in_tps, 2), "outTps": round(out_tps, 2),
                            "inMsg24Hour": in_day, "outMsg24Hour": out_day})
    text = render_table(
        [Col("Topic", 64), Col("Consumer Group", 64), Col("Accumulation", 12, True),
         Col("InTPS", 11, True), Col("OutTPS", 11, True), Col("InMsg24Hour", 14, True),
         Col("OutMsg24Hour", 14, True)],
        [(r["topic"], r["group"], r["accumulation"], r["inTps"], r["outTps"], r["inMsg24Hour"],
          "NO_CONSUMER" if r["group"] is None else r["outMsg24Hour"]) for r in records])
    return Output(records, text, lines=True)


async def _cluster_rt(admin: Admin, args: argparse.Namespace) -> Output:
    info = await admin.cluster_list()
    clusters = sorted(info.cluster_addr_table)
    if args.cluster:
        if args.cluster not in info.cluster_addr_table:
            raise MQClientError(f"cluster {args.cluster!r} not found")
        clusters = [args.cluster]
    records: list[dict[str, Any]] = []
    body = b"x" * args.size
    async with Producer(TOOLS_PRODUCER_GROUP, instance=admin.instance) as producer:
        for round_no in range(args.rounds):
            if round_no:
                await trio.sleep(args.interval)  # mqadmin's pause between rounds (-i)
            for cluster in clusters:
                queues = await producer.queues_for(cluster)  # the cluster's own topic
                for name in sorted(info.cluster_addr_table[cluster]):
                    mine = [q for q in queues if q.broker_name == name]
                    ok = failed = 0
                    elapsed = 0.0
                    for i in range(args.amount):
                        if not mine:
                            failed += 1
                            continue
                        start = time.perf_counter()
                        try:
                            r = await producer.send(Message(cluster, body),
                                                    queue=mine[i % len(mine)])
                        except MQClientError:
                            failed += 1
                            continue
                        elapsed += time.perf_counter() - start
                        if r.status is SendStatus.SEND_OK:
                            ok += 1
                        else:
                            failed += 1
                    rt = elapsed * 1000 / ok if ok else 0.0
                    records.append({"round": round_no + 1, "cluster": cluster,
                                    "brokerName": name, "rtMs": round(rt, 3),
                                    "successCount": ok, "failCount": failed})
    text = render_table(
        [Col("Cluster Name", 24), Col("Broker Name", 24), Col("RT", 4),
         Col("successCount", 8), Col("failCount", 8)],
        [(r["cluster"], r["brokerName"], f"{r['rtMs']:.2f}", r["successCount"],
          r["failCount"]) for r in records])
    return Output(records, text, lines=True)


def _parse_slave(text: str) -> dict[str, Any]:
    fields = dict(part.split("=", 1) for part in text.split() if "=" in part)

    def num(key: str) -> float:
        try:
            return float(fields.get(key, "0"))
        except ValueError:
            return 0.0

    return {"addr": fields.get("addr", ""), "ackOffset": int(num("ackOffset")),
            "diff": int(num("diff")), "inSync": fields.get("inSync") == "true",
            "transferSpeedKBps": round(num("transferBytesPerS") / 1024, 2)}


async def _ha_status(admin: Admin, args: argparse.Namespace) -> Output:
    """5.x mqadmin haStatus, from each broker's runtime info (GET_BROKER_RUNTIME_INFO's HA
    entries: per-slave ack offset and lag on a master, the HA client's state on a slave)."""
    addrs = [args.broker] if args.broker else await admin.master_addrs(args.cluster)
    brokers = []
    text = ""
    for addr in addrs:
        st = await admin.broker_status(addr)
        max_offset = int(st.get("commitLogMaxOffset", "0") or 0)
        if "haMasterAddress" in st:  # a slave
            last_read = int(st.get("haClientLastReadTimestamp", "0") or 0)
            b = {"addr": addr, "role": "SLAVE", "masterAddr": st.get("haMasterAddress"),
                 "commitLogMaxOffset": max_offset,
                 "connected": st.get("haClientConnected") == "true",
                 "lastReadTimestamp": last_read}
            brokers.append(b)
            text += render_kv([("#SlaveAddr", addr), ("#MasterAddr", b["masterAddr"]),
                               ("#CommitLogMaxOffset", max_offset),
                               ("#Connected", b["connected"]),
                               ("#LastReadTime", human_time(last_read))], 26)
            text += "\n"
            continue
        slaves = [_parse_slave(v) for k, v in sorted(st.items())
                  if k.startswith("haSlave") and k[7:].isdigit()]
        b = {"addr": addr, "role": "MASTER", "commitLogMaxOffset": max_offset,
             "slaveNum": int(st.get("haConnectionCount", len(slaves)) or 0),
             "inSyncSlaveNum": int(st.get("haInSyncSlaveNums", "0") or 0), "slaves": slaves}
        brokers.append(b)
        text += render_kv([("#MasterAddr", addr), ("#MasterCommitLogMaxOffset", max_offset),
                           ("#SlaveNum", b["slaveNum"]),
                           ("#InSyncSlaveNum", b["inSyncSlaveNum"])], 26)
        text += render_table(
            [Col("SlaveAddr", 32), Col("SlaveAckOffset", 16), Col("Diff", 16, True),
             Col("TransferSpeed(KB/s)", 16, True), Col("Status", 16, True)],
            [(s["addr"], s["ackOffset"], s["diff"], s["transferSpeedKBps"],
              "OK" if s["inSync"] else "Fall Behind") for s in slaves])
        text += "\n"
    return Output({"brokers": brokers}, text)


# ====================================================================== wiring


AdminCommand = Callable[[str, str, Callable[..., Any]], argparse.ArgumentParser]


def _admin_command(
    sub: Any, name: str, help_text: str, fn: Callable[..., Any]
) -> argparse.ArgumentParser:
    """One mqadmin-named command on ``sub`` (argparse subparsers) running ``fn``."""
    ap: argparse.ArgumentParser = sub.add_parser(name, help=help_text, description=help_text + (
        ". Exit codes: 0 success, 1 failure, 2 usage."))
    add_ns(ap)
    ap.set_defaults(func=runner(_admin), admin_fn=fn, command_name=name)
    return ap


def _where(ap: argparse.ArgumentParser, broker_help: str = "broker address ip:port",
          cluster_help: str = "every master of this cluster") -> None:
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("-b", "--broker", help=broker_help)
    g.add_argument("-c", "--cluster", help=cluster_help)


def add_commands(sub: Any) -> None:
    """Add the mqadmin-named commands to ``sub`` (argparse subparsers)."""
    admin_cmd = functools.partial(_admin_command, sub)
    _add_topic_commands(admin_cmd)
    _add_group_commands(admin_cmd)
    _add_message_commands(admin_cmd)
    _add_broker_commands(admin_cmd)
    add_controller_commands(sub)


def _add_topic_commands(admin_cmd: AdminCommand) -> None:
    ap = admin_cmd("clusterList", "brokers of every cluster", _cluster_list)
    ap.add_argument("-c", "--cluster", help="only this cluster")
    ap = admin_cmd("topicRoute", "a topic's route (indented JSON, as mqadmin prints it)",
                   _topic_route)
    ap.add_argument("-t", "--topic", required=True, type=_topic)
    ap.add_argument("--table", action="store_true", help="one row per broker instead")
    admin_cmd("topicList", "every topic the NameServer knows", _topic_list)
    ap = admin_cmd("updateTopic", "create or update a topic", _update_topic)
    ap.add_argument("-t", "--topic", required=True, type=_topic)
    _where(ap)
    ap.add_argument("-r", "--read-queues", type=non_negative, default=8)
    ap.add_argument("-w", "--write-queues", type=non_negative, default=8)
    ap.add_argument("-p", "--perm", type=int, default=6, choices=range(8), metavar="PERM")
    ap.add_argument("-o", "--order", type=bool_arg, default=False, metavar="true|false",
                    help="ordered topic: also sets the NameServers' orderConf")
    ap = admin_cmd("deleteTopic", "delete a topic from a cluster's brokers and the NameServers",
                   _delete_topic)
    ap.add_argument("-t", "--topic", required=True, type=_topic)
    ap.add_argument("-c", "--cluster", required=True)
    ap = admin_cmd("topicStatus", "a topic's queues: min/max offsets, last update",
                   _topic_status)
    ap.add_argument("-t", "--topic", required=True, type=_topic)
    for name, add, fn in (("wipeWritePerm", False, _wipe(False)),
                          ("addWritePerm", True, _wipe(True))):
        ap = admin_cmd(name, f"{'restore' if add else 'remove'} a broker's write permission "
                       "on every NameServer", fn)
        ap.add_argument("-b", "--broker-name", required=True, help="broker name")


def _add_group_commands(admin_cmd: AdminCommand) -> None:
    ap = admin_cmd("updateSubGroup", "create or update a subscription group", _update_sub_group)
    _where(ap)
    ap.add_argument("-g", "--group", required=True, type=_group)
    ap.add_argument("-s", "--consume-enable", type=bool_arg, default=True,
                    metavar="true|false")
    ap.add_argument("-m", "--consume-from-min-enable", type=bool_arg, default=False,
                    metavar="true|false")
    ap.add_argument("-d", "--consume-broadcast-enable", type=bool_arg, default=False,
                    metavar="true|false")
    ap.add_argument("-o", "--consume-message-orderly", type=bool_arg, default=False,
                    metavar="true|false", help="consume in order (5.x push consumers: FIFO)")
    ap.add_argument("-q", "--retry-queue-nums", type=non_negative, default=1)
    ap.add_argument("-r", "--retry-max-times", type=non_negative, default=16)
    ap.add_argument("-i", "--broker-id", type=non_negative, default=0)
    ap.add_argument("-w", "--which-broker-when-consume-slowly", type=non_negative, default=1)
    ap.add_argument("-a", "--notify-consumer-ids-changed", type=bool_arg, default=True,
                    metavar="true|false")
    ap = admin_cmd("deleteSubGroup", "delete a subscription group (with -c also its retry "
                   "and DLQ topics)", _delete_sub_group)
    _where(ap)
    ap.add_argument("-g", "--group", required=True, type=_group)
    ap = admin_cmd("consumerProgress", "a group's offsets against the brokers' (without -g: "
                   "every group, one line each)", _consumer_progress)
    ap.add_argument("-g", "--group", type=_group)
    ap = admin_cmd("consumerConnection", "a group's online consumers and subscriptions",
                   _consumer_connection)
    ap.add_argument("-g", "--group", required=True, type=_group)
    ap = admin_cmd("producerConnection", "a producer group's connections on a topic's brokers",
                   _producer_connection)
    ap.add_argument("-g", "--group", required=True, type=_group)
    ap.add_argument("-t", "--topic", required=True, type=_topic)
    ap = admin_cmd("consumerStatus", "running info of a group's consumers (asked through "
                   "their broker)", _consumer_status)
    ap.add_argument("-g", "--group", required=True, type=_group)
    ap.add_argument("-i", "--client-id", help="only this client")


def _add_message_commands(admin_cmd: AdminCommand) -> None:
    ap = admin_cmd("queryMsgById", "a message by broker msgId (or client id with -t)",
                   _query_by_id)
    ap.add_argument("-i", "--msg-id", required=True)
    ap.add_argument("-t", "--topic", type=_topic)
    ap.add_argument("-g", "--group", type=_group, help="with -d: have that consumer consume "
                    "the message (CONSUME_MESSAGE_DIRECTLY through its broker)")
    ap.add_argument("-d", "--client-id", help="the consumer's client id (with -g)")
    ap = admin_cmd("queryMsgByKey", "messages by key", _query_by_key)
    ap.add_argument("-t", "--topic", required=True, type=_topic)
    ap.add_argument("-k", "--key", required=True)
    ap = admin_cmd("queryMsgTraceById", "a message's trace (its Pub and SubAfter records in "
                   "the trace topic; --json: every record, one line each)", _query_msg_trace)
    ap.add_argument("-i", "--msg-id", required=True, help="the message's id (UNIQ_KEY)")
    ap.add_argument("-t", "--trace-topic", type=_topic, default=DEFAULT_TRACE_TOPIC)
    ap.add_argument("--num", "--max-num", dest="max_num", type=at_most(QUERY_MAX_NUM),
                    default=QUERY_MAX_NUM, help="trace messages read at most")
    ap = admin_cmd("queryMsgByOffset", "the message at a queue offset", _query_by_offset)
    ap.add_argument("-t", "--topic", required=True, type=_topic)
    ap.add_argument("-b", "--broker-name", required=True, help="broker name")
    ap.add_argument("-i", "--queue-id", required=True, type=non_negative)
    ap.add_argument("-o", "--offset", required=True, type=non_negative)
    ap = admin_cmd("resetOffsetByTime", "move a group's offsets on a topic to a time",
                   _reset_offset)
    ap.add_argument("-g", "--group", required=True, type=_group)
    ap.add_argument("-t", "--topic", required=True, type=_topic)
    ap.add_argument("-s", "--timestamp", required=True,
                    help="ms, now, -1 (the end) or yyyy-MM-dd#HH:mm:ss:SSS")
    ap.add_argument("-f", "--force", type=bool_arg, default=True,
                    metavar="true|false", help="also move offsets forward (default true)")
    ap = admin_cmd("sendMessage", "send one message", _send_message)
    ap.add_argument("-t", "--topic", required=True, type=_topic)
    ap.add_argument("-p", "--body", required=True, help="the message body (text)")
    ap.add_argument("-k", "--keys")
    ap.add_argument("-c", "--tags")
    ap.add_argument("-b", "--broker-name", help="send to this broker")
    ap.add_argument("-i", "--queue-id", type=non_negative, help="and this queue (with -b)")
    ap.add_argument("-m", "--msg-trace-enable", type=bool_arg, default=False,
                    metavar="true|false", help="accepted for mqadmin's sake; no trace is sent")
    ap = admin_cmd("consumeMessage", "read messages of a topic (or one queue from an offset) "
                   "without committing", _consume_message)
    ap.add_argument("-t", "--topic", required=True, type=_topic)
    ap.add_argument("-b", "--broker-name", help="only this broker")
    ap.add_argument("-i", "--queue-id", type=non_negative, help="only this queue (with -b)")
    ap.add_argument("-o", "--offset", type=non_negative, help="from this offset (with -b)")
    ap.add_argument("-g", "--group", type=_group, help="the pulling group (default "
                    f"{TOOLS_CONSUMER_GROUP})")
    ap.add_argument("-s", "--begin", help="from this time (ms or yyyy-MM-dd#HH:mm:ss:SSS)")
    ap.add_argument("-e", "--end", help="up to this time")
    ap.add_argument("-c", "--count", type=non_negative, default=CONSUME_MESSAGE_DEFAULT_COUNT,
                    help=f"at most this many messages (default {CONSUME_MESSAGE_DEFAULT_COUNT})")
    ap = admin_cmd("printMsg", "print every message of a topic (or a time range)", _print_msg)
    ap.add_argument("-t", "--topic", required=True, type=_topic)
    ap.add_argument("-c", "--charset", default="UTF-8",
                    help="accepted for mqadmin's sake; bodies print as UTF-8 text or base64")
    ap.add_argument("-s", "--sub-expression", default="*", help="tag filter, e.g. 'A || B'")
    ap.add_argument("-b", "--begin", help="from this time (ms or yyyy-MM-dd#HH:mm:ss:SSS)")
    ap.add_argument("-e", "--end", help="up to this time")
    ap.add_argument("-d", "--print-body", type=bool_arg, default=True, metavar="true|false")


def _add_broker_commands(admin_cmd: AdminCommand) -> None:
    ap = admin_cmd("brokerStatus", "a broker's runtime info", _broker_status)
    ap.add_argument("-b", "--broker", required=True, help="broker address ip:port")
    for name, help_text, fn in (
        ("getBrokerConfig", "a running broker's config", _get_broker_config),
        ("updateBrokerConfig", "change a running broker's config key (persisted to its "
         "config file)", _update_broker_config),
    ):
        ap = admin_cmd(name, help_text, fn)
        _where(ap)
        if fn is _update_broker_config:
            ap.add_argument("-k", "--key", required=True, help="e.g. brokerPermission")
            ap.add_argument("-v", "--value", required=True)
    ap = admin_cmd("statsAll", "per topic and group: backlog, TPS, messages in 24 hours "
                   "(JSON lines with --json)", _stats_all)
    ap.add_argument("-a", "--active", action="store_true", help="only active topics")
    ap.add_argument("-t", "--topic", type=_topic, help="only this topic")
    ap = admin_cmd("clusterRT", "send probe messages to every broker and print the round "
                   "trip (JSON lines with --json)", _cluster_rt)
    ap.add_argument("-a", "--amount", type=at_most(CLUSTER_RT_MAX_AMOUNT),
                    default=CLUSTER_RT_AMOUNT,
                    help=f"messages per broker and round (default {CLUSTER_RT_AMOUNT})")
    ap.add_argument("-s", "--size", type=at_most(CLUSTER_RT_MAX_SIZE), default=CLUSTER_RT_SIZE,
                    help=f"body bytes (default {CLUSTER_RT_SIZE})")
    ap.add_argument("-c", "--cluster", help="only this cluster")
    ap.add_argument("-i", "--interval", type=non_negative, default=CLUSTER_RT_INTERVAL_S,
                    help="seconds between rounds")
    ap.add_argument("--rounds", type=non_negative, default=1,
                    help="rounds to run (mqadmin runs until stopped; default 1)")
    ap.add_argument("-p", "--print-log", type=bool_arg, default=False, metavar="true|false",
                    help="accepted for mqadmin's sake")
    ap.add_argument("-m", "--machine-room", help="accepted for mqadmin's sake")
    ap = admin_cmd("haStatus", "master/slave replication: each slave's ack offset and lag "
                   "(RocketMQ 5's haStatus)", _ha_status)
    _where(ap)


# ====================================================================== controller mode
# getSyncStateSet asks the controller leader (CONTROLLER_GET_SYNC_STATE_DATA 1006); getBrokerEpoch
# asks each replica of a group, found through the NameServers (GET_BROKER_EPOCH_CACHE 1007).


async def _get_sync_state_set(admin: Admin, args: argparse.Namespace) -> Output:
    from ..cluster.protocol.controller import (
        ControllerRequestCode,
        decode_replicas_table,
        encode_broker_names,
    )
    from ..cluster.protocol.controller_client import (
        ControllerClient,
        parse_controller_addrs,
    )
    from ..cluster.remoting.client_pool import open_remoting_client
    from ..cluster.remoting.codec import RemotingCommand
    from ..cluster.remoting.peer_auth import peer_handshake

    try:
        addrs = parse_controller_addrs(args.controller_address)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    names = [args.broker_name] if args.broker_name else []
    if args.cluster:
        info = await admin.cluster_list()
        names = sorted(info.cluster_addr_table.get(args.cluster, ()))
    secret = args.cluster_secret
    async with open_remoting_client(
        node="mqadmin-controller", handshake=peer_handshake(secret) if secret else None
    ) as client:
        r = await ControllerClient(client, addrs).call(RemotingCommand.request(
            ControllerRequestCode.CONTROLLER_GET_SYNC_STATE_DATA, {}, encode_broker_names(names)))
    if r.code != 0:
        raise UsageError(f"controller answered {r.code}: {r.remark}")
    table = decode_replicas_table(r.body or b"")
    data = {name: i.to_json() for name, i in sorted(table.items())}
    text = ""
    for name, i in sorted(table.items()):
        text += (f"\n#brokerName\t{name}\n#MasterBrokerId\t{i.master_broker_id}\n"
                 f"#MasterAddr\t{i.master_address}\n#MasterEpoch\t{i.master_epoch}\n"
                 f"#SyncStateSetEpoch\t{i.sync_state_set_epoch}\n"
                 f"#SyncStateSetNums\t{len(i.in_sync)}\n")
        for label, views in (("InSyncReplica", i.in_sync), ("NotInSyncReplica", i.not_in_sync)):
            for v in views:
                text += (f"\n{label}:\t{v.address}\tbrokerId:\t{v.broker_id}"
                         f"\talive:\t{str(v.alive).lower()}")
        text += "\n"
    return Output(data, text)


async def _get_broker_epoch(admin: Admin, args: argparse.Namespace) -> Output:
    from ..cluster.protocol.controller import ControllerRequestCode, EpochEntryCache
    from ..cluster.remoting.client_pool import open_remoting_client
    from ..cluster.remoting.codec import RemotingCommand

    info = await admin.cluster_list()
    names = [args.broker_name] if args.broker_name else sorted(
        info.cluster_addr_table.get(args.cluster or "", ()))
    caches = []
    async with open_remoting_client(node="mqadmin-epoch") as client:
        for name in names:
            bd = info.broker_addr_table.get(name)
            for _bid, addr in sorted((bd.broker_addrs if bd else {}).items()):
                r = await client.invoke(addr, RemotingCommand.request(
                    ControllerRequestCode.GET_BROKER_EPOCH_CACHE), 5.0)
                if r.code != 0:
                    raise UsageError(f"{addr} answered {r.code}: {r.remark}")
                caches.append((addr, EpochEntryCache.decode(r.body or b"")))
    data = [{"addr": addr, "clusterName": c.cluster_name, "brokerName": c.broker_name,
             "brokerId": c.broker_id, "maxOffset": c.max_offset,
             "epochList": [{"epoch": e.epoch, "startOffset": e.start_offset,
                            "endOffset": e.end_offset} for e in c.entries]}
            for addr, c in caches]
    text = ""
    for addr, c in caches:
        text += (f"\n#clusterName\t{c.cluster_name}\n#brokerName\t{c.broker_name}\n"
                 f"#brokerAddr\t{addr}\n#brokerId\t{c.broker_id}\n")
        for e in c.entries:
            text += f"#Epoch: {e.epoch}\tStartOffset: {e.start_offset}\tEndOffset: {e.end_offset}\n"
    return Output(data, text)


def add_controller_commands(sub: Any) -> None:
    """getSyncStateSet / getBrokerEpoch (controller mode; called by ``add_commands``)."""
    def cmd(name: str, help_text: str, fn: Callable[..., Any]) -> argparse.ArgumentParser:
        ap = sub.add_parser(name, help=help_text, description=help_text + (
            ". Exit codes: 0 success, 1 failure, 2 usage."))
        add_ns(ap)
        ap.set_defaults(func=runner(_admin), admin_fn=fn, command_name=name)
        return ap

    ap = cmd("getSyncStateSet", "a controller-mode group's master, epoch and SyncStateSet",
             _get_sync_state_set)
    ap.add_argument("-a", "--controller-address", required=True,
                    help="controller addresses host:port;host:port")
    ap.add_argument("--cluster-secret", default=os.environ.get("RMQ_CLUSTER_SECRET"),
                    help="the controllers' clusterSecret, proved on connecting "
                         "(default: $RMQ_CLUSTER_SECRET)")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("-b", "--broker-name", help="broker (group) name")
    g.add_argument("-c", "--cluster", help="every group of this cluster")
    ap = cmd("getBrokerEpoch", "each replica's epoch entries (controller mode)",
             _get_broker_epoch)
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("-b", "--broker-name", help="broker (group) name")
    g.add_argument("-c", "--cluster", help="every group of this cluster")
