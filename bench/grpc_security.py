"""What the gRPC port's security costs per call: mqproxy's server (``serve_grpc``) answering
Heartbeat, in four shapes, rounds interleaved so the machine's load hits all alike:

* ``base_plain``: the base checkout (``--base-tree``, default: this one) in plain text;
* ``plain``: this checkout in plain text (the per-read input accounting it adds);
* ``tls``: this checkout on TLS (the self-signed certificate ``up --proxy`` makes);
* ``tls_signed``: the same, the client signing every call (what the SDK sends), no check;
* ``tls_acl``: TLS and every call signed (5.x ``authorization``) and checked by ``AuthGate``.

The client is grpcio (a Python that has it: ``--client-python``, default the venv the Python
SDK compat test builds), one channel, the SDK's signature on every call where the server wants
one. Per shape: sequential p50/p99 and calls/s with 64 calls in flight. Prints one JSON object.

    python3 bench/grpc_security.py [--rounds 3] [--calls 2000] [--base-tree /work/main]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import checkout

SHAPES = ("base_plain", "plain", "tls", "tls_signed", "tls_acl")
DEFAULT_CLIENT = Path.home() / ".cache/rmq-cluster-compat/pyclient-5.1.2/bin/python"
ACCOUNT = ("benchUser01", "benchSecret01")
IN_FLIGHT = 64

CLIENT = textwrap.dedent('''
    import hashlib, hmac, json, statistics, sys, time
    import grpc
    port, calls, cert, signed, in_flight = sys.argv[1:6]
    calls, in_flight = int(calls), int(in_flight)
    AK, SK = "benchUser01", "benchSecret01"
    REQ = bytes([0x10, 0x01])  # HeartbeatRequest(client_type=PRODUCER)
    def metadata():
        if signed != "1":
            return None
        date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        sig = hmac.new(SK.encode(), date.encode(), hashlib.sha1).hexdigest()
        auth = "MQv2-HMAC-SHA1 Credential=%s, SignedHeaders=x-mq-date-time, Signature=%s"
        return (("x-mq-date-time", date), ("authorization", auth % (AK, sig)))
    target = "127.0.0.1:" + port
    if cert != "-":
        creds = grpc.ssl_channel_credentials(open(cert, "rb").read())
        channel = grpc.secure_channel(target, creds)
    else:
        channel = grpc.insecure_channel(target)
    call = channel.unary_unary("/apache.rocketmq.v2.MessagingService/Heartbeat")
    OK = bytes([0x0a, 0x04, 0x08, 0xa0, 0x9c, 0x01])  # HeartbeatResponse(status.code=OK)
    for _ in range(100):
        answer = call(REQ, metadata=metadata())
        assert answer == OK, answer
    lat = []
    for _ in range(calls):
        t0 = time.perf_counter()
        call(REQ, metadata=metadata())
        lat.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    pending = [call.future(REQ, metadata=metadata()) for _ in range(in_flight)]
    done = 0
    while done < calls:
        pending.pop(0).result()
        done += 1
        pending.append(call.future(REQ, metadata=metadata()))
    for f in pending:
        f.result()
    rate = done / (time.perf_counter() - t0)
    q = statistics.quantiles(lat, n=100)
    print(json.dumps({"p50_us": q[49] * 1e6, "p99_us": q[98] * 1e6, "calls_per_s": rate}))
''')


def serve(shape: str, port: int, workdir: Path) -> None:
    """In a child process whose ``rmq_cluster`` is the tree under test."""
    import trio

    from rmq_cluster.proxy.config import ProxyConfig
    from rmq_cluster.proxy.h2_server import serve_grpc
    from rmq_cluster.proxy.pb import definition_pb2 as pb
    from rmq_cluster.proxy.pb import service_pb2 as spb

    class HeartbeatOnly:
        def kind(self, method: str) -> str | None:
            return "unary" if method == "Heartbeat" else None

        async def unary(self, method: str, request: bytes, metadata: dict[str, str]) -> bytes:
            spb.HeartbeatRequest.FromString(request)
            return spb.HeartbeatResponse(status=pb.Status(code=pb.OK)).SerializeToString()

    async def main() -> None:
        config = ProxyConfig(bind_address="127.0.0.1", grpc_port=port)
        service: Any = HeartbeatOnly()
        kwargs: dict[str, Any] = {}
        if shape.startswith("tls"):
            from rmq_cluster.proxy.tls import ensure_certificate, server_context

            files = ensure_certificate(workdir)
            kwargs["tls_context"] = server_context(str(files.cert), str(files.key))
        async with trio.open_nursery() as n:
            if shape == "tls_acl":
                from rmq_cluster.cluster.acl.guard import AclGuard
                from rmq_cluster.proxy.auth_gate import AuthGate

                guard = AclGuard(str(workdir / "plain_acl.yml"), node="bench")
                guard.load()
                service = AuthGate(service, guard, 900.0)
            await n.start(lambda task_status: serve_grpc(config, service,
                                                         task_status=task_status, **kwargs))
            print("ready", flush=True)

    trio.run(main)


def _round(shape: str, tree: Path, workdir: Path, client: str, calls: int) -> dict[str, float]:
    # (here, not on top: a --serve child imports rmq_cluster only once on its --tree)
    from tests.ports import free_port  # a port below the ephemeral range

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", shape, "--port", str(port), "--tree", str(tree),
         "--workdir", str(workdir)],
        stdout=subprocess.PIPE, text=True, env=checkout.child_env(tree))
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        cert = str(workdir / "conf/proxy-tls/proxy.crt") if shape.startswith("tls") else "-"
        signed = "1" if shape in ("tls_signed", "tls_acl") else "0"
        out = subprocess.run([client, "-c", CLIENT, str(port), str(calls), cert, signed,
                              str(IN_FLIGHT)], capture_output=True, text=True, check=True)
        result: dict[str, float] = json.loads(out.stdout)
        return result
    finally:
        proc.kill()
        proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--base-tree", default=str(checkout.ROOT))
    ap.add_argument("--client-python", default=str(DEFAULT_CLIENT))
    ap.add_argument("--serve", choices=SHAPES)
    ap.add_argument("--port", type=int)
    ap.add_argument("--tree")
    ap.add_argument("--workdir")
    args = ap.parse_args()
    if args.serve:
        checkout.use(Path(args.tree))
        serve(args.serve, args.port, Path(args.workdir))
        return
    base = Path(args.base_tree).resolve()
    checkout.namespace_dir(base)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        (workdir / "plain_acl.yml").write_text(
            f"accounts:\n  - {{accessKey: {ACCOUNT[0]}, secretKey: {ACCOUNT[1]}, admin: true}}\n")
        results: dict[str, list[dict[str, float]]] = {s: [] for s in SHAPES}
        for _ in range(args.rounds):
            for shape in SHAPES:
                tree = base if shape == "base_plain" else checkout.ROOT
                results[shape].append(_round(shape, tree, workdir, args.client_python,
                                             args.calls))
    out = {name: {k: round(statistics.median(r[k] for r in rs), 1) for k in rs[0]}
           for name, rs in results.items()}
    print(json.dumps({"bench": "grpc_security", "calls": args.calls, "rounds": args.rounds,
                      "in_flight": IN_FLIGHT, "base_tree": str(base), **out}))


if __name__ == "__main__":
    main()
