"""The RocketMQ data source's pure half: options, offset specs, queue ranges, rows.

No I/O and no Spark here (``mq_io.py`` talks to the brokers, ``rocketmq_source.py`` is the
``pyspark.sql.datasource`` glue).  A read is planned as one ``QueueRange`` per message queue
(``[start, end)`` in queue offsets on the queue's master), split into ranges of at most
``maxRecordsPerPartition``; each range becomes one Spark partition, read by one pull loop.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final, Protocol

import attrs

from ..cluster.protocol.message import (
    MAX_MESSAGE_SIZE_BYTES,
    SYSFLAG_COMPRESSED,
    BodyInflateError,
    MessageConst,
    RecordError,
    RecordFields,
    encode_offset_msg_id_raw,
    inflate_body,
    record_fields,
)

#: The columns every read returns, in order (Spark DDL).
SCHEMA_DDL: Final = (
    "topic STRING, broker STRING, queueId INT, queueOffset BIGINT, commitLogOffset BIGINT, "
    "msgId STRING, keys STRING, tags STRING, body BINARY, properties MAP<STRING, STRING>, "
    "bornTimestamp TIMESTAMP, storeTimestamp TIMESTAMP, bornHost STRING, storeHost STRING, "
    "reconsumeTimes INT"
)
#: A Spark partition reads at most this many queue offsets unless told otherwise.
DEFAULT_MAX_RECORDS_PER_PARTITION: Final = 100_000
#: Messages asked per pull (a broker answers at most 32: RocketMQ's default pull batch).
DEFAULT_PULL_BATCH: Final = 32
MAX_PULL_BATCH: Final = 1024
#: The consumer group named in pulls (no offset is committed under it).
DEFAULT_GROUP: Final = "rmq_spark_source"
#: Kafka's conventions inside a JSON offset spec: -2 earliest, -1 latest.
EARLIEST: Final = -2
LATEST: Final = -1
#: A JSON offset spec names at most this many queues (it is user input).
MAX_SPEC_QUEUES: Final = 65536
#: RocketMQ's topic and group names.
NAME_RE: Final = re.compile(r"^[%|a-zA-Z0-9_-]{1,127}$")
#: ``readFrom``: where a read pulls from.  ``master`` (the default) reads each broker group's
#: master, and a group whose master is gone from the route from its slave (as RocketMQ's
#: consumers fall back); ``slave`` reads each group's first slave (lowest brokerId) and its
#: master only when the route lists no slave, keeping an analysis off the masters.
READ_FROM: Final = ("master", "slave")
#: ``storePath`` as a plain path: the broker name its rows carry unless ``broker`` says.
DEFAULT_STORE_BROKER: Final = "local"
MAX_STORE_PATHS: Final = 64
MAX_KEY_CHARS: Final = 256
_TAG_SPLIT: Final = re.compile(r"\s*\|\|\s*")


class SourceError(ValueError):
    """A bad option, an unreachable or refusing broker, or data a read cannot return; the
    message says which (Spark shows it as the task's or the query's error)."""


@attrs.frozen
class ReadOptions:
    namesrv: tuple[str, ...]
    topic: str
    starting: str = "earliest"  # "earliest" | "latest" | JSON
    ending: str = "latest"
    starting_ts: int | None = None
    ending_ts: int | None = None
    tags: str | None = None  # "TagA || TagB"
    sql92: str | None = None
    group: str = DEFAULT_GROUP
    max_records_per_partition: int = DEFAULT_MAX_RECORDS_PER_PARTITION
    pull_batch: int = DEFAULT_PULL_BATCH
    max_body_bytes: int = MAX_MESSAGE_SIZE_BYTES
    fail_on_data_loss: bool = True
    timeout_s: float = 10.0
    read_from: str = "master"  # READ_FROM
    #: broker name -> a local store root: read its files instead of pulling (``storePath``)
    store_paths: Mapping[str, str] | None = None
    #: ``accessKey`` / ``secretKey``: every request signed (a cluster under ``--acl``)
    access_key: str | None = None
    secret_key: str | None = attrs.field(default=None, repr=False)

    @property
    def subscription(self) -> tuple[str, str]:
        """(expression, type) the pulls carry: the broker filters before sending."""
        if self.sql92 is not None:
            return self.sql92, "SQL92"
        return (self.tags if self.tags is not None else "*"), "TAG"


def int_option(opts: Mapping[str, str], name: str, default: int | None, lo: int, hi: int
                ) -> int | None:  # fmt: skip
    raw = opts.get(name)
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise SourceError(f"option {name}={raw!r} is not an integer") from None
    if not lo <= value <= hi:
        raise SourceError(f"option {name}={value} is outside {lo}..{hi}")
    return value


def _bool_option(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name)
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise SourceError(f"option {name}={raw!r} is not true or false")
    return text == "true"


def _choice(opts: Mapping[str, str], name: str, choices: tuple[str, ...]) -> str:
    """One of ``choices`` (case-insensitive), the first by default."""
    raw = opts.get(name)
    if raw is None:
        return choices[0]
    if raw.strip().lower() not in choices:
        raise SourceError(f"option {name}={raw!r} is not one of {', '.join(choices)}")
    return raw.strip().lower()


def namesrv_list(raw: str | None) -> tuple[str, ...]:
    addrs = tuple(a.strip() for a in (raw or "").split(";") if a.strip())
    if not addrs:
        raise SourceError("option namesrv is required (host:port[;host:port...])")
    return addrs


def check_name(what: str, name: str | None) -> str:
    if name is None or not NAME_RE.match(name):
        raise SourceError(f"{what} {name!r} is not a RocketMQ name (letters, digits, _ - | %)")
    return name


def credentials(o: Mapping[str, str]) -> tuple[str | None, str | None]:
    """(accessKey, secretKey) of lower-cased options: both or neither."""
    access, secret = o.get("accesskey") or None, o.get("secretkey") or None
    if (access is None) != (secret is None):
        raise SourceError("options accessKey and secretKey go together")
    if access is not None and not (0 < len(access) <= MAX_KEY_CHARS and access.isprintable()):
        raise SourceError("option accessKey must be 1..256 printable characters")
    return access, secret


def store_paths(raw: str | None, broker: str | None) -> dict[str, str] | None:
    """``storePath``: one store root (its rows named ``broker``, default ``local``) or JSON
    ``{"broker-a": "/data/a", ...}``."""
    if raw is None:
        return None
    text = raw.strip()
    if not text.startswith("{"):
        if not text:
            raise SourceError("option storePath is empty")
        return {check_name("broker", broker or DEFAULT_STORE_BROKER): text}
    try:
        obj = json.loads(text)
    except ValueError:
        raise SourceError("option storePath: a path or JSON {broker: path}") from None
    if not isinstance(obj, dict) or not obj or len(obj) > MAX_STORE_PATHS or not all(
            isinstance(v, str) and v for v in obj.values()):  # fmt: skip
        raise SourceError(f"option storePath: JSON of 1..{MAX_STORE_PATHS} broker: path pairs")
    return {check_name("broker", str(k)): v for k, v in obj.items()}


def read_options(opts: Mapping[str, str]) -> ReadOptions:
    """Parse a read's options (Spark hands them over case-insensitively)."""
    o = {str(k).lower(): str(v) for k, v in opts.items()}
    tags, sql92 = o.get("tags"), o.get("sql92")
    stores = store_paths(o.get("storepath"), o.get("broker"))
    if stores is not None and sql92 is not None:
        raise SourceError("option sql92 needs a broker: it does not apply to storePath reads")
    access, secret = credentials(o)
    if tags is not None and sql92 is not None:
        raise SourceError("options tags and sql92 exclude each other")
    if tags is not None and not tag_set(tags) and tags.strip() != "*":
        raise SourceError(f"option tags={tags!r} names no tag")
    parse_offset_spec(o.get("startingoffsets", "earliest"), "startingOffsets")  # checked early
    parse_offset_spec(o.get("endingoffsets", "latest"), "endingOffsets")
    return ReadOptions(
        namesrv=namesrv_list(o.get("namesrv")) if stores is None or "namesrv" in o else (),
        topic=check_name("topic", o.get("topic")),
        starting=o.get("startingoffsets", "earliest"),
        ending=o.get("endingoffsets", "latest"),
        starting_ts=int_option(o, "startingtimestamp", None, 0, 2**62),
        ending_ts=int_option(o, "endingtimestamp", None, 0, 2**62),
        tags=tags,
        sql92=sql92,
        group=check_name("group", o.get("group", DEFAULT_GROUP)),
        max_records_per_partition=int_option(
            o, "maxrecordsperpartition", DEFAULT_MAX_RECORDS_PER_PARTITION, 1, 2**62) or 1,
        pull_batch=int_option(o, "pullbatchsize", DEFAULT_PULL_BATCH, 1, MAX_PULL_BATCH) or 1,
        max_body_bytes=int_option(o, "maxbodybytes", MAX_MESSAGE_SIZE_BYTES, 1, 1 << 30) or 1,
        fail_on_data_loss=_bool_option(o, "failondataloss", True),
        timeout_s=(int_option(o, "timeoutms", 10_000, 100, 600_000) or 10_000) / 1000.0,
        read_from=_choice(o, "readfrom", READ_FROM),
        store_paths=stores,
        access_key=access,
        secret_key=secret,
    )  # fmt: skip


