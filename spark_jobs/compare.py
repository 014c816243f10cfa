"""Pure byte comparison of a group's replicas, and where a store's records end; no Spark, no trio.

The replica-diff's first (and, for a consistent cluster, only) pass: every member of a group is
compared with the group's reference (its declared master, else its first member) over the same
absolute offsets, in big reads into reused buffers and ``memcmp`` (``bytearray ==``); only the
blocks (``block`` bytes, aligned on absolute offsets) that differ are reported, so the decoder
runs only where bytes differ.  A byte is *present* when a member has a file covering it (below
the member's live limit); presence is compared too (absent is unequal to anything present, even
zeros).

:func:`store_end` finds where a store's records end without decoding it record by record: the
last non-zero byte of the last data file, then backwards to the record holding it.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from typing import Any, Final

import attrs

from .decode import (
    _DL_HEAD,
    _DL_MAGIC_BYTES,
    _MAGIC_V1_BYTES,
    DL_BODY_OFFSET,
    KIND_DLEDGER,
    Segment,
    _is_commitlog_sync,
    _is_dledger_sync,
    decode_record_at,
)

CHUNK: Final = 2 * 1024 * 1024  # one read per member per chunk (bigger is slower: caches)
_TAIL_STEP: Final = 4 * 1024 * 1024


@attrs.frozen
class Member:
    rid: int
    segs: tuple[tuple[int, int, str], ...]  # (absolute start, length, path), sorted
    limit: int = -1  # absolute: nothing at or beyond it is read (live); -1 none

    def present(self, a: int, b: int) -> tuple[tuple[int, int], ...]:
        """The sub-ranges of ``[a, b)`` this member has bytes for."""
        if self.limit >= 0:
            b = min(b, self.limit)
        out = []
        for s, n, _ in self.segs:
            lo, hi = max(a, s), min(b, s + n)
            if lo < hi:
                out.append((lo, hi))
        return tuple(out)


@attrs.frozen
class CompareTask:
    """Compare ``others`` with ``ref`` over absolute ``[lo, hi)`` of one area of a group."""

    group: str
    area: str  # "data" or "cq/<topic>/<queue>"
    lo: int
    hi: int
    ref: Member
    others: tuple[Member, ...]
    block: int


#: (rid, area, differing runs [(a, b), ...] on block boundaries)
Diff = tuple[int, str, tuple[tuple[int, int], ...]]


class _Files:
    def __init__(self) -> None:
        self._open: dict[str, Any] = {}

    def read(self, m: Member, a: int, view: memoryview) -> None:
        """``view`` := member ``m``'s bytes at ``[a, a + len(view))`` (zeros where absent)."""
        n = len(view)
        filled = 0
        for lo, hi in m.present(a, a + n):
            if lo - a > filled:
                view[filled : lo - a] = bytes(lo - a - filled)
            path, start = next((p, s) for s, ln, p in m.segs if s <= lo < s + ln)
            f = self._open.get(path)
            if f is None:
                f = self._open[path] = open(path, "rb", buffering=0)  # noqa: SIM115
            f.seek(lo - start)
            got = 0
            while got < hi - lo:
                k = f.readinto(view[lo - a + got : hi - a])
                if not k:
                    break
                got += k
            filled = lo - a + got
        if filled < n:
            view[filled:n] = bytes(n - filled)

    def close(self) -> None:
        for f in self._open.values():
            f.close()
        self._open.clear()


