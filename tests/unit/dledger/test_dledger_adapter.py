"""The DLedger broker pieces that need no network: config keys, result mapping, the checkpoint
file, and the file store's position prediction, views, entry cache and flush ranges."""

from __future__ import annotations

from pathlib import Path

import pytest

from rmq_cluster.broker.config import load_broker_config
from rmq_cluster.cluster.config import ConfigError
from rmq_cluster.dledger.commitlog_adapter import put_status_of, read_checkpoint, write_checkpoint
from rmq_cluster.dledger.config import DLedgerConfig, DLedgerConfigError
from rmq_cluster.dledger.log_storage import BODY_OFFSET, FileLogStorage
from rmq_cluster.dledger.messages import Entry, ResponseCode
from rmq_cluster.store.commitlog import PutMessageStatus

PEERS = "n0-127.0.0.1:40911;n1-127.0.0.1:40912;n2-127.0.0.1:40913"


def test_peers_self_id_and_slave_broker_id() -> None:
    cfg = DLedgerConfig(enable=True, group="g", peers=PEERS, self_id="n2")
    cfg.validate()
    assert cfg.peer_map() == {
        "n0": "127.0.0.1:40911", "n1": "127.0.0.1:40912", "n2": "127.0.0.1:40913",
    }
    assert cfg.slave_broker_id() == 3
    assert cfg.store_dir("/s") == "/s/dledger-n2"
    with pytest.raises(DLedgerConfigError, match="not among"):
        DLedgerConfig(enable=True, group="g", peers=PEERS, self_id="n9").validate()
    with pytest.raises(DLedgerConfigError, match="id-host:port"):
        DLedgerConfig(enable=True, group="g", peers="n0:1", self_id="n0").validate()
    with pytest.raises(DLedgerConfigError, match="duplicate"):
        DLedgerConfig(peers="n0-h:1;n0-h:2").peer_map()


def test_broker_config_reads_dleger_keys_and_refuses_bad_ones() -> None:
    values = {
        "enableDLegerCommitLog": "true", "dLegerGroup": "broker-a", "dLegerPeers": PEERS,
        "dLegerSelfId": "n1",
    }
    loaded = load_broker_config(values)
    assert loaded.settings.dledger.enable and loaded.settings.dledger.self_id == "n1"
    assert not loaded.unknown
    with pytest.raises(ConfigError, match="dLegerSelfId"):
        load_broker_config({**values, "dLegerSelfId": "n7"})


def test_append_results_map_to_put_statuses() -> None:
    assert put_status_of(ResponseCode.SUCCESS) is PutMessageStatus.PUT_OK
    assert put_status_of(ResponseCode.NOT_LEADER) is PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert put_status_of(ResponseCode.WAIT_QUORUM_ACK_TIMEOUT) is (
        PutMessageStatus.OS_PAGECACHE_BUSY
    )
    assert put_status_of(ResponseCode.LEADER_PENDING_FULL) is PutMessageStatus.OS_PAGECACHE_BUSY
    assert put_status_of(ResponseCode.TERM_CHANGED) is PutMessageStatus.UNKNOWN_ERROR


def test_checkpoint_round_trip(tmp_path: Path) -> None:
    path = str(tmp_path / "checkpoint")
    assert read_checkpoint(path) == (-1, -1)
    write_checkpoint(path, 10, 7)
    assert read_checkpoint(path) == (10, 7)
    Path(path).write_text("endIndex=x\n")
    assert read_checkpoint(path) == (-1, -1)


def test_next_pos_view_cache_and_flush_ranges(tmp_path: Path) -> None:
    fb = 4096
    st = FileLogStorage(tmp_path / "dl", data_file_bytes=fb, index_file_bytes=32 * 64, fsync=False)
    pos0 = st.next_pos(100)
    st.append([Entry(0, 1, b"a" * 100)])
    assert st.entry_pos(0) == pos0 == 0
    body = b"b" * 3900  # does not fit after entry 0: a blank, then the next file
    predicted = st.next_pos(len(body))
    assert predicted == fb
    st.append([Entry(1, 1, body)])
    assert st.entry_pos(1) == predicted
    view = st.view(predicted + BODY_OFFSET, len(body))
    assert view is not None and bytes(view) == body
    view.release()
    assert st.view(predicted + BODY_OFFSET, len(body) + 1) is None  # past what was written
    assert st.index_at_or_after(1) == 1 and st.index_at_or_after(fb) == 1
    plan, data_to, index_to = st.flush_ranges(0, 0)
    assert data_to == st.write_pos and index_to == 64 and plan
    # truncation: the cache and the next flush cover the rewritten bytes
    st.truncate_suffix(1)
    st.append([Entry(1, 2, b"c" * 10)])
    assert [(e.index, e.term, e.body) for e in st.entries(0, 5)] == [
        (0, 1, b"a" * 100), (1, 2, b"c" * 10),
    ]
    plan2, _d, _i = st.flush_ranges(data_to, index_to)
    assert plan2  # starts at the truncation point, below the old flushed end
    st.close()
    reopened = FileLogStorage(tmp_path / "dl", data_file_bytes=fb, index_file_bytes=32 * 64)
    assert [(e.index, e.term, e.body) for e in reopened.entries(0, 5)] == [
        (0, 1, b"a" * 100), (1, 2, b"c" * 10),
    ]
    reopened.close()
