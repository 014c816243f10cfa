"""SQL92 message selectors as RocketMQ 4.x evaluates them (``MessageSelector.bySql``). Pure.

    selector = compile_sql92("a BETWEEN 3 AND 5 AND TAGS IN ('TagA', 'TagB')")
    selector.matches({"a": "4", "TAGS": "TagA"})   # True

The grammar is RocketMQ's (an ActiveMQ JMS selector without LIKE, arithmetic, hex/octal):
``OR``/``AND``/``NOT``, ``=``/``<>``, ``>``/``>=``/``<``/``<=``, ``[NOT] BETWEEN x AND y``,
``[NOT] IN ('s', ...)``, ``IS [NOT] NULL``, ``[NOT] CONTAINS|STARTSWITH|ENDSWITH 's'``, unary
``+``/``-``, parentheses, literals (``'str'`` with ``''`` escaping, integers with an optional
``L``, decimals, ``TRUE``/``FALSE``/``NULL``), identifiers ``[a-zA-Z_$][a-zA-Z0-9_$]*`` naming
message properties (user properties and system ones such as ``TAGS`` or ``KEYS``), ``--`` and
``/* */`` comments; keywords are case-insensitive.

Semantics follow RocketMQ's expression classes exactly, including three-valued logic (a missing
property is NULL: a comparison with it is unknown, and only a TRUE result matches), string
properties converted to the other operand's type for comparisons (``a > 5`` with ``a = "7"``),
strings compared with ``>``/``<`` only when both parse as numbers, and the parse-time checks
(``=`` against ``NULL`` is an error, ``BETWEEN`` bounds must be ordered, ``IN`` needs a property,
a float literal must lie in [Double.MIN_VALUE, Double.MAX_VALUE]). An evaluation error (a string
that is not a number compared with one) does not match, as the broker treats it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Final

#: Longest selector accepted (RocketMQ has no explicit limit; a heartbeat body is bounded).
MAX_SQL92_LENGTH: Final = 8192
#: Deepest nesting of parentheses / unary operators accepted.
MAX_SQL92_DEPTH: Final = 64
#: Compiled selectors remembered by ``compile_sql92`` (RocketMQ caches 100 parses).
COMPILE_CACHE_MAX_ENTRIES: Final = 128

_LONG_MIN: Final = -(2**63)
_LONG_MAX: Final = 2**63 - 1
_DOUBLE_MAX: Final = 1.7976931348623157e308
_DOUBLE_MIN: Final = 5e-324  # Java Double.MIN_VALUE: the smallest positive double

_KEYWORDS: Final = frozenset({
    "NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS",
    "CONTAINS", "STARTSWITH", "ENDSWITH",
})

_TOKEN = re.compile(
    r"""
    (?P<ws>[ \t\n\r\f]+)
  | (?P<line_comment>--[^\n\r]*(?:\r\n|\n|\r|$))
  | (?P<block_comment>/\*.*?\*/)
  | (?P<float>(?:[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?
              |\.[0-9]+(?:[eE][+-]?[0-9]+)?
              |[0-9]+[eE][+-]?[0-9]+))
  | (?P<decimal>(?:0|[1-9][0-9]*)[lL]?)
  | (?P<string>'(?:''|[^'])*')
  | (?P<id>[a-zA-Z_$][a-zA-Z0-9_$]*)
  | (?P<op><>|>=|<=|[=<>(),+-])
    """,
    re.VERBOSE | re.DOTALL,
)


class SelectorError(ValueError):
    """The selector does not parse (RocketMQ answers SUBSCRIPTION_PARSE_FAILED)."""


class EvaluationError(Exception):
    """A value could not be converted while comparing (the message does not match)."""


# ============================================================================ values
# Values are None (NULL), bool, int (Java Integer/Long), float (Java Double) or str.


def _java_boolean(text: str) -> bool:
    return text.lower() == "true"


def _java_long(text: str) -> int:
    """Long.valueOf: optional sign, ASCII digits only, in range."""
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        raise EvaluationError(f"For input string: {text!r}")
    value = int(text)
    if not _LONG_MIN <= value <= _LONG_MAX:
        raise EvaluationError(f"For input string: {text!r} (out of range)")
    return value


_JAVA_DOUBLE = re.compile(
    r"[+-]?(?:NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)[fFdD]?"
)


def _java_double(text: str) -> float:
    """Double.valueOf: trims whitespace, accepts Java's decimal forms (hex floats aside)."""
    s = text.strip(" \t\n\r\f\v\x00")
    if not _JAVA_DOUBLE.fullmatch(s):
        raise EvaluationError(f"For input string: {text!r}")
    if s[-1] in "fFdD" and not s.endswith("Infinity"):
        s = s[:-1]
    return float(s.replace("Infinity", "inf"))


