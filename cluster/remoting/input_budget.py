"""The read-side memory budget of a server's connections (``serverMaxBufferedInputBytes``). Pure.

Every connection of a server (or of a client pool) receives into one shared buffer and its
decoder copies what it keeps, so the only input memory a connection holds is its partial frame.
``InputBudget`` bounds what those partial frames hold all together; ``InputCharge`` is one
connection's part of it.

Invariants (``used`` is the sum of every live connection's ``charge``; ``peak`` its maximum):

* A connection is charged an upper bound of what its decoder really allocates: an admitted
  big frame its whole ``grant`` (the decoder assembles it in a mapping of exactly its size,
  codec.py), any other partial frame ``2 * held + 64`` (the small bytearray: its capacity is at
  most twice its length, CPython shrinks it once more than half is freed and grows it by 1/8),
  nothing once every frame it read is complete or it closed (the decoder's buffers are freed
  too).
* A frame longer than ``SMALL_FRAME_BYTES`` is read past its first chunk only once admitted:
  its size in whole pages with a read's slack (``want``, ``frame_grant``) is reserved whole, so
  an admitted frame always has room to complete; one that does not fit waits unread in the
  kernel (TCP backpressure, nothing lost).
* Admission keeps ``used <= cap - reserve``: big frames never take the last ``reserve`` bytes,
  so small requests of other connections keep being read.
* A read that is not admitted takes at most ``(room - 64) // 2`` bytes (it grows its charge by
  at most twice what it reads), so ``used`` never passes ``cap``.
* ``partial`` holds exactly the connections with a partial frame, with when it started (for
  ``serverPartialFrameTimeoutSeconds``).

Hooks a shell overrides: ``freed`` (charges went down: readers waiting for room look again) and
``partial_started`` (a first partial frame: a sweeper waiting for one starts).
"""

from __future__ import annotations

import mmap
import struct
import sys
from typing import Any, Final

from .codec import MAX_FRAME_BYTES

#: Bytes asked of the socket per receive; every complete frame in them is decoded at once.
READ_CHUNK_BYTES: Final = 64 * 1024
#: Part of the input cap that frames longer than ``SMALL_FRAME_BYTES`` never use.
INPUT_RESERVE_BYTES: Final = 4 * 1024 * 1024
#: A frame up to this long is read without admission (it fits in one read).
SMALL_FRAME_BYTES: Final = READ_CHUNK_BYTES
#: What an admitted frame reserves beyond its own mapping: the decoder's small buffer, which
#: holds the frame's first read and what follows it in the read that completes it.
GRANT_SLACK_BYTES: Final = 4 * READ_CHUNK_BYTES
#: Page size the grant rounds a frame's mapping up to.
PAGE_BYTES: Final = mmap.PAGESIZE
#: The smallest input cap: one frame of the largest size admitted beside the reserve.
MIN_MAX_BUFFERED_INPUT_BYTES: Final = MAX_FRAME_BYTES + GRANT_SLACK_BYTES + INPUT_RESERVE_BYTES
#: Room the budget must have for a full read of a connection holding no admitted frame.
ROOM_FOR_A_CHUNK: Final = 2 * READ_CHUNK_BYTES + 64
_FRAME_LENGTH = struct.Struct(">I")


