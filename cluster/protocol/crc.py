"""CRC32, the one implementation every checksum of the project goes through.

``crc32(data, value=0)`` is zlib's CRC-32 (IEEE 802.3, reflected, the value Java's
``java.util.zip.CRC32`` and ``UtilAll.crc32`` give), chained from ``value`` as
``zlib.crc32``: the CommitLog record's BODYCRC (``message.body_crc``, masked to 31 bits as
RocketMQ stores it) on put and on every check (recovery, the replica audit), DLedger's entry
body and chain CRCs, the REGISTER_BROKER body CRC, the epoch files' lines.

It is zlib-ng's (``zlib_ng.zlib_ng.crc32``, a pinned dependency: carry-less multiply folding,
~0.1 µs for a 1 KiB body where the system zlib 1.2.13 takes ~0.4; ``bench/crc.py``), the C
function itself, so a call costs no Python frame. A missing zlib-ng is an ``ImportError``,
except where this module was imported from a zip: the Spark job archive
(``spark_jobs/package.py``), which by design carries no compiled wheel, checks records with the
standard library's ``zlib.crc32`` (the same values, slower).
"""

from __future__ import annotations

import zipimport
from typing import Any, Final, Protocol


class Crc32(Protocol):
    """The signature of ``zlib.crc32`` (positional only)."""

    def __call__(self, data: Any, value: int = 0, /) -> int: ...


def _from_job_archive() -> bool:
    """True when this module was loaded by ``zipimport`` (the Spark job archive)."""
    return __spec__ is not None and isinstance(__spec__.loader, zipimport.zipimporter)


def _implementation() -> Crc32:
    try:
        from zlib_ng.zlib_ng import crc32 as fast
    except ImportError:
        if not _from_job_archive():
            raise
        from zlib import crc32 as plain

        return plain
    return fast


#: ``crc32(data, value=0) -> int``: ``data`` any C-contiguous buffer (bytes, bytearray, a
#: memoryview of an mmap), ``value`` the CRC to continue from (any int, taken modulo 2**32)
crc32: Final[Crc32] = _implementation()
