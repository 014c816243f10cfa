"""A replica's acked mark and the truncation guard (store/epoch_file.py): a cut at a
consistent point must keep what the replica knows was acknowledged."""

from __future__ import annotations

from pathlib import Path

import pytest

from rmq_cluster.store.epoch_file import ACKED_FILE_NAME, AckedMark, EpochFileError, cut_is_safe


def test_cut_is_safe_only_above_the_acked_data_this_log_holds() -> None:
    assert cut_is_safe(1000, 1200, 1000)      # an unacked tail of 200 bytes: cut
    assert not cut_is_safe(0, 1200, 1000)     # a master with nothing: refused
    assert not cut_is_safe(999, 1200, 1000)
    assert cut_is_safe(500, 500, 1000)        # nothing to cut below what we hold
    assert cut_is_safe(0, 0, 0)


def test_the_mark_only_rises_and_survives_a_restart(tmp_path: Path) -> None:
    mark = AckedMark(str(tmp_path), fsync=False)
    assert mark.offset == 0 and not mark.dirty
    assert mark.raise_to(4096) and mark.dirty
    assert not mark.raise_to(100)
    mark.save()
    assert not mark.dirty
    assert AckedMark(str(tmp_path)).offset == 4096


@pytest.mark.parametrize("text", [b"", b"acked 10", b"acked x 1", b"acked 10 1\n",
                                  b"acked -1 0\n", b"a" * 100])
def test_a_corrupt_mark_is_refused_not_guessed(tmp_path: Path, text: bytes) -> None:
    (tmp_path / ACKED_FILE_NAME).write_bytes(text)
    with pytest.raises(EpochFileError):
        AckedMark(str(tmp_path))
