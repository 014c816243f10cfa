"""Pure decoders for the replica-diff: CommitLog records, ConsumeQueue units, DLedger entries.

Reads store files through its own loop (store-and-replication.md §1.3, §1.4, §7.6), each record
with the record codec's readers (``cluster.protocol.message``: the layout table, ``head_status``,
``record_tail``, ``find_property``, ``peek_field``; pure, shipped to the workers by
``package.py``); the DLedger entry layout is copied from ``dledger.log_storage``.  Nothing here
raises on bad bytes: every anomaly (torn tail, garbage, bad blank, CRC mismatch) becomes a row.

Record-aligned ranges: a CommitLog record carries its own absolute offset (PHYSICALOFFSET) after
its magic, a DLedger entry its own ``pos``; so a reader that starts anywhere in a file finds the
next record boundary by scanning for ``magic`` whose offset field names the position it sits at
(:func:`sync_commitlog`).  A range ``[lo, hi)`` yields exactly the records *starting* in it, so
any split of a file yields the same rows as a single pass.  After garbage the decoder resyncs the
same way, so the result does not depend on where the splits are.

Rows are plain tuples (the Spark hot path); :data:`ROW_FIELDS` names them.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Callable, Iterator
from typing import Final

import attrs

from ..cluster.protocol.crc import crc32
from ..cluster.protocol.message import (
    ANY_RECORD_SIZE,
    BLANK_MAGIC,
    END_FILE_MIN_BLANK_LENGTH,
    MAGIC_V1,
    OFF_MAGIC,
    OFF_PHYSICALOFFSET,
    PROP_KEYS,
    PROP_UNIQ_KEY,
    RECORD_HEADER,
    RECORD_HEADER_SIZE,
    RecordError,
    find_property,
    head_status,
    peek_field,
    record_tail,
)

# DLedger entry layout (dledger/log_storage.py; a test checks they agree).  Copied, not imported:
# the workers then need only the stdlib, attrs and cluster/protocol/{message,crc}.py (no orjson).
DL_ENTRY_MAGIC: Final = 1
DL_BLANK_MAGIC: Final = -1
DL_BODY_OFFSET: Final = 48

KIND_COMMITLOG: Final = "commitlog"
KIND_DLEDGER: Final = "dledger"

CQ_UNIT_BYTES: Final = 20
CQ_UNIT: Final = struct.Struct(">qiq")
CQ_PLACEHOLDER_SIZE: Final = 0x7FFFFFFF

#: bytes from a record's start to the end of its PHYSICALOFFSET: what a resync reads
_SYNC_HEAD_BYTES: Final = OFF_PHYSICALOFFSET + 8
_MAGIC_V1_BYTES: Final = struct.pack(">I", MAGIC_V1)
_DL_HEAD: Final = struct.Struct(">iiqqqiIIi")  # magic size index term pos channel chain bcrc blen
_DL_MAGIC_BYTES: Final = struct.pack(">i", DL_ENTRY_MAGIC)
_DL_BLANK_BYTES: Final = struct.pack(">i", DL_BLANK_MAGIC)
_BLANK_MAGIC_BYTES: Final = struct.pack(">I", BLANK_MAGIC)

# anomaly kinds
A_TORN: Final = "torn_record"
A_GARBAGE: Final = "garbage"
A_BAD_CRC: Final = "bad_crc"
A_BAD_ENTRY: Final = "bad_dledger_entry"
#: not a finding: an END_OF_FILE blank (size = the rest of the file), yielded with ``exact`` so
#: its bytes (blank header and padding) can be compared with the master's
A_EOF_BLANK: Final = "eof_blank"

ROW_FIELDS: Final = (
    "phy_offset",  # absolute CommitLog offset of the record (DLedger: entry pos + 48)
    "size",  # TOTALSIZE (or bytes skipped for an anomaly)
    "body_crc",  # stored BODYCRC (recomputed when verify_crc and it differs)
    "topic",
    "queue_id",
    "queue_offset",
    "store_ts",
    "sys_flag",
    "msg_id",  # offset msgId (storeHost ‖ phy_offset), upper-case hex
    "keys",  # KEYS property or None
    "uniq_key",  # UNIQ_KEY property or None
    "term",  # DLedger entry term, None for a plain CommitLog
    "anomaly",  # None for a good record, else an A_* kind
    "detail",
    "digest",  # with exact: crc32 of every byte (DLedger: the entry, its header included)
    "dig_head",  # with exact: crc32 of the 88-byte record header
    "dig_body",  # with exact: crc32 of the body as stored
)
Row = tuple[
    int, int, int, str | None, int | None, int | None, int | None, int | None,
    str | None, str | None, str | None, int | None, str | None, str | None,
    int | None, int | None, int | None,
]  # fmt: skip


Buffer = bytes | mmap.mmap  # a whole file: bytes (tests) or a read-only mmap (the job)


@attrs.frozen
class Segment:
    """One store file: its absolute start offset, its length and path."""

    path: str
    start: int
    length: int


@attrs.frozen
class CqUnit:
    cq_index: int
    phy_offset: int
    size: int
    tags_code: int


def list_segments(directory: str) -> list[Segment]:
    """Files named by a 20-digit start offset, sorted; other names are ignored."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    out = []
    for name in names:
        if len(name) == 20 and name.isdigit():
            path = os.path.join(directory, name)
            out.append(Segment(path, int(name), os.path.getsize(path)))
    return sorted(out, key=lambda s: s.start)


