"""The RocketMQ data source's I/O over the remoting protocol, blocking: routes, offsets and
search-by-time on the driver (``plan_read``), one pull loop per Spark partition on the
executors (``read_range``), batched sends for writes (``Sender``).

Imports only the standard library, ``attrs``, the record layout and this package, so a Spark
worker runs it from the job archive (``package.py``), with no Trio loop: one socket per
partition, one request at a time.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

import attrs

from ..cluster.protocol.message import (
    MAX_MESSAGE_SIZE_BYTES,
    MessageConst,
    encode_batch,
    encode_properties,
    record_fields,
)
from ..cluster.remoting.codes import RequestCode, ResponseCode
from .mq_model import (
    OffsetSpec,
    QueueRange,
    ReadOptions,
    SourceError,
    first_true,
    offset_specs,
    resolve_range,
    rows_of_pull,
    split_range,
    tag_set,
)
from .mq_store import plan_store_queues, read_store_range, store_queue_ends
from .mq_wire import Channel, Reply, WireError

# request and response codes (RocketMQ's RequestCode / ResponseCode)
GET_ROUTEINFO_BY_TOPIC: Final = int(RequestCode.GET_ROUTEINFO_BY_TOPIC)
PULL_MESSAGE: Final = int(RequestCode.PULL_MESSAGE)
SEARCH_OFFSET_BY_TIMESTAMP: Final = int(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP)
GET_MAX_OFFSET: Final = int(RequestCode.GET_MAX_OFFSET)
GET_MIN_OFFSET: Final = int(RequestCode.GET_MIN_OFFSET)
SEND_BATCH_MESSAGE: Final = int(RequestCode.SEND_BATCH_MESSAGE)
SUCCESS: Final = int(ResponseCode.SUCCESS)
PULL_NOT_FOUND: Final = int(ResponseCode.PULL_NOT_FOUND)
PULL_RETRY_IMMEDIATELY: Final = int(ResponseCode.PULL_RETRY_IMMEDIATELY)
PULL_OFFSET_MOVED: Final = int(ResponseCode.PULL_OFFSET_MOVED)
#: Send answers worth another try on the next queue (system error, busy, service not
#: available); anything else but the stored ones is the broker refusing the message itself.
RETRYABLE_SEND: Final = frozenset({int(ResponseCode.SYSTEM_ERROR), int(ResponseCode.SYSTEM_BUSY),
                                   int(ResponseCode.SERVICE_NOT_AVAILABLE)})
#: Stored: SUCCESS, and the flush/replica timeouts (stored on the master, as Java's client
#: reports them without a resend).
SEND_OK_CODES: Final = frozenset({SUCCESS, int(ResponseCode.FLUSH_DISK_TIMEOUT),
                                  int(ResponseCode.SLAVE_NOT_AVAILABLE),
                                  int(ResponseCode.FLUSH_SLAVE_TIMEOUT)})
#: PullSysFlag: the pull carries its own subscription (no heartbeat, no committed offset).
PULL_SUBSCRIPTION_FLAG: Final = 0x4
#: A pull loop gives up after this many answers in a row that do not move its offset.
MAX_STALLED_PULLS: Final = 100
PERM_READ: Final = 0x4
PERM_WRITE: Final = 0x2
MASTER_ID: Final = "0"


@attrs.frozen
class Route:
    """A topic's readable/writable queues and each broker's replica addresses."""

    masters: Mapping[str, str]  # broker name -> master host:port
    read_queues: Mapping[str, int]  # broker name -> readQueueNums (brokers with a replica)
    write_queues: Mapping[str, int]  # (brokers with a master)
    replicas: Mapping[str, Mapping[int, str]] = attrs.field(factory=dict)  # name -> id -> addr

    def read_addr(self, broker: str, read_from: str) -> str:
        """Where to read ``broker``'s queues (``readFrom``): its master, or its first slave;
        the other when the route lists only that one."""
        ids = self.replicas.get(broker) or {}
        slaves = sorted(i for i in ids if i != int(MASTER_ID))
        if read_from == "slave" and slaves:
            return ids[slaves[0]]
        if broker in self.masters:
            return self.masters[broker]
        if slaves:
            return ids[slaves[0]]
        raise SourceError(f"broker {broker} has no replica in the route")


def signed(ext: Mapping[str, Any], body: bytes, access_key: str | None,
           secret_key: str | None) -> Mapping[str, Any]:  # fmt: skip
    """``ext`` with ``AccessKey`` and ``Signature`` added when keys are given (plain ACL's
    HmacSHA1 over the fields as the frame carries them, then the body: the client's
    ``request_content``/``calc_signature``), else ``ext`` as it is."""
    if access_key is None or secret_key is None:
        return ext
    from ..cluster.acl.signing import (
        ACCESS_KEY,
        SIGNATURE,
        calc_signature,
        request_content,
    )

    fields = {k: ("true" if v else "false") if isinstance(v, bool) else str(v)
              for k, v in ext.items() if v is not None}  # fmt: skip
    fields[ACCESS_KEY] = access_key
    fields[SIGNATURE] = calc_signature(request_content(fields, body), secret_key)
    return fields


def call(ch: Channel, opts: ReadOptions, code: int, ext: Mapping[str, Any], body: bytes = b"",
         timeout_s: float | None = None) -> Reply:  # fmt: skip
    """One request on ``ch``, signed with the read's keys when it has them."""
    return ch.call(code, signed(ext, body, opts.access_key, opts.secret_key), body, timeout_s)


