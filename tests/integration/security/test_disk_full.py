"""Disk full: a real broker process whose store sits on a small tmpfs, fed by a fast pipelined
writer over remoting. Sends end in SERVICE_NOT_AVAILABLE (14) with a remark, never in a SIGBUS;
reads keep working; once space is freed, writes resume. (Needs root for the mount, as CI has.)"""

from __future__ import annotations

import mmap
import os
import signal
import subprocess
import sys
from pathlib import Path

import trio

from rmq_cluster.cluster.protocol.message import Message
from rmq_cluster.cluster.remoting.client_pool import open_remoting_client
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode
from rmq_cluster.store.commitlog import RESERVE_CHUNK_BYTES
from rmq_cluster.store.config import MessageStoreConfig
from rmq_cluster.store.message_store import MessageStore
from tests.integration.broker.conftest import messages
from tests.integration.broker.test_broker_process import _start_broker, _stop

TMPFS_BYTES = 16 * 1024 * 1024
FILLER_BYTES = 4 * 1024 * 1024  # freed at the end: writes must resume
BODY = b"x" * 4096
WRITERS = 32
FILL_DEADLINE_S = 60.0


def _mount_tmpfs(where: Path) -> None:
    where.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_BYTES}", "tmpfs", str(where)], check=True
    )


def _unmount(where: Path) -> None:
    subprocess.run(["umount", str(where)], check=True)


async def test_fast_writer_on_full_tmpfs_gets_code_14_not_sigbus(tmp_path: Path) -> None:
    mnt = tmp_path / "tmpfs"
    _mount_tmpfs(mnt)
    proc = None
    try:
        filler = mnt / "filler"
        filler.write_bytes(os.urandom(FILLER_BYTES))
        store = mnt / "store"
        conf = tmp_path / "broker.properties"

        def conf_text(port: int) -> str:
            return (
                f"brokerName=broker-full\nlistenPort={port}\nhaListenPort=0\n"
                f"bindAddress=127.0.0.1\nbrokerIP1=127.0.0.1\nstorePathRootDir={store}\n"
                "mappedFileSizeCommitLog=1048576\nmappedFileSizeConsumeQueue=60000\n"
                "maxHashSlotNum=1024\nmaxIndexNum=4096\ncleanFileForciblyEnable=false\n"
                "autoCreateTopicEnable=true\ndefaultTopicQueueNums=1\n"
            )

        proc, port = await _start_broker(
            conf, conf_text, ["-m", "rmq_cluster.broker", "-c", str(conf)],
            tmp_path / "broker.log", b"boot success",
        )
        addr = f"127.0.0.1:{port}"
        ext = {"a": "PG", "b": "Full", "c": "TBW102", "d": "1", "e": "0", "f": "0", "g": "0",
               "h": "0"}
        codes: dict[int, int] = {}
        remarks: list[str] = []
        full = trio.Event()
        async with open_remoting_client() as client:

            async def send() -> RemotingCommand:
                with trio.fail_after(10):
                    return await client.invoke(
                        addr, RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext, BODY)
                    )

            async def writer() -> None:
                while not full.is_set():
                    resp = await send()
                    codes[resp.code] = codes.get(resp.code, 0) + 1
                    if resp.code == ResponseCode.SERVICE_NOT_AVAILABLE:
                        remarks.append(resp.remark or "")
                        full.set()
                    else:
                        assert resp.code == ResponseCode.SUCCESS, (resp.code, resp.remark)
                    assert proc is not None and proc.returncode is None

            with trio.fail_after(FILL_DEADLINE_S):
                async with trio.open_nursery() as nursery:
                    for _ in range(WRITERS):
                        nursery.start_soon(writer)
            assert codes.get(ResponseCode.SUCCESS, 0) > 100, codes
            assert "disk" in remarks[0] and "full" in remarks[0], remarks[0]
            # still full: every further send is refused the same way, the process lives on
            for _ in range(20):
                assert (await send()).code == ResponseCode.SERVICE_NOT_AVAILABLE
            assert proc.returncode is None
            # reads keep working
            pull = {"consumerGroup": "CG", "topic": "Full", "queueId": "0", "queueOffset": "0",
                    "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0",
                    "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0"}
            with trio.fail_after(10):
                got = await client.invoke(
                    addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, pull)
                )
            assert got.code == ResponseCode.SUCCESS, got.remark
            assert [m.body for m in messages(got)] == [BODY] * 32
            # space freed: writes resume
            await trio.Path(filler).unlink()
            resp = await send()
            assert resp.code == ResponseCode.SUCCESS, (resp.code, resp.remark)
        proc.send_signal(signal.SIGTERM)
        with trio.fail_after(15):
            rc = await proc.wait()
        assert rc == 0, (rc, (tmp_path / "broker.log").read_text()[-3000:])
    finally:
        await _stop(proc)
        _unmount(mnt)
    assert proc is not None and proc.returncode == 0


