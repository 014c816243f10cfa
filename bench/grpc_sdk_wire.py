"""bench/grpc_sdk.py ``--pcap``: where the time of a one-in-flight send goes, read off loopback.

While an SDK runs against a stack, ``capture`` records the TCP segments of the proxy's gRPC port
and of the broker's remoting port (tcpdump on ``lo``). ``send_split`` then follows the sends of
the ``send_1`` phase in the capture (one in flight, so one exchange after the other) and splits
each into the hops a packet capture can see:

  * ``proxy_in``: the SDK's request segment reaches the proxy -> the proxy's request to the broker;
  * ``broker``: that request -> the broker's answer;
  * ``proxy_out``: the broker's answer -> the proxy's answer to the SDK;
  * ``client``: the proxy's answer -> the SDK's next request: the SDK's own share (handing the
    answer to the caller, the caller making and handing over its next message);

and counts the HTTP/2 PINGs the SDK sends per send (17-byte segments: grpc-java's flow-control
pinger sends one after each answer) with the time the proxy took to acknowledge each.

Segments are told apart by size and direction, which holds for this bench's sends (``--size``
of 1 KiB, small answers); p50/p90 in ms. Nothing here imports the product.
"""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs

#: an HTTP/2 PING (or its ACK) alone in a segment: a 9-byte frame header + 8 bytes of payload
PING_SEGMENT = 17
#: the proxy's answer to a send (headers, one DATA frame, trailers) is below this
ANSWER_MAX = 400
START_TIMEOUT_S = 10.0
_LINE = re.compile(r"^(\d+\.\d+) IP6? [\d.:a-f]+\.(\d+) > [\d.:a-f]+\.(\d+): .* length (\d+)")


@attrs.frozen
class Segment:
    time: float
    src: int
    dst: int
    length: int


def parse_tcpdump(lines: Iterable[str]) -> list[Segment]:
    """The segments with a payload, from ``tcpdump -n -tt -r`` text (other lines skipped)."""
    out = []
    for line in lines:
        m = _LINE.match(line)
        if m is not None and int(m[4]) > 0:
            out.append(Segment(float(m[1]), int(m[2]), int(m[3]), int(m[4])))
    return out


@attrs.define
class _Send:
    request: float
    to_broker: float | None = None
    from_broker: float | None = None
    answer: float | None = None
    next_request: float | None = None
    pings: int = 0
    ping_at: float | None = None
    ping_acks_ms: list[float] = attrs.field(factory=list)


def _follow(segments: Sequence[Segment], proxy: int, broker: int, min_request: int
            ) -> list[_Send]:
    """Every SDK request (a segment to the proxy of at least ``min_request`` bytes) with the
    segments that follow it up to the next one."""
    sends: list[_Send] = []
    for seg in segments:
        cur = sends[-1] if sends else None
        if seg.dst == proxy and seg.length >= min_request:
            if cur is not None:
                cur.next_request = seg.time
            sends.append(_Send(seg.time))
        elif cur is None:
            continue
        elif seg.dst == broker and cur.to_broker is None:
            cur.to_broker = seg.time
        elif seg.src == broker and cur.to_broker is not None and cur.from_broker is None:
            cur.from_broker = seg.time
        elif seg.dst == proxy and seg.length == PING_SEGMENT:
            cur.pings += 1
            cur.ping_at = seg.time
        elif seg.src == proxy and seg.length == PING_SEGMENT and cur.ping_at is not None:
            cur.ping_acks_ms.append((seg.time - cur.ping_at) * 1e3)
            cur.ping_at = None
        elif (seg.src == proxy and seg.length < ANSWER_MAX and cur.from_broker is not None
              and cur.answer is None):
            cur.answer = seg.time
    return sends


def _pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


def send_split(segments: Sequence[Segment], proxy: int, broker: int, *, skip: int, count: int,
               min_request: int) -> dict[str, float]:
    """The hops of sends ``skip`` .. ``skip + count - 1`` (the ``send_1`` phase after the
    warmup): ``wire_<hop>_p50_ms`` / ``_p90_ms``, ``wire_sends`` (those seen whole), the PINGs
    per send and their acknowledgement's p50. Empty when none was seen whole."""
    picked = _follow(segments, proxy, broker, min_request)[skip:skip + count]
    whole = [s for s in picked if None not in (s.to_broker, s.from_broker, s.answer,
                                               s.next_request)]
    if not whole:
        return {}
    hops = {
        "proxy_in": [s.to_broker - s.request for s in whole],  # type: ignore[operator]
        "broker": [s.from_broker - s.to_broker for s in whole],  # type: ignore[operator]
        "proxy_out": [s.answer - s.from_broker for s in whole],  # type: ignore[operator]
        "total": [s.answer - s.request for s in whole],  # type: ignore[operator]
        "client": [s.next_request - s.answer for s in whole],  # type: ignore[operator]
    }
    out: dict[str, float] = {"wire_sends": len(whole),
                             "wire_pings_per_send": round(sum(s.pings for s in whole)
                                                          / len(whole), 3)}
    for hop, seconds in hops.items():
        ms = [x * 1e3 for x in seconds]
        out[f"wire_{hop}_p50_ms"] = _pct(ms, 0.5)
        out[f"wire_{hop}_p90_ms"] = _pct(ms, 0.9)
    acks = [a for s in whole for a in s.ping_acks_ms]
    if acks:
        out["wire_ping_ack_p50_ms"] = _pct(acks, 0.5)
    return out


@contextlib.contextmanager
def capture(path: Path, ports: Sequence[int]) -> Iterator[Path]:
    """tcpdump on ``lo`` writing the segments of ``ports`` to ``path`` until the block ends
    (it must be installed and allowed to capture)."""
    expr = " or ".join(f"tcp port {p}" for p in ports)
    err = path.with_suffix(".err")
    with open(err, "w") as err_file:
        proc = subprocess.Popen(["tcpdump", "-i", "lo", "-n", "-s", "128", "-U", "-w",
                                 str(path), expr], stdout=subprocess.DEVNULL,
                                stderr=err_file, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while "listening on" not in err.read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"tcpdump did not start: {err.read_text()[-500:]}")
            time.sleep(0.05)  # polls tcpdump's own word that it listens, under a deadline
        yield path
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def read_capture(path: Path) -> list[Segment]:
    done = subprocess.run(["tcpdump", "-n", "-tt", "-r", str(path)], capture_output=True,
                          text=True, check=False, stdin=subprocess.DEVNULL)
    return parse_tcpdump(done.stdout.splitlines())


def split_of_capture(path: Path, proxy: int, broker: int, *, skip: int, count: int,
                     min_request: int) -> dict[str, Any]:
    return send_split(read_capture(path), proxy, broker, skip=skip, count=count,
                      min_request=min_request)
