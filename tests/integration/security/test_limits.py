"""Per-connection limits on live sockets: in-flight cap (SYSTEM_BUSY), idle close, and the
NameServer's ACL on write requests (with a broker that signs its registration)."""

from __future__ import annotations

from pathlib import Path

import trio
import trio.testing

from rmq_cluster.cluster.acl.signing import Credentials
from rmq_cluster.cluster.acl.validator import ACL_EXCEPTION
from rmq_cluster.cluster.remoting.address import format_address
from rmq_cluster.cluster.remoting.client_pool import open_remoting_client
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode
from rmq_cluster.cluster.remoting.connection import Connection
from rmq_cluster.cluster.remoting.errors import OVERLOAD_REMARK
from rmq_cluster.cluster.remoting.processors import LATER, Later, ProcessorTable
from rmq_cluster.cluster.remoting.server import RemotingServer
from rmq_cluster.namesrv.config import NamesrvConfig
from rmq_cluster.namesrv.server import NamesrvServer
from tests.integration.client.conftest import WAIT_S, broker_settings

HOLD_CODE = 9001
ECHO_CODE = 9002


async def test_in_flight_cap_answers_system_busy(nursery: trio.Nursery) -> None:
    release = trio.Event()

    async def hold(conn: Connection, req: RemotingCommand) -> RemotingCommand:
        await release.wait()
        return req.response(ResponseCode.SUCCESS)

    def echo(conn: Connection, req: RemotingCommand) -> RemotingCommand:
        return req.response(ResponseCode.SUCCESS)

    server = RemotingServer(ProcessorTable({HOLD_CODE: hold, ECHO_CODE: echo}), max_in_flight=3)
    host, port = await nursery.start(server.serve, "127.0.0.1", 0)
    addr = format_address(host, port)
    async with open_remoting_client() as rc:
        results: list[RemotingCommand] = []

        async def one() -> None:
            results.append(await rc.invoke(addr, RemotingCommand.request(HOLD_CODE), WAIT_S))

        async with trio.open_nursery() as n:
            for _ in range(3):
                n.start_soon(one)
            conn = await rc.connection(addr)
            with trio.fail_after(WAIT_S):  # the three requests are held by the server
                await trio.testing.wait_all_tasks_blocked()
            (server_conn,) = server.connections
            assert server_conn._running == 3
            # three held: the fourth request of this connection is refused at once
            busy = await conn.invoke(RemotingCommand.request(HOLD_CODE), WAIT_S)
            assert busy.code == ResponseCode.SYSTEM_BUSY and busy.remark == OVERLOAD_REMARK
            assert server_conn.busy_refusals == 1
            # another connection is not affected
            async with open_remoting_client() as other:
                ok = await other.invoke(addr, RemotingCommand.request(ECHO_CODE), WAIT_S)
                assert ok.code == ResponseCode.SUCCESS
            release.set()
        assert [r.code for r in results] == [ResponseCode.SUCCESS] * 3


async def test_later_answers_at_the_cap_wait_for_room(nursery: trio.Nursery) -> None:
    """A LATER answer is already under way when it passes the cap: the reader waits for
    requests to end before it takes the rest of the read (no SYSTEM_BUSY), and every answer
    reaches its caller."""
    parked: list[tuple[RemotingCommand, Connection]] = []

    def later(conn: Connection, req: RemotingCommand) -> Later:
        parked.append((req, conn))
        return LATER

    server = RemotingServer(ProcessorTable({HOLD_CODE: later}), max_in_flight=2)
    host, port = await nursery.start(server.serve, "127.0.0.1", 0)
    addr = format_address(host, port)
    async with open_remoting_client() as rc:
        results: list[int] = []

        async def one(i: int) -> None:
            req = RemotingCommand.request(HOLD_CODE, {"i": str(i)})
            resp = await rc.invoke(addr, req, WAIT_S)
            assert resp.code == ResponseCode.SUCCESS and resp.remark == str(i)
            results.append(i)

        async with trio.open_nursery() as n:
            for i in range(4):
                n.start_soon(one, i)
            with trio.fail_after(WAIT_S):
                while len(parked) < 3:  # the third passed the cap: the fourth waits for room
                    await trio.testing.wait_all_tasks_blocked()
                (server_conn,) = server.connections
                assert server_conn._running == 3 and server_conn.busy_refusals == 0
                done = 0
                while done < 4:
                    await trio.testing.wait_all_tasks_blocked()
                    req, conn = parked[done]
                    conn.answer_later(req, req.response(ResponseCode.SUCCESS, req.ext_fields["i"]))
                    done += 1
        assert sorted(results) == [0, 1, 2, 3]
        assert server_conn._running == 0 and server_conn.busy_refusals == 0


async def test_namesrv_acl_on_writes_and_signed_registration(tmp_path: Path) -> None:
    from rmq_cluster.broker.node import BrokerNode

    acl = tmp_path / "plain_acl.yml"
    acl.write_text(
        "accounts:\n"
        "  - {accessKey: nsAdmin01, secretKey: nsSecret01, admin: true}\n"
        "  - {accessKey: nsUser001, secretKey: nsSecret02, admin: false}\n"
    )
    cfg = NamesrvConfig(
        kv_config_path=str(tmp_path / "kv.json"), config_store_path=str(tmp_path / "ns.props"),
        bind_address="127.0.0.1", listen_port=0, acl_enable=True, acl_file=str(acl),
    )
    admin = Credentials("nsAdmin01", "nsSecret01")
    user = Credentials("nsUser001", "nsSecret02")
    async with trio.open_nursery() as nursery, open_remoting_client() as rc:
        ns = NamesrvServer(cfg)
        host, port = await nursery.start(ns.serve)
        ns_addr = f"{host}:{port}"
        put = RemotingCommand.request(
            RequestCode.PUT_KV_CONFIG, {"namespace": "N", "key": "k", "value": "v"}
        )
        denied = await rc.invoke(ns_addr, put)
        assert denied.code == ResponseCode.SYSTEM_ERROR
        assert denied.remark == f"{ACL_EXCEPTION}: No accessKey is configured"
        not_admin = await rc.invoke(ns_addr, user.sign(put))
        assert not_admin.remark == (
            f"{ACL_EXCEPTION}: Need admin permission for request code=100, "
            "but accessKey=nsUser001 is not"
        )
        assert (await rc.invoke(ns_addr, admin.sign(put))).code == ResponseCode.SUCCESS
        # reads stay open
        read = RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO)
        assert (await rc.invoke(ns_addr, read)).code == ResponseCode.SUCCESS
        # a broker signing with aclAccessKey/aclSecretKey registers
        settings = broker_settings(tmp_path / "b", ns_addr, aclAccessKey="nsAdmin01",
                                   aclSecretKey="nsSecret01")
        broker = BrokerNode(settings)
        await nursery.start(broker.run)
        with trio.fail_after(WAIT_S):
            await ns.wait_until(lambda st: "broker-a" in st.routes.broker_addr_table)
        assert ns.acl is not None and ns.acl.denials == 2
        nursery.cancel_scope.cancel()