def _cmp(a: object, b: object) -> int:
    """Java compareTo for two values of the same kind (Double: NaN above everything)."""
    if isinstance(a, float) and isinstance(b, float) and (math.isnan(a) or math.isnan(b)):
        return 0 if math.isnan(a) and math.isnan(b) else (1 if math.isnan(a) else -1)
    if a == b:
        return 0
    return -1 if a < b else 1  # type: ignore[operator]


def _kind(v: object) -> str:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    return "str"


def _compare(lv: object, rv: object) -> int:
    """RocketMQ ``ComparisonExpression.__compare`` with string conversion on (as its parser
    sets): operands of different kinds are converted up before comparing; what cannot be
    converted compares as "less" (-1); a string that does not parse raises."""
    lk, rk = _kind(lv), _kind(rv)
    if lk != rk:
        if lk == "bool":
            if rk != "str":
                return -1
            rv = _java_boolean(rv)  # type: ignore[arg-type]
        elif lk == "int":
            if rk == "float":
                lv = float(lv)  # type: ignore[arg-type]
            elif rk == "str":
                rv = _java_long(rv)  # type: ignore[arg-type]
            else:
                return -1
        elif lk == "float":
            if rk == "int":
                rv = float(rv)  # type: ignore[arg-type]
            elif rk == "str":
                rv = _java_double(rv)  # type: ignore[arg-type]
            else:
                return -1
        else:  # a string against a boolean or a number
            if rk == "bool":
                lv = _java_boolean(lv)  # type: ignore[arg-type]
            elif rk == "int":
                lv = _java_long(lv)  # type: ignore[arg-type]
            else:
                lv = _java_double(lv)  # type: ignore[arg-type]
    return _cmp(lv, rv)


# ============================================================================ expressions


class Expr:
    """A node; ``evaluate(props)`` returns a value or None (NULL / unknown)."""

    boolean = False  # a BooleanExpression in RocketMQ's terms

    def evaluate(self, props: Mapping[str, str]) -> object:
        raise NotImplementedError


class Constant(Expr):
    def __init__(self, value: object) -> None:
        self.value = value
        # TRUE / FALSE / NULL are BooleanConstantExpressions; strings and numbers are not
        self.boolean = value is None or isinstance(value, bool)

    def evaluate(self, props: Mapping[str, str]) -> object:
        return self.value


class Property(Expr):
    def __init__(self, name: str) -> None:
        self.name = name

    def evaluate(self, props: Mapping[str, str]) -> object:
        return props.get(self.name)


class Negate(Expr):
    def __init__(self, operand: Expr) -> None:
        self.operand = operand

    def evaluate(self, props: Mapping[str, str]) -> object:
        v = self.operand.evaluate(props)
        if isinstance(v, bool) or not isinstance(v, int | float):
            return None
        return -v


class BooleanCast(Expr):
    boolean = True

    def __init__(self, operand: Expr) -> None:
        self.operand = operand

    def evaluate(self, props: Mapping[str, str]) -> object:
        v = self.operand.evaluate(props)
        if v is None:
            return None
        return v if isinstance(v, bool) else False


class Not(Expr):
    boolean = True

    def __init__(self, operand: Expr) -> None:
        self.operand = operand

    def evaluate(self, props: Mapping[str, str]) -> object:
        v = self.operand.evaluate(props)
        if v is None:
            return None
        return not v


class And(Expr):
    boolean = True

    def __init__(self, left: Expr, right: Expr) -> None:
        self.left, self.right = left, right

    def evaluate(self, props: Mapping[str, str]) -> object:
        lv = self.left.evaluate(props)
        if lv is False:
            return False
        rv = self.right.evaluate(props)
        if rv is False:
            return False
        if lv is None or rv is None:
            return None
        return True


