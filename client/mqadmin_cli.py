"""``rmq-cluster <mqadmin command>``: the admin tools, under mqadmin's command names and flags.

Each command runs one ``trio.run`` through ``client/admin.py``; ``--json`` prints one JSON object.
"""

from __future__ import annotations

import argparse
import datetime
import time
from collections.abc import Callable
from typing import Any

from rmq_cluster.client.admin import Admin
from rmq_cluster.client.cli_common import add_ns, client_config, msg_row, out, runner
from rmq_cluster.client.errors import MQClientError
from rmq_cluster.cluster.acl.secret_keys import mask_secrets
from rmq_cluster.cluster.protocol.route import ClusterInfo, TopicRouteData

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
    async with Admin(client_config=client_config(args)) as admin:
        result = await args.admin_fn(admin, args)
    if args.json:
        out(result)
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
    return {"messages": [msg_row(m) | {"properties": dict(m.properties)} for m in msgs]}


async def _query_by_key(admin: Admin, args: argparse.Namespace) -> Any:
    msgs = await admin.query_msg_by_key(args.topic, args.key)
    return {"messages": [msg_row(m) for m in msgs]}


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



def add_commands(sub: Any) -> None:
    """Add the mqadmin-named commands to ``sub`` (argparse subparsers)."""
    def admin_cmd(name: str, help_text: str, fn: Callable[..., Any]) -> argparse.ArgumentParser:
        ap = sub.add_parser(name, help=help_text)
        add_ns(ap)
        ap.set_defaults(func=runner(_admin), admin_fn=fn)
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
