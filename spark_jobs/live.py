"""Live audits: each group's confirmed replication offset, asked from its brokers.

Every broker of a deploy cluster directory (``cluster.json``: ``host``, ``port``) is asked
GET_BROKER_RUNTIME_INFO over remoting; its ``commitLogMaxOffset`` is what it holds.  A group's
confirmed offset is the least of its members' (each member holds every byte below it, and a
CommitLog is append-only: those bytes no longer change), so the audit reads nothing beyond it
while the brokers keep writing.  Driver side only (blocking sockets, one request per broker).

A broker is not trusted: one whole deadline (``--node-timeout``) covers each exchange with it
(connect, request, answer), its frames go through the project's codec with a small frame bound,
what it may send before answering is bounded, and its offset is range-checked (digits only,
not past what its own store's files can hold).  A broker that fails any of that makes its group
*unverifiable* (the audit says why, per node, and exits 2), as does a group whose confirmed
offset leaves nothing to compare, or whose offset goes back by the end of the audit.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import socket
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

import attrs

from ..cluster.logging import get_logger
from ..cluster.protocol.route import KVTable
from ..cluster.remoting.codec import FrameDecoder, ProtocolError, RemotingCommand, encode
from ..cluster.remoting.codes import RequestCode, ResponseCode
from .decode import list_segments
from .model import NODE_TIMEOUT_S, BadInput, Replica

#: The largest frame a broker's answer may be (a real GET_BROKER_RUNTIME_INFO answer is ~3 KiB).
MAX_ANSWER_FRAME_BYTES: Final = 1 << 20
#: All bytes a broker may send on one exchange before its answer is complete.
MAX_ANSWER_BYTES: Final = 4 << 20
#: Brokers asked at once (each exchange has its own deadline; they run side by side).
ASK_THREADS: Final = 16
#: A broker's words (remarks, bad values) are quoted in a reason up to this many characters.
MAX_QUOTED_CHARS: Final = 120
#: A CommitLog offset: decimal digits, at most a Java long.
MAX_OFFSET: Final = 2**63 - 1
_OFFSET_TEXT = re.compile(r"[0-9]{1,19}")
_ASK_OPAQUE: Final = 1
_RECV_BYTES: Final = 65536

log = get_logger(component="spark_jobs.live")


class NodeFailure(Exception):
    """A broker that could not be asked or answered badly; ``str`` is one line for people."""


@attrs.frozen
class NodeAnswer:
    """What one broker said: its offset, or why it could not be used (``error``)."""

    node: str
    group: str
    addr: str
    max_offset: int | None = None
    fall_behind: str | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"addr": self.addr, "group": self.group, "commitLogMaxOffset": self.max_offset,
                "slaveFallBehindMuch": self.fall_behind, "error": self.error}  # fmt: skip


@attrs.frozen
class LivePlan:
    """The replicas to audit (limited to their group's confirmed offset), every broker's answer
    and, per group left out, why."""

    replicas: tuple[Replica, ...]
    answers: Mapping[str, NodeAnswer]
    left_out: Mapping[str, str]  # group -> reason
    timeout: float


def quote(text: str) -> str:
    """A peer's text, safe on one line: control characters escaped, clipped."""
    clipped = text[:MAX_QUOTED_CHARS]
    out = repr(clipped)
    return out + ("..." if len(text) > MAX_QUOTED_CHARS else "")


def broker_addrs(directory: str) -> dict[str, str]:
    """node name -> ``host:port`` of every broker in ``directory/cluster.json``."""
    path = os.path.join(directory, "cluster.json")
    try:
        with open(path) as f:
            nodes = json.load(f)["topology"]["nodes"]
        out = {str(n["name"]): (str(n["host"]), int(n["port"])) for n in nodes
               if n.get("kind") == "broker"}  # fmt: skip
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BadInput(f"cannot read broker addresses from {path}: {exc!r}") from exc
    for name, (host, port) in out.items():
        if not 0 < port < 65536 or not host:
            raise BadInput(f"{path}: broker {name!r} has a bad address {host!r}:{port}")
    return {name: f"{host}:{port}" for name, (host, port) in out.items()}


def _left(deadline: float, timeout: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise NodeFailure(f"no answer within {timeout:g} s")
    return left


def _answer_table(cmd: RemotingCommand) -> dict[str, str]:
    if cmd.code != ResponseCode.SUCCESS:
        raise NodeFailure(f"answered code {cmd.code} {quote(cmd.remark or '')}")
    try:
        return dict(KVTable.decode(bytes(cmd.body)).table)
    except ValueError as exc:
        raise NodeFailure(f"sent a bad runtime-info body: {quote(str(exc))}") from None


def _read_answer(s: socket.socket, deadline: float, timeout: float) -> dict[str, str]:
    dec = FrameDecoder(max_frame_bytes=MAX_ANSWER_FRAME_BYTES)
    got = 0
    while True:
        s.settimeout(_left(deadline, timeout))
        data = s.recv(_RECV_BYTES)
        if not data:
            part = f" ({dec.buffered} bytes of a frame)" if dec.buffered else ""
            raise NodeFailure(f"closed the connection before answering{part}")
        got += len(data)
        if got > MAX_ANSWER_BYTES:
            raise NodeFailure(f"sent more than {MAX_ANSWER_BYTES} bytes without answering")
        for cmd in dec.feed(data):
            if cmd.is_response and cmd.opaque == _ASK_OPAQUE:
                return _answer_table(cmd)


def runtime_info(addr: str, timeout: float = NODE_TIMEOUT_S) -> dict[str, str]:
    """One GET_BROKER_RUNTIME_INFO round trip within ``timeout`` seconds in all; NodeFailure
    (one line) when the broker cannot be reached or answers badly."""
    deadline = time.monotonic() + timeout
    host, _, port = addr.rpartition(":")
    req = encode(RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), opaque=_ASK_OPAQUE)
    try:
        with socket.create_connection((host, int(port)), timeout=_left(deadline, timeout)) as s:
            s.settimeout(_left(deadline, timeout))
            s.sendall(req)
            return _read_answer(s, deadline, timeout)
    except TimeoutError:
        raise NodeFailure(f"no answer within {timeout:g} s") from None
    except ProtocolError as exc:
        raise NodeFailure(f"sent a bad frame: {quote(str(exc))}") from None
    except OSError as exc:
        raise NodeFailure(f"connection failed: {exc.strerror or exc!r}") from None


def _offset(info: Mapping[str, str]) -> int:
    raw = info.get("commitLogMaxOffset")
    if raw is None:
        raise NodeFailure("gave no commitLogMaxOffset")
    if not _OFFSET_TEXT.fullmatch(raw) or int(raw) > MAX_OFFSET:
        raise NodeFailure(f"gave a bad commitLogMaxOffset {quote(raw)}")
    return int(raw)


def ask(node: str, group: str, addr: str, timeout: float) -> NodeAnswer:
    """One broker's answer; its failure is a value, never an exception."""
    try:
        info = runtime_info(addr, timeout)
        return NodeAnswer(node, group, addr, _offset(info), info.get("slaveFallBehindMuch"))
    except NodeFailure as exc:
        return NodeAnswer(node, group, addr, error=str(exc))


def ask_all(
    targets: Iterable[tuple[str, str, str]], timeout: float
) -> dict[str, NodeAnswer]:
    """(node, group, addr) each asked at once, each within its own ``timeout``."""
    todo = list(targets)
    if not todo:
        return {}
    with ThreadPoolExecutor(max(1, min(ASK_THREADS, len(todo)))) as pool:
        answers = list(pool.map(ask, *zip(*todo, strict=True), itertools.repeat(timeout)))
    return {a.node: a for a in answers}


def store_extent(r: Replica) -> int:
    """The absolute offset just past the replica's last data file: no broker holding this
    store can have written beyond it (its files are created before they are written)."""
    try:
        segs = list_segments(r.data_dir)
    except OSError as exc:
        raise BadInput(f"{r.group}:{r.node}: cannot list {r.data_dir!r}: {exc}") from exc
    return segs[-1].start + segs[-1].length if segs else 0


def _checked(a: NodeAnswer, r: Replica) -> NodeAnswer:
    """``a``, failed if it claims more than its store's files can hold."""
    if a.error is not None or a.max_offset is None:
        return a
    extent = store_extent(r)
    if a.max_offset <= extent:
        return a
    return attrs.evolve(a, error=f"claims commitLogMaxOffset {a.max_offset}, beyond the "
                                 f"{extent} bytes its store's files span")  # fmt: skip


def plan_live(replicas: list[Replica], directory: str, timeout: float) -> LivePlan:
    """Ask every broker; groups with a broker that failed are left out (with the reason), the
    others are limited to their confirmed offset (the least of their members')."""
    addrs = broker_addrs(directory)
    for r in replicas:
        if r.node not in addrs:
            raise BadInput(f"{r.group}:{r.node}: not a broker of {directory}")
    asked = ask_all(((r.node, r.group, addrs[r.node]) for r in replicas), timeout)
    answers = {r.node: _checked(asked[r.node], r) for r in replicas}
    left_out: dict[str, str] = {}
    for r in replicas:
        a = answers[r.node]
        if a.error is not None:
            log.warning("broker unverifiable", node=r.node, addr=a.addr, reason=a.error)
            left_out.setdefault(r.group, f"{r.node} at {a.addr}: {a.error}")
    limits: dict[str, int] = {}
    for r in replicas:
        mx = answers[r.node].max_offset
        if r.group not in left_out and mx is not None:
            limits[r.group] = min(limits.get(r.group, mx), mx)
    kept = tuple(attrs.evolve(r, limit=limits[r.group]) for r in replicas
                 if r.group not in left_out)  # fmt: skip
    return LivePlan(kept, answers, left_out, timeout)


def recheck(plan: LivePlan) -> dict[str, str]:
    """Ask the audited brokers again after the audit: group -> why its confirmed offset no
    longer holds (a broker gone bad, or one whose offset went back below it)."""
    limits = {r.group: r.limit for r in plan.replicas}
    again = ask_all(((r.node, r.group, plan.answers[r.node].addr) for r in plan.replicas),
                    plan.timeout)  # fmt: skip
    out: dict[str, str] = {}
    for r in plan.replicas:
        a = again[r.node]
        lim = limits[r.group] or 0
        if a.error is not None:
            why = f"after the audit: {a.error}"
        elif a.max_offset is not None and a.max_offset < lim:
            why = f"commitLogMaxOffset went back from {lim} or more to {a.max_offset}"
        else:
            continue
        log.warning("broker unverifiable", node=r.node, addr=a.addr, reason=why)
        out.setdefault(r.group, f"{r.node} at {a.addr}: {why}")
    return out


def compared_bytes(grp: Mapping[str, Any]) -> int:
    """Bytes of complete master records the audit of one group covered (below its limit)."""
    m = grp["replicas"][grp["master"]]
    return 0 if m.get("first_offset") is None else max(0, m["end_offset"] - m["first_offset"])


def judge(summary: dict[str, Any], plan: LivePlan, after: Mapping[str, str]) -> dict[str, Any]:
    """The audit's summary with the live verdicts: a group left out, one whose confirmed offset
    no longer held after the audit (``after``) and one where nothing was compared are
    unverifiable.  Exit 1 if a verifiable group diverged (or lags without --allow-lag), else 2
    if any group is unverifiable, else 0."""
    why: dict[str, str] = dict(plan.left_out)
    groups: dict[str, Any] = {}
    for g, grp in summary["groups"].items():
        n = compared_bytes(grp)
        limit = grp["replicas"][grp["master"]]["audited_to"]
        reason = after.get(g) or (None if n else (
            f"0 bytes compared: its confirmed offset {limit} (the least commitLogMaxOffset of "
            "its brokers) holds no complete record"))  # fmt: skip
        grp = {**grp, "compared_bytes": n}
        if reason is not None:
            why[g] = reason
            grp["replicas"] = {node: {**r, "verdict": "unverifiable"}
                               for node, r in grp["replicas"].items()}  # fmt: skip
        groups[g] = grp
    failing = {"divergent"} | (set() if summary["allow_lag"] else {"lagging"})
    diverged = any(r["verdict"] in failing for grp in groups.values()
                   for r in grp["replicas"].values())  # fmt: skip
    code = 1 if diverged else 2 if why else 0
    return {
        **summary,
        "exit_code": code,
        "verdict": {0: "consistent", 1: "divergent", 2: "unverifiable"}[code],
        "groups": groups,
        "unverifiable": dict(sorted(why.items())),
        "live": {"node_timeout_s": plan.timeout,
                 "nodes": {n: a.to_json() for n, a in sorted(plan.answers.items())}},
    }  # fmt: skip