class Or(Expr):
    boolean = True

    def __init__(self, left: Expr, right: Expr) -> None:
        self.left, self.right = left, right

    def evaluate(self, props: Mapping[str, str]) -> object:
        lv = self.left.evaluate(props)
        if lv is True:
            return True
        rv = self.right.evaluate(props)
        if rv is True:
            return True
        if lv is None or rv is None:
            return None
        return False


class Equal(Expr):
    boolean = True

    def __init__(self, left: Expr, right: Expr) -> None:
        self.left, self.right = left, right

    def evaluate(self, props: Mapping[str, str]) -> object:
        lv = self.left.evaluate(props)
        rv = self.right.evaluate(props)
        if (lv is None) != (rv is None):
            return None if lv is None else False
        if lv is None:
            return True  # IS NULL of a missing property
        if _kind(lv) == _kind(rv) and lv == rv:
            return True
        return _compare(lv, rv) == 0


_ORDER_TESTS: Final[dict[str, Callable[[int], bool]]] = {
    ">": lambda c: c > 0,
    ">=": lambda c: c >= 0,
    "<": lambda c: c < 0,
    "<=": lambda c: c <= 0,
}


class Order(Expr):
    boolean = True

    def __init__(self, op: str, left: Expr, right: Expr) -> None:
        self.op, self.left, self.right = op, left, right
        self.test = _ORDER_TESTS[op]

    def evaluate(self, props: Mapping[str, str]) -> object:
        lv = self.left.evaluate(props)
        if lv is None:
            return None
        rv = self.right.evaluate(props)
        if rv is None:
            return None
        if isinstance(lv, str) and isinstance(rv, str):
            # strings are ordered only as numbers
            try:
                return self.test(_cmp(_java_double(lv), _java_double(rv)))
            except EvaluationError as exc:
                raise EvaluationError(
                    f"It's illegal to compare string by '{self.op}'. lv={lv}, rv={rv}"
                ) from exc
        return self.test(_compare(lv, rv))


class In(Expr):
    boolean = True

    def __init__(self, prop: Property, values: list[str], negated: bool) -> None:
        self.prop, self.values, self.negated = prop, frozenset(values), negated

    def evaluate(self, props: Mapping[str, str]) -> object:
        v = self.prop.evaluate(props)
        if not isinstance(v, str):
            return None
        return (v in self.values) != self.negated


_STRING_TESTS: Final[dict[str, Callable[[str, str], bool]]] = {
    "CONTAINS": lambda v, s: s in v,
    "STARTSWITH": str.startswith,
    "ENDSWITH": str.endswith,
}


class StringTest(Expr):
    boolean = True

    def __init__(self, op: str, operand: Expr, search: str, negated: bool) -> None:
        self.operand, self.search, self.negated = operand, search, negated
        self.test = _STRING_TESTS[op]

    def evaluate(self, props: Mapping[str, str]) -> object:
        if not self.search:
            return False
        v = self.operand.evaluate(props)
        if not isinstance(v, str):
            return False
        return self.test(v, self.search) != self.negated


# ============================================================================ selector


class Selector:
    """A compiled SQL92 selector."""

    __slots__ = ("expression", "root")

    def __init__(self, expression: str, root: Expr) -> None:
        self.expression = expression
        self.root = root

    def evaluate(self, props: Mapping[str, str]) -> object:
        """The raw three-valued result (True / False / None); raises EvaluationError."""
        return self.root.evaluate(props)

    def matches(self, props: Mapping[str, str]) -> bool:
        """Only a TRUE result matches; an evaluation error does not (the broker logs it)."""
        try:
            return self.root.evaluate(props) is True
        except EvaluationError:
            return False

    def __repr__(self) -> str:
        return f"Selector({self.expression!r})"


