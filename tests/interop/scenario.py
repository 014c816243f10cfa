"""The differential scenario: raw remoting requests, as a client and an admin send them, replayed
against a NameServer + Broker, and the responses flattened into comparable fields.

A ``Step`` is one request (its extFields and body may depend on what earlier steps learned on the
same cluster, e.g. the physical offset a send answered). ``replay`` runs the whole scenario on one
cluster and returns, per step, a flat ``{field path: value}`` view of the response:

* ``code``, ``remark`` (addresses and offset msgIds normalised, see ``norm``);
* ``ext.<name>`` for every extField present;
* ``body...``: JSON bodies as data (``body.a.b[0]``; lists sorted, since Java serialises hash sets
  in no fixed order), stored-message bodies record by record (``body[0].queue_offset``,
  ``body[0].properties.TAGS``), ``key=value`` bodies key by key, anything else as its length.

``compare`` diffs two such views; ``ALLOWED`` is the commented list of fields that may differ.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

import attrs
import orjson
import trio

from rmq_cluster.cluster.protocol import fastjson
from rmq_cluster.cluster.protocol.message import (
    BLANK_MAGIC,
    SIZE_MAGIC,
    decode_offset_msg_id,
    decode_record,
    encode_batch,
    encode_properties,
    iter_records,
)
from rmq_cluster.cluster.remoting.client_pool import open_remoting_client
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode as RC
from rmq_cluster.cluster.remoting.errors import RemotingError

#: Steps marked ``until`` repeat (both sides alike) until their condition holds or this passes:
#: route registration and the index are asynchronous on both brokers.
EVENTUAL_TIMEOUT_S: Final = 15.0

TOPIC: Final = "InteropT"
TOPIC_AUTO: Final = "InteropAuto"
GROUP: Final = "InteropGroup"
PGROUP: Final = "InteropProducer"
CLIENT_ID: Final = "127.0.0.1@interop"
#: The born timestamp every send carries (the same on both sides, so records compare equal).
BORN_MS: Final = 1_700_000_000_000
MAX_MESSAGE_SIZE: Final = 4 * 1024 * 1024  # RocketMQ's maxMessageSize default, both brokers

FLAG_COMMIT_OFFSET: Final = 0x1
FLAG_SUSPEND: Final = 0x2
FLAG_SUBSCRIPTION: Final = 0x4

Ctx = dict[str, Any]
Ext = Mapping[str, Any] | Callable[[Ctx], Mapping[str, Any]]
Body = bytes | Callable[[Ctx], bytes]


@attrs.frozen
class Step:
    name: str
    target: str  # "namesrv" | "broker"
    code: int
    ext: Ext = attrs.field(factory=dict)
    body: Body = b""
    #: "none" | "json" | "records" | "properties" | "raw"
    body_kind: str = "none"
    #: repeat until this holds on the flat view (eventually consistent reads)
    until: Callable[[dict[str, Any]], bool] | None = None
    #: learn something from the response for later steps
    save: Callable[[Ctx, RemotingCommand], None] | None = None
    #: why this step is here (shown in failures)
    doc: str = ""
    timeout_s: float = 10.0
    #: how long ``until`` may keep repeating the step (revive and timers take longer)
    eventual_s: float = EVENTUAL_TIMEOUT_S
    #: pause between two tries of an ``until`` step
    retry_s: float = 0.1


def uniq(n: int) -> str:
    """A client-style UNIQ_KEY (32 hex), fixed per message so both sides store the same bytes.
    Hex 8..12 is FFFF: never the high half of a port, so ``norm`` tells it from an offset msgId."""
    return f"7F000001FFFF{n:020X}"


def props(**kv: str) -> str:
    return encode_properties(kv).decode()


def send_v1(topic: str, queue_id: int, n: int, *, tags: str = "TagA", keys: str = "",
            sys_flag: int = 0, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    p = {"TAGS": tags, "WAIT": "true", "UNIQ_KEY": uniq(n)}
    if keys:
        p["KEYS"] = keys
    p.update(extra or {})
    return {
        "producerGroup": PGROUP, "topic": topic, "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4", "queueId": str(queue_id), "sysFlag": str(sys_flag),
        "bornTimestamp": str(BORN_MS), "flag": "0", "properties": props(**p),
        "reconsumeTimes": "0", "unitMode": "false", "batch": "false",
    }


_V2: Final = {
    "producerGroup": "a", "topic": "b", "defaultTopic": "c", "defaultTopicQueueNums": "d",
    "queueId": "e", "sysFlag": "f", "bornTimestamp": "g", "flag": "h", "properties": "i",
    "reconsumeTimes": "j", "unitMode": "k", "maxReconsumeTimes": "l", "batch": "m",
}


def send_v2(*args: Any, **kwargs: Any) -> dict[str, str]:
    return {_V2[k]: v for k, v in send_v1(*args, **kwargs).items()}


def body_of(n: int, size: int = 0) -> bytes:
    text = f"interop message {n}".encode()
    return text if size <= 0 else (text * (size // len(text) + 1))[:size]


def pull(topic: str, queue_id: int, offset: int, sub: str = "*", *, max_nums: int = 32,
         sys_flag: int = FLAG_SUBSCRIPTION) -> dict[str, str]:
    return {
        "consumerGroup": GROUP, "topic": topic, "queueId": str(queue_id),
        "queueOffset": str(offset), "maxMsgNums": str(max_nums), "sysFlag": str(sys_flag),
        "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": sub,
        "subVersion": "0", "expressionType": "TAG",
    }


def heartbeat_body() -> bytes:
    return orjson.dumps({
        "clientID": CLIENT_ID,
        "producerDataSet": [{"groupName": PGROUP}],
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


def _save_phys(key: str) -> Callable[[Ctx, RemotingCommand], None]:
    def save(ctx: Ctx, resp: RemotingCommand) -> None:
        msg_id = resp.ext_fields.get("msgId", "").split(",")[0]
        if len(msg_id) == 32:
            ctx[key] = decode_offset_msg_id(msg_id)[1]
            ctx[key + ".msgId"] = msg_id
        if "queueOffset" in resp.ext_fields:
            ctx[key + ".queueOffset"] = int(resp.ext_fields["queueOffset"])
    return save


def _code_is(code: int) -> Callable[[dict[str, Any]], bool]:
    return lambda view: view.get("code") == code


def _max_offset_is(n: int) -> Callable[[dict[str, Any]], bool]:
    """A pull answer that shows ``n`` messages in its queue (``maxOffset``)."""
    return lambda view: view.get("ext.maxOffset") == str(n)


def _has_records(view: dict[str, Any]) -> bool:
    return any(k.startswith("body[") for k in view)


def _records_are(n: int) -> Callable[[dict[str, Any]], bool]:
    """An answer with ``n`` records: a query that stops at its first record would compare a
    half-built index when one broker indexes the second message a moment later."""
    return lambda view: f"body[{n - 1}].topic" in view and f"body[{n}].topic" not in view


L = 2**63 - 1

#: A MessageQueue as a map key in fastjson's output, made a plain "topic@broker@queue" key.
_MQ_KEY: Final = re.compile(rb'\{"brokerName":"([^"]*)","queueId":(\d+),"topic":"([^"]*)"\}:')

SCENARIO: Final[tuple[Step, ...]] = (
    # --- NameServer: routes and cluster info -------------------------------------------------
    Step("ns_route_unknown", "namesrv", RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "NoSuchTopic"},
         body_kind="json", doc="a topic nobody has: TOPIC_NOT_EXIST and the remark clients show"),
    Step("ns_route_tbw102", "namesrv", RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"},
         body_kind="json", until=_code_is(0),
         doc="autoCreateTopicEnable=true registers the default topic"),
    Step("ns_cluster_info", "namesrv", RC.GET_BROKER_CLUSTER_INFO, body_kind="json"),
    Step("ns_config", "namesrv", RC.GET_NAMESRV_CONFIG, body_kind="properties",
         doc="every key Java's NameServer answers, ours too (extension keys aside)"),
    # --- admin: create a topic; its route follows --------------------------------------------
    Step("create_topic", "broker", RC.UPDATE_AND_CREATE_TOPIC, {
        "topic": TOPIC, "defaultTopic": "TBW102", "readQueueNums": "4", "writeQueueNums": "4",
        "perm": "6", "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false",
    }),
    Step("ns_route_created", "namesrv", RC.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC},
         body_kind="json", until=_code_is(0)),
    # --- sends of every kind -----------------------------------------------------------------
    Step("send_v1", "broker", RC.SEND_MESSAGE, send_v1(TOPIC, 0, 1, keys="k1 shared"),
         body_of(1), save=_save_phys("m1")),
    Step("send_v2", "broker", RC.SEND_MESSAGE_V2, send_v2(TOPIC, 0, 2, tags="TagB", keys="k2"),
         body_of(2), save=_save_phys("m2")),
    Step("send_v2_q1", "broker", RC.SEND_MESSAGE_V2, send_v2(TOPIC, 1, 3, keys="shared"),
         body_of(3, 3000)),
    Step("send_batch", "broker", RC.SEND_BATCH_MESSAGE,
         {**send_v2(TOPIC, 2, 4), "m": "true", "i": props(WAIT="true")},
         encode_batch([(0, body_of(10 + i), {"TAGS": "TagBatch", "KEYS": f"bk{i}",
                                             "UNIQ_KEY": uniq(10 + i)}) for i in range(3)]),
         save=_save_phys("batch")),
    Step("send_auto_topic", "broker", RC.SEND_MESSAGE_V2, send_v2(TOPIC_AUTO, 0, 5), body_of(5),
         doc="a topic the broker does not know, created from TBW102 (autoCreateTopicEnable)"),
    Step("ns_route_auto", "namesrv", RC.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC_AUTO},
         body_kind="json", until=_code_is(0)),
    Step("send_batch_plain", "broker", RC.SEND_BATCH_MESSAGE,
         {**send_v2(TOPIC_AUTO, 1, 30), "m": "true", "i": props(TAGS="TagPlain", WAIT="true")},
         encode_batch([(0, body_of(30 + i), {"UNIQ_KEY": uniq(30 + i)}) for i in range(3)]),
         doc="items with a UNIQ_KEY only, TAGS from the header: our put dispatches such a "
             "batch itself (Dispatcher.dispatch_batch), not the reput"),
    # --- heartbeat and consumers -------------------------------------------------------------
    Step("heartbeat", "broker", RC.HEART_BEAT, body=heartbeat_body()),
    Step("consumer_list", "broker", RC.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": GROUP},
         body_kind="json"),
    # --- pulls with every status -------------------------------------------------------------
    # (each broker builds its ConsumeQueues a moment after the append: Java's reput service is
    # a thread of its own; poll until every message sent to the queue is there)
    Step("pull_found", "broker", RC.PULL_MESSAGE, pull(TOPIC, 0, 0), body_kind="records",
         until=_max_offset_is(2)),
    Step("pull_found_batch", "broker", RC.PULL_MESSAGE, pull(TOPIC, 2, 0), body_kind="records",
         until=_max_offset_is(3)),
    Step("pull_found_batch_plain", "broker", RC.PULL_MESSAGE, pull(TOPIC_AUTO, 1, 0),
         body_kind="records", until=_max_offset_is(3)),
    Step("send_batch_plain_again", "broker", RC.SEND_BATCH_MESSAGE,
         {**send_v2(TOPIC_AUTO, 1, 33), "m": "true", "i": props(TAGS="TagPlain", WAIT="true")},
         encode_batch([(0, body_of(33 + i), {"UNIQ_KEY": uniq(33 + i)}) for i in range(3)]),
         doc="the same into the queue made for the first (dispatched, as the pull above saw): "
             "our put finds the reput caught up and the segment there, and dispatches it"),
    Step("pull_found_batch_plain_again", "broker", RC.PULL_MESSAGE, pull(TOPIC_AUTO, 1, 3),
         body_kind="records", until=_max_offset_is(6)),
    Step("pull_found_big", "broker", RC.PULL_MESSAGE, pull(TOPIC, 1, 0), body_kind="records",
         until=_max_offset_is(1)),
    Step("pull_tag_filter", "broker", RC.PULL_MESSAGE, pull(TOPIC, 0, 0, "TagB"),
         body_kind="records", doc="the ConsumeQueue tag hash filters TagA out"),
    Step("pull_no_matched", "broker", RC.PULL_MESSAGE, pull(TOPIC, 0, 0, "TagZ"),
         body_kind="records", doc="NO_MATCHED_MSG: PULL_RETRY_IMMEDIATELY"),
    Step("pull_no_new", "broker", RC.PULL_MESSAGE, pull(TOPIC, 0, 2), body_kind="records",
         doc="offset == max: NO_NEW_MSG (no suspend flag: answered at once)"),
    Step("pull_overflow_one", "broker", RC.PULL_MESSAGE, pull(TOPIC, 0, 3), body_kind="records"),
    Step("pull_offset_illegal", "broker", RC.PULL_MESSAGE, pull(TOPIC, 0, 100),
         body_kind="records", doc="far past max: OFFSET_OVERFLOW_BADLY -> PULL_OFFSET_MOVED"),
    Step("pull_empty_queue", "broker", RC.PULL_MESSAGE, pull(TOPIC, 3, 0), body_kind="records"),
    Step("pull_empty_queue_moved", "broker", RC.PULL_MESSAGE, pull(TOPIC, 3, 5),
         body_kind="records"),
    Step("pull_max_one", "broker", RC.PULL_MESSAGE, pull(TOPIC, 2, 1, max_nums=1),
         body_kind="records"),
    Step("pull_no_subscription", "broker", RC.PULL_MESSAGE,
         {**pull(TOPIC, 0, 0), "sysFlag": "0", "consumerGroup": "NoHeartbeatGroup"},
         body_kind="records", doc="no subscription in the request and none from a heartbeat"),
    Step("pull_missing_queue", "broker", RC.PULL_MESSAGE, pull(TOPIC, 99, 0),
         body_kind="records"),
    Step("pull_unknown_topic", "broker", RC.PULL_MESSAGE, pull("NoSuchTopic", 0, 0),
         body_kind="records"),
    # --- offsets -----------------------------------------------------------------------------
    Step("update_offset", "broker", RC.UPDATE_CONSUMER_OFFSET,
         {"consumerGroup": GROUP, "topic": TOPIC, "queueId": "0", "commitOffset": "1"}),
    Step("query_offset", "broker", RC.QUERY_CONSUMER_OFFSET,
         {"consumerGroup": GROUP, "topic": TOPIC, "queueId": "0"}),
    Step("query_offset_never_committed", "broker", RC.QUERY_CONSUMER_OFFSET,
         {"consumerGroup": GROUP, "topic": TOPIC, "queueId": "1"}),
    Step("query_offset_unknown_group", "broker", RC.QUERY_CONSUMER_OFFSET,
         {"consumerGroup": "NoSuchGroup", "topic": TOPIC, "queueId": "3"}),
    Step("broker_consume_stats", "broker", RC.GET_BROKER_CONSUME_STATS, {"isOrder": "false"},
         body_kind="mq_keyed_json",
         doc="mqadmin brokerConsumeStats: every group's offsets and diff"),
    Step("max_offset", "broker", RC.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": "0"}),
    Step("max_offset_missing_queue", "broker", RC.GET_MAX_OFFSET,
         {"topic": TOPIC, "queueId": "99"}),
    Step("min_offset", "broker", RC.GET_MIN_OFFSET, {"topic": TOPIC, "queueId": "0"}),
    Step("earliest_store_time", "broker", RC.GET_EARLIEST_MSG_STORETIME,
         {"topic": TOPIC, "queueId": "0"}),
    Step("search_offset_past", "broker", RC.SEARCH_OFFSET_BY_TIMESTAMP,
         {"topic": TOPIC, "queueId": "0", "timestamp": "0"}),
    Step("search_offset_future", "broker", RC.SEARCH_OFFSET_BY_TIMESTAMP,
         {"topic": TOPIC, "queueId": "0", "timestamp": str(2**62)}),
    # --- queries by key / unique key / id ----------------------------------------------------
    Step("query_by_key", "broker", RC.QUERY_MESSAGE,
         {"topic": TOPIC, "key": "shared", "maxNum": "32", "beginTimestamp": "0",
          "endTimestamp": str(L)}, body_kind="records", until=_records_are(2),
         doc="m1 and m3 carry the key"),
    Step("query_by_uniq_key", "broker", RC.QUERY_MESSAGE,
         {"topic": TOPIC, "key": uniq(2), "maxNum": "32", "beginTimestamp": "0",
          "endTimestamp": str(L), "_UNIQUE_KEY_QUERY": "true"}, body_kind="records",
         until=_has_records),
    Step("query_by_uniq_key_batch_plain", "broker", RC.QUERY_MESSAGE,
         {"topic": TOPIC_AUTO, "key": uniq(34), "maxNum": "32", "beginTimestamp": "0",
          "endTimestamp": str(L), "_UNIQUE_KEY_QUERY": "true"}, body_kind="records",
         until=_has_records),
    Step("query_by_key_missing", "broker", RC.QUERY_MESSAGE,
         {"topic": TOPIC, "key": "no-such-key", "maxNum": "32", "beginTimestamp": "0",
          "endTimestamp": str(L)}, body_kind="records"),
    Step("view_by_id", "broker", RC.VIEW_MESSAGE_BY_ID, lambda ctx: {"offset": str(ctx["m2"])},
         body_kind="records"),
    Step("view_by_id_batch", "broker", RC.VIEW_MESSAGE_BY_ID,
         lambda ctx: {"offset": str(ctx["batch"])}, body_kind="records"),
    Step("view_by_id_missing", "broker", RC.VIEW_MESSAGE_BY_ID, {"offset": str(10**9)},
         body_kind="records"),
    # --- config and runtime info -------------------------------------------------------------
    Step("broker_config", "broker", RC.GET_BROKER_CONFIG, body_kind="properties"),
    Step("runtime_info", "broker", RC.GET_BROKER_RUNTIME_INFO, body_kind="keys",
         until=_code_is(0),
         doc="Java answers SYSTEM_ERROR until its stats were first sampled (~10 s after boot)"),
    Step("all_topic_config", "broker", RC.GET_ALL_TOPIC_CONFIG, body_kind="json"),
    # --- errors ------------------------------------------------------------------------------
    Step("error_unknown_code", "broker", 9999),
    Step("error_unknown_code_namesrv", "namesrv", 9999, timeout_s=2.0,
         doc="Java's NameServer never answers an unknown code; a short wait shows that"),
    Step("error_bad_topic", "broker", RC.SEND_MESSAGE_V2, send_v2("bad topic!", 0, 6),
         body_of(6)),
    Step("error_long_topic", "broker", RC.SEND_MESSAGE_V2, send_v2("T" * 128, 0, 6), body_of(6)),
    Step("error_send_default_topic", "broker", RC.SEND_MESSAGE_V2, send_v2("TBW102", 0, 6),
         body_of(6)),
    Step("error_oversize", "broker", RC.SEND_MESSAGE_V2, send_v2(TOPIC, 3, 7),
         body_of(7, MAX_MESSAGE_SIZE + 1)),
    Step("error_missing_queue", "broker", RC.SEND_MESSAGE_V2, send_v2(TOPIC, 99, 8), body_of(8)),
    Step("error_missing_header", "broker", RC.SEND_MESSAGE_V2,
         {k: v for k, v in send_v2(TOPIC, 0, 9).items() if k != "b"}, body_of(9)),
    Step("error_create_bad_topic", "broker", RC.UPDATE_AND_CREATE_TOPIC, {
        "topic": "bad topic!", "defaultTopic": "TBW102", "readQueueNums": "4",
        "writeQueueNums": "4", "perm": "6", "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0",
        "order": "false"}),
    # --- send-back (retry) and transactions: last, they write system topics ------------------
    Step("send_back", "broker", RC.CONSUMER_SEND_MSG_BACK, lambda ctx: {
        "group": GROUP, "offset": str(ctx["m1"]), "delayLevel": "0", "originMsgId": uniq(1),
        "originTopic": TOPIC, "unitMode": "false", "maxReconsumeTimes": "16"}),
    Step("send_half", "broker", RC.SEND_MESSAGE_V2,
         send_v2(TOPIC, 3, 20, sys_flag=4, extra={"TRAN_MSG": "true", "PGROUP": PGROUP}),
         body_of(20), save=_save_phys("half")),
    Step("end_transaction_commit", "broker", RC.END_TRANSACTION, lambda ctx: {
        "producerGroup": PGROUP, "tranStateTableOffset": str(ctx["half.queueOffset"]),
        "commitLogOffset": str(ctx["half"]), "commitOrRollback": "8",
        "fromTransactionCheck": "false", "msgId": uniq(20), "transactionId": uniq(20)}),
    Step("pull_committed", "broker", RC.PULL_MESSAGE, pull(TOPIC, 3, 0), body_kind="records",
         until=_has_records, doc="the committed half message, in its real topic"),
    Step("end_transaction_unknown", "broker", RC.END_TRANSACTION, {
        "producerGroup": PGROUP, "tranStateTableOffset": "0", "commitLogOffset": str(10**9),
        "commitOrRollback": "8", "fromTransactionCheck": "false", "msgId": uniq(21),
        "transactionId": uniq(21)}),
    Step("unregister_client", "broker", RC.UNREGISTER_CLIENT,
         {"clientID": CLIENT_ID, "producerGroup": PGROUP, "consumerGroup": GROUP}),
    Step("consumer_list_after", "broker", RC.GET_CONSUMER_LIST_BY_GROUP,
         {"consumerGroup": GROUP}, body_kind="json"),
)

# --------------------------------------------------------------------------- normalisation

_ADDR_RE: Final = re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}:\d{1,5}\b")
_MSGID_RE: Final = re.compile(r"\b[0-9A-F]{32}\b")


def norm(text: str) -> str:
    """Addresses -> ``<addr>``; offset msgIds -> ``<host>@<physical offset>`` (the host part
    names the broker's port, which differs; the offset must not)."""
    def msgid(m: re.Match[str]) -> str:
        value = m.group(0)
        if value[8:12] != "0000":
            return value  # a UNIQ_KEY (its "port" would exceed 65535), not an offset msgId
        try:
            (host, _port), offset = decode_offset_msg_id(value)
        except ValueError:
            return value
        return f"<{host}>@{offset}"

    return _MSGID_RE.sub(msgid, _ADDR_RE.sub("<addr>", text))


def _flatten(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, dict):
        if not value:
            out[prefix] = "{}"
        for k, v in value.items():
            _flatten(f"{prefix}.{norm(str(k))}", v, out)
    elif isinstance(value, list):
        if not value:
            out[prefix] = "[]"
        items = []
        for v in value:
            sub: dict[str, Any] = {}
            _flatten("", v, sub)
            items.append(sub)
        items.sort(key=lambda d: orjson.dumps(d, option=orjson.OPT_SORT_KEYS))
        for i, sub in enumerate(items):
            for k, v in sub.items():
                out[f"{prefix}[{i}]{k}"] = v
    elif isinstance(value, str):
        out[prefix] = norm(value)
    else:
        out[prefix] = value


def flatten_response(resp: RemotingCommand | None, body_kind: str) -> dict[str, Any]:
    if resp is None:
        return {"code": "NO_ANSWER"}
    out: dict[str, Any] = {"code": resp.code}
    if resp.remark:
        out["remark"] = norm(resp.remark)
    for k, v in resp.ext_fields.items():
        out[f"ext.{k}"] = norm(v)
    body = bytes(resp.body)
    if not body:
        return out
    if body_kind in ("json", "mq_keyed_json"):
        if body_kind == "mq_keyed_json":  # fastjson writes MessageQueue map keys as objects
            body = _MQ_KEY.sub(rb'"\3@\1@\2":', body)
        try:
            _flatten("body", fastjson.loads(body), out)
        except ValueError:
            out["body"] = f"<unparsable {len(body)} bytes>"
    elif body_kind == "keys":  # a KVTable of statistics: which keys, not their values
        try:
            table = fastjson.loads(body).get("table", {})
        except (ValueError, AttributeError):
            table = {}
        for k in table:
            out[f"body.table.{k}"] = "<present>"
    elif body_kind == "records":
        try:
            records = list(iter_records(body))
        except ValueError as exc:
            out["body"] = f"<bad records: {exc}>"
            return out
        for i, rec in enumerate(records):
            fields = attrs.asdict(rec)
            fields["body"] = bytes(rec.body).decode("utf-8", "replace")[:64]
            fields["body_len"] = len(rec.body)
            fields["born_host"] = "<addr>" if rec.born_host[1] else str(rec.born_host)
            fields["store_host"] = "<addr>" if rec.store_host[1] else str(rec.store_host)
            _flatten(f"body[{i}]", fields, out)
    elif body_kind == "properties":
        for line in body.decode("utf-8", "replace").splitlines():
            k, sep, v = line.partition("=")
            if sep:
                out[f"body.{k.strip()}"] = norm(v.strip())
    else:
        out["body.len"] = len(body)
    return out


# --------------------------------------------------------------------------- replay


async def _call(
    client: Any, addr: str, req: RemotingCommand, timeout: float
) -> RemotingCommand | None:
    try:
        return await client.invoke(addr, req, timeout)  # type: ignore[no-any-return]
    except RemotingError:
        return None


async def replay_async(
    namesrv_addr: str, broker_addr: str, steps: tuple[Step, ...] = SCENARIO
) -> dict[str, dict[str, Any]]:
    ctx: Ctx = {}
    views: dict[str, dict[str, Any]] = {}
    async with open_remoting_client(node="interop") as client:
        for step in steps:
            addr = namesrv_addr if step.target == "namesrv" else broker_addr
            deadline = trio.current_time() + step.eventual_s
            while True:
                try:  # built per try: a step may carry the time it is sent at
                    ext = step.ext(ctx) if callable(step.ext) else step.ext
                    body = step.body(ctx) if callable(step.body) else step.body
                except KeyError as exc:  # an earlier step did not answer what this one needs
                    resp, view = None, {"code": f"SKIPPED (no {exc} from an earlier step)"}
                    break
                req = RemotingCommand.request(step.code, ext, body)
                resp = await _call(client, addr, req, step.timeout_s)
                view = flatten_response(resp, step.body_kind)
                if step.until is None or step.until(view) or trio.current_time() > deadline:
                    break
                await trio.sleep(step.retry_s)  # polling an eventual read, with a deadline
            if resp is not None and step.save is not None:
                step.save(ctx, resp)
            views[step.name] = view
    return views


def replay(
    namesrv_addr: str, broker_addr: str, steps: tuple[Step, ...] = SCENARIO
) -> dict[str, dict[str, Any]]:
    return trio.run(replay_async, namesrv_addr, broker_addr, steps)


# --------------------------------------------------------------------------- comparison

#: Fields allowed to differ between the Java broker and ours, as (step regex, field regex).
#: Everything else must match or be listed in deviations.py.
ALLOWED: Final[tuple[tuple[str, str, str], ...]] = (
    # wall-clock time: when each broker stored a message or answered
    (r".*", r"body\[\d+\]\.store_timestamp", "store time is the broker's clock"),
    (r"earliest_store_time", r"ext\.timestamp", "store time is the broker's clock"),
    # the broker's own ports differ (both are 127.0.0.1): addresses are normalised to <addr>
    # already, and offset msgIds to host@offset, so only the port-bearing raw forms remain here
    (r"ns_.*", r"body\.brokerDatas\[\d+\]\.brokerAddrs\.0", "the broker's address (port)"),
    # the broker's config dump: paths and ports of the temp dir, host names, derived sizes
    (r"broker_config", r"body\.(storePath\w*|rocketmqHome|listenPort|haListenPort|brokerIP\d|"
     r"namesrvAddr|kvConfigPath|configStorePath|brokerName|hostName)",
     "per-run paths, ports and host names"),
    (r"ns_config", r"body\.(listenPort|kvConfigPath|configStorePath|rocketmqHome)",
     "per-run paths and ports"),
    # the store time of the last consumed message: each broker's own clock
    (r"broker_consume_stats", r"body\.consumeStatsList.*\.lastTimestamp",
     "store time is the broker's clock"),
    # a group's consumption per second over the last minute: Java's figure moves only when its
    # 10 s sampler has run twice since the pull, ours counts from the store; both are clocks
    (r"broker_consume_stats", r"body\.consumeStatsList.*\.consumeTps",
     "a rate over each broker's last minute"),
    # Java names one runtime key after the CommitLog directory (a per-run temp path)
    (r"runtime_info", r"body\.table\.commitLogDiskRatio_.*", "keyed by the store path"),
    # data versions carry a timestamp and a counter of how often the broker changed its tables
    (r".*", r"(ext|body)\.(version|dataVersion)(\..*)?", "DataVersion: timestamp + counter"),
)


#: Steps whose body keys are a node's settings: every key Java's node answers must be there
#: (with the same value unless ALLOWED); keys only ours answers are our extension keys
#: (ACL, metrics, remoting limits, HA and DLedger extras) and are not compared.
COMMON_KEYS_ONLY: Final = frozenset({"broker_config", "ns_config"})



def compare(
    step: str, java: dict[str, Any], ours: dict[str, Any],
    allowed_fields: tuple[tuple[str, str, str], ...] = ALLOWED,
) -> list[tuple[str, Any, Any]]:
    """[(field, java value, our value)] for every field that differs and is not allowed."""
    allowed = [re.compile(f) for s, f, _ in allowed_fields if re.fullmatch(s, step)]
    diffs = []
    for field in sorted(set(java) | set(ours)):
        if any(a.fullmatch(field) for a in allowed):
            continue
        if step in COMMON_KEYS_ONLY and field.startswith("body.") and field not in java:
            continue
        j, o = java.get(field, "<absent>"), ours.get(field, "<absent>")
        if j != o:
            diffs.append((field, j, o))
    return diffs


# --------------------------------------------------------------- the store, record by record


def read_commitlog(store_dir: Path) -> list[dict[str, Any]]:
    """Every record in ``store_dir/commitlog`` (RocketMQ's layout), flattened like a pull body."""
    out: list[dict[str, Any]] = []
    files = sorted((store_dir / "commitlog").glob("[0-9]" * 20))
    for path in files:
        data = memoryview(path.read_bytes())
        pos = 0
        while pos + 8 <= len(data):
            size, magic = SIZE_MAGIC.unpack_from(data, pos)
            if size == 0 or magic == BLANK_MAGIC:
                break
            rec = decode_record(data, pos)
            fields = attrs.asdict(rec)
            fields["body"] = f"crc={rec.body_crc} len={len(rec.body)}"
            fields["born_host"] = "<addr>" if rec.born_host[1] else str(rec.born_host)
            fields["store_host"] = "<addr>" if rec.store_host[1] else str(rec.store_host)
            flat: dict[str, Any] = {}
            _flatten("", fields, flat)
            out.append(flat)
            pos += size
    return out
