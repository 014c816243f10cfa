"""IndexFile: a hash index from ``topic#key`` to CommitLog offsets (pure; no trio).

Layout (big-endian): a 40-byte header (beginTimestamp i64, endTimestamp i64, beginPhyOffset i64,
endPhyOffset i64, hashSlotCount i32, indexCount i32 — starts at 1), then ``slots`` × i32 slot
heads, then ``entries`` × 20-byte entries (keyHash i32, phyOffset i64, timeDiff i32 seconds,
prevIndex i32). Files are named by creation time ``yyyyMMddHHmmssSSS`` (local time).
"""

from __future__ import annotations

import operator
import os
import struct
import time
from collections.abc import Callable
from typing import Final

import structlog

from ..cluster.protocol.message import (
    SYSFLAG_TRANSACTION_MASK,
    SYSFLAG_TRANSACTION_ROLLBACK_TYPE,
    index_key_hash,
)
from .commitlog import DispatchRequest
from .mapped_file import MappedFile

log = structlog.get_logger(component="index")

HEADER: Final = struct.Struct(">qqqqii")
HEADER_SIZE: Final = 40
SLOT: Final = struct.Struct(">i")
SLOT_SIZE: Final = 4
ENTRY: Final = struct.Struct(">iqii")
ENTRY_SIZE: Final = 20
INVALID_INDEX: Final = 0
INT_MAX: Final = 0x7FFFFFFF
MAX_QUERY_RESULTS: Final = 64  # RocketMQ maxMsgsNumBatch
_HASH_UNITS: Final = 512  # longer index keys take index_key_hash
TOPIC_PREFIX_CACHE_MAX_ENTRIES: Final = 100_000


_MASK32: Final = 0xFFFFFFFF
_POW31_DESC: Final = [pow(31, k, 1 << 32) for k in range(_HASH_UNITS - 1, -1, -1)]
_POW31: Final = [pow(31, k, 1 << 32) for k in range(_HASH_UNITS + 1)]  # 31**k mod 2**32
_TAIL: Final = 8
_POW31_TAIL: Final = _POW31[_TAIL]
_POW31_DESC_TAIL: Final = _POW31_DESC[_HASH_UNITS - _TAIL :]
_HEAD_CACHE_MAX_ENTRIES: Final = 1 << 16
_head_hashes: dict[bytes, int] = {}
_head2_hashes: dict[bytes, int] = {}
#: hash contribution of two bytes (a, b) read as the 16-bit ``a << 8 | b``: a * 31 + b
_PAIR: Final = tuple((x >> 8) * 31 + (x & 0xFF) for x in range(1 << 16))
_POW31_2: Final = 31 * 31


def _ascii_hash(raw: bytes) -> int:
    """Java ``hashCode`` mod 2**32 of ASCII ``raw`` (at most _HASH_UNITS bytes). The hash of
    all but the last 2 bytes is remembered: keys such as UNIQ_KEY share long heads (client
    address, pid, time, the high part of a counter), so usually only a table look-up of the
    last two bytes is left (even multiplying out an 8-byte tail shows in bench/store.py)."""
    n = len(raw)
    if n <= _TAIL + 4:
        return sum(map(operator.mul, raw, _POW31_DESC[_HASH_UNITS - n :])) & _MASK32
    head = raw[:-2]
    hh = _head2_hashes.get(head)
    if hh is None:
        hh = _head2_hash(head)
    return (hh * _POW31_2 + _PAIR[(raw[-2] << 8) | raw[-1]]) & _MASK32


def _head2_hash(head: bytes) -> int:
    """The hash of a key's head (all but its last two bytes), remembered."""
    hh = _ascii_hash8(head)
    if len(_head2_hashes) >= _HEAD_CACHE_MAX_ENTRIES:
        _head2_hashes.clear()
    _head2_hashes[head] = hh
    return hh