def _ok(reply: Reply, what: str, addr: str) -> Reply:
    if reply.code != SUCCESS:
        raise SourceError(f"{what} at {addr}: code {reply.code} {reply.remark or ''}".rstrip())
    return reply


def fetch_route(namesrv: Sequence[str], topic: str, timeout_s: float,
                keys: tuple[str | None, str | None] = (None, None)) -> Route:  # fmt: skip
    """GET_ROUTEINFO_BY_TOPIC from the first NameServer that answers."""
    errors = []
    for addr in namesrv:
        try:
            with Channel(addr, timeout_s) as ch:
                ext = signed({"topic": topic}, b"", *keys)
                reply = _ok(ch.call(GET_ROUTEINFO_BY_TOPIC, ext), "route", addr)
            return parse_route(bytes(reply.body))
        except (WireError, SourceError) as exc:
            errors.append(str(exc))
    raise SourceError(f"no route for topic {topic}: " + "; ".join(errors))


def parse_route(body: bytes) -> Route:
    try:
        obj = json.loads(body)
        replicas = {str(b["brokerName"]): {int(i): str(a) for i, a in
                                           (b.get("brokerAddrs") or {}).items()}
                    for b in obj.get("brokerDatas") or []}  # fmt: skip
        queues = [(str(q["brokerName"]), int(q["readQueueNums"]), int(q["writeQueueNums"]),
                   int(q["perm"])) for q in obj.get("queueDatas") or []]  # fmt: skip
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise SourceError(f"route body is not TopicRouteData: {exc!r}") from None
    replicas = {b: ids for b, ids in replicas.items() if ids}
    masters = {b: ids[int(MASTER_ID)] for b, ids in replicas.items() if int(MASTER_ID) in ids}
    return Route(
        masters=masters,
        read_queues={b: r for b, r, _w, p in queues if p & PERM_READ and b in replicas},
        write_queues={b: w for b, _r, w, p in queues if p & PERM_WRITE and b in masters},
        replicas=replicas,
    )


def _keys(opts: ReadOptions) -> tuple[str | None, str | None]:
    return opts.access_key, opts.secret_key


# --------------------------------------------------------------------------- planning


