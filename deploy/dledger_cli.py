"""``rmq-cluster dledger transfer|leaders``: operate the DLedger groups of a local cluster.

``transfer --group G --to n2`` sends DLedger's admin LEADERSHIP_TRANSFER request
(``dledger/admin.py``) to the group's peers on their dLegerPeers ports: a follower answers
NOT_LEADER naming the leader, the leader hands over and answers once ``n2`` leads (or
TAKE_LEADERSHIP_FAILED).  When the group names another member its ``preferredLeaderId``, that
member takes the leadership back within a few seconds (DLedger's preferred-leader check):
``transfer`` watches the group for ``PREFERRED_WATCH_S`` and says so (exit 1: the member asked
for does not lead).  ``leaders`` prints who leads each group, in which term.  When the
group's brokers hold a ``clusterSecret`` (their dLegerPeers ports authenticate every peer), the
admin client proves it too (``cluster/remoting/peer_auth.py``), read from a member's config.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import attrs
import orjson
import trio

from ..cluster.config import read_properties
from ..cluster.remoting.client_pool import open_remoting_client
from ..cluster.remoting.codec import RemotingCommand
from ..cluster.remoting.errors import RemotingError
from ..cluster.remoting.peer_auth import CLUSTER_SECRET_KEY, peer_handshake
from . import supervisor
from .commands import _guarded, _print_json, _state, format_table
from .topology import Topology

PROG = "rmq-cluster dledger"
#: DLedger's wire contract, as its admin tool speaks it (deploy imports no node package):
#: ``DLedgerRequestCode.LEADERSHIP_TRANSFER`` and the ``DLedgerResponseCode`` numbers used here
LEADERSHIP_TRANSFER_CODE = 51005
DLEDGER_CODE_NAMES = {
    -1: "UNKNOWN", 200: "SUCCESS", 300: "TIMEOUT", 303: "UNSUPPORTED", 400: "UNKNOWN_GROUP",
    401: "UNKNOWN_MEMBER", 404: "NOT_LEADER", 411: "UNEXPECTED_ARGUMENT",
    418: "TAKE_LEADERSHIP_FAILED", 506: "LEADER_TRANSFERRING",
}
CODE_SUCCESS = 200
CODE_NOT_LEADER = 404
#: the leader works on a hand-over for up to 10 s (dledger/admin.py); the client waits longer
DEFAULT_WAIT_S = 15.0
MAX_ANSWER_BYTES = 4096
MAX_REDIRECTS = 3
#: After a transfer away from the group's preferredLeaderId: how long ``transfer`` watches for
#: the preferred member taking the leadership back (it checks every second, dledger/core.py),
#: and how often it looks.
PREFERRED_WATCH_S = 8.0
PREFERRED_POLL_S = 0.25
PREFERRED_LEADER_KEY = "preferredLeaderId"


@attrs.frozen
class TransferAnswer:
    """DLedger's LeadershipTransferResponse (the fields the CLI shows)."""

    code: int
    leader_id: str
    term: int
    remark: str

    @property
    def code_name(self) -> str:
        return DLEDGER_CODE_NAMES.get(self.code, str(self.code))

    @classmethod
    def parse(cls, body: bytes, remark: str | None) -> TransferAnswer:
        if not body or len(body) > MAX_ANSWER_BYTES:
            raise ValueError(f"answer body of {len(body)} bytes")
        obj = orjson.loads(body)
        if not isinstance(obj, dict):
            raise ValueError("answer is not a JSON object")
        code, term, leader = obj.get("code", -1), obj.get("term", -1), obj.get("leaderId", "")
        if not isinstance(code, int) or not isinstance(term, int) or not isinstance(leader, str):
            raise ValueError("answer fields of the wrong type")
        text = obj.get("remark") or remark or ""
        return cls(code, leader, term, str(text)[:1024])


def transfer_request_json(group: str, to: str, remote_id: str) -> bytes:
    """DLedger's LeadershipTransferRequest JSON, as its admin tool sends it."""
    return orjson.dumps({
        "group": group, "remoteId": remote_id, "localId": "rmq-cluster-admin",
        "leaderId": "", "term": -1, "transferId": "", "transfereeId": to,
        "takeLeadershipLedgerIndex": -1,
    })


