"""The CommitLog: every message of every topic, appended as v1/IPv4 records (pure; no trio).

The Trio event loop is the only writer, so an append runs start to end without yielding: that is
RocketMQ's put lock. Records are written straight into the mmap by the record codec
(``write_record``; ``store/record.py`` prepares a put's properties and a batch).
"""

from __future__ import annotations

import enum
import errno
import os
import shutil
import struct
from collections.abc import Callable
from typing import Final, NamedTuple

import structlog

from ..cluster.clock import now_ms
from ..cluster.protocol.crc import crc32
from ..cluster.protocol.message import (
    BLANK,
    BLANK_MAGIC,
    END_FILE_MIN_BLANK_LENGTH,
    MAX_TOPIC_LENGTH_BYTES,
    REC_BLANK,
    REC_CORRUPT,
    RECORD_FIXED_SIZE,
    RECORD_HEADER,
    RECORD_HEADER_SIZE,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
    SYSFLAG_TRANSACTION_MASK,
    SYSFLAG_TRANSACTION_PREPARED_TYPE,
    SYSFLAG_TRANSACTION_ROLLBACK_TYPE,
    HostAddr,
    Message,
    MessageConst,
    RecordError,
    decode_properties,
    encode_host,
    encode_offset_msg_id_raw,
    encode_properties,
    head_status,
    peek_field,
    record_tail,
    short_status,
    write_batch_records,
    write_record,
)
from .config import (
    DISK_SPACE_WARNING_LEVEL_RATIO,
    MAX_PROPERTIES_LENGTH_BYTES,
    RECORD_OVERHEAD_ALLOWANCE_BYTES,
    MessageStoreConfig,
)
from .mapped_file import DirSyncLedger, MappedFile, MappedFileQueue
from .paths import is_valid_component
from .record import (
    BatchKeys,
    batch_keys,
    parse_delay_levels,
    plan_batch,
    plan_size,
    put_properties,
    record_tags_code,
)

log = structlog.get_logger(component="commitlog")

_NO_ADVANCE_TXN: Final = (SYSFLAG_TRANSACTION_PREPARED_TYPE, SYSFLAG_TRANSACTION_ROLLBACK_TYPE)
_HOST_V6_FLAGS: Final = SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6
HOST_CACHE_MAX_ENTRIES: Final = 65536
_OFFSET_PACK: Final = struct.Struct(">q").pack  # the offset half of an offset msgId
_BAD_TOPIC: Final = (
    f"topic must be 1..{MAX_TOPIC_LENGTH_BYTES} bytes of one valid file name "
    "(no '/', '\\', NUL, '.' or '..')"
)


#: CommitLog blocks are reserved (posix_fallocate) this far ahead of the write position, so
#: that no write through the mapping lands in a hole a full disk cannot fill (SIGBUS). A
#: reservation is one open + fallocate + close per chunk of records, cheap beside the chunk's
#: puts; fallocating a whole file at creation would hold all of its disk from the start, which
#: the sparse segments of a cluster in a box avoid (bench/store.py measures puts).
RESERVE_CHUNK_BYTES: Final = 4 * 1024 * 1024


class DiskFullError(OSError):
    """No room on the disk for the CommitLog's next bytes."""


class PutMessageStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    #: controller mode: fewer SyncStateSet members than minInSyncReplicas (RocketMQ 5)
    IN_SYNC_REPLICAS_NOT_ENOUGH = "IN_SYNC_REPLICAS_NOT_ENOUGH"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPEDFILE_FAILED = "CREATE_MAPEDFILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    OS_PAGECACHE_BUSY = "OS_PAGECACHE_BUSY"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"

    @property
    def stored(self) -> bool:
        # PUT_OK by identity first: ``in`` a frozenset calls Enum.__hash__, a Python function
        return self is PutMessageStatus.PUT_OK or self in _STORED


_STORED: Final = frozenset(
    {
        PutMessageStatus.PUT_OK,
        PutMessageStatus.FLUSH_DISK_TIMEOUT,
        PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
        PutMessageStatus.SLAVE_NOT_AVAILABLE,
        PutMessageStatus.IN_SYNC_REPLICAS_NOT_ENOUGH,  # decided after the append, as the above
    }
)


