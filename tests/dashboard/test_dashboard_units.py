"""The dashboard's pure parts: sessions, forms, body views, replication figures, chaos-run
listing, escaping."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rmq_cluster.dashboard import chaos_runs, gather
from rmq_cluster.dashboard.forms import (
    MAX_FORM_FIELDS,
    FormError,
    body_views,
    int_field,
    parse_form,
    reset_timestamp,
)
from rmq_cluster.dashboard.sessions import Account, SessionStore
from rmq_cluster.dashboard.settings import MAX_RESULT_BYTES
from rmq_cluster.dashboard.templates import render


def test_sessions_are_bounded_expire_and_rotate_on_login() -> None:
    store = SessionStore(limit=3, idle_s=10.0)
    first = store.new(0.0)
    for t in (1.0, 2.0, 3.0):
        store.new(t)
    assert len(store) == 3 and store.get(first.sid, 3.0) is None  # the oldest went
    s = store.new(4.0)
    assert store.get(s.sid, 13.0) is s and store.get(s.sid, 24.0) is None  # idle > 10 s
    s = store.new(30.0)
    account = Account("ak", "secret", admin=False)
    fresh = store.login(s, account, 31.0)
    assert fresh.sid != s.sid and fresh.csrf != s.csrf and store.get(s.sid, 31.0) is None
    assert fresh.check_csrf(fresh.csrf) and not fresh.check_csrf(s.csrf)
    assert not fresh.check_csrf(None) and not fresh.check_csrf("")
    assert "secret" not in repr(account)


def test_forms_are_bounded_and_checked() -> None:
    assert parse_form(b"a=1&a=2&b=%20x") == {"a": "1", "b": " x"}
    with pytest.raises(FormError):
        parse_form(b"\xff\xfe=1")
    with pytest.raises(FormError):
        parse_form("&".join(f"f{i}=1" for i in range(MAX_FORM_FIELDS + 1)).encode())
    assert int_field({"n": "8"}, "n", 1, 1024) == 8
    assert int_field({}, "n", 1, 1024, 4) == 4
    for bad in ("0", "1025", "x", "1e3"):
        with pytest.raises(FormError):
            int_field({"n": bad}, "n", 1, 1024)
    assert reset_timestamp("earliest", "") == 0 and reset_timestamp("latest", "") == -1
    assert reset_timestamp("time", "2026-01-02T03:04:05") == 1767323045000
    for to, when in (("time", "yesterday"), ("sideways", "")):
        with pytest.raises(FormError):
            reset_timestamp(to, when)


def test_body_views_text_json_hex_and_bounds() -> None:
    v = body_views(b'{"a": [1, 2]}', 1024, 1024)
    assert v["text"] == '{"a": [1, 2]}' and json.loads(v["json"]) == {"a": [1, 2]}
    assert v["hex"].startswith("00000000  7b 22 61 22")
    v = body_views(b"\xff" * 100, 10, 32)
    assert v["json"] == "(too long to show as JSON)" and "90 more bytes" in v["text"]
    assert "68 more bytes" in v["hex"] and len(v["hex"].splitlines()) == 3
    assert body_views(b"[" * 100_000, 200_000, 0)["json"] == "(not JSON)"


def _row(name: str, bid: int, offset: int, info: dict[str, str] | None = None,
         error: str | None = None) -> gather.BrokerRow:
    return gather.BrokerRow("C", name, bid, f"h:{bid}", "x", max_offset=offset,
                            info=info or {}, error=error)


def test_replication_lag_per_slave() -> None:
    rows = [_row("a", 0, 1000, {"haSlave0": "addr=h:1 ackOffset=900 diff=100 inSync=true"}),
            _row("a", 1, 900), _row("a", 2, 1200),
            _row("b", 1, 50, error="down")]
    groups = gather.replication(rows)
    assert [g.broker_name for g in groups] == ["a", "b"]
    a, b = groups
    assert [(r.broker_id, r.lag_bytes) for r in a.replicas] == [(1, 100), (2, 0)]
    assert a.ha_slaves[0]["diff"] == "100"
    assert b.master is None and b.replicas[0].error == "down"
    assert b.replicas[0].lag_bytes is None  # unknown, not "all of it"
    assert gather.lag_series(groups) == {"a/1": 100, "a/2": 0}


def test_topic_kinds() -> None:
    assert [gather.topic_kind(t) for t in ("T", "%RETRY%g", "%DLQ%g", "TBW102",
                                           "rmq_sys_x")] == [
        "normal", "retry", "dlq", "system", "system"]


def test_chaos_runs_listed_from_disk_only(tmp_path: Path) -> None:
    good = tmp_path / "rmq-chaos-ok"
    good.mkdir()
    (good / "result.json").write_text(json.dumps({
        "profile": "2m-2s-sync", "fault": "kill-master", "verdict": "PASS", "invoked": 10,
        "acked": 9, "lost": 0, "replica_audit": {"verdict": "consistent"}}))
    bad = tmp_path / "rmq-chaos-bad"
    bad.mkdir()
    (bad / "result.json").write_text("{not json")
    huge = tmp_path / "rmq-chaos-huge"
    huge.mkdir()
    (huge / "result.json").write_bytes(b" " * (MAX_RESULT_BYTES + 1))
    runs = {r.id: r for r in chaos_runs.list_runs((str(tmp_path),))}
    assert runs["rmq-chaos-ok"].verdict == "PASS" and runs["rmq-chaos-ok"].audit == "consistent"
    assert "not JSON" in runs["rmq-chaos-bad"].verdict
    assert "over" in runs["rmq-chaos-huge"].verdict
    assert chaos_runs.find_run((str(tmp_path),), "../etc") is None
    assert chaos_runs.find_run((str(tmp_path),), "rmq-chaos-ok") is not None


def test_everything_rendered_is_escaped() -> None:
    html = render("error", title="t", page="error", cid=0, nav=(), cluster=None, clusters=[],
                  account=None, csrf="tok", flash="<img src=x onerror=alert(1)>",
                  can_act=False, message="<script>alert(1)</script>")
    assert "<script>alert" not in html and "&lt;script&gt;" in html
    assert "<img src=x" not in html
