"""Who may use the master's HA port, pure (no trio, no sockets). Our extension: RocketMQ 4.x
serves its whole CommitLog to anyone who connects to the HA port, and takes any peer's offset
reports as slave acks.

* ``SlaveAllowList``: ``haAllowedSlaveAddresses`` -- comma-separated patterns, each an IP
  (``10.0.0.7``), a network (``10.0.0.0/24``), a host name (resolved by the shell when the HA
  service starts), ``*`` (anyone), optionally with ``:port`` (``[v6]:port`` for IPv6). A
  connection from an address no pattern matches is closed at accept and logged.
* ``default_allow_list``: what an empty setting means. A loopback-bound broker: loopback peers
  only (nothing else can reach it). Otherwise: the hosts of this broker group's slaves as the
  NameServers list them (the broker feeds them in); nobody until they are known.
* The authenticated handshake (``aclEnable=true``): on accept the master sends a challenge
  (``HA_AUTH_MAGIC`` + a random nonce); the slave answers HMAC-SHA256(aclSecretKey, label +
  nonce) before its first offset report. A slave that answers wrong, or not in time, gets
  nothing but the challenge. This makes an ACL-on HA port incompatible with a Java slave (it
  sends its offset at once and never answers the challenge); ACL-off HA is unchanged.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from collections.abc import Iterable, Mapping
from typing import Final

import attrs

from ..cluster.config import ConfigError, check_host, check_port
from .protocol import HAProtocolError

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: The networks a loopback-bound master accepts slaves from by default.
LOOPBACK_NETWORKS: Final[tuple[IPNetwork, ...]] = (
    ipaddress.ip_network("127.0.0.0/8"),
    ipaddress.ip_network("::1/128"),
)
#: First bytes of the master's challenge (8 bytes: no valid offset report starts like this is
#: not required -- the slave reads it, the master never reads it).
HA_AUTH_MAGIC: Final = b"RMQHA\x01\x00\x00"
HA_AUTH_NONCE_BYTES: Final = 16
HA_AUTH_CHALLENGE_BYTES: Final = len(HA_AUTH_MAGIC) + HA_AUTH_NONCE_BYTES  # 24
HA_AUTH_ANSWER_BYTES: Final = hashlib.sha256().digest_size  # 32
#: Bound into the MAC so an answer cannot be replayed in another protocol or direction.
_AUTH_LABEL: Final = b"rmq-cluster ha slave v1\x00"


@attrs.frozen
class Pattern:
    network: IPNetwork | None = None  # None: a host name to resolve, or any ("*")
    hostname: str | None = None
    port: int | None = None  # None: any port

    def matches(self, ip: ipaddress.IPv4Address | ipaddress.IPv6Address, port: int) -> bool:
        if self.port is not None and port != self.port:
            return False
        if self.network is None:
            return self.hostname is None  # "*"; an unresolved host name matches nothing
        return ip.version == self.network.version and ip in self.network


def _parse_pattern(text: str) -> Pattern:
    key = "haAllowedSlaveAddresses"
    part = text.strip()
    port: int | None = None
    if part.startswith("["):
        host, sep, rest = part[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise ConfigError(f"{key}: {text!r} is not [IPv6] or [IPv6]:port")
        if rest:
            port = _port(key, text, rest[1:])
        part = host
    elif part.count(":") == 1:
        part, _, port_text = part.partition(":")
        port = _port(key, text, port_text)
    if part == "*":
        return Pattern(port=port)
    if "/" in part:
        try:
            return Pattern(network=ipaddress.ip_network(part, strict=False), port=port)
        except ValueError:
            raise ConfigError(f"{key}: {text!r} is not a network (e.g. 10.0.0.0/24)") from None
    try:
        ip = ipaddress.ip_address(part)
    except ValueError:
        return Pattern(hostname=check_host(key, part).lower(), port=port)
    return Pattern(network=ipaddress.ip_network(ip), port=port)


def _port(key: str, text: str, port_text: str) -> int:
    if not port_text.isascii() or not port_text.isdigit() or len(port_text) > 5:
        raise ConfigError(f"{key}: {text!r} has no numeric port")
    return check_port(key, int(port_text))


@attrs.frozen
class SlaveAllowList:
    patterns: tuple[Pattern, ...] = ()

    @classmethod
    def parse(cls, text: str) -> SlaveAllowList:
        """``haAllowedSlaveAddresses``; ConfigError names a bad pattern. Empty text gives an
        empty list (the caller then uses ``default_allow_list``)."""
        return cls(tuple(_parse_pattern(p) for p in text.split(",") if p.strip()))

    @property
    def hostnames(self) -> frozenset[str]:
        return frozenset(p.hostname for p in self.patterns if p.hostname is not None)

    def resolved(self, addresses: Mapping[str, Iterable[str]]) -> SlaveAllowList:
        """Host-name patterns replaced by one pattern per resolved address (a name missing
        from ``addresses`` stays and matches nothing)."""
        out: list[Pattern] = []
        for p in self.patterns:
            if p.hostname is None or p.hostname not in addresses:
                out.append(p)
                continue
            for addr in addresses[p.hostname]:
                try:
                    out.append(Pattern(network=ipaddress.ip_network(addr), port=p.port))
                except ValueError:
                    continue
        return SlaveAllowList(tuple(out))

    def allows(self, host: str, port: int) -> bool:
        try:
            ip = ipaddress.ip_address(host.split("%", 1)[0])
        except ValueError:
            return False
        if ip.version == 6 and ip.ipv4_mapped is not None:  # ::ffff:a.b.c.d on a v6 socket
            ip = ip.ipv4_mapped
        return any(p.matches(ip, port) for p in self.patterns)


def is_loopback_host(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"


def default_allow_list(bind_host: str, slave_hosts: Iterable[str] = ()) -> SlaveAllowList:
    """An empty ``haAllowedSlaveAddresses``: loopback for a loopback-bound master, else the
    group's slave hosts (IP literals; anything else is skipped)."""
    if is_loopback_host(bind_host):
        return SlaveAllowList(tuple(Pattern(network=n) for n in LOOPBACK_NETWORKS))
    out: list[Pattern] = []
    for host in sorted(set(slave_hosts)):
        try:
            out.append(Pattern(network=ipaddress.ip_network(host.strip("[]"))))
        except ValueError:
            continue
    return SlaveAllowList(tuple(out))


# ----------------------------------------------------------------------------- handshake


def encode_challenge(nonce: bytes) -> bytes:
    if len(nonce) != HA_AUTH_NONCE_BYTES:
        raise HAProtocolError(f"a nonce is {HA_AUTH_NONCE_BYTES} bytes, got {len(nonce)}")
    return HA_AUTH_MAGIC + nonce


def decode_challenge(data: bytes) -> bytes:
    """The nonce of a master's challenge; HAProtocolError if it is not one."""
    if len(data) != HA_AUTH_CHALLENGE_BYTES or not data.startswith(HA_AUTH_MAGIC):
        raise HAProtocolError("the master did not send an HA authentication challenge")
    return bytes(data[len(HA_AUTH_MAGIC) :])


def auth_answer(secret: str, nonce: bytes) -> bytes:
    return hmac.new(secret.encode("utf-8"), _AUTH_LABEL + nonce, hashlib.sha256).digest()


def verify_answer(secret: str | None, nonce: bytes, answer: bytes) -> bool:
    """Constant-time check of a slave's answer; no secret configured = nobody passes."""
    if not secret:
        return False
    return hmac.compare_digest(auth_answer(secret, nonce), bytes(answer))
