"""Client ids and UNIQ_KEY message ids (Java ``ClientConfig.buildMQClientId`` and
``MessageClientIDSetter`` layouts). Pure apart from reading the clock, pid and local address."""

from __future__ import annotations

import datetime as _dt
import itertools
import os
import random
import socket
import struct
import threading
import time


def local_ip() -> str:
    """The address this host uses to reach others (no packet is sent); 127.0.0.1 if none."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))
            ip = str(s.getsockname()[0])
            if ip and not ip.startswith("0."):
                return ip
    except OSError:
        pass
    return "127.0.0.1"


def default_instance_name() -> str:
    """Java 4.9 replaces the instance name ``DEFAULT`` by ``pid#nanoTime``."""
    return f"{os.getpid()}#{time.monotonic_ns()}"


def build_client_id(ip: str, instance_name: str, unit_name: str | None = None) -> str:
    """``ip@instanceName`` (+ ``@unitName``)."""
    cid = f"{ip}@{instance_name}"
    return f"{cid}@{unit_name}" if unit_name else cid


def _month_start_ms(now_ms: int) -> tuple[int, int]:
    t = _dt.datetime.fromtimestamp(now_ms / 1000).astimezone()
    start = t.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    nxt = (start + _dt.timedelta(days=32)).replace(day=1)
    return int(start.timestamp() * 1000), int(nxt.timestamp() * 1000)


class UniqIdGenerator:
    """32 hex chars: IP(4) + pid low 16 bits(2) + random int(4) [the fixed prefix] then
    int32 ms since the start of the month + int16 counter."""

    _TAIL = struct.Struct(">ih")

    def __init__(self, ip: str | None = None, pid: int | None = None) -> None:
        try:
            ip_bytes = socket.inet_aton(ip or local_ip())
        except OSError:
            ip_bytes = struct.pack(">I", int(time.time() * 1000) & 0xFFFFFFFF)
        prefix = ip_bytes + struct.pack(">H", (pid or os.getpid()) & 0xFFFF)
        prefix += struct.pack(">I", random.getrandbits(32))
        self.prefix = prefix.hex().upper()
        self._counter = itertools.count()
        self._lock = threading.Lock()
        self._start = 0
        self._next = 0

    def next_id(self, now_ms: int | None = None) -> str:
        now = int(time.time() * 1000) if now_ms is None else now_ms
        if now >= self._next or now < self._start:
            with self._lock:
                self._start, self._next = _month_start_ms(now)
        span = (now - self._start) & 0xFFFFFFFF
        if span >= 0x80000000:
            span -= 0x100000000
        count = next(self._counter) & 0xFFFF
        if count >= 0x8000:
            count -= 0x10000
        return self.prefix + self._TAIL.pack(span, count).hex().upper()


_DEFAULT: UniqIdGenerator | None = None


def create_uniq_id() -> str:
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = UniqIdGenerator()
    return _DEFAULT.next_id()
