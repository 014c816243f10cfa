"""``spark.read.format("rocketmq")`` and ``df.write.format("rocketmq")``: a topic as a
DataFrame, through the remoting protocol (PySpark's Python Data Source API).

::

    from rmq_cluster.spark_jobs.rocketmq_source import register
    register(spark)
    df = (spark.read.format("rocketmq").option("namesrv", "127.0.0.1:9876")
          .option("topic", "Orders").load())

Read options: ``namesrv`` (``h1:9876;h2:9876``), ``topic``; ``startingOffsets`` /
``endingOffsets`` (``earliest``, ``latest`` or JSON ``{"broker-a": {"0": 10}}``, -2/-1 for
earliest/latest; default earliest/latest, the end fixed when the read is planned);
``startingTimestamp`` / ``endingTimestamp`` (ms; rows stored in ``[start, end)``, found with
the brokers' search by time); ``tags`` (``TagA || TagB``) or ``sql92`` (a SQL92 filter; the
broker needs ``enablePropertyFilter``), both applied by the broker; ``maxRecordsPerPartition``,
``pullBatchSize``, ``maxBodyBytes``, ``failOnDataLoss``, ``group``, ``timeoutMs``;
``readFrom``: ``master`` (default: each broker group's master, its slave when the route lists
no master, as RocketMQ's consumers fall back when a master is down) or ``slave`` (each group's
first slave, its master when it has none; a slave's queues end where its replication has got
to when the read is planned).

Stream (``spark.readStream.format("rocketmq")``): the same options (``startingOffsets``
defaults to ``latest``, as Kafka's source; ending options do not apply) and
``maxMessagesPerTrigger`` (a micro-batch reads at most that many offsets in all, shared among
the queues in proportion to what each has waiting); ``Trigger.AvailableNow`` stops at the
offsets current when the query starts.  Offsets live in Spark's checkpoint only.

Write (``df.write`` and ``df.writeStream``): columns ``body`` (binary or string, required),
``topic`` (else the ``topic`` option), ``keys``, ``tags``, ``properties`` (map); options
``namesrv``, ``topic``, ``batchSize``, ``retries``, ``group``, ``timeoutMs``.  Delivery is at
least once: a batch retried after a lost answer, or a micro-batch replayed after a failure,
may be stored twice.

Local files (batch reads and streams): ``storePath`` (a broker store's root, its rows named by
``broker``, default ``local``; or JSON ``{"broker-a": "/data/a", ...}``) reads the CommitLog
and ConsumeQueues directly instead of pulling (``namesrv`` not needed; ``sql92`` not
available); the Spark tasks must see the files.  A stream's micro-batches end where each
queue's ConsumeQueue ends when the batch is planned, its offsets kept in the checkpoint as
for a broker read (same keys: ``broker/queueId``).

ACL: ``accessKey`` / ``secretKey`` sign every request (reads, streams, writes) with plain
ACL's HmacSHA1, as RocketMQ's ``AclClientRPCHook`` does.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import attrs
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from .mq_arrow import record_batches
from .mq_io import (
    DEFAULT_PRODUCER_GROUP,
    DEFAULT_SEND_RETRIES,
    DEFAULT_WRITE_BATCH,
    Sender,
    out_message,
    plan_queues,
    plan_read,
    queue_ends,
    read_range,
    send_all,
)
from .mq_model import (
    SCHEMA_DDL,
    QueueRange,
    ReadOptions,
    SourceError,
    cap_offsets,
    check_name,
    credentials,
    int_option,
    namesrv_list,
    read_options,
    split_range,
)

FORMAT = "rocketmq"
WRITE_COLUMNS = frozenset({"topic", "keys", "tags", "body", "properties"})


def register(spark: Any) -> None:
    """Make ``format("rocketmq")`` known to ``spark`` (once per session)."""
    spark.dataSource.register(RocketMQDataSource)


class RangePartition(InputPartition):
    def __init__(self, value: QueueRange) -> None:
        super().__init__(value)


class RocketMQDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        return RocketMQReader(read_options(self.options), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return RocketMQWriter(dict(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return RocketMQStreamWriter(dict(self.options), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        o = {str(k).lower(): str(v) for k, v in self.options.items()}
        opts = read_options({"startingoffsets": "latest", **o})  # Kafka's default for streams
        cap = int_option(o, "maxmessagespertrigger", None, 1, 2**62)
        return RocketMQStreamReader(attrs.evolve(opts, ending="latest", ending_ts=None), cap,
                                    schema)  # fmt: skip


def _batches(r: QueueRange, opts: ReadOptions, schema: StructType) -> Iterator[Any]:
    """The rows of ``r`` as Arrow record batches in ``schema`` (Spark takes them as they
    are: no conversion row by row)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    yield from record_batches(read_range(r, opts), to_arrow_schema(schema, timezone="UTC"))


