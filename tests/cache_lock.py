"""What the tests build or fetch once (Maven probe builds, the Go probe, the C++ and Node.js
clients) is shared between processes: pytest-xdist workers of one run, or two runs at once. A
build happens under an exclusive lock (``fcntl.flock`` on a file beside it, released by the
kernel if the holder dies), and a stamp (a digest of the build's inputs) says a finished build
is still fresh, so a second worker, or the same worker's next fixture, does not run it again.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def exclusive(lock_file: Path) -> Iterator[None]:
    """Hold ``lock_file`` (created if missing) exclusively for the block. A waiter waits as
    long as the holder's own bounded build takes (Maven and Go builds have their timeouts)."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def inputs_digest(*paths: Path, extra: str = "") -> str:
    """A digest of every file under ``paths`` (names and bytes, in a fixed order) and
    ``extra``: what a build read, so a changed source means a new build."""
    digest = hashlib.sha256(extra.encode() + b"\0")
    for root in paths:
        files = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else [root]
        for f in files:
            digest.update(f.relative_to(root.parent).as_posix().encode() + b"\0")
            digest.update(f.read_bytes() + b"\0")
    return digest.hexdigest()


def stamp_matches(stamp: Path, digest: str) -> bool:
    try:
        return stamp.read_text().strip() == digest
    except OSError:
        return False
