"""RocketMQ 5 controller mode's SYNC put rule (ha/master.py ``InSyncRule``): inSyncReplicas,
minInSyncReplicas and allAckInSyncStateSet decide how many slave acks a put waits for, from the
SyncStateSet the controller reports; the HA service answers by it (issue 38 item 1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rmq_cluster.broker.processors.common import put_status_code
from rmq_cluster.broker.replicas_manager import in_sync_size
from rmq_cluster.cluster.protocol.controller import SyncStateSet
from rmq_cluster.cluster.remoting.codes import ResponseCode
from rmq_cluster.ha.config import HAConfig
from rmq_cluster.ha.master import InSyncRule, InSyncState
from rmq_cluster.ha.service import HAService
from rmq_cluster.store.commitlog import PutMessageStatus
from rmq_cluster.store.config import BrokerRole, MessageStoreConfig
from rmq_cluster.store.message_store import MessageStore


@pytest.mark.parametrize(
    ("rule", "size", "need"),
    [
        (InSyncRule(), 1, 0),  # RocketMQ's defaults: the master alone is enough
        (InSyncRule(), 2, 0),  # ... even with a slave in the set (inSyncReplicas=1)
        (InSyncRule(), 0, None),  # not in the set: below minInSyncReplicas
        (InSyncRule(in_sync_replicas=2), 1, 1),
        (InSyncRule(in_sync_replicas=3), 2, 2),
        (InSyncRule(all_ack_in_sync_state_set=True), 1, 0),  # the set shrank to the master
        (InSyncRule(all_ack_in_sync_state_set=True), 2, 1),
        (InSyncRule(all_ack_in_sync_state_set=True), 3, 2),
        (InSyncRule(in_sync_replicas=3, all_ack_in_sync_state_set=True), 1, 0),  # ignored
        (InSyncRule(min_in_sync_replicas=2, all_ack_in_sync_state_set=True), 1, None),
        (InSyncRule(min_in_sync_replicas=2, all_ack_in_sync_state_set=True), 2, 1),
    ],
)
def test_slave_acks_needed(rule: InSyncRule, size: int, need: int | None) -> None:
    assert rule.slave_acks_needed(size) == need


def test_a_replaced_master_counts_no_replica() -> None:
    assert in_sync_size(1, SyncStateSet(frozenset({1, 2}), 3)) == 2
    assert in_sync_size(1, SyncStateSet(frozenset({2}), 4)) == 0  # the controller elected 2


def test_refusal_answers_system_error_as_rocketmq() -> None:
    code, remark = put_status_code(PutMessageStatus.IN_SYNC_REPLICAS_NOT_ENOUGH)
    assert code == ResponseCode.SYSTEM_ERROR and remark == "in-sync replicas not enough"


def test_ha_service_answers_by_the_rule(tmp_path: Path) -> None:
    store = MessageStore.open(MessageStoreConfig(
        store_path_root_dir=str(tmp_path), mapped_file_size_commit_log=1024 * 1024,
        broker_role=BrokerRole.SYNC_MASTER,
    ))
    try:
        state = InSyncState(InSyncRule(all_ack_in_sync_state_set=True), 1)
        ha = HAService(store, HAConfig(ha_listen_port=0), host="127.0.0.1", in_sync=state)
        # no slave connected, the set is the master alone: SEND_OK at once (not
        # SLAVE_NOT_AVAILABLE, the 4.x rule and this broker's answer before issue 38)
        assert ha.sync_status_nowait(100) is PutMessageStatus.PUT_OK
        state.sync_state_set_size = 2  # a slave joined: its ack is needed
        assert ha.sync_status_nowait(100) is PutMessageStatus.SLAVE_NOT_AVAILABLE
        ha.table.add(1, "slave", 0)
        assert ha.sync_status_nowait(100) is None  # wait for it
        state.sync_state_set_size = 0  # replaced by another master
        assert ha.sync_status_nowait(100) is PutMessageStatus.IN_SYNC_REPLICAS_NOT_ENOUGH
        plain = HAService(store, HAConfig(ha_listen_port=0), host="127.0.0.1")
        # 4.x: one slave's ack, always
        assert plain.sync_status_nowait(100) is PutMessageStatus.SLAVE_NOT_AVAILABLE
    finally:
        store.close()