def _anomaly(phy: int, size: int, kind: str, detail: str, term: int | None = None) -> Row:
    return (phy, size, 0, None, None, None, None, None, None, None, None, term, kind, detail,
            None, None, None)  # fmt: skip


def crc_of(buf: Buffer, lo: int, hi: int) -> int:
    """crc32 of ``buf[lo:hi]`` without copying (C speed over a memory view)."""
    with memoryview(buf) as mv:
        return crc32(mv[lo:hi])


def _blank(buf: Buffer, seg_start: int, pos: int) -> Row:
    n = len(buf) - pos
    return (seg_start + pos, n, 0, None, None, None, None, None, None, None, None, None,
            A_EOF_BLANK, "END_OF_FILE blank", crc_of(buf, pos, len(buf)), None, None)  # fmt: skip


def _prop(props: bytes, key: bytes) -> str | None:
    value = find_property(props, key, 0, len(props))
    return None if value is None else value.decode("utf-8", "replace")


def decode_record_at(
    buf: Buffer, off: int, limit: int, phy: int, *, verify_crc: bool,
    term: int | None = None, exact: bool = False, entry_off: int | None = None,
) -> Row | None:
    """The record at ``buf[off:]`` (absolute offset ``phy``, must end by ``limit``) or None if
    the bytes there are not a well-formed v1 record claiming offset ``phy``.  ``exact`` adds the
    digests (whole record from ``entry_off``, default ``off``; header; body)."""
    if limit - off < RECORD_HEADER_SIZE:
        return None
    (total, magic, crc, qid, _flag, qoff, rphy, sysflag, _bts, _bh, sts, shost, _rc, _pt,
     blen) = RECORD_HEADER.unpack_from(buf, off)  # fmt: skip
    if rphy != phy or head_status(total, magic, limit - off, ANY_RECORD_SIZE) <= 0:
        return None
    try:
        tp, p0, plen = record_tail(buf, off, total, blen, sysflag)
    except RecordError:
        return None
    try:  # (a topic that is not UTF-8 is no record, as for the store)
        topic = bytes(buf[tp + 1 : p0 - 2]).decode()
    except UnicodeDecodeError:
        return None
    props = bytes(buf[p0 : p0 + plen])
    b0 = off + RECORD_HEADER_SIZE
    anomaly = detail = None
    if verify_crc:
        real = crc32(buf[b0:tp]) & 0x7FFFFFFF
        if real != crc:
            anomaly, detail = A_BAD_CRC, f"stored body crc {crc} != computed {real}"
            crc = real
    msg_id = (bytes(shost) + phy.to_bytes(8, "big", signed=True)).hex().upper()
    dig = dig_head = dig_body = None
    if exact:
        dig = crc_of(buf, off if entry_off is None else entry_off, off + total)
        dig_head = crc_of(buf, off, b0)
        dig_body = crc_of(buf, b0, tp)
    return (
        phy, total, crc, topic, qid, qoff, sts, sysflag, msg_id,
        _prop(props, PROP_KEYS), _prop(props, PROP_UNIQ_KEY), term, anomaly, detail,
        dig, dig_head, dig_body,
    )  # fmt: skip


def _is_commitlog_sync(buf: Buffer, off: int, phy: int) -> bool:
    return bytes(buf[off + OFF_MAGIC : off + OFF_MAGIC + 4]) == _MAGIC_V1_BYTES and (
        peek_field(buf, "PHYSICALOFFSET", off) == phy
    )


def _sync(
    buf: Buffer, pos: int, hi: int, magic_at: int,
    checks: tuple[tuple[bytes, Callable[[int], bool]], ...],
) -> int:
    """First ``c`` in ``[pos, hi)`` where one of the magics sits at ``c + magic_at`` and its
    check accepts ``c``; ``hi`` if none.  Each pattern is searched once per match (C speed)."""
    end = min(hi + magic_at + 4, len(buf))
    found = [buf.find(m, pos + magic_at, end) for m, _ in checks]
    while True:
        live = [(x, i) for i, x in enumerate(found) if x >= 0]
        if not live:
            return hi
        x, i = min(live)
        c = x - magic_at
        if c < hi and checks[i][1](c):
            return c
        found[i] = buf.find(checks[i][0], x + 1, end)