class QueueProbe:
    """The driver's questions about one queue, on one connection to its master."""

    def __init__(self, ch: Channel, opts: ReadOptions, broker: str, queue_id: int) -> None:
        self.ch, self.opts, self.broker, self.queue_id = ch, opts, broker, queue_id

    def _offset(self, code: int, what: str, extra: Mapping[str, Any] | None = None) -> int:
        ext = {"topic": self.opts.topic, "queueId": self.queue_id, **(extra or {})}
        reply = _ok(call(self.ch, self.opts, code, ext), what, self.ch.addr)
        try:
            return int(reply.ext_fields["offset"])
        except (KeyError, ValueError):
            raise SourceError(f"{what} at {self.ch.addr}: no offset in the answer") from None

    def bounds(self) -> tuple[int, int]:
        return (self._offset(GET_MIN_OFFSET, "min offset"),
                self._offset(GET_MAX_OFFSET, "max offset"))  # fmt: skip

    def store_ts(self, offset: int) -> int:
        """The store timestamp of the message at ``offset`` (one pull of one message)."""
        reply = pull_once(self.ch, self.opts, self.queue_id, offset, 1, ("*", "TAG"))
        if reply.code == SUCCESS and reply.body:
            return int(record_fields(memoryview(reply.body))[9])
        raise SourceError(f"{self.broker}/{self.queue_id}@{offset}: no message to time "
                          f"(code {reply.code})")  # fmt: skip

    def first_at_or_after(self, ts: int, lo: int, hi: int) -> int:
        """The least offset in ``[lo, hi]`` whose message was stored at or after ``ts`` (``hi``
        if none): the broker's search-by-time answer, made exact by a few one-message pulls."""
        if hi <= lo:
            return hi
        guess = self._offset(SEARCH_OFFSET_BY_TIMESTAMP, "search by time", {"timestamp": ts})
        return first_true(lambda off: self.store_ts(off) >= ts, lo, hi, guess)


def _queue_range(opts: ReadOptions, route: Route, broker: str, qid: int,
                 specs: tuple[OffsetSpec, OffsetSpec]) -> QueueRange:  # fmt: skip
    addr = route.read_addr(broker, opts.read_from)
    with Channel(addr, opts.timeout_s) as ch:
        start, end = resolve_range(QueueProbe(ch, opts, broker, qid), opts, (broker, qid), specs)
    return QueueRange(opts.topic, broker, addr, qid, start, end, opts.starting_ts,
                      opts.ending_ts)  # fmt: skip


def plan_queues(opts: ReadOptions) -> list[QueueRange]:
    """Every readable queue of the topic as one range (its start and end resolved): from
    the brokers, or from the local stores' files with ``storePath``."""
    if opts.store_paths is not None:
        return plan_store_queues(opts)
    route = fetch_route(opts.namesrv, opts.topic, opts.timeout_s, _keys(opts))
    if not route.read_queues:
        raise SourceError(f"topic {opts.topic} has no readable queue on a live broker")
    specs = offset_specs(opts, route.read_queues)
    ranges: list[QueueRange] = []
    for broker in sorted(route.read_queues):
        for qid in range(route.read_queues[broker]):
            try:
                ranges.append(_queue_range(opts, route, broker, qid, specs))
            except WireError as exc:
                raise SourceError(f"planning {broker}/{qid}: {exc}") from None
    return ranges


def plan_read(opts: ReadOptions) -> list[QueueRange]:
    """Every readable queue's range, split into at most ``max_records_per_partition``."""
    return [p for r in plan_queues(opts) for p in split_range(r, opts.max_records_per_partition)]


def queue_ends(opts: ReadOptions) -> dict[str, tuple[str, int]]:
    """``broker/queueId`` -> (master address, max offset) of every readable queue, now (with
    ``storePath``: (store root, max offset) of every queue in the stores' files)."""
    if opts.store_paths is not None:
        return store_queue_ends(opts)
    route = fetch_route(opts.namesrv, opts.topic, opts.timeout_s, _keys(opts))
    out: dict[str, tuple[str, int]] = {}
    for broker in sorted(route.read_queues):
        addr = route.read_addr(broker, opts.read_from)
        try:
            with Channel(addr, opts.timeout_s) as ch:
                for qid in range(route.read_queues[broker]):
                    out[f"{broker}/{qid}"] = (addr, QueueProbe(ch, opts, broker, qid).bounds()[1])
        except WireError as exc:
            raise SourceError(f"max offsets of {broker}: {exc}") from None
    return out


# --------------------------------------------------------------------------- the pull loop


def pull_once(ch: Channel, opts: ReadOptions, queue_id: int, offset: int, count: int,
              subscription: tuple[str, str]) -> Reply:  # fmt: skip
    expression, kind = subscription
    ext = {
        "consumerGroup": opts.group, "topic": opts.topic, "queueId": queue_id,
        "queueOffset": offset, "maxMsgNums": count, "sysFlag": PULL_SUBSCRIPTION_FLAG,
        "commitOffset": 0, "suspendTimeoutMillis": 0, "subscription": expression,
        "subVersion": 0, "expressionType": kind,
    }
    return call(ch, opts, PULL_MESSAGE, ext, timeout_s=opts.timeout_s)


