"""The store's Trio shell: flush, reput, file-allocation and clean services as tasks (and
``Watermark``, from ``store/watermark.py``, re-exported here).

A broker runs ``from store import flush`` then ``await nursery.start(flush.run, store)`` next
to its servers, and cancels that scope before ``store.close()``. Every blocking disk call
(msync, file creation) goes to ``trio.to_thread.run_sync``; the event loop never waits on the
disk (except a rollover that finds no preallocated file, which creates one inline).

``Watermark`` is the group-commit primitive the services advance (``store.flush_watermark``);
``run`` also runs its sweeper (and that of ``store.both_watermark`` on a SYNC_FLUSH
SYNC_MASTER), which times out what waits on it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import structlog
import trio

from .config import OS_PAGE_SIZE_BYTES, FlushDiskType
from .watermark import Watermark as Watermark  # re-export: ha, tests

if TYPE_CHECKING:
    from .config import MessageStoreConfig
    from .message_store import MessageStore
    from .retention import CleanResult

log = structlog.get_logger(component="store_services")

WARM_AHEAD_BYTES = 8 * 1024 * 1024  # CommitLog bytes kept prefaulted past the write position
WARM_STEP_BYTES = 1024 * 1024


async def commitlog_flush_service(store: MessageStore) -> None:
    cfg = store.config
    interval_s = cfg.flush_interval_commit_log_ms / 1000
    least_bytes = cfg.flush_commit_log_least_pages * OS_PAGE_SIZE_BYTES
    thorough_s = cfg.flush_commit_log_thorough_interval_ms / 1000
    last_thorough = trio.current_time()
    sync = cfg.flush_disk_type is FlushDiskType.SYNC_FLUSH
    while True:
        if sync:
            # group commit: every put that arrives while an fsync runs shares the next one
            with trio.move_on_after(interval_s):
                await store.flush_requested.wait()
            store.flush_requested = trio.Event()
            if store.commitlog.max_offset > store.commitlog.flushed_offset:
                await store.flush_commitlog()
            continue
        await trio.sleep(interval_s)
        dirty = store.commitlog.max_offset - store.commitlog.flushed_offset
        now = trio.current_time()
        thorough = now - last_thorough >= thorough_s
        if dirty >= least_bytes or (thorough and dirty > 0):
            await store.flush_commitlog()
        if thorough:
            last_thorough = now


async def reput_service(store: MessageStore) -> None:
    """Dispatch promptly: woken by appends, yields between MAX_DISPATCH_BYTES_PER_ROUND rounds.
    A record whose ConsumeQueue segment does not exist yet stops dispatch (``on_file_wanted``,
    set while this runs): the segments are made in a worker thread, then dispatch goes on. The
    event loop never creates one: a new segment cost milliseconds of file creation and first
    page fault (a topic of 1024 queues: seconds of stalled loop), now paid in the worker, as
    RocketMQ's reput thread pays it off the put path."""
    dispatcher = store.dispatcher
    dispatcher.on_file_wanted = store.wake_reput
    try:
        while True:
            count = store.dispatch()
            if await store.make_wanted_files():
                continue
            if count and store.dispatch_behind_bytes > 0:
                await trio.lowlevel.checkpoint()
                continue
            # caught up (or stopped before an incomplete record): wait for bytes beyond the end
            await store.wait_reput_work(store.max_phys_offset)
    finally:
        dispatcher.on_file_wanted = None
        dispatcher.files_pending = False  # (dispatch creates inline from now on)


async def allocate_service(store: MessageStore) -> None:
    """Create the next CommitLog file in a worker thread whenever a new file comes into use,
    so a rollover on the event loop only has to take it (RocketMQ AllocateMappedFileService)."""
    queue = store.commitlog.queue
    while True:
        store.file_created = trio.Event()
        start = queue.next_file_start()
        if start is not None:
            try:
                await trio.to_thread.run_sync(queue.preallocate, start, WARM_STEP_BYTES)
                store.preallocated.advance(start)
            except OSError as exc:  # the put path will retry and report CREATE_MAPEDFILE_FAILED
                log.warning("preallocate_failed", start=start, error=str(exc))
        await store.file_created.wait()


async def warm_service(store: MessageStore) -> None:
    """Keep the CommitLog pages just ahead of the write position prefaulted (in a worker
    thread), so appends on the event loop copy into resident pages instead of taking a page
    fault every few records. Woken by an append crossing ``store.warm_at`` (one comparison per
    append); stops for good where the platform does not support it."""
    queue = store.commitlog.queue
    while True:
        files = queue.files
        mf = files[-1] if files else None
        if mf is not None and mf.warmed < mf.file_size:
            start = max(mf.wrote, mf.warmed)
            target = min(mf.file_size, mf.wrote + WARM_AHEAD_BYTES)
            if target - start >= WARM_STEP_BYTES or (target == mf.file_size and target > start):
                ok = await trio.to_thread.run_sync(mf.populate, start, target)
                if not ok and not mf.mm.closed:
                    log.info("commitlog_warmup_unsupported")
                    return
                mf.warmed = target
                continue
            store.warm_at = mf.file_from + mf.warmed - (WARM_AHEAD_BYTES - WARM_STEP_BYTES)
        else:
            store.warm_at = mf.file_end if mf is not None else 0
        event = trio.Event()
        store.warm_wake = event
        await event.wait()


async def logics_flush_service(store: MessageStore) -> None:
    """Flush the ConsumeQueues with ``flushConsumeQueueLeastPages`` new pages every
    ``flushIntervalConsumeQueue``, and all of them (and the checkpoint's logics time) every
    ``flushConsumeQueueThoroughInterval``, as RocketMQ does."""
    cfg = store.config
    interval_s = cfg.flush_interval_consume_queue_ms / 1000
    thorough_s = cfg.flush_consume_queue_thorough_interval_ms / 1000
    last_thorough = trio.current_time()
    while True:
        await trio.sleep(interval_s)
        now = trio.current_time()
        least_pages = cfg.flush_consume_queue_least_pages
        if now - last_thorough >= thorough_s:
            least_pages = 0
            last_thorough = now
        await store.flush_logics(least_pages)


class Cleanable(Protocol):
    """What ``clean_service`` needs of a store: its config and one retention pass (a
    ``MessageStore``, or the DLedger store run by ``dledger/node.py``)."""

    @property
    def config(self) -> MessageStoreConfig: ...

    def clean_once(self, now_ms: int | None = None) -> CleanResult: ...


async def clean_service(store: Cleanable) -> None:
    interval_s = store.config.clean_resource_interval_ms / 1000
    while True:
        await trio.sleep(interval_s)
        try:
            store.clean_once()
        except OSError as exc:
            log.error("clean_failed", error=str(exc))


async def run(
    store: MessageStore, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    """Run every store service until cancelled; the owner calls ``store.close()`` after."""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(commitlog_flush_service, store)
        nursery.start_soon(reput_service, store)
        nursery.start_soon(logics_flush_service, store)
        nursery.start_soon(allocate_service, store)
        nursery.start_soon(warm_service, store)
        nursery.start_soon(clean_service, store)
        # the deadlines of what waits for the flush (SYNC_FLUSH answers and puts)
        nursery.start_soon(store.flush_watermark.run)
        if store.both_watermark is not None:
            nursery.start_soon(store.both_watermark.run)
        store.services_running = True
        task_status.started()
        try:
            await trio.sleep_forever()
        finally:
            store.services_running = False
