"""JSON the way RocketMQ's Java nodes write it with fastjson, and lenient input like fastjson reads.

Output (docs/protocol/remoting.md, "Route and cluster JSON"): compact, object keys sorted, ``None``
values omitted, and **integer map keys unquoted** (``{0:"10.0.0.1:10911"}``) unless
``standard=True``, which mirrors the NameServer's "standard JSON" route encoding for clients
of version >= V4_9_4
(``BrowserCompatible`` + ``QuoteFieldNames`` + ``MapSortField``: integer keys quoted, non-ASCII
characters escaped as ``\\uXXXX``).

Input: ``loads`` accepts standard JSON and, as fastjson does, unquoted integer object keys.

Pure: no I/O, no trio.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import orjson

__all__ = ["FastjsonError", "dumps", "loads", "quote_numeric_keys"]


class FastjsonError(ValueError):
    """Input that is not JSON even under fastjson's lenient reading."""


def _string(value: str, standard: bool) -> str:
    if standard and not value.isascii():
        return json.dumps(value, ensure_ascii=True)
    return orjson.dumps(value).decode()


def _key_order(key: Any) -> tuple[int, Any]:
    # ints sort numerically (a TreeMap of Long); strings by code point (String.compareTo on BMP)
    return (0, key) if isinstance(key, int) else (1, key)


def _write(value: Any, out: list[str], standard: bool) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, str):
        out.append(_string(value, standard))
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, float):
        out.append(orjson.dumps(value).decode())
    elif isinstance(value, Mapping):
        out.append("{")
        first = True
        for key in sorted(value, key=_key_order):
            item = value[key]
            if item is None:
                continue
            if not first:
                out.append(",")
            first = False
            if isinstance(key, str):
                out.append(_string(key, standard))
            elif isinstance(key, int) and not isinstance(key, bool):
                out.append(f'"{key}"' if standard else str(key))
            else:
                raise TypeError(f"unsupported map key type {type(key).__name__}")
            out.append(":")
            _write(item, out, standard)
        out.append("}")
    elif isinstance(value, list | tuple):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _write(item, out, standard)
        out.append("]")
    elif isinstance(value, set | frozenset):
        _write(sorted(value), out, standard)
    else:
        raise TypeError(f"cannot write {type(value).__name__} as JSON")


def dumps(value: Any, *, standard: bool = False) -> bytes:
    """Encode ``value`` (dicts, lists, str, int, bool, None) as fastjson would, UTF-8 bytes."""
    out: list[str] = []
    _write(value, out, standard)
    return "".join(out).encode()


def quote_numeric_keys(text: str) -> str:
    """Rewrite fastjson's unquoted integer object keys (``{0:"a"}``) as quoted keys.

    String-aware: text inside string literals is never changed.
    """
    out: list[str] = []
    i = 0
    n = len(text)
    expect_key = False
    while i < n:
        ch = text[i]
        if ch == '"':
            j = i + 1
            while j < n:
                c = text[j]
                if c == "\\":
                    j += 2
                    continue
                if c == '"':
                    break
                j += 1
            out.append(text[i : j + 1])
            i = j + 1
            expect_key = False
            continue
        if ch in "{,":
            out.append(ch)
            i += 1
            expect_key = True
            continue
        if expect_key and (ch.isdigit() or ch == "-"):
            j = i + 1
            while j < n and text[j].isdigit():
                j += 1
            k = j
            while k < n and text[k] in " \t\r\n":
                k += 1
            if k < n and text[k] == ":":
                out.append(f'"{text[i:j]}"')
                i = j
                expect_key = False
                continue
        if ch not in " \t\r\n":
            expect_key = False
        out.append(ch)
        i += 1
    return "".join(out)


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """Parse JSON leniently: standard JSON, or fastjson's output with unquoted integer keys."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        pass
    try:
        text = data if isinstance(data, str) else bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FastjsonError(f"not UTF-8: {exc}") from None
    try:
        return orjson.loads(quote_numeric_keys(text))
    except orjson.JSONDecodeError as exc:
        raise FastjsonError(f"not JSON: {exc}") from None
