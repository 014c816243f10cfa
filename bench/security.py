"""Send-path cost of metrics and ACL: the same SEND_MESSAGE_V2 load against a broker process
started four ways, side by side in the same run.

    python3 bench/security.py [--seconds 1.5] [--rounds 3] [--body 1024] [--inflight 256]

Cases (each its own ``mqbroker``, ASYNC_FLUSH, temp store, one connection), run
interleaved for ``--rounds`` rounds, each case's best round kept (the machine may be shared):
  * ``plain``: no metrics, no ACL -- the baseline;
  * ``metrics``: ``metricsPort=0`` (the send latency histogram wraps the send processor);
  * ``acl_white``: ``aclEnable=true``, the client's address in globalWhiteRemoteAddresses
    (request parsing and the white-list check, no HMAC);
  * ``acl_signed``: ``aclEnable=true``, requests signed by an account (an HMAC-SHA1 check per
    request on the broker).
For 1 and ``--inflight`` requests in flight: msgs/s, p50/p99 latency, and the ratio to
``plain``. Prints one JSON object. Disabled ACL/metrics must cost nothing: ``plain`` is the
code path of a broker without them (nothing wrapped).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import trio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import _launch  # noqa: E402  (bench/_launch.py: the broker processes)
import checkout  # noqa: E402, F401  (bench/checkout.py: this tree's rmq_cluster first)
import produce  # noqa: E402  (bench/produce.py: the raw load driver)

from rmq_cluster.cluster.acl.signing import Credentials  # noqa: E402
from rmq_cluster.cluster.logging import configure_logging  # noqa: E402
from rmq_cluster.cluster.remoting.client_pool import open_remoting_client  # noqa: E402
from rmq_cluster.cluster.remoting.codec import RemotingCommand, encode  # noqa: E402
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode  # noqa: E402

ACCOUNT = Credentials("benchUser01", "benchSecret01")
RULES = """globalWhiteRemoteAddresses: [{white}]
accounts:
  - accessKey: benchUser01
    secretKey: benchSecret01
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
"""


def _frames(body: bytes, signed: bool) -> list[bytes]:
    out = []
    for q in range(produce.QUEUES):
        cmd = RemotingCommand.request(
            RequestCode.SEND_MESSAGE_V2, produce._send_ext(produce.TOPIC, q), body
        )
        out.append(encode(ACCOUNT.sign(cmd) if signed else cmd, 1 + q))
    return out


async def _create_topic(port: int, body: bytes) -> None:
    first = RemotingCommand.request(
        RequestCode.SEND_MESSAGE_V2, produce._send_ext(produce.TOPIC, 0), body
    )
    async with open_remoting_client(node="bench") as client:
        resp = await client.invoke(f"127.0.0.1:{port}", ACCOUNT.sign(first), 10)
        if resp.code != ResponseCode.SUCCESS:
            raise RuntimeError(f"send failed: {resp.code} {resp.remark}")


async def _rounds(
    ports: dict[str, int], signed: dict[str, bool], args: argparse.Namespace
) -> dict[str, dict[str, dict[str, float]]]:
    """Every case ``--rounds`` times, interleaved (plain, metrics, ... then again), keeping
    each case's best round: load from other processes hits every case alike."""
    body = os.urandom(args.body)
    for port in ports.values():
        await _create_topic(port, body)
    best: dict[str, dict[str, dict[str, float]]] = {name: {} for name in ports}
    modes = {"send_1_in_flight": 1, f"send_{args.inflight}_in_flight": args.inflight}
    for _ in range(args.rounds):
        for name, port in ports.items():
            frames = _frames(body, signed[name])
            for mode, inflight in modes.items():
                res = await produce._raw_case(port, frames, inflight, args.seconds, 0.2)
                if res["req_per_s"] > best[name].get(mode, {}).get("req_per_s", -1):
                    best[name][mode] = res
    return best


def _per_call_ns(fn: Any, n: int = 200_000) -> float:
    import time

    start = time.perf_counter_ns()
    for _ in range(n):
        fn()
    return round((time.perf_counter_ns() - start) / n, 1)


