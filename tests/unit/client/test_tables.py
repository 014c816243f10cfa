"""client/tables.py: mqadmin's ``#``-headed tables and key/value views (pure)."""

from __future__ import annotations

import json
import re

from hypothesis import given
from hypothesis import strategies as st

from rmq_cluster.client.tables import Col, human_time, json_lines, render_kv, render_table


def test_headers_widths_and_alignment() -> None:
    text = render_table([Col("Broker Name", 16), Col("QID", 4), Col("Diff", 8, True)],
                        [("broker-a", 0, 12), ("b", 10, None)])
    head, first, second = text.splitlines()
    assert head == "#Broker Name      #QID     #Diff"
    assert first == "broker-a          0           12"
    assert second == "b                 10"  # an empty last cell: no trailing blanks
    assert text.endswith("\n") and text.count("\n") == 3


def test_cells() -> None:
    text = render_table(["A", "B", "C", "D"], [(True, 1.5, None, {"k": [1]})])
    assert text.splitlines()[1].split() == ["true", "1.50", '{"k":[1]}']


def test_rows_must_fit_the_columns() -> None:
    try:
        render_table(["A", "B"], [(1,)])
    except ValueError as exc:
        assert "1 cells for 2 columns" in str(exc)
    else:
        raise AssertionError("a short row was accepted")


def test_kv_time_and_json_lines() -> None:
    assert render_kv([("Topic:", "T"), ("Keys:", None)]) == f"{'Topic:':<20} T\nKeys:\n"
    assert human_time(0) == "" and human_time(-1) == ""
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,007", human_time(1_700_000_000_007))
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d",
                        human_time(1_700_000_000_007, millis=False))
    lines = json_lines([{"b": 1, "a": 2}, {}]).splitlines()
    assert [json.loads(x) for x in lines] == [{"a": 2, "b": 1}, {}]


_word = st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=1,
                max_size=12)


@given(st.lists(st.tuples(_word, _word, st.integers(-10**6, 10**6)), max_size=8),
       st.lists(st.integers(0, 40), min_size=3, max_size=3), st.booleans())
def test_every_row_reads_back(rows: list[tuple[str, str, int]], widths: list[int],
                              right: bool) -> None:
    cols = [Col("One", widths[0]), Col("Two Words", widths[1], right), Col("N", widths[2], True)]
    lines = render_table(cols, rows).splitlines()
    assert re.split(r"\s{2,}", lines[0].strip()) == ["#One", "#Two Words", "#N"]
    assert [ln.split() for ln in lines[1:]] == [[a, b, str(n)] for a, b, n in rows]
    starts = {ln.index(b, len(a)) for (a, b, _n), ln in zip(rows, lines[1:], strict=True)}
    assert len(starts) <= 1 or right  # left-aligned columns start where their header does