def sync_commitlog(buf: Buffer, seg_start: int, pos: int, hi: int) -> int:
    """The first position in ``[pos, hi)`` holding a record header that names its own offset,
    or a valid END_OF_FILE blank; ``hi`` if none."""
    length = len(buf)

    def rec(c: int) -> bool:
        return c + _SYNC_HEAD_BYTES <= length and _is_commitlog_sync(buf, c, seg_start + c)

    def blank(c: int) -> bool:
        return c + 8 <= length and struct.unpack_from(">i", buf, c)[0] == length - c

    return _sync(buf, pos, hi, OFF_MAGIC, ((_MAGIC_V1_BYTES, rec), (_BLANK_MAGIC_BYTES, blank)))


def _commitlog_boundary(buf: Buffer, seg_start: int, pos: int) -> bool:
    """A record header naming ``pos`` or the END_OF_FILE blank: where a range may start."""
    length = len(buf)
    if pos + _SYNC_HEAD_BYTES <= length and _is_commitlog_sync(buf, pos, seg_start + pos):
        return True
    if pos + 8 <= length:
        size, magic = struct.unpack_from(">iI", buf, pos)
        return bool(magic == BLANK_MAGIC and size == length - pos)
    return False


def decode_commitlog(
    buf: Buffer, seg_start: int, lo: int = 0, hi: int | None = None,
    *, verify_crc: bool = False, exact: bool = False,
) -> Iterator[Row]:
    """Records of one CommitLog file (``buf`` = the whole file) starting in ``[lo, hi)``.

    Ownership rule that makes any split equal one pass: a range owns the boundaries (see
    :func:`sync_commitlog`) in ``[lo, hi)``, and every non-boundary position its walk reaches
    (a torn tail, garbage, zeros before more records), wherever that is."""
    length = len(buf)
    hi = length if hi is None else min(hi, length)
    pos = lo
    if lo > 0:
        pos = sync_commitlog(buf, seg_start, lo, hi)
        if pos >= hi:
            return
    while pos < length:
        if pos >= hi and _commitlog_boundary(buf, seg_start, pos):
            return  # the next range's
        if length - pos < END_FILE_MIN_BLANK_LENGTH:
            if any(bytes(buf[pos:length])):
                yield _anomaly(seg_start + pos, length - pos, A_TORN, "bytes after last record")
            return
        size, magic = struct.unpack_from(">iI", buf, pos)
        if magic == BLANK_MAGIC and size == length - pos:
            if exact:
                yield _blank(buf, seg_start, pos)
            return  # END_OF_FILE blank
        if (size == 0 and magic == 0) or magic == BLANK_MAGIC:
            nxt = sync_commitlog(buf, seg_start, pos + 1, length)
        if size == 0 and magic == 0:
            if nxt >= length:
                return  # end of written data in a preallocated file
            yield _anomaly(seg_start + pos, nxt - pos, A_GARBAGE, "zeros before more records")
        elif magic == BLANK_MAGIC:
            yield _anomaly(seg_start + pos, nxt - pos, A_GARBAGE, f"bad blank size {size}")
        else:
            row = decode_record_at(buf, pos, length, seg_start + pos, verify_crc=verify_crc,
                                   exact=exact)
            if row is not None:
                yield row
                pos += row[1]
                continue
            nxt = sync_commitlog(buf, seg_start, pos + 1, length)
            if magic == MAGIC_V1 and _is_commitlog_sync(buf, pos, seg_start + pos):
                yield _anomaly(seg_start + pos, nxt - pos, A_TORN,
                               f"record header claims {size} bytes; malformed or cut")
            else:
                yield _anomaly(seg_start + pos, nxt - pos, A_GARBAGE,
                               f"no record here (magic {magic:#x})")
        if nxt >= hi:
            return
        pos = nxt


def _is_dledger_sync(buf: Buffer, off: int, pos: int) -> bool:
    return bytes(buf[off : off + 4]) == _DL_MAGIC_BYTES and (
        int.from_bytes(buf[off + 24 : off + 32], "big", signed=True) == pos
    )


