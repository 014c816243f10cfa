"""RocketMQ ``.properties`` files -> frozen attrs configs with RocketMQ's key names and defaults.

A config class is an ``@attrs.frozen`` class with fields declared by ``setting(key, default)``;
the key is RocketMQ's own name (``listenPort``, ``brokerIP1``, ``flushDiskType``). ``load_config``
parses each value by the field's type (str, int, float, bool, an Enum by member name), rejects a bad
value naming its key, and hands back the keys it did not know so the caller can report them.
"""

from __future__ import annotations

import enum
import ipaddress
import math
import os
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Generic, TypeVar

import attrs

T = TypeVar("T")


class ConfigError(ValueError):
    """A value that does not parse, or a file that cannot be read; names the key or the file."""


def setting(key: str, default: Any, *, secret: bool = False) -> Any:
    """Declare a config field read from the properties key ``key``; a ``secret`` one never
    shows in the config value's repr (a logged config object)."""
    return attrs.field(default=default, kw_only=True, metadata={"key": key}, repr=not secret)


#: The shortest ``clusterSecret`` a node accepts (``rmq-cluster up`` generates 43 characters).
MIN_CLUSTER_SECRET_CHARS: Final = 16


def check_cluster_secret(value: str) -> None:
    """``clusterSecret``: empty (open peer ports) or at least ``MIN_CLUSTER_SECRET_CHARS``
    printable ASCII characters without spaces."""
    if value and (len(value) < MIN_CLUSTER_SECRET_CHARS or len(value) > 1024
                  or not value.isascii() or not value.isprintable() or " " in value):
        raise ValueError(
            f"clusterSecret: must be {MIN_CLUSTER_SECRET_CHARS}..1024 printable ASCII characters "
            "without spaces (or empty)")


