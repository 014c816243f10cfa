"""``mqbroker`` argument handling (no sockets)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rmq_cluster.broker.__main__ import main


def test_print_config_items(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conf = tmp_path / "broker-a.properties"
    conf.write_text("brokerName=broker-a\nlistenPort=20911\nbrokerRole=SYNC_MASTER\n")
    assert main(["-c", str(conf), "-n", "127.0.0.1:9876;127.0.0.1:9877", "-p"]) == 0
    out = capsys.readouterr().out
    assert "brokerName=broker-a" in out
    assert "namesrvAddr=127.0.0.1\\:9876;127.0.0.1\\:9877" in out or (
        "namesrvAddr=127.0.0.1:9876;127.0.0.1:9877" in out
    )
    assert "brokerRole=SYNC_MASTER" in out and "listenPort=20911" in out


def test_bad_config_value(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conf = tmp_path / "bad.properties"
    conf.write_text("listenPort=notaport\n")
    assert main(["-c", str(conf), "-p"]) == 2
    assert "listenPort" in capsys.readouterr().err