class RocketMQReader(DataSourceReader):
    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        return [RangePartition(r) for r in plan_read(self.opts)]

    def read(self, partition: InputPartition | None) -> Iterator[Any]:
        # a plan without ranges still gets one task, handed no partition
        if partition is not None and partition.value is not None:
            yield from _batches(partition.value, self.opts, self.schema)


class RocketMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of queue offsets: ``{"broker/queueId": offset}`` dicts, kept in Spark's
    checkpoint (nothing is committed to the brokers), so a restarted query resumes exactly
    where its last committed batch ended."""

    def __init__(self, opts: ReadOptions, max_per_trigger: int | None,
                 schema: StructType) -> None:  # fmt: skip
        self.opts = opts
        self.max_per_trigger = max_per_trigger
        self.schema = schema
        self._target: dict[str, int] | None = None

    def initialOffset(self) -> dict[str, int]:
        return {f"{r.broker}/{r.queue_id}": r.start for r in plan_queues(self.opts)}

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.max_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.max_per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {k: end for k, (_addr, end) in queue_ends(self.opts).items()}

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        latest = self._target
        if latest is None:
            latest = {k: end for k, (_addr, end) in queue_ends(self.opts).items()}
        cap = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return cap_offsets(start, latest, cap)

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        todo = {k: (start.get(k, 0), e) for k, e in end.items() if e > start.get(k, 0)}
        if not todo:
            return []
        addrs = {k: addr for k, (addr, _end) in queue_ends(self.opts).items()}
        files = self.opts.store_paths is not None  # addrs are store roots
        ranges = []
        for key, (lo, hi) in sorted(todo.items()):
            broker, _, qid = key.rpartition("/")
            if key not in addrs:
                raise SourceError(f"queue {key} is no longer routed to a live broker"
                                  if not files else f"queue {key} is gone from the store")
            r = QueueRange(self.opts.topic, broker, addrs[key], int(qid), lo, hi,
                           store=addrs[key] if files else None)  # fmt: skip
            ranges += split_range(r, self.opts.max_records_per_partition)
        return [RangePartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        yield from _batches(partition.value, self.opts, self.schema)

    def commit(self, end: dict[str, int]) -> None:
        return None


class SentMessage(WriterCommitMessage):
    def __init__(self, count: int) -> None:
        self.count = count


def _partition_id() -> int:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return ctx.partitionId() if ctx is not None else -1


class RocketMQWriter(DataSourceWriter):
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        o = {str(k).lower(): str(v) for k, v in options.items()}
        names = set(schema.fieldNames())
        if "body" not in names:
            raise SourceError("writing to rocketmq needs a body column")
        extra = names - WRITE_COLUMNS
        if extra:
            raise SourceError(f"columns {sorted(extra)} are not topic/keys/tags/body/properties")
        self.topic = check_name("topic", o["topic"]) if "topic" in o else None
        if self.topic is None and "topic" not in names:
            raise SourceError("writing to rocketmq needs a topic column or the topic option")
        self.namesrv = namesrv_list(o.get("namesrv"))
        self.group = check_name("group", o.get("group", DEFAULT_PRODUCER_GROUP))
        self.batch = int_option(o, "batchsize", DEFAULT_WRITE_BATCH, 1, 1024) or 1
        self.retries = int_option(o, "retries", DEFAULT_SEND_RETRIES, 0, 100) or 0
        self.timeout_s = (int_option(o, "timeoutms", 10_000, 100, 600_000) or 10_000) / 1000.0
        self.keys = credentials(o)

    def write(self, iterator: Iterator[Any]) -> SentMessage:
        part = _partition_id()
        sender = Sender(self.namesrv, group=self.group, retries=self.retries,
                        timeout_s=self.timeout_s, keys=self.keys)  # fmt: skip
        try:
            return SentMessage(send_all(sender, self._messages(iterator, part), self.batch))
        finally:
            sender.close()

    def _messages(self, rows: Iterator[Any], part: int) -> Iterator[Any]:
        for i, row in enumerate(rows):
            d = row.asDict()
            keys = d.get("keys")
            where = f"partition {part} row {i} (keys={keys!r})"
            topic = d.get("topic") or self.topic
            yield out_message(where, check_name(f"{where}: topic", topic), d.get("body"), keys,
                              d.get("tags"), d.get("properties"))  # fmt: skip

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        return None

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        return None


class RocketMQStreamWriter(DataSourceStreamWriter):
    """``writeStream.format("rocketmq")``: each micro-batch's rows sent as
    ``df.write.format("rocketmq")`` sends them (same columns and options).  At least once: a
    micro-batch replayed after a failure (its commit not yet in the checkpoint) is sent
    again."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.batch_writer = RocketMQWriter(options, schema)

    def write(self, iterator: Iterator[Any]) -> SentMessage:
        return self.batch_writer.write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        return None

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        return None