DLEDGER_FILLER = r"""
import errno, os, sys
from rmq_cluster.dledger.log_storage import FileLogStorage
from rmq_cluster.dledger.messages import make_entry

root, filler = sys.argv[1], sys.argv[2]
log = FileLogStorage(root, data_file_bytes=1 << 20, index_file_bytes=32 * 4096, fsync=False)
body = b"d" * 3000
refused = 0
for i in range(20000):
    index = log.last_index() + 1
    try:
        if i % 3:
            log.append((make_entry(index, 1, body),))
        else:  # the rolling path, several entries at once
            log.append(tuple(make_entry(index + k, 1, body) for k in range(5)))
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc
        refused += 1
        if refused == 3:
            break
assert refused == 3, refused
last = log.last_index()
assert log.entries(last, last + 1)[0].body == body
os.unlink(filler)  # space freed: appends resume
log.append((make_entry(last + 1, 1, b"after"),))
assert log.entries(last + 1, last + 2)[0].body == b"after"
log.close()
print("ok", last)
"""


async def test_dledger_log_on_full_tmpfs_raises_enospc_not_sigbus(tmp_path: Path) -> None:
    mnt = tmp_path / "tmpfs"
    _mount_tmpfs(mnt)
    try:
        filler = mnt / "filler"
        filler.write_bytes(os.urandom(FILLER_BYTES))
        with trio.fail_after(60):
            done = await trio.run_process(
                [sys.executable, "-c", DLEDGER_FILLER, str(mnt / "dledger"), str(filler)],
                capture_stdout=True, capture_stderr=True, check=False,
            )
        # a negative code is a signal (SIGBUS: -7)
        assert done.returncode == 0, (done.returncode, done.stderr.decode()[-2000:])
        assert done.stdout.startswith(b"ok ")
    finally:
        _unmount(mnt)


def test_commitlog_reserves_blocks_ahead_of_every_write(tmp_path: Path) -> None:
    """Sparse segments, but nothing is written through the mapping past the reserved blocks."""
    cfg = MessageStoreConfig(
        store_path_root_dir=str(tmp_path), mapped_file_size_commit_log=3 * RESERVE_CHUNK_BYTES,
        message_index_enable=False,
    )
    store = MessageStore.open(cfg)
    try:
        body = b"r" * 100_000
        for _ in range(50):  # 5 MB of records: 8 MiB reserved of 12
            assert store.append_message(Message(topic="R", body=body, queue_id=0)).ok
            for mf in store.commitlog.queue.files:
                assert mf.wrote <= mf.limit or mf.wrote == mf.file_size
                assert mf.limit % mmap.PAGESIZE == 0 and mf.limit <= mf.file_size
                # the file system holds at least the reserved blocks
                assert os.stat(mf.path).st_blocks * 512 >= mf.limit
        files = store.commitlog.queue.files
        assert len(files) == 1 and files[0].limit < files[0].file_size  # still sparse
    finally:
        store.close()