# --------------------------------------------------------------------------- offset specs

QueueKey = tuple[str, int]  # (broker name, queue id)
OffsetSpec = int | dict[QueueKey, int]  # EARLIEST / LATEST, or per queue


def parse_offset_spec(text: str, what: str) -> OffsetSpec:
    """``earliest`` / ``latest`` (EARLIEST / LATEST) or JSON ``{"broker-a": {"0": 5}}``;
    in JSON, -2 means earliest and -1 latest for that queue."""
    t = text.strip()
    if t.lower() == "earliest":
        return EARLIEST
    if t.lower() == "latest":
        return LATEST
    try:
        obj = json.loads(t)
    except ValueError:
        raise SourceError(f"{what}={text!r}: earliest, latest or JSON per broker and queue"
                          ) from None  # fmt: skip
    if not isinstance(obj, dict):
        raise SourceError(f"{what}: JSON must be an object of brokers")
    out: dict[QueueKey, int] = {}
    for broker, queues in obj.items():
        if not isinstance(queues, dict):
            raise SourceError(f"{what}: broker {broker!r} must map queue ids to offsets")
        for qid, off in queues.items():
            if not (str(qid).isdigit() and type(off) is int and off >= EARLIEST):
                raise SourceError(f"{what}: {broker}/{qid}: bad queue id or offset {off!r}")
            out[(str(broker), int(qid))] = off
            if len(out) > MAX_SPEC_QUEUES:
                raise SourceError(f"{what}: more than {MAX_SPEC_QUEUES} queues")
    return out