def sync_dledger(buf: Buffer, seg_start: int, pos: int, hi: int) -> int:
    """The first position in ``[pos, hi)`` with an entry header naming its own pos, or a blank."""
    length = len(buf)

    def entry(c: int) -> bool:
        return c + 32 <= length and _is_dledger_sync(buf, c, seg_start + c)

    def blank(c: int) -> bool:
        return c + 8 <= length and struct.unpack_from(">i", buf, c + 4)[0] == length - c

    return _sync(buf, pos, hi, 0, ((_DL_MAGIC_BYTES, entry), (_DL_BLANK_BYTES, blank)))


def _dledger_boundary(buf: Buffer, seg_start: int, pos: int) -> bool:
    length = len(buf)
    if pos + 32 <= length and _is_dledger_sync(buf, pos, seg_start + pos):
        return True
    if pos + 8 <= length:
        magic, size = struct.unpack_from(">ii", buf, pos)
        return bool(magic == DL_BLANK_MAGIC and size == length - pos)
    return False


def decode_dledger(
    buf: Buffer, seg_start: int, lo: int = 0, hi: int | None = None,
    *, verify_crc: bool = False, exact: bool = False,
) -> Iterator[Row]:
    """CommitLog records wrapped in the DLedger entries starting in ``[lo, hi)`` of one data
    file; a record's physical offset is the entry pos + 48 (§7.7).  Same ownership rule as
    :func:`decode_commitlog`."""
    length = len(buf)
    hi = length if hi is None else min(hi, length)
    pos = lo
    if lo > 0:
        pos = sync_dledger(buf, seg_start, lo, hi)
        if pos >= hi:
            return
    while pos < length:
        if pos >= hi and _dledger_boundary(buf, seg_start, pos):
            return
        if length - pos < 8:
            if any(bytes(buf[pos:length])):
                yield _anomaly(seg_start + pos, length - pos, A_TORN, "bytes after last entry")
            return
        magic, size = struct.unpack_from(">ii", buf, pos)
        if magic == DL_BLANK_MAGIC and size == length - pos:
            if exact:
                yield _blank(buf, seg_start, pos)
            return
        epos = seg_start + pos
        if magic == DL_ENTRY_MAGIC and pos + DL_BODY_OFFSET <= length:
            _m, _s, _idx, term, hpos, _ch, _chain, _bcrc, blen = _DL_HEAD.unpack_from(buf, pos)
            fits = pos + size <= length
            if hpos == epos and blen >= 0 and blen + DL_BODY_OFFSET == size and fits:
                b0 = pos + DL_BODY_OFFSET
                if blen > 0:  # 0: a new leader's no-op entry, no record
                    row = decode_record_at(
                        buf, b0, b0 + blen, epos + DL_BODY_OFFSET, verify_crc=verify_crc,
                        term=term, exact=exact, entry_off=pos,
                    )
                    if row is not None and row[1] == blen:
                        yield row
                    else:
                        yield _anomaly(epos + DL_BODY_OFFSET, blen, A_BAD_ENTRY,
                                       "entry body is not a CommitLog record for pos+48", term)
                pos += size
                continue
        nxt = sync_dledger(buf, seg_start, pos + 1, length)
        if magic == 0 and size == 0:
            if nxt >= length:
                return
            yield _anomaly(epos, nxt - pos, A_GARBAGE, "zeros before more entries")
        elif magic == DL_ENTRY_MAGIC and _is_dledger_sync(buf, pos, epos):
            yield _anomaly(epos, nxt - pos, A_TORN, f"entry header claims {size} bytes")
        else:
            yield _anomaly(epos, nxt - pos, A_GARBAGE, f"no entry here (magic {magic})")
        if nxt >= hi:
            return
        pos = nxt


def decode_segment_range(
    kind: str, buf: Buffer, seg_start: int, lo: int = 0, hi: int | None = None,
    *, verify_crc: bool = False, exact: bool = False,
) -> Iterator[Row]:
    if kind == KIND_DLEDGER:
        return decode_dledger(buf, seg_start, lo, hi, verify_crc=verify_crc, exact=exact)
    return decode_commitlog(buf, seg_start, lo, hi, verify_crc=verify_crc, exact=exact)


def decode_cq(buf: Buffer, seg_start: int) -> Iterator[CqUnit]:
    """Units of one ConsumeQueue file (``seg_start`` = its logical byte offset); stops at the
    first all-zero unit, skips the (0, 0x7FFFFFFF, 0) placeholders."""
    first = seg_start // CQ_UNIT_BYTES
    for i in range(len(buf) // CQ_UNIT_BYTES):
        phy, size, tags = CQ_UNIT.unpack_from(buf, i * CQ_UNIT_BYTES)
        if phy == 0 and size == 0 and tags == 0:
            return
        if size == CQ_PLACEHOLDER_SIZE and phy == 0:
            continue
        yield CqUnit(first + i, phy, size, tags)
