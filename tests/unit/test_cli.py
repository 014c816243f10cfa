"""The rmq-cluster console script: --help and --version, as installed."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from rmq_cluster.deploy.cli import main


def test_help_and_version_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    assert "rmq-cluster" in capsys.readouterr().out
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert "rmq-cluster 0." in capsys.readouterr().out


def test_unknown_command_exits_non_zero(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["frobnicate"])
    assert info.value.code == 2
    assert "frobnicate" in capsys.readouterr().err


def test_console_script_is_installed() -> None:
    exe = shutil.which("rmq-cluster")
    cmd = [exe] if exe else [sys.executable, "-m", "rmq_cluster.deploy.cli"]
    out = subprocess.run([*cmd, "--help"], capture_output=True, text=True, timeout=60, check=True)
    assert "usage: rmq-cluster" in out.stdout
    out = subprocess.run(
        [*cmd, "--version"], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.startswith("rmq-cluster ")
