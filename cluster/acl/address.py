"""White-list address patterns of plain ACL (RocketMQ ``RemoteAddressStrategyFactory``).

Forms (IPv4; IPv6 only as exact addresses or comma lists):

* blank: matches nothing;
* ``*``, ``*.*.*.*``: matches every address;
* ``192.168.1.{1,2,3}``: the listed last parts;
* ``192.168.1.1,192.168.1.2``: the listed addresses;
* ``192.168.1.*``, ``192.168.*.*``, ``192.168.1.1-200``, ``192.168.10-20.*``: the first part
  (2nd..4th) that is ``*`` or ``a-b`` is a range, parts before it must be equal, parts after
  are not looked at;
* anything else: one exact address.

A pattern that is none of these (bad numbers, ``1-300``, ...) raises ``AclConfigError`` when the
rules load, as RocketMQ refuses such a file.

Pure: no I/O.
"""

from __future__ import annotations

import ipaddress
from typing import Final

import attrs

#: IPv4 addresses have four parts, each 0..255.
IPV4_PARTS: Final = 4
IPV4_PART_MAX: Final = 255


class AclConfigError(ValueError):
    """A plain_acl.yml that cannot be used (RocketMQ refuses to load it too)."""


def _octet(text: str, pattern: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise AclConfigError(f"Netaddress examine Exception netaddress is {pattern}") from None
    if not 0 <= value <= IPV4_PART_MAX:
        raise AclConfigError(f"netaddress examine scope Exception netaddress is {pattern}")
    return value


def _normalise(addr: str) -> str:
    """An address in one canonical spelling (IPv6 expanded), or as given if not an address."""
    try:
        return ipaddress.ip_address(addr.strip().strip("[]")).exploded.upper()
    except ValueError:
        return addr.strip()


def _check_address(addr: str, pattern: str) -> str:
    try:
        return ipaddress.ip_address(addr.strip().strip("[]")).exploded.upper()
    except ValueError:
        raise AclConfigError(f"Netaddress examine Exception netaddress is {pattern}") from None


@attrs.frozen
class AddressPattern:
    """One compiled pattern; ``match(ip)`` takes the peer's IP without the port."""

    text: str
    kind: str  # "none" | "all" | "set" | "range"
    addresses: frozenset[str] = frozenset()
    head: tuple[int, ...] = ()
    low: int = 0
    high: int = 0

    def match(self, ip: str) -> bool:
        kind = self.kind
        if kind == "all":
            return True
        if kind == "none":
            return False
        if kind == "set":
            return _normalise(ip) in self.addresses
        parts = ip.split(".")
        if len(parts) != IPV4_PARTS or not all(p.isdigit() for p in parts):
            return False
        n = len(self.head)
        if tuple(int(p) for p in parts[:n]) != self.head:
            return False
        return self.low <= int(parts[n]) <= self.high


def compile_pattern(text: str | None) -> AddressPattern:
    pattern = (text or "").strip()
    if not pattern:
        return AddressPattern(pattern, "none")
    if pattern in ("*", "*.*.*.*", "*:*:*:*:*:*:*:*"):
        return AddressPattern(pattern, "all")
    if pattern.endswith("}"):
        prefix, brace, listed = pattern.rpartition("{")
        if not brace or not prefix.endswith("."):
            raise AclConfigError(
                "MultipleRemoteAddressStrategy netaddress examine scope Exception netaddress "
                f"{pattern}"
            )
        items = [i.strip() for i in listed[:-1].split(",") if i.strip()]
        return AddressPattern(
            pattern, "set", frozenset(_check_address(prefix + i, pattern) for i in items)
        )
    if "," in pattern:
        items = [i.strip() for i in pattern.split(",") if i.strip()]
        return AddressPattern(pattern, "set", frozenset(_check_address(i, pattern) for i in items))
    if "*" in pattern or "-" in pattern:
        parts = pattern.split(".")
        if len(parts) != IPV4_PARTS:
            raise AclConfigError(f"netaddress examine scope Exception netaddress is {pattern}")
        for index in range(1, IPV4_PARTS):
            part = parts[index].strip()
            if part == "*":
                low, high = 0, IPV4_PART_MAX
            elif "-" in part:
                a, _, b = part.partition("-")
                if not a:
                    raise AclConfigError(
                        "RangeRemoteAddressStrategy netaddress examine scope Exception value "
                        f"{part}"
                    )
                low, high = _octet(a, pattern), _octet(b, pattern)
                if low > high:
                    raise AclConfigError(
                        "RangeRemoteAddressStrategy netaddress examine scope Exception start is "
                        f"{low} , end is {high}"
                    )
            else:
                continue
            head = tuple(_octet(p, pattern) for p in parts[:index])
            return AddressPattern(pattern, "range", head=head, low=low, high=high)
        raise AclConfigError(f"netaddress examine scope Exception netaddress is {pattern}")
    return AddressPattern(pattern, "set", frozenset({_check_address(pattern, pattern)}))


def peer_ip(remote: str) -> str:
    """``"1.2.3.4:5678"`` / ``"[::1]:5678"`` -> the IP part (RocketMQ: up to the last ':')."""
    if ":" not in remote:
        return remote
    return remote[: remote.rfind(":")].strip("[]")