def _micro(body_bytes: int) -> dict[str, float]:
    """In-process per-request costs (stable under load, unlike the end-to-end rates)."""
    from rmq_cluster.cluster.acl.rules import parse_plain_acl
    from rmq_cluster.cluster.acl.validator import AclDecider
    from rmq_cluster.cluster.metrics import Histogram

    body = os.urandom(body_bytes)
    cmd = RemotingCommand.request(
        RequestCode.SEND_MESSAGE_V2, produce._send_ext(produce.TOPIC, 0), body
    )
    signed = ACCOUNT.sign(cmd)
    white = AclDecider(parse_plain_acl(RULES.format(white='"127.0.0.1"')))
    strict = AclDecider(parse_plain_acl(RULES.format(white="")))
    assert white.check(cmd, "127.0.0.1:5000") is None
    assert strict.check(signed, "127.0.0.1:5000") is None
    hist = Histogram((0.0001, 0.001, 0.01, 0.1, 1.0))

    def nothing() -> None:
        return None

    from rmq_cluster.broker.metrics import timed

    response = cmd.response(ResponseCode.SUCCESS)

    def processor(conn: Any, request: RemotingCommand) -> RemotingCommand:
        return response

    wrapped = timed(processor, hist)

    return {
        "empty_call_ns": _per_call_ns(nothing),
        "acl_check_white_listed_ns": _per_call_ns(lambda: white.check(cmd, "127.0.0.1:5000")),
        "acl_check_signed_ns": _per_call_ns(lambda: strict.check(signed, "127.0.0.1:5000"), 50_000),
        "client_sign_ns": _per_call_ns(lambda: ACCOUNT.sign(cmd), 50_000),
        "histogram_observe_ns": _per_call_ns(lambda: hist.observe(0.0003)),
        "processor_ns": _per_call_ns(lambda: processor(None, cmd)),
        "timed_processor_ns": _per_call_ns(lambda: wrapped(None, cmd)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--body", type=int, default=1024)
    parser.add_argument("--inflight", type=int, default=256)
    args = parser.parse_args()
    configure_logging("warning")
    cases = {
        "plain": ("", False),
        "metrics": ("metricsPort=0\n", False),
        "acl_white": ("aclEnable=true\naclFile=@ACL@\n", False),
        "acl_signed": ("aclEnable=true\naclFile=@ACL@\n", True),
    }
    with tempfile.TemporaryDirectory(prefix="bench-sec-") as root:
        procs: dict[str, subprocess.Popen[str]] = {}
        ports: dict[str, int] = {}
        try:
            for name, (extra, _signed) in cases.items():
                store = Path(root) / name
                store.mkdir()
                acl = store / "plain_acl.yml"
                acl.write_text(RULES.format(white='"127.0.0.1"' if name == "acl_white" else ""))
                procs[name], ports[name] = _launch.start_broker(
                    store, queues=produce.QUEUES, extra=extra.replace("@ACL@", str(acl))
                )
            results = trio.run(_rounds, ports, {n: c[1] for n, c in cases.items()}, args)
        finally:
            for proc in procs.values():
                proc.terminate()
            for proc in procs.values():
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    base = results["plain"]
    ratios: dict[str, dict[str, float]] = {}
    for name, res in results.items():
        ratios[name] = {
            key: round(res[key]["req_per_s"] / max(1, base[key]["req_per_s"]), 3) for key in res
        }
    micro = _micro(args.body)
    per_request_ns = 1e9 / max(1, base[f"send_{args.inflight}_in_flight"]["req_per_s"])
    added = {
        "metrics": micro["timed_processor_ns"] - micro["processor_ns"],
        "acl_white": micro["acl_check_white_listed_ns"],
        "acl_signed": micro["acl_check_signed_ns"],
    }
    print(json.dumps({
        "benchmark": "send path: metrics and ACL vs plain",
        "body_bytes": args.body,
        "seconds_per_case": args.seconds,
        "rounds": args.rounds,
        "method": "cases interleaved round by round; each case's best round",
        "cpus": os.cpu_count(),
        "baseline": "plain",
        "per_call": micro,
        "broker_ns_per_request_plain_pipelined": round(per_request_ns),
        "estimated_cost_vs_plain": {k: round(v / per_request_ns, 4) for k, v in added.items()},
        **results,
        "ratios_vs_plain": ratios,
    }, indent=2))


if __name__ == "__main__":
    main()
