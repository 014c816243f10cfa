"""SQL92 selectors: RocketMQ's grammar, its three-valued logic and its type conversions."""

from __future__ import annotations

import contextlib
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmq_cluster.cluster.filter.sql92 import (
    COMPILE_CACHE_MAX_ENTRIES,
    EvaluationError,
    SelectorError,
    compile_sql92,
)

PROPS = {"a": "5", "b": "xyz", "f": "2.5", "flag": "true", "TAGS": "TagA", "neg": "-3"}


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        # comparisons: string properties are converted to the literal's type
        ("a = 5", True),
        ("a = 5.0", True),
        ("a <> 5", False),
        ("a > 4 AND a < 6", True),
        ("a >= 5 AND a <= 5", True),
        ("f > 2.0", True),
        ("f < 2.6", True),
        ("neg < 0", True),
        ("a > -1", True),
        ("a BETWEEN 3 AND 5", True),
        ("a BETWEEN 6 AND 9", False),
        ("a NOT BETWEEN 6 AND 9", True),
        ("b = 'xyz'", True),
        ("b = 'XYZ'", False),
        ("flag = TRUE", True),
        ("flag = FALSE", False),
        ("TAGS IN ('TagA', 'TagB')", True),
        ("TAGS NOT IN ('TagA', 'TagB')", False),
        ("b CONTAINS 'y'", True),
        ("b NOT CONTAINS 'y'", False),
        ("b STARTSWITH 'xy'", True),
        ("b ENDSWITH 'yz'", True),
        ("b NOT ENDSWITH 'q'", True),
        ("b CONTAINS ''", False),
        # NULL: a missing property makes a comparison unknown; only TRUE matches
        ("missing IS NULL", True),
        ("a IS NULL", False),
        ("a IS NOT NULL", True),
        ("missing = 1", None),
        ("missing > 1", None),
        ("NOT (missing > 1)", None),
        ("missing > 1 OR a = 5", True),
        ("missing > 1 OR a = 6", None),
        ("missing > 1 AND a = 6", False),
        ("missing > 1 AND a = 5", None),
        ("missing IN ('x')", None),
        ("missing CONTAINS 'x'", False),
        ("NOT (a = 5)", False),
        ("(a = 5 OR b = 'q') AND NOT (TAGS = 'TagB')", True),
        # keywords are case-insensitive; property names are not
        ("a between 3 and 5 and tags is null", True),
        # comments
        ("a = 5 -- trailing comment", True),
        ("/* lead */ a = 5", True),
        ("a = 5L", True),
        ("a = 05.0e0", True),
    ],
)
def test_evaluation_matches_rocketmq(expression: str, expected: bool | None) -> None:
    selector = compile_sql92(expression)
    assert selector.evaluate(PROPS) is expected
    assert selector.matches(PROPS) is (expected is True)


@pytest.mark.parametrize(
    "expression",
    # an integer literal converts the property with Long.valueOf: "2.5" does not parse either
    ["b > 1", "b = 5", "b BETWEEN 1 AND 2", "a > 1 AND b < 3", "f > 2", "flag = 1"],
)
def test_a_string_that_is_not_a_number_does_not_match(expression: str) -> None:
    selector = compile_sql92(expression)
    with pytest.raises(EvaluationError):
        selector.evaluate(PROPS)
    assert selector.matches(PROPS) is False


def test_strings_compare_by_order_only_as_numbers() -> None:
    selector = compile_sql92("x > y")
    assert selector.matches({"x": "10", "y": "9"})  # numerically, not lexically
    assert not selector.matches({"x": "abc", "y": "abd"})


def test_string_properties_convert_to_booleans() -> None:
    assert compile_sql92("flag = TRUE").evaluate({"flag": "TRUE"}) is True
    assert compile_sql92("b = TRUE").evaluate({"b": "yes"}) is False
    assert compile_sql92("b = FALSE").evaluate({"b": "yes"}) is True


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("", "can't be null"),
        ("   ", "can't be null"),
        ("a =", "expected a literal"),
        ("a = NULL", "cannot be compared"),
        ("NULL = a", "cannot be compared"),
        ("TRUE = 5", "cannot be compared"),
        ("a > 'x'", "cannot be compared"),
        ("a > TRUE", "cannot be compared"),
        ("NOT a > 5", "cannot be compared"),  # NOT binds tighter than '>' (as in RocketMQ)
        ("5 IN ('a')", "Expected a property"),
        ("a IN ()", "expected a string literal"),
        ("a IN (1, 2)", "expected a string literal"),
        ("a BETWEEN 5 AND 3", "must less than or equal"),
        ("a BETWEEN 1", "BETWEEN needs AND"),
        ("a > 0.0", "less than"),  # Java's check against Double.MIN_VALUE rejects 0.0 too
        ("'s'", "will not result in a boolean"),
        ("5", "will not result in a boolean"),
        ("a.b = 1", "Lexical error"),
        ("a != 1", "Lexical error"),
        ("a = 1 b = 2", "unexpected token"),
        ("((a = 1)", "expected ')'"),
        ("a = 99999999999999999999", "out of the long range"),
        ("a LIKE 'x%'", "unexpected token"),
    ],
)
def test_parse_errors_name_the_reason(expression: str, reason: str) -> None:
    with pytest.raises(SelectorError, match=re.escape(reason)):
        compile_sql92(expression)


def test_nesting_and_length_are_bounded() -> None:
    with pytest.raises(SelectorError, match="nested deeper"):
        compile_sql92("NOT " * 200 + "(a = 1)")
    with pytest.raises(SelectorError, match="longer than"):
        compile_sql92("a = 1 OR " * 2000 + "a = 2")


def test_compile_cache_is_bounded_and_reused() -> None:
    cache: dict = {}
    first = compile_sql92("a = 1", cache)
    assert compile_sql92("a = 1", cache) is first
    for i in range(COMPILE_CACHE_MAX_ENTRIES + 5):
        compile_sql92(f"a = {i}", cache)
    assert len(cache) <= COMPILE_CACHE_MAX_ENTRIES


_atoms = st.sampled_from(
    ["a", "b", "f", "missing", "5", "-3", "2.5", "'x'", "'5'", "TRUE", "FALSE", "NULL", "flag"]
)
_ops = st.sampled_from(
    ["=", "<>", ">", ">=", "<", "<=", "AND", "OR", "IS NULL", "IS NOT NULL", "NOT", "IN ('x')",
     "BETWEEN 1 AND 9", "CONTAINS 'y'", "(", ")"]
)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(_atoms, _ops), min_size=1, max_size=12),
       st.dictionaries(st.sampled_from(["a", "b", "f", "flag"]),
                       st.text(max_size=6) | st.integers().map(str), max_size=4))
def test_any_token_soup_parses_or_fails_cleanly(tokens: list[str], props: dict[str, str]) -> None:
    """Whatever the input: a SelectorError at compile time, and evaluation either yields
    True/False/None or an EvaluationError -- never another exception."""
    text = " ".join(tokens)
    try:
        selector = compile_sql92(text)
    except SelectorError:
        return
    with contextlib.suppress(EvaluationError):
        assert selector.evaluate(props) in (True, False, None)
    assert selector.matches(props) in (True, False)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_arbitrary_text_never_crashes_the_parser(text: str) -> None:
    with contextlib.suppress(SelectorError):
        compile_sql92(text)
