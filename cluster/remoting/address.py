"""``host:port`` addresses as RocketMQ writes them (pure)."""

from __future__ import annotations


def parse_address(addr: str) -> tuple[str, int]:
    """``"ip:port"`` (or ``"[v6]:port"``) -> (host, port)."""
    host, sep, port = addr.strip().rpartition(":")
    if not sep or not host:
        raise ValueError(f"address {addr!r} is not host:port")
    try:
        port_num = int(port)
    except ValueError:
        raise ValueError(f"address {addr!r} has a non-numeric port") from None
    if not 0 < port_num < 65536:
        raise ValueError(f"address {addr!r} has port out of range")
    return host.strip("[]"), port_num


def format_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
