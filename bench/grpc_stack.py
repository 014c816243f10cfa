"""The gRPC server stack of mqproxy (issue 34), measured: our h2 (sans-IO) on Trio against
grpcio's asyncio server on a thread of its own whose every call hops to the Trio thread (where
the proxy's remoting client lives) and back. Each server runs in a process of its own and
answers Heartbeat (decode the request, encode a response with Code OK); a grpcio client calls
it, rounds interleaved (h2, grpcio, h2, grpcio, ...) so the machine's load hits both. Per
stack: sequential p50/p99 latency (one call at a time) and calls/s with 64 calls in flight.
Prints one JSON object; needs grpcio (``pip install grpcio==1.85.3``).

    python3 bench/grpc_stack.py [--rounds 3] [--calls 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import threading
import time
from typing import Any

import checkout  # noqa: F401  (bench/checkout.py: import this checkout)
import trio

from rmq_cluster.proxy.config import ProxyConfig
from rmq_cluster.proxy.h2_server import serve_grpc
from rmq_cluster.proxy.pb import definition_pb2 as pb
from rmq_cluster.proxy.pb import service_pb2 as spb
from tests.ports import free_port  # (below the ephemeral range)

PATH = "/apache.rocketmq.v2.MessagingService/Heartbeat"
IN_FLIGHT = 64


def _answer(request: bytes) -> bytes:
    spb.HeartbeatRequest.FromString(request)
    return spb.HeartbeatResponse(status=pb.Status(code=pb.OK, message="OK")).SerializeToString()


class _HeartbeatOnly:
    def kind(self, method: str) -> str | None:
        return "unary" if method == "Heartbeat" else None

    async def unary(self, method: str, request: bytes, metadata: dict[str, str]) -> bytes:
        return _answer(request)

    async def stream(self, *args: Any) -> None:
        raise NotImplementedError

    async def bidi(self, *args: Any) -> None:
        raise NotImplementedError


def serve_h2(port: int) -> None:
    async def main() -> None:
        config = ProxyConfig(bind_address="127.0.0.1", grpc_port=port)
        async with trio.open_nursery() as n:
            await n.start(serve_grpc, config, _HeartbeatOnly())
            print("ready", flush=True)

    trio.run(main)


def serve_grpcio(port: int) -> None:
    import grpc

    box: dict[str, Any] = {}
    ready = threading.Event()

    def trio_thread() -> None:
        async def main() -> None:
            box["token"] = trio.lowlevel.current_trio_token()
            ready.set()
            await trio.sleep_forever()

        trio.run(main)

    threading.Thread(target=trio_thread, daemon=True).start()
    ready.wait()
    token = box["token"]

    async def heartbeat(request: bytes, context: Any) -> bytes:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[bytes] = loop.create_future()

        def on_trio() -> None:  # runs on the Trio thread: the hop there
            async def call() -> None:
                answer = _answer(request)
                loop.call_soon_threadsafe(done.set_result, answer)  # and the hop back

            trio.lowlevel.spawn_system_task(call)

        token.run_sync_soon(on_trio)
        return await done

    async def main() -> None:
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            "apache.rocketmq.v2.MessagingService",
            {"Heartbeat": grpc.unary_unary_rpc_method_handler(heartbeat)}),))
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        print("ready", flush=True)
        await server.wait_for_termination()

    asyncio.run(main())


def _measure(port: int, calls: int) -> dict[str, float]:
    import grpc

    request = spb.HeartbeatRequest(client_type=pb.PRODUCER).SerializeToString()
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_unary(PATH)
        for _ in range(100):  # warm up
            call(request)
        lat = []
        for _ in range(calls):
            t0 = time.perf_counter()
            call(request)
            lat.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        pending = [call.future(request) for _ in range(IN_FLIGHT)]
        done = 0
        while done < calls:
            pending.pop(0).result()
            done += 1
            pending.append(call.future(request))
        for f in pending:
            f.result()
        rate = done / (time.perf_counter() - t0)
    q = statistics.quantiles(lat, n=100)
    return {"p50_us": q[49] * 1e6, "p99_us": q[98] * 1e6, "calls_per_s": rate}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--serve", choices=("h2", "grpcio"))
    ap.add_argument("--port", type=int)
    args = ap.parse_args()
    if args.serve:
        (serve_h2 if args.serve == "h2" else serve_grpcio)(args.port)
        return
    results: dict[str, list[dict[str, float]]] = {"h2_trio": [], "grpcio_thread_hop": []}
    for _ in range(args.rounds):
        for name, kind in (("h2_trio", "h2"), ("grpcio_thread_hop", "grpcio")):
            port = free_port()
            proc = subprocess.Popen([sys.executable, __file__, "--serve", kind, "--port",
                                     str(port)], stdout=subprocess.PIPE, text=True)
            try:
                assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
                results[name].append(_measure(port, args.calls))
            finally:
                proc.kill()
                proc.wait()
    out = {name: {k: round(statistics.median(r[k] for r in rs), 1) for k in rs[0]}
           for name, rs in results.items()}
    print(json.dumps({"bench": "grpc_stack", "calls": args.calls, "rounds": args.rounds,
                      "in_flight": IN_FLIGHT, **out}))


if __name__ == "__main__":
    main()
