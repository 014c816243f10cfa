"""The one wall clock of the project: milliseconds since the epoch, as RocketMQ stamps messages,
offsets and data versions (``System.currentTimeMillis()``).

Pure (no trio). Code that must be testable with a mock clock takes a ``clock_ms`` callable
defaulting to ``now_ms`` instead of calling it directly.
"""

from __future__ import annotations

import time


def now_ms() -> int:
    """Wall-clock milliseconds since the epoch."""
    return time.time_ns() // 1_000_000