def _ascii_hash8(raw: bytes) -> int:
    """``_ascii_hash`` of a key longer than 12 bytes through a cache of all but its last 8."""
    n = len(raw)
    cut = n - _TAIL
    head = raw[:cut]
    hh = _head_hashes.get(head)
    if hh is None:
        hh = sum(map(operator.mul, head, _POW31_DESC[_HASH_UNITS - cut :])) & _MASK32
        if len(_head_hashes) >= _HEAD_CACHE_MAX_ENTRIES:
            _head_hashes.clear()
        _head_hashes[head] = hh
    return (hh * _POW31_TAIL + sum(map(operator.mul, raw[cut:], _POW31_DESC_TAIL))) & _MASK32


def _abs_hash(h: int) -> int:
    """Unsigned 32-bit hashCode -> the IndexFile key hash (abs; MIN_VALUE -> 0)."""
    if h & 0x80000000:
        h = 0x100000000 - h
        return 0 if h == 0x80000000 else h
    return h


def _key_hash(key: str) -> int:
    """``index_key_hash`` without its cache: index keys (UNIQ_KEY above all) rarely repeat."""
    if len(key) <= _HASH_UNITS and key.isascii():
        return _abs_hash(_ascii_hash(key.encode()))
    return index_key_hash(key)


_ENTRY_PACK: Final = ENTRY.pack_into
_SLOT_PACK: Final = SLOT.pack_into
_SLOT_UNPACK: Final = SLOT.unpack_from


def index_file_size(slots: int, entries: int) -> int:
    return HEADER_SIZE + slots * SLOT_SIZE + entries * ENTRY_SIZE