def compile_sql92(expression: str, cache: dict[str, Selector] | None = None) -> Selector:
    """Parse ``expression``; raises SelectorError with RocketMQ-like reasons. ``cache`` (a
    caller-owned dict) remembers compiled selectors by text."""
    if cache is not None:
        hit = cache.get(expression)
        if hit is not None:
            return hit
    if len(expression) > MAX_SQL92_LENGTH:
        raise SelectorError(f"selector longer than {MAX_SQL92_LENGTH} characters")
    parser = _Parser(expression)
    root = parser.parse()
    selector = Selector(expression, root)
    if cache is not None:
        if len(cache) >= COMPILE_CACHE_MAX_ENTRIES:
            cache.clear()
        cache[expression] = selector
    return selector


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = self._tokenize(text)
        self.pos = 0
        self.depth = 0

    # ------------------------------------------------------------------ tokens

    @staticmethod
    def _tokenize(text: str) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        pos = 0
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None or m.end() == pos:
                raise SelectorError(
                    f"Invalid MessageSelector. Lexical error at column {pos + 1}: "
                    f"{text[pos:pos + 10]!r}"
                )
            kind = m.lastgroup or ""
            pos = m.end()
            if kind in ("ws", "line_comment", "block_comment"):
                continue
            value = m.group()
            if kind == "id" and value.upper() in _KEYWORDS:
                kind, value = "kw", value.upper()
            out.append((kind, value))
        out.append(("eof", ""))
        return out

    def _peek(self, offset: int = 0) -> tuple[str, str]:
        return self.tokens[min(self.pos + offset, len(self.tokens) - 1)]

    def _next(self) -> tuple[str, str]:
        tok = self.tokens[self.pos]
        if tok[0] != "eof":
            self.pos += 1
        return tok

    def _is(self, kind: str, value: str | None = None, offset: int = 0) -> bool:
        k, v = self._peek(offset)
        return k == kind and (value is None or v == value)

    def _kw(self, word: str, offset: int = 0) -> bool:
        return self._is("kw", word, offset)

    def _expect(self, kind: str, value: str) -> None:
        k, v = self._next()
        if k != kind or v != value:
            raise SelectorError(
                f"Invalid MessageSelector. Encountered {v or 'end of input'!r}, expected {value!r}"
            )

    def _error(self, what: str) -> SelectorError:
        v = self._peek()[1]
        return SelectorError(
            f"Invalid MessageSelector. {what}; encountered {v or 'end of input'!r}"
        )

    # ------------------------------------------------------------------ grammar

    def parse(self) -> Expr:
        if not self.text.strip():
            raise SelectorError("Expression can't be null! SQL92")
        root = self._or()
        if not self._is("eof"):
            raise self._error("unexpected token")
        return _as_boolean(root)

    def _or(self) -> Expr:
        left = self._and()
        while self._kw("OR"):
            self._next()
            left = Or(_as_boolean(left), _as_boolean(self._and()))
        return left

    def _and(self) -> Expr:
        left = self._equality()
        while self._kw("AND"):
            self._next()
            left = And(_as_boolean(left), _as_boolean(self._equality()))
        return left

    def _equality(self) -> Expr:
        left = self._comparison()
        while True:
            if self._is("op", "="):
                self._next()
                left = _equal(left, self._comparison())
            elif self._is("op", "<>"):
                self._next()
                left = Not(_equal(left, self._comparison()))
            elif self._kw("IS") and self._kw("NULL", 1):
                self.pos += 2
                left = Equal(left, Constant(None))
            elif self._kw("IS") and self._kw("NOT", 1) and self._kw("NULL", 2):
                self.pos += 3
                left = Not(Equal(left, Constant(None)))
            else:
                return left

    def _comparison(self) -> Expr:
        left = self._unary()
        while True:
            k, v = self._peek()
            if k == "op" and v in _ORDER_TESTS:
                self._next()
                left = _order(v, left, self._unary())
                continue
            negated = self._kw("NOT") and self._peek(1)[0] == "kw" and self._peek(1)[1] in (
                "BETWEEN", "IN", "CONTAINS", "STARTSWITH", "ENDSWITH"
            )
            word = self._peek(1 if negated else 0)
            if word[0] != "kw" or word[1] not in (
                "BETWEEN", "IN", "CONTAINS", "STARTSWITH", "ENDSWITH"
            ):
                return left
            self.pos += 2 if negated else 1
            if word[1] == "BETWEEN":
                low = self._unary()
                if not self._kw("AND"):
                    raise self._error("BETWEEN needs AND")
                self._next()
                high = self._unary()
                left = _between(left, low, high, negated)
            elif word[1] == "IN":
                self._expect("op", "(")
                values = [self._string()]
                while self._is("op", ","):
                    self._next()
                    values.append(self._string())
                self._expect("op", ")")
                if not isinstance(left, Property):
                    raise SelectorError(
                        f"Expected a property for In expression, got: {_describe(left)}"
                    )
                left = In(left, values, negated)
            else:
                left = StringTest(word[1], left, self._string(), negated)

    def _unary(self) -> Expr:
        self.depth += 1
        if self.depth > MAX_SQL92_DEPTH:
            raise SelectorError(f"selector nested deeper than {MAX_SQL92_DEPTH}")
        try:
            if self._is("op", "+"):
                self._next()
                return self._unary()
            if self._is("op", "-"):
                self._next()
                return _negate(self._unary())
            if self._kw("NOT"):
                self._next()
                return Not(_as_boolean(self._unary()))
            return self._primary()
        finally:
            self.depth -= 1

    def _primary(self) -> Expr:
        k, v = self._peek()
        if k == "op" and v == "(":
            self._next()
            inner = self._or()
            self._expect("op", ")")
            return inner
        if k == "string":
            return Constant(self._string())
        if k == "decimal":
            self._next()
            text = v[:-1] if v[-1] in "lL" else v
            value = int(text)
            if value > _LONG_MAX:
                raise SelectorError(f"Invalid MessageSelector. {v} is out of the long range")
            return Constant(value)
        if k == "float":
            self._next()
            f = float(v)
            if f > _DOUBLE_MAX:
                raise SelectorError(f"{v} is greater than {_DOUBLE_MAX}")
            if f < _DOUBLE_MIN:  # sic: Java rejects 0.0 this way too
                raise SelectorError(f"{v} is less than {_DOUBLE_MIN}")
            return Constant(f)
        if k == "kw" and v in ("TRUE", "FALSE", "NULL"):
            self._next()
            return Constant({"TRUE": True, "FALSE": False, "NULL": None}[v])
        if k == "id":
            self._next()
            return Property(v)
        raise self._error("expected a literal, a property or '('")

    def _string(self) -> str:
        k, v = self._next()
        if k != "string":
            raise SelectorError(
                f"Invalid MessageSelector. Encountered {v or 'end of input'!r}, "
                "expected a string literal"
            )
        return v[1:-1].replace("''", "'")


