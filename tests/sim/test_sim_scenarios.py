"""Datadriven-style scenarios (tests/sim/scenarios/*.txt), interpreted by tests/sim/scenario.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.sim.scenario import run_scenario

SCENARIOS = sorted((Path(__file__).parent / "scenarios").glob("*.txt"))


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_scenario(path: Path) -> None:
    run_scenario(path)