def index_file_name(ms: int) -> str:
    t = time.localtime(ms // 1000)
    return time.strftime("%Y%m%d%H%M%S", t) + f"{ms % 1000:03d}"


class IndexFile:
    def __init__(self, path: str, slots: int, entries: int, *, create: bool) -> None:
        self.path = path
        self.slots = slots
        self.entries = entries
        self.mf = MappedFile(path, 0, index_file_size(slots, entries), create=create)
        self.mf.wrote = self.mf.file_size
        self.mm = self.mf.mm
        self.entries_base = HEADER_SIZE + slots * SLOT_SIZE
        if create:
            self.begin_ts = self.end_ts = 0
            self.begin_phy = self.end_phy = 0
            self.slot_count = 0
            self.index_count = 1
            self._write_header()
        else:
            (
                self.begin_ts, self.end_ts, self.begin_phy, self.end_phy, self.slot_count,
                self.index_count,
            ) = HEADER.unpack_from(self.mm, 0)
            if self.index_count < 1:
                self.index_count = 1

    def _write_header(self) -> None:
        HEADER.pack_into(
            self.mm, 0, self.begin_ts, self.end_ts, self.begin_phy, self.end_phy,
            self.slot_count, self.index_count,
        )

    def is_full(self) -> bool:
        return self.index_count >= self.entries

    def put_key(self, key: str, phys: int, store_ts: int) -> bool:
        """Add one entry; the header is written by ``write_header`` (the dispatcher does it
        once per round: a crash in between leaves a header whose count is behind, and every
        reader already ignores slot heads and chains at or past ``index_count``)."""
        return self.put_hash(_key_hash(key), phys, store_ts)

    def put_hash(self, h: int, phys: int, store_ts: int) -> bool:
        n = self.index_count
        if n >= self.entries:
            return False
        mm = self.mm
        slot_pos = HEADER_SIZE + (h % self.slots) * SLOT_SIZE
        (prev,) = _SLOT_UNPACK(mm, slot_pos)
        if prev <= INVALID_INDEX or prev > n:
            prev = INVALID_INDEX
            self.slot_count += 1
        begin_ts = self.begin_ts
        if begin_ts <= 0:
            diff = 0
        else:
            diff = (store_ts - begin_ts) // 1000
            if diff > INT_MAX:
                diff = INT_MAX
            elif diff < 0:
                diff = 0
        _ENTRY_PACK(mm, self.entries_base + n * ENTRY_SIZE, h, phys, diff, prev)
        _SLOT_PACK(mm, slot_pos, n)
        if n <= 1:
            self.begin_phy = phys
            self.begin_ts = store_ts
        self.index_count = n + 1
        self.end_phy = phys
        self.end_ts = store_ts
        return True

    def write_header(self) -> None:
        self._write_header()

    def time_matched(self, begin: int, end: int) -> bool:
        return (begin < self.begin_ts and end > self.end_ts) or (
            self.begin_ts <= begin <= self.end_ts
        ) or (self.begin_ts <= end <= self.end_ts)

    def select(self, key: str, max_num: int, begin: int, end: int, out: list[int]) -> None:
        """Append phy offsets of entries whose hash matches and whose time lies in
        [begin, end]; the caller must compare the key with the message itself."""
        h = index_key_hash(key)
        (cur,) = SLOT.unpack_from(self.mm, HEADER_SIZE + (h % self.slots) * SLOT_SIZE)
        base = HEADER_SIZE + self.slots * SLOT_SIZE
        seen = 0
        while INVALID_INDEX < cur < self.index_count and len(out) < max_num:
            kh, phys, diff, prev = ENTRY.unpack_from(self.mm, base + cur * ENTRY_SIZE)
            if diff < 0:
                break
            t = self.begin_ts + diff * 1000
            if kh == h and begin <= t <= end:
                out.append(phys)
            # chains run newest to oldest: nothing further back can be inside the range
            if prev <= INVALID_INDEX or prev > self.index_count or prev == cur or t < begin:
                break
            cur = prev
            seen += 1
            if seen > self.index_count:
                break

    def flush(self) -> None:
        self.mf.flush_range(0, self.mf.file_size)

    def close(self) -> bool:
        return self.mf.close()

    def destroy(self) -> bool:
        return self.mf.destroy()


_FIRST: Final = operator.itemgetter(0)


def _plain_stretches(ph: int, run: list[tuple[bytes, int, int]]) -> list[tuple[int, int]]:
    """(start, end) of each stretch of ``run`` whose keys ``_index_stretch`` hashes: ASCII
    keys of one length above 12 bytes and at most ``_HASH_UNITS`` (client UNIQ_KEYs) under an
    ASCII topic (``ph`` >= 0). The usual run (one client's keys) is checked at C speed; a
    mixed one key by key, once."""
    if ph < 0 or not run:
        return []
    keys = list(map(_FIRST, run))
    ulen = len(keys[0])
    if (
        _TAIL + 4 < ulen <= _HASH_UNITS
        and set(map(len, keys)) == {ulen}
        and b"".join(keys).isascii()
    ):
        return [(0, len(run))]
    out = []
    start, last = -1, -1
    for i, key in enumerate(keys):
        n = len(key)
        plain = _TAIL + 4 < n <= _HASH_UNITS and key.isascii()
        if start >= 0 and (not plain or n != last):
            out.append((start, i))
            start = -1
        if plain and start < 0:
            start, last = i, n
    if start >= 0:
        out.append((start, len(keys)))
    return out


def _index_stretch(f: IndexFile, ph: int, run: list[tuple[bytes, int, int]]) -> None:
    """The entries of a stretch of plain keys (``_plain_stretches``) into ``f``, in one tight
    pass that checks nothing per record: the caller saw to room in ``f`` for every entry,
    ``f``'s first entry written (its begin time set) and the first offset past ``f``'s end
    (offsets rise along a run, so none is a replay). The hashes are ``_key_hash``'s of
    ``topic#key`` (a key's head of all but two bytes hashed once per change); entries, slot
    heads and counters ``put_hash``'s; the time difference is computed once per store time."""
    n, slot_count, begin_ts = f.index_count, f.slot_count, f.begin_ts
    mm, slots = f.mm, f.slots
    pair, heads, unpack_slot, pack_slot, pack_entry = (
        _PAIR, _head2_hashes, _SLOT_UNPACK, _SLOT_PACK, _ENTRY_PACK
    )
    prefix_part = ph * _POW31[len(run[0][0])]  # hash(topic#) * 31**len(key)
    last_head = b"\xff"  # (no ASCII key starts with it)
    base = 0  # hash(topic#) * 31**len(key) + hash(head) * 31**2
    last_ts, diff = None, 0
    at = f.entries_base + n * ENTRY_SIZE
    for uniq, phys, store_ts in run:
        if not uniq.startswith(last_head):
            last_head = uniq[:-2]
            hh = heads.get(last_head)
            base = prefix_part + (_head2_hash(last_head) if hh is None else hh) * _POW31_2
        h = (base + pair[(uniq[-2] << 8) | uniq[-1]]) & _MASK32
        if h & 0x80000000:  # abs of the signed hashCode; MIN_VALUE -> 0
            h = 0x100000000 - h
            if h == 0x80000000:
                h = 0
        slot_pos = HEADER_SIZE + (h % slots) * SLOT_SIZE
        (prev,) = unpack_slot(mm, slot_pos)
        if prev <= INVALID_INDEX or prev > n:
            prev = INVALID_INDEX
            slot_count += 1
        if store_ts != last_ts:
            last_ts = store_ts
            diff = 0 if begin_ts <= 0 else min(max((store_ts - begin_ts) // 1000, 0), INT_MAX)
        pack_entry(mm, at, h, phys, diff, prev)
        pack_slot(mm, slot_pos, n)
        at += ENTRY_SIZE
        n += 1
    f.index_count, f.slot_count = n, slot_count
    _key, f.end_phy, f.end_ts = run[-1]


class IndexService:
    def __init__(
        self, directory: str, slots: int, entries: int, *, clock_ms: Callable[[], int]
    ) -> None:
        self.directory = directory
        self.slots = slots
        self.entries = entries
        self.clock_ms = clock_ms
        self.files: list[IndexFile] = []
        self.on_file_full: Callable[[IndexFile], None] | None = None
        self._prefix_hashes: dict[str, int] = {}

    def load(self) -> None:
        if not os.path.isdir(self.directory):
            return
        size = index_file_size(self.slots, self.entries)
        for name in sorted(os.listdir(self.directory)):
            path = os.path.join(self.directory, name)
            if not (len(name) == 17 and name.isdigit()):
                continue
            if os.path.getsize(path) != size:
                log.warning("index_file_size_mismatch_deleted", path=path)
                os.unlink(path)
                continue
            self.files.append(IndexFile(path, self.slots, self.entries, create=False))

    def truncate_beyond(self, phys_end: int, index_ts: int | None) -> int | None:
        """Delete files holding offsets >= ``phys_end`` (or newer than ``index_ts``); returns
        the lowest begin offset among them (dispatch must rebuild from there), or None."""
        rebuild: int | None = None
        keep: list[IndexFile] = []
        for f in self.files:
            # an empty file seeded from a dirty predecessor carries its stale end offset too
            used = f.index_count > 1 or f.end_phy > 0
            dirty = used and (
                f.end_phy >= phys_end or (index_ts is not None and f.end_ts > index_ts)
            )
            if dirty:
                rebuild = f.begin_phy if rebuild is None else min(rebuild, f.begin_phy)
                f.destroy()
            else:
                keep.append(f)
        self.files = keep
        return rebuild

    @property
    def end_phy(self) -> int:
        return self.files[-1].end_phy if self.files else 0

    def _writable(self) -> IndexFile:
        last = self.files[-1] if self.files else None
        if last is not None and not last.is_full():
            return last
        if last is not None:
            last.write_header()
        os.makedirs(self.directory, exist_ok=True)
        ms = self.clock_ms()
        name = index_file_name(ms)
        while os.path.exists(os.path.join(self.directory, name)) or (
            self.files and name <= os.path.basename(self.files[-1].path)
        ):
            ms += 1
            name = index_file_name(ms)
        f = IndexFile(os.path.join(self.directory, name), self.slots, self.entries, create=True)
        if last is not None:
            f.begin_phy = f.end_phy = last.end_phy
            f.begin_ts = f.end_ts = last.end_ts
            f._write_header()
            if self.on_file_full is not None:
                self.on_file_full(last)
        self.files.append(f)
        return f

    def _file_for(self, phys: int) -> IndexFile | None:
        """The file the entries of the record at ``phys`` go into: the newest, or a new one
        when it is full (whose end is the full one's); None when the record is indexed
        already (a replayed dispatch). ``index_raw_keys``' usual record and
        ``index_uniq_run`` decide the same inline."""
        files = self.files
        f = files[-1] if files else None
        if f is None or f.index_count >= f.entries:
            f = self._writable()
        if (f.index_count > 1 or len(files) > 1) and phys <= f.end_phy:
            return None
        return f

    def build_index(self, req: DispatchRequest) -> None:
        if (req.sys_flag & SYSFLAG_TRANSACTION_MASK) == SYSFLAG_TRANSACTION_ROLLBACK_TYPE:
            return
        self.index_keys(
            req.topic, req.uniq_key, req.keys, req.commitlog_offset, req.store_timestamp
        )
        self.write_headers()

    def index_keys(self, topic: str, uniq_key: str, keys: str, phys: int, store_ts: int) -> None:
        """Index ``topic#uniq_key`` and ``topic#k`` for each space-separated k of ``keys``
        (the caller skips rollback records and calls ``write_headers`` after a round)."""
        if not uniq_key and not keys:
            return
        f = self._file_for(phys)
        if f is None:
            return  # already indexed (replayed dispatch)
        ph = self._prefix_hashes.get(topic)
        if ph is None:
            ph = self._prefix_hash(topic)
        if uniq_key:
            h = self._hash(ph, topic, uniq_key)
            if not f.put_hash(h, phys, store_ts):
                f = self._writable()
                f.put_hash(h, phys, store_ts)
        if keys:
            for k in keys.split(" "):
                if k:
                    h = self._hash(ph, topic, k)
                    if not f.put_hash(h, phys, store_ts):
                        f = self._writable()
                        f.put_hash(h, phys, store_ts)

    def index_raw_keys(
        self, topic: str, uniq_key: bytes | None, keys: bytes | None, phys: int, store_ts: int
    ) -> None:
        """``index_keys`` for raw property values as read from a record (the dispatcher's
        path): ASCII keys are hashed straight from the bytes, anything else is decoded first
        (UTF-8 with replacement, as ``decode_properties`` does)."""
        ph = self._prefix_hashes.get(topic)
        if ph is None:
            ph = self._prefix_hash(topic)
        if (
            keys is None
            and uniq_key
            and ph >= 0
            and len(uniq_key) <= _HASH_UNITS
            and uniq_key.isascii()
        ):
            # the usual record: a client-generated UNIQ_KEY and no KEYS
            files = self.files
            f = files[-1] if files else None
            if f is None or f.index_count >= f.entries:
                f = self._writable()  # (a new file's end is the full one's: checked below)
            if phys <= f.end_phy and (f.index_count > 1 or len(files) > 1):
                return  # already indexed (replayed dispatch)
            h = (ph * _POW31[len(uniq_key)] + _ascii_hash(uniq_key)) & _MASK32
            if h & 0x80000000:  # abs of the signed hashCode; MIN_VALUE -> 0
                h = 0x100000000 - h
                if h == 0x80000000:
                    h = 0
            if not f.put_hash(h, phys, store_ts):
                self._writable().put_hash(h, phys, store_ts)
            return
        if (
            ph < 0
            or (uniq_key is not None and (len(uniq_key) > _HASH_UNITS or not uniq_key.isascii()))
            or (keys is not None and (len(keys) > _HASH_UNITS or not keys.isascii()))
        ):
            self.index_keys(
                topic,
                uniq_key.decode("utf-8", "replace") if uniq_key is not None else "",
                keys.decode("utf-8", "replace") if keys is not None else "",
                phys,
                store_ts,
            )
            return
        f = self._file_for(phys)
        if f is None:
            return  # already indexed (replayed dispatch)
        hashes: list[int] = []
        if uniq_key:
            hashes.append((ph * _POW31[len(uniq_key)] + _ascii_hash(uniq_key)) & _MASK32)
        if keys:
            for k in keys.split(b" "):
                if k:
                    hashes.append((ph * _POW31[len(k)] + _ascii_hash(k)) & _MASK32)
        for h in hashes:
            if h & 0x80000000:  # abs of the signed hashCode; MIN_VALUE -> 0
                h = 0x100000000 - h
                if h == 0x80000000:
                    h = 0
            if not f.put_hash(h, phys, store_ts):
                f = self._writable()
                f.put_hash(h, phys, store_ts)

    def index_uniq_run(self, topic: str, run: list[tuple[bytes, int, int]]) -> None:
        """``index_raw_keys(topic, uniq, None, phys, store_ts)`` for each
        ``(uniq, phys, store_ts)`` of ``run``, in order (the dispatcher's batched path:
        records with a UNIQ_KEY and no KEYS, their offsets rising). The same entries, slot
        heads and file rollovers as one call per record: each stretch of plain keys
        (``_plain_stretches``) goes into the newest file through ``_index_stretch``, as much
        of it at once as the file has room for; a key that is not plain, a file's first entry
        and a replayed record go through ``index_raw_keys``."""
        ph = self._prefix_hashes.get(topic)
        if ph is None:
            ph = self._prefix_hash(topic)
        done = 0
        for i, j in _plain_stretches(ph, run):
            for uniq, phys, store_ts in run[done:i]:
                self.index_raw_keys(topic, uniq, None, phys, store_ts)
            while i < j:
                f = self.files[-1] if self.files else None
                if f is None or f.index_count >= f.entries:
                    f = self._writable()
                n = f.index_count
                if n <= 1 or run[i][1] <= f.end_phy:
                    uniq, phys, store_ts = run[i]
                    self.index_raw_keys(topic, uniq, None, phys, store_ts)
                    i += 1
                else:
                    k = min(j, i + f.entries - n)
                    _index_stretch(f, ph, run[i:k])
                    i = k
            done = j
        for uniq, phys, store_ts in run[done:]:
            self.index_raw_keys(topic, uniq, None, phys, store_ts)

    def _prefix_hash(self, topic: str) -> int:
        """hashCode of ``topic#`` mod 2**32 (-1 when not ASCII)."""
        prefix = f"{topic}#"
        ph = _ascii_hash(prefix.encode()) if prefix.isascii() and len(prefix) <= _HASH_UNITS else -1
        if len(self._prefix_hashes) >= TOPIC_PREFIX_CACHE_MAX_ENTRIES:
            self._prefix_hashes.clear()
        self._prefix_hashes[topic] = ph
        return ph

    @staticmethod
    def _hash(ph: int, topic: str, key: str) -> int:
        """The IndexFile hash of ``topic#key``: hash(topic#) * 31**len(key) + hash(key)."""
        if ph >= 0 and len(key) <= _HASH_UNITS and key.isascii():
            return _abs_hash((ph * _POW31[len(key)] + _ascii_hash(key.encode())) & _MASK32)
        return index_key_hash(f"{topic}#{key}")

    def write_headers(self) -> None:
        """Write the newest file's header (older files had theirs written when they filled)."""
        if self.files:
            self.files[-1].write_header()

    def query(self, topic: str, key: str, max_num: int, begin: int, end: int) -> list[int]:
        out: list[int] = []
        full_key = f"{topic}#{key}"
        max_num = min(max_num, MAX_QUERY_RESULTS)
        for f in reversed(self.files):
            if len(out) >= max_num:
                break
            if f.index_count <= 1 or not f.time_matched(begin, end):
                continue
            f.select(full_key, max_num, begin, end, out)
        return out

    def delete_expired(self, commitlog_min: int) -> int:
        count = 0
        while len(self.files) > 1 and self.files[0].end_phy < commitlog_min:
            self.files.pop(0).destroy()
            count += 1
        return count

    def flush(self) -> None:
        self.write_headers()
        for f in self.files[-2:]:
            f.flush()

    def close(self) -> None:
        self.write_headers()
        for f in self.files:
            f.close()
        self.files = []