# ============================================================================ builders


def _describe(e: Expr) -> str:
    if isinstance(e, Property):
        return e.name
    if isinstance(e, Constant):
        return "NULL" if e.value is None else repr(e.value)
    return type(e).__name__


def _as_boolean(e: Expr) -> Expr:
    if e.boolean:
        return e
    if isinstance(e, Property):
        return BooleanCast(e)
    raise SelectorError(f"Expression will not result in a boolean value: {_describe(e)}")


def _equal(left: Expr, right: Expr) -> Expr:
    for side in (left, right):
        if isinstance(side, Constant) and side.value is None:
            raise SelectorError("'NULL' cannot be compared.")
    if (
        isinstance(left, Constant)
        and isinstance(right, Constant)
        and left.boolean
        and not right.boolean
    ):
        raise SelectorError(f"'{_describe(left)}' cannot be compared with '{_describe(right)}'")
    return Equal(left, right)


def _check_order_operand(e: Expr) -> None:
    if isinstance(e, Constant):
        if isinstance(e.value, int | float) and not isinstance(e.value, bool):
            return
        raise SelectorError(f"Value '{_describe(e)}' cannot be compared.")
    if e.boolean:
        raise SelectorError(f"Value '{_describe(e)}' cannot be compared.")


def _order(op: str, left: Expr, right: Expr) -> Expr:
    _check_order_operand(left)
    _check_order_operand(right)
    return Order(op, left, right)


def _between(value: Expr, low: Expr, high: Expr, negated: bool) -> Expr:
    if negated:
        return Or(_order("<", value, low), _order(">", value, high))
    if isinstance(low, Constant) and isinstance(high, Constant):
        if low.value is None or high.value is None:
            raise SelectorError("Illegal values of between, values can not be null!")
        try:
            ordered = _compare(high.value, low.value) >= 0
        except EvaluationError as exc:
            raise SelectorError(f"Illegal values of between: {exc}") from exc
        if not ordered:
            raise SelectorError(
                f"Illegal values of between, left value({low.value}) must less than or equal "
                f"to right value({high.value})"
            )
    return And(_order(">=", value, low), _order("<=", value, high))


def _negate(e: Expr) -> Expr:
    # never folded into a constant: RocketMQ's checks (BETWEEN bounds) see a negation
    return Negate(e)
