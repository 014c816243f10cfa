"""Datadriven scenarios for the connection state machine (scenarios/*.txt, see scenario.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.remoting.scenario import run_scenario

SCENARIOS = sorted((Path(__file__).parent / "scenarios").glob("*.txt"))


def test_there_are_scenarios() -> None:
    assert len(SCENARIOS) >= 5


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_scenario(path: Path) -> None:
    run_scenario(path)