# --------------------------------------------------------------------------- .properties text

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "u" and i + 6 <= len(text):
                try:
                    out.append(chr(int(text[i + 2 : i + 6], 16)))
                    i += 6
                    continue
                except ValueError:
                    pass
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _logical_lines(text: str) -> list[str]:
    lines: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.lstrip()
        if pending == "" and (not line or line[0] in "#!"):
            continue
        # an odd number of trailing backslashes continues the line
        stripped = line.rstrip("\\")
        if (len(line) - len(stripped)) % 2 == 1:
            pending += line[:-1]
            continue
        lines.append(pending + line)
        pending = ""
    if pending:
        lines.append(pending)
    return lines


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java ``.properties`` text: ``k=v``, ``k: v`` or ``k v``; ``#``/``!`` comments;
    backslash continuations and escapes. Later keys win, as in ``Properties.load``."""
    result: dict[str, str] = {}
    for line in _logical_lines(text):
        i = 0
        while i < len(line):
            ch = line[i]
            if ch == "\\":
                i += 2
                continue
            if ch in "=: \t\f":
                break
            i += 1
        key = line[:i]
        rest = line[i:].lstrip(" \t\f")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t\f")
        result[_unescape(key)] = _unescape(rest).rstrip() if rest else ""
    return result


def read_properties(path: str | os.PathLike[str]) -> dict[str, str]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    return parse_properties(text)


def format_properties(values: Mapping[str, str]) -> str:
    """Render ``key=value`` lines, escaping what ``parse_properties`` would read differently."""
    lines = []
    for key, value in values.items():
        k = key.replace("\\", "\\\\").replace("=", "\\=").replace(":", "\\:").replace(" ", "\\ ")
        v = value.replace("\\", "\\\\").replace("\n", "\\n")
        if v.startswith(" "):
            v = "\\" + v
        lines.append(f"{k}={v}")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- typed configs


@attrs.frozen
class Loaded(Generic[T]):
    """A loaded config and the keys of the source that no field claimed."""

    config: T
    unknown: Mapping[str, str]


def _field_type(cls: type, field: attrs.Attribute) -> Any:
    hints = typing.get_type_hints(cls)
    tp = hints.get(field.name, field.type)
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def parse_value(key: str, tp: Any, raw: str) -> Any:
    """Parse one properties value as ``tp``; a bad value raises ``ConfigError`` naming ``key``."""
    text = raw.strip()
    if tp is bool:
        low = text.lower()
        if low == "true":
            return True
        if low == "false":
            return False
        raise ConfigError(f"{key}: expected true or false, got {raw!r}")
    if tp is int:
        try:
            return int(text)
        except ValueError:
            raise ConfigError(f"{key}: expected an integer, got {raw!r}") from None
    if tp is float:
        try:
            return float(text)
        except ValueError:
            raise ConfigError(f"{key}: expected a number, got {raw!r}") from None
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp[text]
        except KeyError:
            names = ", ".join(m.name for m in tp)
            raise ConfigError(f"{key}: expected one of {names}, got {raw!r}") from None
    return raw if tp is str else text


def format_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return value.name
    return str(value)


def config_keys(cls: type) -> dict[str, str]:
    """Field name -> properties key, for a config class."""
    return {f.name: f.metadata["key"] for f in attrs.fields(cls) if "key" in f.metadata}


def load_config(cls: type[T], values: Mapping[str, str], **overrides: Any) -> Loaded[T]:
    """Build ``cls`` from properties ``values``; ``overrides`` (by field name) win over them."""
    kwargs: dict[str, Any] = {}
    claimed: set[str] = set()
    for field in attrs.fields(cls):  # type: ignore[arg-type]
        key = field.metadata.get("key")
        if key is None:
            continue
        claimed.add(key)
        if key in values:
            kwargs[field.name] = parse_value(key, _field_type(cls, field), values[key])
    kwargs.update(overrides)
    try:
        config = cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise ConfigError(str(exc)) from None
    unknown = {k: v for k, v in values.items() if k not in claimed}
    return Loaded(config=config, unknown=unknown)


def load_config_file(cls: type[T], path: str | os.PathLike[str], **overrides: Any) -> Loaded[T]:
    return load_config(cls, read_properties(path), **overrides)


def to_properties(config: Any) -> dict[str, str]:
    """A config back to its properties keys and string values (for rendering files)."""
    out: dict[str, str] = {}
    for field in attrs.fields(type(config)):
        key = field.metadata.get("key")
        if key is not None:
            value = getattr(config, field.name)
            if value is not None:
                out[key] = format_value(value)
    return out


# --------------------------------------------------------------------------- value checks
# Shared by every node's boot and by UPDATE_BROKER_CONFIG / UPDATE_NAMESRV_CONFIG: a value is
# checked by the same function whether it comes from a file, the command line or the wire.

#: Longest host name (RFC 1035) and label.
MAX_HOSTNAME_CHARS = 253
MAX_HOSTNAME_LABEL_CHARS = 63
_LABEL_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_")


def check_host(key: str, host: str) -> str:
    """``host`` as an IPv4/IPv6 literal or a DNS host name (RFC 1123 labels); ConfigError
    naming ``key`` otherwise. Returns it without IPv6 brackets."""
    text = host.strip()
    bare = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    if not bare:
        raise ConfigError(f"{key}: empty host")
    try:
        ipaddress.ip_address(bare)
        return bare
    except ValueError:
        if text.startswith("["):
            raise ConfigError(f"{key}: {host!r} is not an IPv6 address") from None
    if len(bare) > MAX_HOSTNAME_CHARS:
        raise ConfigError(f"{key}: host name {host!r} is longer than {MAX_HOSTNAME_CHARS}")
    name = bare[:-1] if bare.endswith(".") else bare
    for label in name.split("."):
        if (
            not label
            or len(label) > MAX_HOSTNAME_LABEL_CHARS
            or not set(label) <= _LABEL_CHARS
            or label[0] == "-"
            or label[-1] == "-"
        ):
            raise ConfigError(f"{key}: {host!r} is not a host name or IP address")
    if name.replace(".", "").isdigit():
        raise ConfigError(f"{key}: {host!r} is not a valid IPv4 address")
    return bare


def check_port(key: str, port: int, *, lowest: int = 1) -> int:
    if not lowest <= port <= 65535:
        raise ConfigError(f"{key}: {port} is not a port number ({lowest}..65535)")
    return port


def check_host_port(key: str, addr: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` for IPv6) with a port 1..65535; ConfigError otherwise."""
    text = addr.strip()
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise ConfigError(f"{key}: {addr!r} is not host:port")
    if ":" in host and not (host.startswith("[") and host.endswith("]")):
        raise ConfigError(f"{key}: {addr!r}: write an IPv6 host as [addr]:port")
    if not port.isascii() or not port.isdigit() or len(port) > 5:
        raise ConfigError(f"{key}: {addr!r} has no numeric port")
    return check_host(key, host), check_port(key, int(port))


def check_address_list(key: str, value: str) -> list[tuple[str, int]]:
    """A ``host:port[;host:port...]`` list (RocketMQ's namesrvAddr form; empty = none), each
    entry parsed in full."""
    return [check_host_port(key, part) for part in value.split(";") if part.strip()]


def check_range(key: str, value: float, lowest: float | None, highest: float | None) -> None:
    """``value`` within ``[lowest, highest]`` (None: open on that side) and finite (a float
    key's ``nan`` or ``inf`` compares as in range otherwise); ConfigError naming ``key``."""
    if (
        not math.isfinite(value)
        or (lowest is not None and value < lowest)
        or (highest is not None and value > highest)
    ):
        low = "" if lowest is None else f"{lowest}"
        high = "" if highest is None else f"{highest}"
        raise ConfigError(f"{key}: {value} is out of range [{low}..{high}]")


#: An inclusive range per numeric key: (lowest, highest).
Ranges = Mapping[str, tuple[float, float]]


def numeric_keys(cls: type) -> list[str]:
    """The properties keys of ``cls``'s int and float fields (what a range table must cover)."""
    out = []
    for field in attrs.fields(cls):
        key = field.metadata.get("key")
        if key is not None and _field_type(cls, field) in (int, float):
            out.append(key)
    return out


def check_ranges(config: Any, ranges: Ranges) -> None:
    """Every numeric field of ``config`` that ``ranges`` names, within its range; ConfigError
    naming the first key out of it."""
    for name, key in config_keys(type(config)).items():
        bounds = ranges.get(key)
        value = getattr(config, name)
        if bounds is not None and isinstance(value, int | float) and not isinstance(value, bool):
            check_range(key, value, *bounds)