def _merge(runs: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    out: list[list[int]] = []
    for a, b in sorted(runs):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return tuple((a, b) for a, b in out)


def compare_range(task: CompareTask, chunk: int = CHUNK) -> list[Diff]:
    """One :data:`Diff` per other member (runs empty: identical over the range)."""
    block = max(1, task.block)
    step = chunk // block * block if block <= chunk else chunk
    ref_buf = bytearray(step)
    oth_buf = bytearray(step)
    rv, ov = memoryview(ref_buf), memoryview(oth_buf)
    runs: dict[int, list[tuple[int, int]]] = {o.rid: [] for o in task.others}
    files = _Files()
    try:
        pos = task.lo
        while pos < task.hi:
            n = min(step, task.hi - pos)
            rp = task.ref.present(pos, pos + n)
            if rp:
                files.read(task.ref, pos, rv[:n])
            for o in task.others:
                op = o.present(pos, pos + n)
                if not rp and not op:
                    continue
                if op:
                    files.read(o, pos, ov[:n])
                if op == rp and (ref_buf == oth_buf if n == step else rv[:n] == ov[:n]):
                    continue
                runs[o.rid].extend(_blocks(pos, n, block, rp, op, rv, ov))
            pos += n
    finally:
        files.close()
        rv.release()
        ov.release()
    return [(o.rid, task.area, _merge(runs[o.rid])) for o in task.others]


def _blocks(pos: int, n: int, block: int, rp: tuple[tuple[int, int], ...],
            op: tuple[tuple[int, int], ...], rv: memoryview, ov: memoryview,
            ) -> Iterator[tuple[int, int]]:  # fmt: skip
    """The block-aligned pieces of a differing chunk that differ."""
    a = pos - pos % block
    while a < pos + n:
        b = a + block
        lo, hi = max(a, pos), min(b, pos + n)
        if (_clip(rp, lo, hi) != _clip(op, lo, hi)
                or rv[lo - pos : hi - pos].tobytes() != ov[lo - pos : hi - pos].tobytes()):
            yield (a, b)
        a = b


def _clip(pres: tuple[tuple[int, int], ...], lo: int, hi: int) -> tuple[tuple[int, int], ...]:
    return tuple((max(a, lo), min(b, hi)) for a, b in pres if max(a, lo) < min(b, hi))


def _last_nonzero(fd: int, hi: int) -> int:
    """Offset of the last non-zero byte of the file's first ``hi`` bytes, -1 if none: a
    trailing hole (sparse preallocation) is skipped, the rest read backwards in big chunks
    compared with zeros (memcmp), only the last non-zero chunk stripped."""
    try:
        hole = os.lseek(fd, 0, os.SEEK_HOLE)
        if hole < hi:
            try:
                os.lseek(fd, hole, os.SEEK_DATA)
            except OSError:  # ENXIO: only holes after it
                hi = hole
    except OSError:  # no SEEK_HOLE here: read it all
        pass
    step = _TAIL_STEP
    zero = bytes(step)
    while hi > 0:
        lo = max(0, hi - step)
        data = os.pread(fd, hi - lo, lo)
        if len(data) == step and data == zero:
            hi = lo
            continue
        k = len(data.rstrip(b"\0"))
        if k:
            return lo + k - 1
        hi = lo
    return -1


def _tail_end(kind: str, buf: Any, seg_start: int, length: int, fd: int) -> int | None:
    """Absolute end of the last record of one data file whose bytes end at ``length`` (the
    file's, or a live limit's), or None if it holds none."""
    z = _last_nonzero(fd, length)
    if z < 0:
        return None
    if kind == KIND_DLEDGER:
        pats, at = (_DL_MAGIC_BYTES,), 0
    else:
        pats, at = (_MAGIC_V1_BYTES,), 4
    hi = z + 1  # the record holding byte z starts below hi
    while hi > 0:
        x = max(buf.rfind(p, 0, hi + at + 3) for p in pats)  # a magic at x = start + at
        c = x - at
        if x < 0 or c < 0:
            return None
        end = _record_end(kind, buf, seg_start, c, length)
        if end is not None:
            return end
        hi = c
    return None


def _record_end(kind: str, buf: Any, seg_start: int, c: int, length: int) -> int | None:
    if kind == KIND_DLEDGER:
        if c < 0 or c + DL_BODY_OFFSET > length or not _is_dledger_sync(buf, c, seg_start + c):
            return None
        _m, size, _i, _t, _p, _ch, _cc, _bc, blen = _DL_HEAD.unpack_from(buf, c)
        if blen <= 0 or blen + DL_BODY_OFFSET != size or c + size > length:
            return None  # a no-op entry (no record) or a cut one: look further back
        b0 = c + DL_BODY_OFFSET
        row = decode_record_at(buf, b0, b0 + blen, seg_start + b0, verify_crc=False)
        return None if row is None or row[1] != blen else seg_start + c + size
    if c < 0 or c + 36 > length or not _is_commitlog_sync(buf, c, seg_start + c):
        return None
    row = decode_record_at(buf, c, length, seg_start + c, verify_crc=False)
    return None if row is None else seg_start + c + row[1]


def store_end(kind: str, segs: list[Segment], limit: int | None = None) -> int | None:
    """Absolute end of a store's last complete record (below ``limit``), looking at its last
    files' tails only; None when no file holds a record."""
    for s in reversed(segs):
        length = s.length if limit is None else min(s.length, limit - s.start)
        if length <= 0:
            continue
        with open(s.path, "rb") as f:
            if os.fstat(f.fileno()).st_size == 0:
                continue
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                end = _tail_end(kind, m, s.start, min(length, len(m)), f.fileno())
        if end is not None:
            return end
    return None


def _members(replicas: list[Any], rid: int, segs: list[Segment]) -> Member:
    r = replicas[rid]
    return Member(rid, tuple((s.start, s.length, s.path) for s in segs),
                  -1 if r.limit is None else r.limit)  # fmt: skip


def _within(m: Member, a: int, b: int) -> Member:
    """``m`` with only its files overlapping ``[a, b)`` (a task looks at no others)."""
    return attrs.evolve(m, segs=tuple(x for x in m.segs if x[0] < b and x[0] + x[1] > a))


def plan_compare(
    replicas: list[Any], block: int, *, range_bytes: int = 64 * 1024 * 1024,
) -> tuple[list[CompareTask], dict[str, int]]:
    """Tasks comparing every member of every group (with more than one member) with the
    group's reference over its data files (``range_bytes`` per task, on block boundaries) and
    its ConsumeQueues (one task per queue; none for a live audit); and group -> reference."""
    from .decode import list_segments

    block = max(1, block)
    per = max(block, range_bytes // block * block)
    tasks: list[CompareTask] = []
    refs: dict[str, int] = {}
    for g in dict.fromkeys(r.group for r in replicas):
        idx = [i for i, r in enumerate(replicas) if r.group == g]
        declared = [i for i in idx if replicas[i].declared_master]
        ref = refs[g] = declared[0] if declared else idx[0]
        others = [i for i in idx if i != ref]
        if not others:
            continue
        segs = {i: list_segments(replicas[i].data_dir) for i in idx}
        mem = {i: _members(replicas, i, segs[i]) for i in idx}
        spans = [(s[0].start, s[-1].start + s[-1].length) for s in segs.values() if s]
        if spans:
            lo = min(a for a, _ in spans)
            hi = max(b for _, b in spans)
            lims = [replicas[i].limit for i in idx if replicas[i].limit is not None]
            if lims:
                hi = min(hi, max(lims))
            for a in range(lo - lo % block, hi, per):
                b = min(a + per, hi)
                tasks.append(CompareTask(g, "data", a, b, _within(mem[ref], a, b),
                                         tuple(_within(mem[i], a, b) for i in others), block))
        if any(replicas[i].limit is not None for i in idx):
            continue  # live: ConsumeQueues change under a running broker
        queues: dict[tuple[str, str], dict[int, list[Segment]]] = {}
        for i in idx:
            root = os.path.join(replicas[i].store, "consumequeue")
            if not os.path.isdir(root):
                continue
            for topic in sorted(os.listdir(root)):
                tdir = os.path.join(root, topic)
                if not os.path.isdir(tdir):
                    continue
                for q in sorted(os.listdir(tdir)):
                    if q.lstrip("-").isdigit():
                        queues.setdefault((topic, q), {})[i] = list_segments(
                            os.path.join(tdir, q))
        for (topic, q), by in sorted(queues.items()):
            qm = {i: _members(replicas, i, by.get(i, [])) for i in idx}
            spans = [(s[0].start, s[-1].start + s[-1].length) for s in by.values() if s]
            if not spans:
                continue
            tasks.append(CompareTask(g, f"cq/{topic}/{int(q)}", min(a for a, _ in spans),
                                     max(b for _, b in spans), qm[ref],
                                     tuple(qm[i] for i in others), 1 << 62))  # fmt: skip
    return tasks, refs


def record_start_before(kind: str, path: str, seg_start: int, a: int) -> int:
    """Absolute start of the last record (or entry) starting at or before absolute ``a`` in one
    data file, found backwards by its self-naming header; the file's start if none."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return seg_start
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            pos = min(a - seg_start, len(m) - 1)
            pat, at = (_DL_MAGIC_BYTES, 0) if kind == KIND_DLEDGER else (_MAGIC_V1_BYTES, 4)
            hi = pos + 1
            while hi > 0:
                x = m.rfind(pat, 0, hi + at + 3)
                c = x - at
                if x < 0 or c < 0:
                    break
                sync = (_is_dledger_sync if kind == KIND_DLEDGER else _is_commitlog_sync)
                if c + 36 <= len(m) and sync(m, c, seg_start + c):
                    return seg_start + c
                hi = c
    return seg_start


def windows(
    kind: str, segs: dict[int, list[Segment]], runs: list[tuple[int, int]],
) -> list[tuple[int, int]]:
    """Absolute decode windows ``[start, end)`` for differing block runs: each run widened back
    to the record holding its first byte (on every member that has a file there), then merged;
    a window yields the records *starting* in it, so no record is decoded twice."""
    out: list[tuple[int, int]] = []
    for a, b in sorted(runs):
        start = a
        for ss in segs.values():
            for s in ss:
                if s.start <= a < s.start + s.length:
                    start = min(start, record_start_before(kind, s.path, s.start, a))
        out.append((start, b))
    merged: list[list[int]] = []
    for a, b in sorted(out):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return [(a, b) for a, b in merged]
