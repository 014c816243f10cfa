"""The invisible-time settings from the command line: ``mqproxy``'s flags into ``ProxyConfig``,
and ``rmq-cluster up --proxy``'s ``--proxy-`` flags passed on to the ``mqproxy`` it starts."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from rmq_cluster.deploy.proxy_up import _command, add_up_flag
from rmq_cluster.proxy.__main__ import _invisible_settings, _parser
from rmq_cluster.proxy.config import ProxyConfig


def _config(*argv: str) -> ProxyConfig:
    return _invisible_settings(ProxyConfig(), _parser().parse_args(list(argv)))


def test_mqproxy_flags_set_the_invisible_time_settings() -> None:
    assert _config() == ProxyConfig()
    got = _config("--min-invisible-time-ms-for-recv", "1000", "--max-invisible-time-ms", "0",
                  "--default-invisible-time-ms", "30000")
    assert (got.min_invisible_time_ms_for_recv, got.max_invisible_time_ms,
            got.default_invisible_time_ms) == (1000, 0, 30000)
    assert _config("--min-invisible-time-ms-for-recv", "0").min_invisible_time_ms_for_recv == 0


@pytest.mark.parametrize("argv", [
    ["--min-invisible-time-ms-for-recv", "-1"],
    ["--max-invisible-time-ms", "-5"],
    ["--default-invisible-time-ms", "0"],
])
def test_mqproxy_refuses_invisible_times_out_of_range(argv: list[str]) -> None:
    """(``main`` prints the error and exits 2.)"""
    with pytest.raises(ValueError, match=f"bad {argv[0]}"):
        _config(*argv)


def _up(*argv: str) -> argparse.Namespace:
    up = argparse.ArgumentParser()
    up.set_defaults(func=lambda _args: 0)
    add_up_flag(up)
    return up.parse_args(list(argv))


def test_up_passes_its_proxy_flags_on_to_mqproxy(tmp_path: Path) -> None:
    args = _up("--proxy", "--proxy-min-invisible-time-ms-for-recv", "1000",
               "--proxy-default-invisible-time-ms", "30000")
    cmd = _command(args, tmp_path, "127.0.0.1:9876", None)
    at = cmd.index("--min-invisible-time-ms-for-recv")
    assert cmd[at + 1] == "1000"
    assert cmd[cmd.index("--default-invisible-time-ms") + 1] == "30000"
    assert "--max-invisible-time-ms" not in cmd
    plain = _command(_up("--proxy"), tmp_path, "127.0.0.1:9876", None)
    assert not any("invisible" in part for part in plain)
    # the flags given are ones mqproxy takes
    _parser().parse_args(cmd[cmd.index("-n"):])


def test_mqproxy_flags_set_the_auto_renew_settings() -> None:
    from rmq_cluster.proxy.__main__ import _overrides

    def config(*argv: str) -> ProxyConfig:
        return _overrides(ProxyConfig(), _parser().parse_args(list(argv)))

    assert config() == ProxyConfig()
    got = config("--enable-proxy-auto-renew", "false", "--renew-policy-ms", "2000,4000",
                 "--renew-ahead-time-ms", "1500", "--renew-schedule-period-ms", "200",
                 "--renew-max-time-ms", "60000", "--channel-expired-timeout-ms", "6000")
    assert (got.enable_proxy_auto_renew, got.renew_policy_ms, got.renew_ahead_time_ms,
            got.renew_schedule_period_ms, got.renew_max_time_ms,
            got.channel_expired_timeout_ms) == (False, (2000, 4000), 1500, 200, 60000, 6000)
    with pytest.raises(SystemExit):  # argparse refuses it (mqproxy exits 2)
        config("--renew-policy-ms", "2000,0")
