"""The ``checkpoint`` file: physicMsgTimestamp @0, logicsMsgTimestamp @8, indexMsgTimestamp @16,
int64 big-endian in a 4 KiB mapped file (pure)."""

from __future__ import annotations

import struct
from typing import Final

from .config import CHECKPOINT_FILE_SIZE_BYTES, CHECKPOINT_SAFETY_MARGIN_MS
from .mapped_file import MappedFile

CHECKPOINT: Final = struct.Struct(">qqq")


class StoreCheckpoint:
    def __init__(self, path: str) -> None:
        import os

        create = not os.path.exists(path)
        self.mf = MappedFile(path, 0, CHECKPOINT_FILE_SIZE_BYTES, create=create)
        self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp = (
            CHECKPOINT.unpack_from(self.mf.mm, 0)
        )

    def min_timestamp(self) -> int:
        return max(
            0,
            min(self.physic_msg_timestamp, self.logics_msg_timestamp)
            - CHECKPOINT_SAFETY_MARGIN_MS,
        )

    def min_timestamp_index(self) -> int:
        return min(self.min_timestamp(), self.index_msg_timestamp)

    def write(self) -> None:
        CHECKPOINT.pack_into(
            self.mf.mm, 0, self.physic_msg_timestamp, self.logics_msg_timestamp,
            self.index_msg_timestamp,
        )

    def flush(self) -> None:
        self.write()
        self.mf.flush_range(0, CHECKPOINT_FILE_SIZE_BYTES)

    def close(self) -> None:
        self.flush()
        self.mf.close()
