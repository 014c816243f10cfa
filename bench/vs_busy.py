"""``busy_neighbours(n)``: ``n`` CPU-bound child processes for a whole bench run (vs_java.py
``--busy N``), the same for every broker it compares; always stopped."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from typing import Final

#: A neighbour spins in pure Python: one core's worth of CPU demand each.
_SPIN: Final = "while True: pass"


@contextlib.contextmanager
def busy_neighbours(n: int) -> Iterator[list[int]]:
    """``n`` CPU-bound processes (children of this one) for the block; their pids. Each is
    killed and reaped when the block ends, whatever happened in it."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(n):
            procs.append(subprocess.Popen([sys.executable, "-c", _SPIN],
                                          stdin=subprocess.DEVNULL, start_new_session=True))
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                p.kill()
        for p in procs:
            p.wait()