def spec_for(spec: OffsetSpec, key: QueueKey, default: int) -> int:
    if isinstance(spec, int):
        return spec
    return spec.get(key, default)


def offset_specs(opts: ReadOptions, queues: Mapping[str, int]) -> tuple[OffsetSpec, OffsetSpec]:
    """The read's (starting, ending) specs, checked against ``queues`` (broker -> how many
    queues it has): a JSON spec naming a queue the topic lacks is refused."""
    start_spec = parse_offset_spec(opts.starting, "startingOffsets")
    end_spec = parse_offset_spec(opts.ending, "endingOffsets")
    for spec, what in ((start_spec, "startingOffsets"), (end_spec, "endingOffsets")):
        if isinstance(spec, dict):
            unknown = [k for k in spec if k[0] not in queues or k[1] >= queues[k[0]]]
            if unknown:
                raise SourceError(f"{what} names queues the topic does not have: {unknown[:5]}")
    return start_spec, end_spec


class QueueBounds(Protocol):
    """What planning asks of one queue, from a broker or from a store's files."""

    def bounds(self) -> tuple[int, int]: ...

    def first_at_or_after(self, ts: int, lo: int, hi: int) -> int: ...


def resolve_offset(spec: int, lo: int, hi: int, opts: ReadOptions, what: str) -> int:
    if spec == EARLIEST:
        return lo
    if spec == LATEST:
        return hi
    if spec < lo and opts.fail_on_data_loss:
        raise SourceError(f"{what} offset {spec} is below the queue's min offset {lo} (deleted; "
                          "failOnDataLoss=false reads from the min)")  # fmt: skip
    return min(max(spec, lo), hi)