def frame_grant(frame: int) -> int:
    """What an admitted frame of ``frame`` bytes (length word included) reserves: the decoder's
    mapping of it in whole pages, and ``GRANT_SLACK_BYTES``."""
    return -(-frame // PAGE_BYTES) * PAGE_BYTES + GRANT_SLACK_BYTES


class InputCharge:
    """One connection's part of the budget: ``charge`` (bytes counted for its partial frame),
    ``grant`` (what its admitted big frame reserved; reads are then unchecked), ``want`` (the
    grant a big frame waits for: no read until admitted), ``frame`` (the partial frame's length
    with its length word; 0: not known yet) and ``head`` (the first bytes of a frame whose
    length word is incomplete)."""

    __slots__ = ("charge", "frame", "grant", "head", "want")

    def __init__(self) -> None:
        self.charge = self.grant = self.want = self.frame = 0
        self.head = b""


class InputBudget:
    """The bytes the partial frames of a set of connections hold, under ``cap``."""

    __slots__ = ("cap", "partial", "pauses", "peak", "reserve", "tight_above", "used")

    def __init__(self, cap: int = sys.maxsize, reserve: int = 0) -> None:
        self.cap = cap
        #: charged past this, a full read no longer fits: reads look closer (``room_for_read``)
        self.tight_above = cap - ROOM_FOR_A_CHUNK
        self.reserve = reserve  # what big frames leave to small ones
        self.used = 0  # bytes charged now, all connections
        self.peak = 0  # the most ever charged at once
        self.pauses = 0  # reads that waited for room
        #: connections holding a partial frame -> when that frame started
        self.partial: dict[Any, float] = {}

    def freed(self) -> None:
        """Hook: charges went down."""

    def partial_started(self) -> None:
        """Hook: a partial frame appeared while there was none."""

    def needs_check(self, c: InputCharge) -> bool:
        """Whether a read of ``c`` must ask ``room_for_read`` first (else: a full chunk)."""
        return (self.used > self.tight_above or c.want != 0) and not c.grant

    def admit(self, c: InputCharge) -> bool:
        """Reserve the grant ``c`` waits for, if it fits beside the reserve."""
        grant = c.want
        used = self.used - c.charge + grant
        if used > self.cap - self.reserve:
            return False
        self.used = used
        if used > self.peak:
            self.peak = used
        c.charge = c.grant = grant
        c.want = 0
        return True

    def room_for_read(self, c: InputCharge) -> int:
        """How much the next read of ``c`` may take; 0: none yet (wait for ``freed``)."""
        if c.want:
            return READ_CHUNK_BYTES if self.admit(c) else 0
        room = self.cap - self.used
        if room >= ROOM_FOR_A_CHUNK:
            return READ_CHUNK_BYTES
        return max(0, (room - 64) >> 1)  # a read of n bytes adds at most 2n + 64

    def account(
        self, c: InputCharge, key: Any, now: float, data: memoryview | bytes,
        completed: bool, held: int,
    ) -> None:
        """Charge ``c`` for the partial frame its decoder holds (``held`` bytes) after reading
        ``data`` (``completed``: frames completed in it), admitting a big frame when it fits;
        note when the partial frame started (``now``)."""
        old = c.charge
        if not held:  # every frame complete: the decoder's buffer is freed too
            c.charge = c.grant = c.want = c.frame = 0
            c.head = b""
            self.partial.pop(key, None)
            self.used -= old
            self.freed()
            return
        if completed or not old:  # a frame started in this read: all of it is in ``data``
            c.grant = c.want = c.frame = 0
            start = len(data) - held
            prefix = bytes(data[start : start + 4])
            if not self.partial:
                self.partial_started()
            self.partial[key] = now
        elif not c.frame:  # the length word was incomplete: ``data`` continues it
            prefix = c.head + bytes(data[:4])
        else:
            prefix = b""
        if prefix:
            if len(prefix) >= 4:
                c.frame = _FRAME_LENGTH.unpack_from(prefix)[0] + 4
                c.head = b""
            else:
                c.head = prefix
        if c.grant:
            charge = c.grant
        else:
            charge = 2 * held + 64
            frame = c.frame
            if frame > SMALL_FRAME_BYTES and not c.want:
                # read no further until the whole frame is admitted (the decoder checked its
                # length against the frame limit, so it fits an empty budget)
                c.want = frame_grant(frame)
        c.charge = charge
        self.used += charge - old
        if c.want:
            self.admit(c)  # (or the next read waits for it)
        if self.used > self.peak:
            self.peak = self.used
        if c.charge < old:
            self.freed()

    def release(self, c: InputCharge, key: Any) -> None:
        """The connection closed: its charge goes back to the budget."""
        self.used -= c.charge
        c.charge = c.grant = c.want = c.frame = 0
        self.partial.pop(key, None)
        self.freed()