def _next_offset(reply: Reply, where: str) -> int:
    try:
        return int(reply.ext_fields["nextBeginOffset"])
    except (KeyError, ValueError):
        raise SourceError(f"{where}: pull answer without nextBeginOffset") from None


def read_range(r: QueueRange, opts: ReadOptions) -> Iterator[tuple[Any, ...]]:
    """Every row of ``r``: one connection, pulls until ``r.end`` (the broker filters by
    subscription; rows are re-checked here by tag, offset and store time); a range of a
    local store (``storePath``) is read from its files."""
    if r.store is not None:
        yield from read_store_range(r, opts)
        return
    tags = tag_set(opts.tags) if opts.tags is not None else frozenset()
    where = f"{r.broker}/{r.queue_id}"
    offset, stalled = r.start, 0
    with Channel(r.addr, opts.timeout_s) as ch:
        while offset < r.end:
            count = min(opts.pull_batch, r.end - offset)
            try:
                reply = pull_once(ch, opts, r.queue_id, offset, count, opts.subscription)
            except WireError as exc:
                raise SourceError(f"pulling {where}@{offset}: {exc}") from None
            if reply.code == SUCCESS:
                yield from rows_of_pull(bytes(reply.body), r, offset, tags, opts.max_body_bytes)
            elif reply.code == PULL_OFFSET_MOVED and opts.fail_on_data_loss:
                raise SourceError(f"{where}@{offset}: offset moved (messages deleted); "
                                  "failOnDataLoss=false skips them")  # fmt: skip
            elif reply.code == PULL_NOT_FOUND:
                raise SourceError(f"{where}: the queue ends before offset {offset} "
                                  f"(the read planned up to {r.end}); {reply.remark or ''}")
            elif reply.code not in (PULL_RETRY_IMMEDIATELY, PULL_OFFSET_MOVED):
                raise SourceError(f"pulling {where}@{offset}: code {reply.code} "
                                  f"{reply.remark or ''}".rstrip())  # fmt: skip
            nxt = _next_offset(reply, where)
            stalled = stalled + 1 if nxt <= offset else 0
            if stalled >= MAX_STALLED_PULLS:
                raise SourceError(f"{where}@{offset}: {stalled} pulls without progress")
            offset = max(offset, nxt)


# --------------------------------------------------------------------------- writing

#: Messages per SEND_BATCH_MESSAGE, and the body bytes one batch may reach.
DEFAULT_WRITE_BATCH: Final = 64
MAX_BATCH_BYTES: Final = 1024 * 1024
DEFAULT_SEND_RETRIES: Final = 2
DEFAULT_PRODUCER_GROUP: Final = "rmq_spark_sink"


@attrs.frozen
class OutMessage:
    """One row to send, and where it came from (for errors)."""

    row: str  # "partition 3 row 17 (keys=...)"
    topic: str
    body: bytes
    properties: Mapping[str, str]


def out_message(row: str, topic: str, body: Any, keys: str | None, tags: str | None,
                properties: Mapping[str, str] | None) -> OutMessage:  # fmt: skip
    """Check one row and build its message; SourceError naming the row if it cannot be sent."""
    if isinstance(body, str):
        body = body.encode()
    if not isinstance(body, bytes | bytearray) or not body:
        raise SourceError(f"{row}: body must be non-empty binary or string")
    if len(body) > MAX_MESSAGE_SIZE_BYTES:
        raise SourceError(f"{row}: body of {len(body)} bytes exceeds {MAX_MESSAGE_SIZE_BYTES}")
    props = {str(k): str(v) for k, v in (properties or {}).items() if v is not None}
    if keys:
        props[MessageConst.PROPERTY_KEYS] = keys
    if tags:
        props[MessageConst.PROPERTY_TAGS] = tags
    props.setdefault(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, uuid.uuid4().hex.upper())
    for k, v in props.items():
        if not k or "\x01" in k + v or "\x02" in k + v:
            raise SourceError(f"{row}: property {k!r} is empty or holds a separator character")
    if len(encode_properties(props)) > 32767:
        raise SourceError(f"{row}: properties exceed 32767 bytes")
    return OutMessage(row, topic, bytes(body), props)


