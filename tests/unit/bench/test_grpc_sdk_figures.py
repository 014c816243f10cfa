"""bench/grpc_sdk_figures.py: the client sides' output line (as GrpcSdkBench.java and
grpc_sdk_side.py print it), the figures per phase, and the proxy's added latency."""

from __future__ import annotations

import os

import pytest

from bench import grpc_sdk_figures as fig

#: GrpcSdkBench.java's line, verbatim in its shape (Double.toString walls, %.4f latencies)
JAVA_LINE = (
    '{"client": "java-sdk", "phases": ['
    '{"name": "send_1", "count": 4, "wall_s": 0.0125, "latencies_ms": [1.0000, 2.0000, 3.0000,'
    ' 10.5000], "cpu_ticks": {"proxy": 2, "broker": 1}}, '
    '{"name": "send_k", "count": 4, "wall_s": 4.0E-3, "latencies_ms": [2.0, 2.0, 2.0, 2.0],'
    ' "cpu_ticks": {"proxy": -1, "broker": 1}}, '
    '{"name": "receive_ack", "count": 12, "wall_s": 0.5, "latencies_ms": [],'
    ' "cpu_ticks": {"proxy": 3, "broker": 3}}]}'
)


def test_the_java_line_parses_after_the_sdk_logs() -> None:
    out = fig.parse_client_output("12:00 INFO the SDK says hello\n{not json either\n" + JAVA_LINE)
    assert out["client"] == "java-sdk"
    assert [p["name"] for p in out["phases"]] == ["send_1", "send_k", "receive_ack"]


@pytest.mark.parametrize("stdout", [
    "", "no line\n", "{]\n", '{"client": "x"}\n', '{"phases": [{"name": "send_9"}]}\n',
    '{"phases": [{"name": "send_1", "count": 1, "wall_s": 0, "latencies_ms": [],'
    ' "cpu_ticks": {}}]}\n',
    '{"phases": [{"name": "send_1", "count": 1, "wall_s": 1, "latencies_ms": ["1"],'
    ' "cpu_ticks": {}}]}\n',
    '{"phases": [{"name": "send_1", "count": 1, "wall_s": 1, "latencies_ms": [],'
    ' "cpu_ticks": {"proxy": 1.5}}]}\n',
])
def test_a_broken_line_is_refused_by_name(stdout: str) -> None:
    with pytest.raises(fig.FiguresError):
        fig.parse_client_output(stdout)


def test_a_short_receive_fails_the_run() -> None:
    out = fig.parse_client_output(JAVA_LINE)
    fig.check_received(out, 12)
    with pytest.raises(fig.FiguresError, match="received 12 of 13"):
        fig.check_received(out, 13)


def test_phase_rows_rates_percentiles_and_cpu_per_message() -> None:
    out = fig.parse_client_output(JAVA_LINE)
    rows = fig.client_rows(out, "ours", 0, clk_tck=100)
    send_1, send_k, receive = rows
    assert send_1 == {"stack": "ours", "repeat": 0, "client": "java-sdk", "phase": "send_1",
                      "msgs": 4, "msgs_per_s": 320.0, "p50_ms": 3.0, "p99_ms": 10.5,
                      "max_ms": 10.5, "proxy_cpu_us_per_msg": 5000.0,
                      "broker_cpu_us_per_msg": 2500.0}
    assert "proxy_cpu_us_per_msg" not in send_k  # unreadable: absent, not negative
    assert send_k["msgs_per_s"] == 1000.0
    assert "p50_ms" not in receive and receive["msgs_per_s"] == 24.0


def _row(stack: str, client: str, rep: int, p50: float, p99: float, cpu: float = 0.0
         ) -> dict[str, object]:
    return {"stack": stack, "repeat": rep, "client": client, "phase": "send_1",
            "p50_ms": p50, "p99_ms": p99, "proxy_cpu_us_per_msg": cpu}


def test_added_latency_is_the_sdk_through_the_proxy_minus_the_direct_client() -> None:
    rows = [
        _row("ours", "java-sdk", 0, 2.0, 5.0, 300.0), _row("ours", "java-sdk", 1, 4.0, 9.0, 500),
        _row("ours", "java-sdk", 2, 3.0, 7.0, 400.0),
        _row("ours", "java-remoting", 0, 1.0, 2.0), _row("ours", "java-remoting", 1, 1.2, 2.0),
        _row("ours", "java-remoting", 2, 0.8, 3.0),
        _row("apache", "java-sdk", 0, 1.5, 4.0, 200.0),
        _row("apache", "java-remoting", 0, 0.5, 1.0),
        _row("apache", "python-sdk", 0, 3.0, 4.0),  # no python-remoting: no python entry
    ]
    med = fig.medians(rows)
    assert med["ours"]["java-sdk"]["send_1"] == {"p50_ms": 3.0, "p99_ms": 7.0,
                                                 "proxy_cpu_us_per_msg": 400.0}
    added = fig.added_latency(med)
    assert added == {
        "ours": {"java": {"added_p50_ms": 2.0, "added_p99_ms": 5.0, "via_proxy_p50_ms": 3.0,
                          "via_proxy_p99_ms": 7.0, "direct_p50_ms": 1.0, "direct_p99_ms": 2.0,
                          "proxy_cpu_us_per_send_send_1": 400.0}},
        "apache": {"java": {"added_p50_ms": 1.0, "added_p99_ms": 3.0, "via_proxy_p50_ms": 1.5,
                            "via_proxy_p99_ms": 4.0, "direct_p50_ms": 0.5, "direct_p99_ms": 1.0,
                            "proxy_cpu_us_per_send_send_1": 200.0}},
    }
    ratios = fig.ratios(med)
    assert ratios["java-sdk"]["send_1"] == {"p50_ms": 2.0, "p99_ms": 1.75,
                                            "proxy_cpu_us_per_msg": 2.0}
    assert "python-sdk" not in ratios  # only Apache ran it


def test_the_client_side_reads_cpu_ticks_and_pids() -> None:
    assert fig.parse_pids("proxy=12,broker=34,") == {"proxy": 12, "broker": 34}
    assert fig.cpu_ticks(os.getpid()) >= 0
    assert fig.cpu_ticks(2**22 + 12345) == -1  # above pid_max: no such process
    rec = fig.phase_record("send_1", 2, 1.0, [1.23456, 2.0], {"proxy": 5, "broker": -1},
                           {"proxy": 9, "broker": 7})
    assert rec["cpu_ticks"] == {"proxy": 4, "broker": -1}
    assert rec["latencies_ms"] == [1.2346, 2.0]