@attrs.frozen
class TransferOutcome:
    ok: bool
    answer: TransferAnswer | None
    asked: tuple[str, ...]
    error: str = ""


def group_peers(topo: Topology, group: str) -> dict[str, str]:
    """dLegerSelfId -> dLegerPeers address of every member of ``group``."""
    return {
        m.dledger_id: f"{m.host}:{m.dledger_port}"
        for m in topo.group_members(group)
        if m.dledger_id is not None
    }


def group_setting(state: supervisor.ClusterState, group: str, key: str) -> str:
    """``key`` of ``group``'s brokers, from a member's rendered config ("" when none has it)."""
    for spec in state.topology.group_members(group):
        try:
            value = read_properties(state.node(spec.name).conf).get(key, "")
        except (OSError, supervisor.SupervisorError):
            continue
        if value:
            return value
    return ""


def group_secret(state: supervisor.ClusterState, group: str) -> str:
    """The ``clusterSecret`` of ``group``'s brokers ("" when none has one: open peer ports)."""
    return group_setting(state, group, CLUSTER_SECRET_KEY)


def watch_taken_back(
    state: supervisor.ClusterState, group: str, to: str, within_s: float
) -> dict[str, Any] | None:
    """Whether another member leads ``group`` within ``within_s`` of ``to`` taking over: its
    ``leader`` (dLegerSelfId), ``term`` and ``after_s``; None if ``to`` still leads."""
    started = time.monotonic()
    while time.monotonic() - started < within_s:
        for node in supervisor.status(state)["nodes"]:
            leader = node.get("leader")
            if (node.get("group") == group and node.get("alive") and leader
                    and leader != to and node.get("term") is not None):
                return {"leader": leader, "term": node["term"],
                        "after_s": round(time.monotonic() - started, 2)}
        time.sleep(PREFERRED_POLL_S)
    return None


async def transfer(
    peers: dict[str, str], group: str, to: str, *,
    timeout_s: float = DEFAULT_WAIT_S, secret: str = "",
) -> TransferOutcome:
    """Ask the group's peers until the leader answers (following NOT_LEADER's leaderId);
    with ``secret``, every connection first authenticates (the peers' clusterSecret)."""
    asked: list[str] = []
    order = list(peers)
    errors: list[str] = []
    async with open_remoting_client(
        node="rmq-cluster-dledger-admin",
        handshake=peer_handshake(secret) if secret else None,
    ) as client:
        queue = list(order)
        redirects = 0
        while queue:
            pid = queue.pop(0)
            asked.append(pid)
            body = transfer_request_json(group, to, pid)
            req = RemotingCommand.request(LEADERSHIP_TRANSFER_CODE, {}, body)
            try:
                resp = await client.invoke(peers[pid], req, timeout_s)
            except (RemotingError, OSError, trio.TooSlowError) as exc:
                errors.append(f"{pid}: {exc}")
                continue
            try:
                answer = TransferAnswer.parse(bytes(resp.body), resp.remark)
            except ValueError as exc:
                errors.append(f"{pid}: bad answer ({exc}); code {resp.code} {resp.remark!r}")
                continue
            if answer.code == CODE_NOT_LEADER:
                leader = answer.leader_id
                if leader in peers and leader != pid and redirects < MAX_REDIRECTS:
                    redirects += 1
                    queue = [leader] + [p for p in queue if p != leader]
                continue
            return TransferOutcome(answer.code == CODE_SUCCESS, answer, tuple(asked))
    return TransferOutcome(False, None, tuple(asked),
                           "; ".join(errors) or "no peer answered as the leader")


