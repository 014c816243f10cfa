"""The store's path guard: hostile name components and symlink escapes are refused; every
store path derived from a topic goes through it (ConsumeQueue, delete topic, config files)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq_cluster.broker.persist import config_dir, config_file
from rmq_cluster.cluster.protocol.message import Message
from rmq_cluster.store.commitlog import PutMessageStatus
from rmq_cluster.store.consume_queue import ConsumeQueue
from rmq_cluster.store.dispatcher import ConsumeQueueTable
from rmq_cluster.store.message_store import MessageStore
from rmq_cluster.store.paths import (
    MAX_COMPONENT_BYTES,
    StorePathError,
    StoreRoot,
    component_problem,
    is_valid_component,
)
from tests.unit.store.store_testlib import small_config

HOSTILE = [
    "", ".", "..", "/", "/etc", "/etc/passwd", "../commitlog", "a/b", "..\\x", "a\\b", "a\0b",
    "x" * (MAX_COMPONENT_BYTES + 1), "é" * 128,
]


@pytest.mark.parametrize("part", HOSTILE)
def test_hostile_component_is_refused(tmp_path: Path, part: str) -> None:
    root = StoreRoot(tmp_path)
    assert component_problem(part) is not None
    assert not is_valid_component(part)
    with pytest.raises(StorePathError):
        root.child(part)
    with pytest.raises(StorePathError):
        root.child("consumequeue", part, "0")


@pytest.mark.parametrize("part", ["TopicTest", "%RETRY%group", "%DLQ%g", "..a", "a..", ".hidden",
                                  "a b", "日本", "x" * MAX_COMPONENT_BYTES])
def test_ordinary_names_are_accepted(tmp_path: Path, part: str) -> None:
    path = StoreRoot(tmp_path).child("consumequeue", part, "3")
    assert path == os.path.join(os.path.realpath(tmp_path), "consumequeue", part, "3")


def test_non_text_and_no_components_are_refused(tmp_path: Path) -> None:
    root = StoreRoot(tmp_path)
    with pytest.raises(StorePathError):
        root.child()
    with pytest.raises(StorePathError):
        root.child(b"bytes")  # type: ignore[arg-type]
    assert component_problem("\udcff") is not None  # a lone surrogate: no file name


def test_symlink_escape_is_refused(tmp_path: Path) -> None:
    store = tmp_path / "store"
    outside = tmp_path / "outside"
    (store / "consumequeue").mkdir(parents=True)
    outside.mkdir()
    (store / "consumequeue" / "evil").symlink_to(outside)
    (store / "consumequeue" / "fine").symlink_to(store / "consumequeue")  # stays inside
    root = StoreRoot(store)
    with pytest.raises(StorePathError):
        root.child("consumequeue", "evil", "0")
    assert root.child("consumequeue", "fine", "x").startswith(str(store.resolve()))
    with pytest.raises(StorePathError):  # the root itself is not strictly inside
        root.check(str(store))
    # a root reached through a symlink is resolved once: its children are still accepted
    (tmp_path / "alias").symlink_to(store)
    assert StoreRoot(tmp_path / "alias").child("config") == str(store.resolve() / "config")


@given(st.lists(st.text(min_size=0, max_size=20), min_size=1, max_size=4))
def test_any_accepted_path_is_strictly_inside(parts: list[str]) -> None:
    root = StoreRoot("/nonexistent-store-root/x")
    try:
        path = root.child(*parts)
    except StorePathError:
        assert any(not is_valid_component(p) for p in parts)
        return
    assert all(is_valid_component(p) for p in parts)
    assert path.startswith(root.path + os.sep)
    assert os.path.normpath(path) == path
    assert path[len(root.path) + 1 :].split(os.sep) == parts


def test_consume_queue_refuses_hostile_topics(tmp_path: Path) -> None:
    cfg = small_config(tmp_path)
    table = ConsumeQueueTable(cfg)
    for topic in ["../commitlog", "/abs", "..", "a/b"]:
        with pytest.raises(StorePathError):
            table.find_or_create(topic, 0)
        with pytest.raises(StorePathError):
            ConsumeQueue(cfg.consume_queue_dir, topic, 0, cfg.cq_file_size)
    assert table.queues == {}
    assert not (tmp_path / "commitlog" / "0").exists()


def test_delete_topic_with_a_path_deletes_nothing(tmp_path: Path) -> None:
    store = MessageStore.open(small_config(tmp_path / "store"))
    try:
        assert store.put_message  # opened
        res = store.append_message(Message(topic="T", body=b"x", queue_id=0))
        assert res.ok
        store.dispatch_all()
        victim = tmp_path / "victim"
        victim.mkdir()
        (victim / "keep").write_bytes(b"1")
        commitlog_files = sorted(os.listdir(tmp_path / "store" / "commitlog"))
        for topic in [str(victim), "../commitlog", "../../victim", "..", "", "a/../../x"]:
            assert store.delete_topic(topic) == 0
        # a symlinked topic dir: the link is not followed
        os.symlink(victim, tmp_path / "store" / "consumequeue" / "link")
        assert store.delete_topic("link") == 0
        assert (victim / "keep").read_bytes() == b"1"
        assert sorted(os.listdir(tmp_path / "store" / "commitlog")) == commitlog_files
        assert store.delete_topic("T") == 1
        assert not (tmp_path / "store" / "consumequeue" / "T").exists()
    finally:
        store.close()


def test_put_with_a_path_topic_is_illegal_and_writes_nothing(tmp_path: Path) -> None:
    store = MessageStore.open(small_config(tmp_path / "store"))
    try:
        before = store.max_phys_offset
        for topic in ["../x", "/abs", "..", "%RETRY%../../../../tmp/x"]:
            res = store.append_message(Message(topic=topic, body=b"x", queue_id=0))
            assert res.status is PutMessageStatus.MESSAGE_ILLEGAL
            assert "file name" in res.remark
        assert store.max_phys_offset == before
    finally:
        store.close()


def test_config_files_go_through_the_guard(tmp_path: Path) -> None:
    assert config_dir(str(tmp_path)) == str(tmp_path.resolve() / "config")
    assert config_file(str(tmp_path), "topics.json").endswith("/config/topics.json")
    for name in ["../x.json", "/etc/passwd", "", ".."]:
        with pytest.raises(StorePathError):
            config_file(str(tmp_path), name)
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "store"
    root.mkdir()
    (root / "config").symlink_to(outside)
    with pytest.raises(StorePathError):
        config_dir(str(root))


def test_load_skips_a_consume_queue_dir_that_leads_out(tmp_path: Path) -> None:
    root = tmp_path / "store"
    outside = tmp_path / "outside"
    (outside / "0").mkdir(parents=True)
    seg = outside / "0" / ("0" * 20)
    seg.write_bytes(b"\x01" * 1280)
    store = MessageStore.open(small_config(root))
    try:
        assert store.append_message(Message(topic="T", body=b"x", queue_id=0)).ok
        store.dispatch_all()
    finally:
        store.close()
    os.symlink(outside, root / "consumequeue" / "evil")
    store = MessageStore.open(small_config(root))
    try:
        assert sorted(store.cqs.queues) == [("T", 0)]
        assert store.get_message("evil", 0, 0, 1).status.name == "NO_MATCHED_LOGIC_QUEUE"
        assert store.append_message(Message(topic="evil", body=b"y", queue_id=0)).ok
        store.dispatch_all()  # its ConsumeQueue would lead out: the record is skipped
        assert store.dispatcher.skipped_records == 1
    finally:
        store.close()
    assert seg.read_bytes() == b"\x01" * 1280
    assert os.listdir(outside / "0") == ["0" * 20]
