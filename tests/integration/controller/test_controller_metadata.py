"""GET_METADATA_INFO names the leader's listen address (what brokers dial), not its Raft port,
on every controller, also after the leader changes."""

from __future__ import annotations

from pathlib import Path

from rmq_cluster.cluster.protocol.controller import (
    ControllerRequestCode,
    GetMetaDataResponseHeader,
)
from rmq_cluster.cluster.remoting.client_pool import RemotingClient, open_remoting_client
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import ResponseCode
from tests.integration.controller.controller_testlib import running_controllers, until


async def _metadata(client: RemotingClient, addr: str) -> GetMetaDataResponseHeader:
    r = await client.invoke(
        addr, RemotingCommand.request(ControllerRequestCode.CONTROLLER_GET_METADATA_INFO), 2.0
    )
    assert r.code == ResponseCode.SUCCESS, r.remark
    return GetMetaDataResponseHeader.from_ext_fields(r.ext_fields)


async def test_every_controller_names_the_leaders_listen_address(tmp_path: Path) -> None:
    async with running_controllers(tmp_path) as ctl, open_remoting_client() as client:
        leader = await ctl.wait_leader()

        async def all_name(addr: str, live: list[str]) -> bool:
            heads = [await _metadata(client, a) for a in live]
            return all(h.controller_leader_address == addr for h in heads)

        await until(lambda: all_name(leader.addr, ctl.addrs))
        h = await _metadata(client, leader.addr)
        assert h.is_leader and h.controller_leader_id == leader.config.self_id
        peer_port = leader.config.peer_map()[leader.config.self_id]
        assert h.controller_leader_address != peer_port

        # the leader goes: the next one announces its own listen address
        gone = ctl.members.index(leader)
        await ctl.stop(gone)
        new = await ctl.wait_leader()
        assert new is not leader
        live = [m.addr for m in ctl.members if m.node is not None]
        await until(lambda: all_name(new.addr, live))
