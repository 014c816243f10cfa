"""bench/vs_busy.py: --busy N's neighbours burn CPU while the block runs and are gone after it,
even when the block fails."""

from __future__ import annotations

import os
import time

import pytest

from bench.vs_busy import busy_neighbours


def _cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_neighbours_spin_then_are_reaped_even_on_failure() -> None:
    with pytest.raises(RuntimeError), busy_neighbours(2) as pids:
        assert len(pids) == 2
        deadline = time.monotonic() + 20
        while not all(_cpu_ticks(p) > 0 for p in pids):  # each has run on a CPU
            assert time.monotonic() < deadline, "a neighbour never ran"
            time.sleep(0.01)
        raise RuntimeError("the run failed")
    assert all(_gone(p) for p in pids)  # killed and reaped: no zombie left either


def test_zero_neighbours() -> None:
    with busy_neighbours(0) as pids:
        assert pids == []