def resolve_range(probe: QueueBounds, opts: ReadOptions, key: QueueKey,
                  specs: tuple[OffsetSpec, OffsetSpec]) -> tuple[int, int]:  # fmt: skip
    """``[start, end)`` of one queue: offset specs, then timestamps (exact) if given."""
    lo, hi = probe.bounds()
    start = resolve_offset(spec_for(specs[0], key, EARLIEST), lo, hi, opts, "start")
    end = resolve_offset(spec_for(specs[1], key, LATEST), lo, hi, opts, "end")
    if opts.starting_ts is not None:
        start = probe.first_at_or_after(opts.starting_ts, lo, hi)
    if opts.ending_ts is not None:
        end = probe.first_at_or_after(opts.ending_ts, lo, hi)
    return start, max(start, end)


@attrs.frozen
class QueueRange:
    """Queue offsets ``[start, end)`` of one queue, read from the broker at ``addr``; rows
    whose storeTimestamp is outside ``[min_ts, max_ts)`` are dropped (timestamp ranges)."""

    topic: str
    broker: str
    addr: str
    queue_id: int
    start: int
    end: int
    min_ts: int | None = None
    max_ts: int | None = None
    store: str | None = None  # a local store root: read from its files, not from ``addr``


def split_range(r: QueueRange, max_records: int) -> list[QueueRange]:
    """``r`` in pieces of at most ``max_records`` offsets; an empty range is dropped."""
    if r.end <= r.start:
        return []
    step = max(1, max_records)
    return [attrs.evolve(r, start=s, end=min(r.end, s + step)) for s in range(r.start, r.end, step)]


def first_true(pred: Callable[[int], bool], lo: int, hi: int, guess: int) -> int:
    """The least ``x`` in ``[lo, hi]`` with ``pred(x)``, for a monotone ``pred`` that is
    treated as true at ``hi``; galloping out from ``guess`` (a broker's search-by-time answer
    is near the boundary), so a good guess costs a few probes."""
    if hi <= lo:
        return hi
    g = min(max(guess, lo), hi)
    if g == hi or pred(g):  # the answer is at or before g
        step, right = 1, g
        while right - step >= lo and pred(right - step):
            right -= step
            step *= 2
        left = max(lo, right - step)  # pred(left) false unless left == lo
        if left == lo and left < right and pred(lo):
            return lo
    else:
        step, left = 1, g
        while left + step < hi and not pred(left + step):
            left += step
            step *= 2
        right = min(hi, left + step)
    while right - left > 1:  # pred(left) false, pred(right) true
        mid = (left + right) // 2
        if mid < hi and not pred(mid):
            left = mid
        else:
            right = mid
    return right