class AppendMessageResult(NamedTuple):
    """Where an append landed (an immutable tuple: cheap on the per-message path)."""

    wrote_offset: int  # physical offset of the (first) record
    wrote_bytes: int
    store_timestamp: int
    logics_offset: int  # queue offset of the (first) record
    msg_num: int
    store_host_bytes: bytes
    offsets: tuple[int, ...] = ()  # every record's physical offset, batches only
    #: a batch's records as dispatch reads them (``record.batch_keys``), when asked for
    keys: BatchKeys | None = None

    @property
    def end_offset(self) -> int:
        return self.wrote_offset + self.wrote_bytes

    @property
    def msg_id(self) -> str:
        """Offset msgId; comma-separated for a batch, as RocketMQ answers a batch send."""
        if self.offsets:
            # encode_offset_msg_id_raw per record, joined: hex(host + offset as >q), upper case
            # (offsets are never negative); the host's hex is made once and the case is
            # raised once for the whole answer
            host = self.store_host_bytes.hex()
            hexes = map(bytes.hex, map(_OFFSET_PACK, self.offsets))
            return (host + ("," + host).join(hexes)).upper()
        return encode_offset_msg_id_raw(self.store_host_bytes, self.wrote_offset)


class PutMessageResult(NamedTuple):
    status: PutMessageStatus
    result: AppendMessageResult | None = None
    remark: str = ""

    @property
    def ok(self) -> bool:
        return self.status is PutMessageStatus.PUT_OK


class DispatchRequest(NamedTuple):
    topic: str
    queue_id: int
    commitlog_offset: int
    msg_size: int
    tags_code: int
    store_timestamp: int
    queue_offset: int
    keys: str
    uniq_key: str
    sys_flag: int


def _illegal(remark: str, status: PutMessageStatus = PutMessageStatus.MESSAGE_ILLEGAL) -> (
    PutMessageResult
):
    return PutMessageResult(status, None, remark)