class Sender:
    """Batched SEND_BATCH_MESSAGE to the masters of each topic's writable queues, round
    robin; a batch the broker answers busy (or that fails on the wire) is retried on the next
    queue; a batch it refuses is resent one message at a time, so the error names the row."""

    def __init__(self, namesrv: Sequence[str], *, group: str = DEFAULT_PRODUCER_GROUP,
                 retries: int = DEFAULT_SEND_RETRIES, timeout_s: float = 10.0,
                 keys: tuple[str | None, str | None] = (None, None)) -> None:  # fmt: skip
        self.namesrv, self.group, self.retries, self.timeout_s = namesrv, group, retries, timeout_s
        self.keys = keys
        self._queues: dict[str, list[tuple[str, int]]] = {}
        self._addrs: dict[str, str] = {}
        self._channels: dict[str, Channel] = {}
        self._turn = 0
        self.sent = 0

    def close(self) -> None:
        for ch in self._channels.values():
            ch.close()
        self._channels.clear()

    def _targets(self, topic: str) -> list[tuple[str, int]]:
        if topic not in self._queues:
            route = fetch_route(self.namesrv, topic, self.timeout_s, self.keys)
            queues = [(b, q) for b in sorted(route.write_queues)
                      for q in range(route.write_queues[b])]  # fmt: skip
            if not queues:
                raise SourceError(f"topic {topic} has no writable queue on a live master")
            self._queues[topic] = queues
            self._addrs.update(route.masters)
        return self._queues[topic]

    def _send(self, topic: str, msgs: Sequence[OutMessage], attempt: int) -> Reply:
        queues = self._targets(topic)
        broker, qid = queues[(self._turn + attempt) % len(queues)]
        addr = self._addrs[broker]
        ch = self._channels.setdefault(addr, Channel(addr, self.timeout_s))
        body = encode_batch((0, m.body, m.properties) for m in msgs)
        ext = {"a": self.group, "b": topic, "c": "TBW102", "d": 4, "e": qid, "f": 0,
               "g": int(time.time() * 1000), "h": 0, "i": "WAIT\x01true", "j": 0, "k": False,
               "m": True, "n": broker}  # fmt: skip
        return ch.call(SEND_BATCH_MESSAGE, signed(ext, body, *self.keys), body)

    def send(self, topic: str, msgs: Sequence[OutMessage]) -> None:
        """Send ``msgs`` (one topic) as one batch; SourceError naming a row on a refusal."""
        last = ""
        for attempt in range(self.retries + 1):
            try:
                reply = self._send(topic, msgs, attempt)
            except WireError as exc:
                last = str(exc)
                continue
            if reply.code in SEND_OK_CODES:
                self._turn += 1
                self.sent += len(msgs)
                return
            last = f"code {reply.code} {reply.remark or ''}".rstrip()
            if reply.code not in RETRYABLE_SEND:
                if len(msgs) > 1:  # find the row the broker refuses
                    for m in msgs:
                        self.send(topic, [m])
                    return
                raise SourceError(f"{msgs[0].row}: the broker refused the message: {last}")
        raise SourceError(f"{msgs[0].row}..{msgs[-1].row}: not sent after "
                          f"{self.retries + 1} tries: {last}")  # fmt: skip


def send_all(sender: Sender, msgs: Iterator[OutMessage], batch: int) -> int:
    """Group ``msgs`` into batches (one topic, at most ``batch`` messages and
    MAX_BATCH_BYTES) and send each; returns how many were sent."""
    pending: list[OutMessage] = []
    size = 0
    for m in msgs:
        cost = len(m.body) + 64 + sum(len(k) + len(v) + 2 for k, v in m.properties.items())
        if pending and (pending[0].topic != m.topic or len(pending) >= batch
                        or size + cost > MAX_BATCH_BYTES):  # fmt: skip
            sender.send(pending[0].topic, pending)
            pending, size = [], 0
        pending.append(m)
        size += cost
    if pending:
        sender.send(pending[0].topic, pending)
    return sender.sent