def cap_offsets(start: Mapping[str, int], latest: Mapping[str, int], max_rows: int | None
                ) -> dict[str, int]:  # fmt: skip
    """The end offsets of a micro-batch from ``start``: ``latest``, or with ``max_rows`` at
    most that many offsets in all, shared in proportion to what each queue has waiting (every
    queue with messages waiting moves, while the budget lasts).  A queue new to ``start``
    starts at 0; a queue gone from ``latest`` keeps its offset."""
    begin = {k: start.get(k, 0) for k in latest}
    waiting = {k: max(0, latest[k] - begin[k]) for k in latest}
    total = sum(waiting.values())
    if max_rows is None or total <= max_rows:
        end = {k: begin[k] + waiting[k] for k in latest}
    else:
        share = {k: w * max_rows // total for k, w in waiting.items()}
        spare = max_rows - sum(share.values())
        for k in sorted(waiting, key=lambda k: (share[k] > 0, k)):  # the left-out ones first
            if spare <= 0:
                break
            if waiting[k] > share[k]:
                share[k] += 1
                spare -= 1
        end = {k: begin[k] + share[k] for k in latest}
    return {**dict(start), **end}


# --------------------------------------------------------------------------- rows


def tag_set(expression: str) -> frozenset[str]:
    """The tags of ``TagA || TagB``; empty for ``*`` (all)."""
    if expression.strip() == "*":
        return frozenset()
    return frozenset(t for t in _TAG_SPLIT.split(expression.strip()) if t)


def inflate(body: bytes, sys_flag: int, limit: int, where: str) -> bytes:
    """The body as a consumer sees it (``inflate_body``, bounded by ``limit``); a bomb or a
    corrupt body is refused with where it lies, never held."""
    try:
        return inflate_body(body, sys_flag, limit)
    except BodyInflateError as exc:
        raise SourceError(f"{where}: {exc} (maxBodyBytes={limit})") from None


def rows_of_pull(body: bytes, r: QueueRange, start: int, tags: frozenset[str],
                 max_body: int) -> Iterator[tuple[Any, ...]]:  # fmt: skip
    """Rows of a PULL_MESSAGE answer's records with queue offset in ``[start, r.end)``,
    whose tag is in ``tags`` (when given) and store time inside the range's bounds."""
    view = memoryview(body)
    pos = 0
    while pos < len(view):
        try:
            f = record_fields(view, pos)
        except RecordError as exc:
            raise SourceError(f"{r.broker}/{r.queue_id}: bad record at +{pos}: {exc}") from None
        pos += f[0]
        row = row_of(f, r, start, tags, max_body)
        if row is not None:
            yield row


def row_of(f: RecordFields, r: QueueRange, start: int, tags: frozenset[str],
           max_body: int) -> tuple[Any, ...] | None:  # fmt: skip
    """The row of one record's fields (``record_fields``), or None when it is outside
    ``[start, r.end)``, of another queue or topic, of another tag, or out of the time range.
    The columns of SCHEMA_DDL in order, in their raw form: the two timestamps in ms since the
    epoch and the two hosts as their 8 stored bytes (``mq_arrow`` makes them Spark values a
    whole column at a time)."""
    (_total, _crc, queue_id, _flag, qoff, phys, sys_flag, born_ts, born_host, store_ts,
     store_host, reconsume, _prep, payload, topic, props) = f  # fmt: skip
    if not start <= qoff < r.end or queue_id != r.queue_id or topic != r.topic:
        return None
    tag = props.get(MessageConst.PROPERTY_TAGS)
    if tags and tag not in tags:
        return None  # the broker filters by tag hash; equal hashes are told apart here
    if (r.min_ts is not None and store_ts < r.min_ts) or (
            r.max_ts is not None and store_ts >= r.max_ts):  # fmt: skip
        return None
    if sys_flag & SYSFLAG_COMPRESSED:
        payload = inflate(payload, sys_flag, max_body, f"{r.broker}/{r.queue_id}@{qoff}")
    msg_id = props.get(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or \
        encode_offset_msg_id_raw(store_host, phys)
    return (topic, r.broker, queue_id, qoff, phys, msg_id,
            props.get(MessageConst.PROPERTY_KEYS), tag, payload, props, born_ts, store_ts,
            born_host, store_host, reconsume)  # fmt: skip