class CommitLog:
    def __init__(self, config: MessageStoreConfig, *, clock_ms: Callable[[], int] = now_ms):
        self.config = config
        self.clock_ms = clock_ms
        self.queue = MappedFileQueue(
            config.commit_log_dir,
            config.mapped_file_size_commit_log,
            preallocate=config.warm_maped_file_enable,
            # new files' names are made durable by the next flush, before its watermark moves
            ledger=DirSyncLedger(),
        )
        self.file_size = config.mapped_file_size_commit_log
        self.topic_queue_table: dict[tuple[str, int], int] = {}
        self.max_body = config.max_message_size
        self.max_record = min(
            config.max_message_size + RECORD_OVERHEAD_ALLOWANCE_BYTES,
            self.file_size - END_FILE_MIN_BLANK_LENGTH,
        )
        self.last_store_timestamp = 0  # of the newest appended record
        self._topic_cache: dict[str, bytes] = {}
        self.check_crc_on_recover = config.check_crc_on_recover
        #: messageDelayLevel: a delayed put's schedule queue and a delayed record's tagsCode
        self.delay_levels = parse_delay_levels(config.message_delay_level)
        self._host_cache: dict[HostAddr, bytes] = {}
        #: blocks are reserved this far ahead of the writer (at most a file)
        self.reserve_chunk = min(RESERVE_CHUNK_BYTES, self.file_size)
        #: the last reservation failed for want of space (puts are refused until one succeeds)
        self.disk_full = False

    # ------------------------------------------------------------------ positions

    @property
    def min_offset(self) -> int:
        return self.queue.min_offset

    @property
    def max_offset(self) -> int:
        return self.queue.max_offset

    @property
    def flushed_offset(self) -> int:
        return self.queue.flushed_where

    def roll_next_file(self, offset: int) -> int:
        return offset + self.file_size - offset % self.file_size

    # ------------------------------------------------------------------ append

    def _topic_bytes(self, topic: str) -> bytes | None:
        tb = self._topic_cache.get(topic)
        if tb is None:
            if not is_valid_component(topic):  # it could never get a ConsumeQueue directory
                return None
            raw = topic.encode()
            if not raw or len(raw) > MAX_TOPIC_LENGTH_BYTES:
                return None
            tb = bytes((len(raw),)) + raw
            if len(self._topic_cache) < 100_000:
                self._topic_cache[topic] = tb
        return tb

    def _file_with_room(self, size: int) -> MappedFile:
        """The last file if ``size`` fits before its blank-length reserve, else seal it with a
        blank and return a new file; either way with blocks reserved for the record and the
        blank after it (``_reserve``). Raises DiskFullError when the disk cannot take them,
        OSError when a file cannot be created."""
        mf = self.queue.last_file_for_write()
        if size + END_FILE_MIN_BLANK_LENGTH > mf.remaining:
            # only 8 bytes are written; the write position jumps to the end of the file
            self._reserve(mf, min(mf.wrote + END_FILE_MIN_BLANK_LENGTH, mf.file_size))
            BLANK.pack_into(mf.mm, mf.wrote, mf.remaining, BLANK_MAGIC)
            mf.wrote = mf.file_size
            mf = self.queue.create_file(mf.file_end)
        self._reserve(mf, mf.wrote + size + END_FILE_MIN_BLANK_LENGTH)
        return mf

    def _reserve(self, mf: MappedFile, upto: int) -> None:
        """Blocks for ``mf``'s bytes up to ``upto`` (a chunk at a time) before anything is
        written there through the mapping: a write into a hole of a full disk is a SIGBUS
        that kills the process. The free space is checked first, here (once a chunk), not by
        the 10 s retention probe: refused above ``DISK_SPACE_WARNING_LEVEL_RATIO`` used (the
        rest is headroom for ConsumeQueue, index and config writes), or on ENOSPC/EDQUOT."""
        if upto <= mf.limit:
            return
        want = max(upto, mf.limit + self.reserve_chunk) - mf.limit
        try:
            usage = shutil.disk_usage(os.path.dirname(mf.path) or ".")
        except OSError:
            usage = None
        if usage is not None and usage.total:
            ratio = (usage.used + min(want, usage.free)) / usage.total
            if ratio > DISK_SPACE_WARNING_LEVEL_RATIO or want > usage.free:
                raise DiskFullError(
                    errno.ENOSPC,
                    f"the broker's disk is full: {usage.free} bytes free of {usage.total}, "
                    f"{want} more needed, writes stop above "
                    f"{DISK_SPACE_WARNING_LEVEL_RATIO:.0%} used",
                )
        try:
            mf.reserve(upto, self.reserve_chunk)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise DiskFullError(exc.errno, f"the broker's disk is full: {exc}") from exc
            raise

    def _room_refused(self, size: int) -> PutMessageResult | None:
        """``_file_with_room`` as a put's answer: None when the last file has room (reserved)
        for ``size`` bytes, else the refusal (SERVICE_NOT_AVAILABLE on a full disk, which
        the broker answers with code 14; CREATE_MAPEDFILE_FAILED for any other failure)."""
        try:
            self._file_with_room(size)
        except DiskFullError as exc:
            if not self.disk_full:
                log.error("commitlog_disk_full", error=exc.strerror)
            self.disk_full = True
            return PutMessageResult(
                PutMessageStatus.SERVICE_NOT_AVAILABLE, None, exc.strerror or str(exc)
            )
        except OSError as exc:
            log.error("create_mapped_file_failed", error=str(exc))
            return _illegal(str(exc), PutMessageStatus.CREATE_MAPEDFILE_FAILED)
        if self.disk_full:
            log.warning("commitlog_disk_writable_again")
            self.disk_full = False
        return None

    def append(self, msg: Message) -> PutMessageResult:
        sys_flag = msg.sys_flag & ~_HOST_V6_FLAGS
        txn = sys_flag & SYSFLAG_TRANSACTION_MASK
        topic, queue_id, _props, props = put_properties(
            msg.properties, msg.topic, msg.queue_id, sys_flag, self.delay_levels
        )
        body = msg.body
        topic_b = self._topic_cache.get(topic) or self._topic_bytes(topic)
        if topic_b is None:
            return _illegal(_BAD_TOPIC)
        body_len = len(body)
        props_len = len(props)
        if body_len > self.max_body:
            return _illegal(f"message body {body_len} > maxMessageSize {self.max_body}")
        if props_len > MAX_PROPERTIES_LENGTH_BYTES:
            return _illegal(
                f"properties {props_len} > {MAX_PROPERTIES_LENGTH_BYTES}",
                PutMessageStatus.PROPERTIES_SIZE_EXCEEDED,
            )
        total = RECORD_FIXED_SIZE - 1 + body_len + len(topic_b) + props_len
        if total > self.max_record:
            return _illegal(f"record {total} bytes exceeds the limit {self.max_record}")
        hosts = self._host_cache
        try:
            store_host = hosts.get(msg.store_host) or self._host_bytes(msg.store_host)
            born_host = hosts.get(msg.born_host) or self._host_bytes(msg.born_host)
        except (OSError, TypeError, struct.error) as exc:
            return _illegal(f"only IPv4 host:port is supported: {exc}")
        files = self.queue.files
        mf = files[-1] if files else None
        # ``limit``, not the file size: past the reserved blocks, reserve more first
        if mf is None or total + END_FILE_MIN_BLANK_LENGTH > mf.limit - mf.wrote:
            refused = self._room_refused(total)
            if refused is not None:
                return refused
            mf = self.queue.files[-1]
        key = (topic, queue_id)
        table = self.topic_queue_table
        if txn in _NO_ADVANCE_TXN:
            qo = 0
        else:
            qo = table.get(key, 0)
            table[key] = qo + 1
        pos = mf.wrote
        phys = mf.file_from + pos
        now = self.clock_ms()
        end = write_record(
            mf.mm, pos, total, queue_id, msg.flag, qo, phys, sys_flag, msg.born_timestamp,
            born_host, now, store_host, msg.reconsume_times, msg.prepared_transaction_offset,
            body, topic_b, props,
        )
        mf.wrote = end
        self.last_store_timestamp = now
        return PutMessageResult(
            PutMessageStatus.PUT_OK,
            AppendMessageResult(phys, total, now, qo, 1, store_host),
        )

    def _host_bytes(self, host: HostAddr) -> bytes:
        raw = encode_host(host)
        if len(self._host_cache) > HOST_CACHE_MAX_ENTRIES:
            self._host_cache.clear()
        self._host_cache[host] = raw
        return raw

    def append_batch(self, batch: Message, *, keys: bool = False) -> PutMessageResult:
        """``batch.body`` is a SEND_BATCH_MESSAGE body (§5.5); header fields apply to all items
        and ``batch.properties`` are appended to each item's properties. One pass over the item
        headers sizes the batch, a second writes every record straight into the mmap.
        ``keys``: the result also holds what dispatch reads of the records
        (``AppendMessageResult.keys``, ``record.batch_keys``), for a dispatch from the put."""
        topic_b = self._topic_bytes(batch.topic)
        if topic_b is None:
            return _illegal(_BAD_TOPIC)
        sys_flag = batch.sys_flag & ~_HOST_V6_FLAGS
        if sys_flag & SYSFLAG_TRANSACTION_MASK:
            return _illegal("batch messages cannot be transactional")
        if MessageConst.PROPERTY_DELAY_TIME_LEVEL in batch.properties:
            return _illegal("batch messages cannot be delayed")
        extra = encode_properties(batch.properties)
        src = memoryview(batch.body)
        items, remark, too_long = plan_batch(src, len(topic_b), len(extra), self.max_body)
        if not items:
            return _illegal(
                remark,
                PutMessageStatus.PROPERTIES_SIZE_EXCEEDED if too_long
                else PutMessageStatus.MESSAGE_ILLEGAL,
            )
        try:
            store_host = encode_host(batch.store_host)
            born_host = encode_host(batch.born_host)
        except (OSError, TypeError, struct.error) as exc:
            return _illegal(f"only IPv4 host:port is supported: {exc}")
        batch_size = plan_size(items)
        if batch_size > self.file_size - END_FILE_MIN_BLANK_LENGTH:
            return _illegal(f"batch of {batch_size} bytes does not fit in one CommitLog file")
        refused = self._room_refused(batch_size)
        if refused is not None:
            return refused
        mf = self.queue.files[-1]
        key = (batch.topic, batch.queue_id)
        first_qo = self.topic_queue_table.get(key, 0)
        first_phys = mf.file_from + mf.wrote
        now = self.clock_ms()
        wpos, offsets = write_batch_records(
            mf.mm, mf.wrote, mf.file_from, items, src, extra, topic_b, batch.queue_id, first_qo,
            sys_flag, batch.born_timestamp, born_host, now, store_host, batch.reconsume_times,
        )
        mf.wrote = wpos
        self.topic_queue_table[key] = first_qo + len(items)
        self.last_store_timestamp = now
        body = batch.body
        return PutMessageResult(
            PutMessageStatus.PUT_OK,
            AppendMessageResult(
                first_phys, batch_size, now, first_qo, len(items), store_host, tuple(offsets),
                batch_keys(body, items, extra, batch.topic)
                if keys and isinstance(body, bytes) else None,
            ),
        )

    # ------------------------------------------------------------------ replication

    def append_raw(self, phys_offset: int, data: bytes | memoryview) -> None:
        """Write raw CommitLog bytes (from a master) at ``phys_offset``, which must be our end
        (or, for an empty log, a file boundary). Raises ValueError otherwise."""
        if self.queue.files:
            if phys_offset != self.max_offset:
                raise ValueError(
                    f"append_raw at {phys_offset}, but the log ends at {self.max_offset}"
                )
        elif phys_offset % self.file_size:
            raise ValueError(f"an empty log must start at a file boundary, not {phys_offset}")
        view = memoryview(data)
        start_if_empty = phys_offset
        while len(view):
            mf = self.queue.last_file_for_write(start_if_empty)
            end = min(mf.file_size, mf.wrote + len(view))
            if end > mf.limit:
                self._reserve(mf, end)  # DiskFullError (an OSError) on a full disk
            n = mf.append(view)
            view = view[n:]

    def read_raw(self, phys_offset: int, max_bytes: int) -> memoryview | None:
        """Up to ``max_bytes`` written bytes from ``phys_offset``, never crossing a file."""
        mf = self.queue.find(phys_offset)
        if mf is None:
            return None
        pos = phys_offset - mf.file_from
        end = min(mf.wrote, pos + max_bytes)
        if end < pos:
            return None
        return mf.view[pos:end]

    # ------------------------------------------------------------------ reads

    def get_message(self, phys_offset: int, size: int) -> memoryview | None:
        return self.queue.read(phys_offset, size)

    def pickup_store_timestamp(self, phys_offset: int, size: int) -> int:
        view = self.queue.read(phys_offset, min(size, RECORD_HEADER_SIZE))
        if view is None:
            return -1
        try:
            return peek_field(view, "STORETIMESTAMP")
        except struct.error:
            return -1
        finally:
            view.release()

    # ------------------------------------------------------------------ record checks

    def check_record(
        self,
        buf: memoryview,
        pos: int,
        base: int,
        *,
        check_crc: bool,
        strict: bool,
        want_request: bool = True,
    ) -> tuple[int, DispatchRequest | None]:
        """Validate the record at ``pos`` of ``buf`` (a file view; ``base`` = its file offset)
        with the codec's readers (``head_status``, ``record_tail``); ``strict`` (recovery)
        also wants the record to name its own offset and no NUL in its topic or properties
        (a torn write leaves zeros). Returns (size, request) or (REC_EMPTY / REC_BLANK /
        REC_INCOMPLETE / REC_CORRUPT, None)."""
        end = len(buf)
        if end - pos < RECORD_HEADER_SIZE:
            return short_status(buf, pos, end, self.max_record), None
        (
            total, magic, crc, queue_id, _flag, queue_offset, phys, sys_flag, _born, _bh,
            store_ts, _sh, _rc, _pt, body_len,
        ) = RECORD_HEADER.unpack_from(buf, pos)
        status = head_status(total, magic, end - pos, self.max_record)
        if status <= 0:
            return status, None
        try:
            tp, p0, props_len = record_tail(buf, pos, total, body_len, sys_flag)
        except RecordError:
            return REC_CORRUPT, None
        topic_raw = bytes(buf[tp + 1 : p0 - 2])
        props_raw = bytes(buf[p0 : p0 + props_len])
        if strict and (phys != base + pos or b"\0" in topic_raw or b"\0" in props_raw):
            return REC_CORRUPT, None
        body_at = pos + RECORD_HEADER_SIZE
        if check_crc and (crc32(buf[body_at:tp]) & 0x7FFFFFFF) != crc:
            return REC_CORRUPT, None
        try:
            topic = topic_raw.decode()
        except UnicodeDecodeError:
            return REC_CORRUPT, None
        if not want_request:
            return total, None
        props = decode_properties(props_raw) if props_len else {}
        code = record_tags_code(topic, props, store_ts, self.delay_levels)
        return total, DispatchRequest(
            topic, queue_id, phys, total, code, store_ts, queue_offset,
            props.get(MessageConst.PROPERTY_KEYS, ""),
            props.get(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, ""),
            sys_flag,
        )

    def scan_valid_end(self, start_index: int, *, check_crc: bool) -> int:
        """Scan files from ``files[start_index]``; the offset just past the last valid record
        (a blank moves to the next file; the first bad record ends the scan)."""
        files = self.queue.files
        if not files:
            return 0
        start_index = max(0, min(start_index, len(files) - 1))
        process = files[start_index].file_from
        for mf in files[start_index:]:
            buf = mf.view
            pos = 0
            while True:
                size, _req = self.check_record(
                    buf, pos, mf.file_from, check_crc=check_crc, strict=True, want_request=False
                )
                if size > 0:
                    pos += size
                    process = mf.file_from + pos
                    continue
                if size == REC_BLANK:
                    process = mf.file_end
                    break
                return process
        return process

    def first_store_timestamp(self, mf: MappedFile) -> int:
        size, req = self.check_record(mf.view, 0, mf.file_from, check_crc=False, strict=True)
        if size > 0 and req is not None:
            return req.store_timestamp
        return -1

    def close(self) -> None:
        self.queue.close()