def cmd_transfer(args: argparse.Namespace) -> int:
    state = _state(args)
    topo = state.topology
    if args.group not in topo.groups:
        sys.stderr.write(f"{PROG}: error: no group {args.group!r} (groups: "
                         f"{', '.join(topo.groups)})\n")
        return 2
    peers = group_peers(topo, args.group)
    if not peers:
        sys.stderr.write(f"{PROG}: error: group {args.group!r} is not a DLedger group\n")
        return 2
    to = args.to
    by_name = {m.name: m.dledger_id for m in topo.group_members(args.group)}
    to = by_name.get(to) or to
    if to not in peers:
        sys.stderr.write(f"{PROG}: error: --to {args.to!r} is not a member of {args.group} "
                         f"({', '.join(peers)})\n")
        return 2
    secret = group_secret(state, args.group)
    out = trio.run(lambda: transfer(peers, args.group, to, timeout_s=args.timeout,
                                    secret=secret))
    report: dict[str, Any] = {
        "group": args.group, "to": to, "ok": out.ok, "asked": list(out.asked),
        "code": out.answer.code_name if out.answer else None,
        "leader": out.answer.leader_id if out.answer else None,
        "term": out.answer.term if out.answer else None,
        "remark": (out.answer.remark if out.answer else "") or out.error,
    }
    preferred = group_setting(state, args.group, PREFERRED_LEADER_KEY)
    back = None
    if out.ok and preferred and preferred != to:
        report["preferred_leader"] = preferred
        back = report["taken_back"] = watch_taken_back(state, args.group, to, PREFERRED_WATCH_S)
    if args.json:
        _print_json(report)
    elif out.ok:
        print(f"group {args.group}: {to} leads (term {report['term']})")
        if back is not None:
            print(f"group {args.group}: {back['leader']} took the leadership back after "
                  f"{back['after_s']} s (term {back['term']}): it is the group's "
                  f"{PREFERRED_LEADER_KEY}")
    if not out.ok:
        sys.stderr.write(f"{PROG}: error: transfer to {to} failed: {report['code']} "
                         f"{report['remark']}\n")
        return 1
    if back is not None:
        sys.stderr.write(f"{PROG}: error: {to} no longer leads {args.group}: "
                         f"{PREFERRED_LEADER_KEY}={preferred} took the leadership back; change "
                         f"or remove {PREFERRED_LEADER_KEY} to keep {to} leading\n")
        return 1
    return 0


def cmd_leaders(args: argparse.Namespace) -> int:
    state = _state(args)
    report = supervisor.status(state)
    rows: dict[str, dict[str, Any]] = {}
    for n in report["nodes"]:
        if "term" not in n:
            continue
        row = rows.setdefault(n["group"], {"group": n["group"], "leader": None, "term": None,
                                           "members": 0, "alive": 0})
        row["members"] += 1
        row["alive"] += 1 if n.get("alive") else 0
        if n.get("alive") and n.get("leader") and (row["term"] or -1) < (n.get("term") or -1):
            row["leader"], row["term"] = n["leader"], n["term"]
    out = sorted(rows.values(), key=lambda r: r["group"])
    if args.json:
        _print_json(out)
    else:
        print(format_table(out, [("group", "GROUP"), ("leader", "LEADER"), ("term", "TERM"),
                                 ("alive", "ALIVE"), ("members", "MEMBERS")]))
    return 0 if out and all(r["leader"] for r in out) else 1


def _positive(text: str) -> float:
    value = float(text)
    if not 0 < value <= 600:
        raise argparse.ArgumentTypeError("must be in (0, 600] seconds")
    return value


def add_commands(sub: Any) -> None:
    p = sub.add_parser("dledger", help="operate DLedger groups: transfer leadership, leaders")
    dsub = p.add_subparsers(dest="dledger_command", metavar="SUBCOMMAND", required=True)

    def common(q: argparse.ArgumentParser) -> None:
        q.add_argument("--dir", help="cluster directory (default $RMQ_CLUSTER_HOME/<name>)")
        q.add_argument("--name", default=supervisor.DEFAULT_NAME, help="cluster name")
        q.add_argument("--json", action="store_true", help="print JSON")

    t = dsub.add_parser("transfer", help="make a member the leader of its DLedger group "
                                         "(DLedger's LEADERSHIP_TRANSFER)")
    t.add_argument("--group", required=True, help="the group (brokerName, e.g. broker-a)")
    t.add_argument("--to", required=True, help="dLegerSelfId (n2) or node name (broker-a-n2)")
    t.add_argument("--timeout", type=_positive, default=DEFAULT_WAIT_S,
                   help="seconds to wait for the leader's answer (default %(default)s; the "
                        "leader itself gives up after 10 s)")
    common(t)
    t.set_defaults(func=_guarded(cmd_transfer))
    ls = dsub.add_parser("leaders", help="the leader and term of every DLedger group")
    common(ls)
    ls.set_defaults(func=_guarded(cmd_leaders))
