"""bench/grpc_sdk_wire.py: a one-in-flight send's hops read off tcpdump's text."""

from __future__ import annotations

from bench import grpc_sdk_wire as wire

SDK, PROXY, PROXY_OUT, BROKER = 40000, 15000, 41000, 20000


def _line(t: float, src: int, dst: int, length: int) -> str:
    return (f"{t:.6f} IP 127.0.0.1.{src} > 127.0.0.1.{dst}: Flags [P.], seq 1:2, ack 1, "
            f"win 64, options [nop,nop,TS val 1 ecr 1], length {length}")


def _send(t: float) -> list[str]:
    """One send as the Java SDK makes it: request, proxy -> broker, answer, proxy's answer,
    the SDK's PING (after the answer) and the proxy's PING ACK, and pure ACKs between."""
    return [
        _line(t, SDK, PROXY, 1209),
        _line(t + 0.0001, PROXY, SDK, 0),
        _line(t + 0.002, PROXY_OUT, BROKER, 1420),
        _line(t + 0.003, BROKER, PROXY_OUT, 243),
        _line(t + 0.004, PROXY, SDK, 95),
        _line(t + 0.005, SDK, PROXY, 17),
        _line(t + 0.0055, PROXY, SDK, 17),
    ]


def test_the_sends_after_the_warmup_split_into_hops() -> None:
    lines = ["reading from file x.pcap, link-type EN10MB", *_send(0.0), *_send(0.010),
             *_send(0.020), *_send(0.030)]
    got = wire.send_split(wire.parse_tcpdump(lines), PROXY, BROKER, skip=1, count=2,
                          min_request=1024)
    assert got["wire_sends"] == 2
    assert got["wire_proxy_in_p50_ms"] == 2.0
    assert got["wire_broker_p50_ms"] == 1.0
    assert got["wire_proxy_out_p50_ms"] == 1.0
    assert got["wire_total_p50_ms"] == 4.0
    assert got["wire_client_p50_ms"] == 6.0
    assert got["wire_pings_per_send"] == 1.0
    assert got["wire_ping_ack_p50_ms"] == 0.5


def test_a_send_not_seen_whole_is_left_out() -> None:
    # the last send has no next request: its client share is unknown
    lines = [*_send(0.0), *_send(0.010)]
    got = wire.send_split(wire.parse_tcpdump(lines), PROXY, BROKER, skip=0, count=5,
                          min_request=1024)
    assert got["wire_sends"] == 1
    assert wire.send_split([], PROXY, BROKER, skip=0, count=5, min_request=1024) == {}
