"""A small datadriven-style interpreter for ``tests/sim/scenarios/*.txt``.

One command per line (``#`` comments).  The network is reliable with a 1-tick delay; the
node timers still run on each ``tick``, so scenarios are deterministic given the file's
``seed``.  Commands:

    nodes 3 [seed=N] [preferred=n2] [batch=BYTES]   start n1..n3 (must come first)
    elect n1                      n1 campaigns now; tick until it leads (fails after 100 ticks)
    campaign n1 n2 [nopre|force]  n1 and n2 campaign now (nopre: skip pre-vote; force: no
                                  pre-vote and bypass leases, as a leadership transferee does)
    deliver [N]                   N network steps (default 1) with no timer ticks at all
    partition n1 | n2 n3          split the network into groups; `heal` joins it again
    propose n1 x                  leader n1 appends body "x" (must succeed)
    propose-fail n2 x NOT_LEADER  the proposal must fail with that code
    transfer n1 n2                leader n1 transfers leadership to n2
    tick 50                       advance 50 ticks
    crash n1 / restart n1         lose the process (unsynced state); reload from storage
    expect leader n2              n2 leads, and every live node it can reach follows it
    expect role n1 FOLLOWER       role of a node
    expect term n1 2              current term of a node
    expect commit n1 4            commit index of a node
    expect log n1 1/_ 1/x 2/_     the node's log as term/body (`_` = the leader's no-op)
    expect same-log n1 n2 n3      logs are identical
    expect one-leader-among n1 n2 exactly one live leader, and it is one of these
"""

from __future__ import annotations

from pathlib import Path

from rmq_cluster.dledger.core import Role
from rmq_cluster.dledger.messages import ResponseCode
from tests.sim.harness import Cluster

ELECT_LIMIT_TICKS = 100


class ScenarioError(AssertionError):
    pass


def render_log(log: list[tuple[int, bytes]]) -> str:
    return " ".join(f"{t}/{b.decode() or '_'}" for t, b in log)


def run_scenario(path: Path) -> None:
    cluster: Cluster | None = None
    try:
        for lineno, raw in enumerate(path.read_text().splitlines(), 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            where = f"{path.name}:{lineno}: {line}"
            try:
                cluster = _run(cluster, line.split())
            except ScenarioError as exc:
                raise ScenarioError(f"{where}\n  {exc}") from None
    finally:
        if cluster is not None:
            cluster.close()


def _core(c: Cluster, nid: str):  # type: ignore[no-untyped-def]
    core = c.nodes[nid].core
    if core is None:
        raise ScenarioError(f"{nid} is down")
    return core


def _run(c: Cluster | None, words: list[str]) -> Cluster:
    cmd, args = words[0], words[1:]
    if cmd == "nodes":
        opts = dict(a.split("=", 1) for a in args[1:])
        seed = int(opts.get("seed", "1"))
        return Cluster(
            int(args[0]),
            seed,
            preferred=opts.get("preferred", ""),
            max_batch_bytes=int(opts.get("batch", "64")),
        )
    if c is None:
        raise ScenarioError("first command must be `nodes N`")
    if cmd == "elect":
        _core(c, args[0]).campaign()
        for _ in range(ELECT_LIMIT_TICKS):
            c.handle_ready(c.nodes[args[0]])
            c.tick()
            if _core(c, args[0]).role is Role.LEADER:
                break
        else:
            raise ScenarioError(f"{args[0]} did not become leader")
        c.tick(2)  # let the first heartbeat/no-op reach the followers
    elif cmd == "campaign":
        force = "force" in args
        pre = "nopre" not in args and not force
        for nid in [a for a in args if a not in ("nopre", "force")]:
            _core(c, nid).campaign(pre_vote=pre, take_leadership=force)
            c.handle_ready(c.nodes[nid])
    elif cmd == "deliver":
        for _ in range(int(args[0]) if args else 1):
            c.deliver()
    elif cmd == "partition":
        groups: list[set[str]] = [set()]
        for a in args:
            if a == "|":
                groups.append(set())
            else:
                groups[-1].add(a)
        c.partition(*groups)
    elif cmd == "heal":
        c.heal()
    elif cmd == "propose":
        res = c.propose(args[0], " ".join(args[1:]).encode())
        if res.code is not ResponseCode.SUCCESS:
            raise ScenarioError(f"propose failed: {res.code.name}")
    elif cmd == "propose-fail":
        res = c.propose(args[0], args[1].encode())
        if res.code is not ResponseCode[args[2]]:
            raise ScenarioError(f"propose answered {res.code.name}, expected {args[2]}")
    elif cmd == "transfer":
        code = _core(c, args[0]).transfer_leadership(args[1])
        c.handle_ready(c.nodes[args[0]])
        if code is not ResponseCode.SUCCESS:
            raise ScenarioError(f"transfer answered {code.name}")
    elif cmd == "tick":
        c.tick(int(args[0]))
    elif cmd == "crash":
        c.crash(args[0])
    elif cmd == "restart":
        c.restart(args[0])
    elif cmd == "expect":
        _expect(c, args)
    else:
        raise ScenarioError(f"unknown command {cmd!r}")
    return c


def _expect(c: Cluster, args: list[str]) -> None:
    what = args[0]
    if what == "leader":
        nid = args[1]
        core = _core(c, nid)
        if core.role is not Role.LEADER:
            raise ScenarioError(f"{nid} is {core.role.name} (term {core.term})")
        for other in c.nodes.values():
            oc = other.core
            if (
                other.id != nid
                and oc is not None
                and c.net.connected(nid, other.id)
                and (oc.leader_id != nid or oc.term != core.term)
            ):
                raise ScenarioError(
                    f"{other.id} follows {oc.leader_id or 'nobody'} in term {oc.term}"
                )
    elif what == "role":
        role = _core(c, args[1]).role
        if role is not Role[args[2]]:
            raise ScenarioError(f"{args[1]} is {role.name}")
    elif what == "term":
        term = _core(c, args[1]).term
        if term != int(args[2]):
            raise ScenarioError(f"{args[1]} is in term {term}")
    elif what == "commit":
        commit = _core(c, args[1]).commit
        if commit != int(args[2]):
            raise ScenarioError(f"{args[1]} commit is {commit}")
    elif what == "log":
        got = render_log(c.nodes[args[1]].log())
        if got != " ".join(args[2:]):
            raise ScenarioError(f"{args[1]} log is: {got}")
    elif what == "same-log":
        logs = {nid: render_log(c.nodes[nid].log()) for nid in args[1:]}
        if len(set(logs.values())) != 1:
            raise ScenarioError("logs differ: " + "; ".join(f"{k}: {v}" for k, v in logs.items()))
    elif what == "one-leader-among":
        leaders = [
            n.id for n in c.nodes.values() if n.core is not None and n.core.role is Role.LEADER
        ]
        if len(leaders) != 1 or leaders[0] not in args[1:]:
            raise ScenarioError(f"leaders: {leaders}")
    else:
        raise ScenarioError(f"unknown expectation {what!r}")
