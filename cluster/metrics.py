"""A small metrics registry with Prometheus text exposition (format 0.0.4). Pure: no I/O.

Two kinds of metric:

* **instruments** the hot path touches: ``Counter.inc()`` is one attribute add, ``Histogram``
  ``observe()`` one ``bisect`` and two adds; no locks (one Trio thread), no allocation per call;
* **collected** families: a callback run at scrape time that reads state the node keeps anyway
  (store offsets, client tables, the DLedger term), so most figures cost nothing until scraped.

``Registry.render()`` gives the exposition text; ``parse_exposition`` (strict) reads it back,
for tests and ``rmq-cluster status --metrics``.

A node with many series builds its text in steps: ``Registry.render_steps()`` (and a node's own
build, e.g. ``broker.metrics.BrokerMetrics.build``) is a generator that yields at safe points,
every few hundred samples, and returns the text; the node's event loop runs it a time slice at
a time (``cluster.metrics_server.run_steps``), so a scrape never holds the loop for long.
``run_to_end`` runs one at once.
"""

from __future__ import annotations

import bisect
import collections
import math
import re
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from typing import Final

import attrs

CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"
#: Put latency buckets in seconds (0.1 ms .. 5 s).
LATENCY_BUCKETS_S: Final = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
)
_NAME_RE: Final = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL_RE: Final = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
TYPES: Final = frozenset({"counter", "gauge", "histogram", "summary", "untyped"})

Labels = tuple[tuple[str, str], ...]
#: A build in steps: yields at safe points (between them nothing else runs), returns the text.
Steps = Generator[None, None, str]
#: Samples rendered between two safe points of ``Registry.render_steps``.
RENDER_STEP_SAMPLES: Final = 256


def run_to_end(steps: Steps) -> str:
    """Run a build in steps at once, -> its text."""
    while True:
        try:
            next(steps)
        except StopIteration as stop:
            return str(stop.value)


@attrs.frozen
class Sample:
    name: str
    labels: Labels
    value: float


def _labels(mapping: Mapping[str, object] | None) -> Labels:
    if not mapping:
        return ()
    return tuple((k, str(v)) for k, v in mapping.items())


class Counter:
    """A monotonically increasing count (one child of a family, fixed labels)."""

    __slots__ = ("labels", "value")

    def __init__(self, labels: Labels = ()) -> None:
        self.labels = labels
        self.value = 0

    def inc(self, amount: int = 1) -> None:
        self.value += amount


class Gauge:
    __slots__ = ("labels", "value")

    def __init__(self, labels: Labels = ()) -> None:
        self.labels = labels
        self.value = 0.0

    def set(self, value: float) -> None:
        self.value = value

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount

    def dec(self, amount: float = 1.0) -> None:
        self.value -= amount


class Histogram:
    """Cumulative buckets rendered at scrape time from per-bucket counts."""

    __slots__ = ("bounds", "count", "counts", "labels", "sum")

    def __init__(self, bounds: Sequence[float], labels: Labels = ()) -> None:
        if list(bounds) != sorted(bounds) or not bounds:
            raise ValueError("histogram bounds must be a non-empty ascending sequence")
        self.bounds = tuple(bounds)
        self.labels = labels
        self.counts = [0] * (len(self.bounds) + 1)  # last: above every bound (+Inf)
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.count += 1
        self.sum += value


Collector = Callable[[], Iterable[tuple[Mapping[str, object] | None, float]]]


@attrs.define
class Family:
    name: str
    type: str
    help: str
    children: list[Counter | Gauge | Histogram] = attrs.field(factory=list)
    collector: Collector | None = None

    def samples(self) -> list[Sample]:
        out: list[Sample] = []
        suffix = "_total" if self.type == "counter" and not self.name.endswith("_total") else ""
        for child in self.children:
            if isinstance(child, Histogram):
                running = 0
                for bound, n in zip(self.children_bounds(child), child.counts, strict=True):
                    running += n
                    le = "+Inf" if math.isinf(bound) else _format_value(bound)
                    out.append(Sample(self.name + "_bucket", (*child.labels, ("le", le)), running))
                out.append(Sample(self.name + "_sum", child.labels, child.sum))
                out.append(Sample(self.name + "_count", child.labels, child.count))
            else:
                out.append(Sample(self.name + suffix, child.labels, float(child.value)))
        if self.collector is not None:
            for labels, value in self.collector():
                out.append(Sample(self.name + suffix, _labels(labels), float(value)))
        return out

    @staticmethod
    def children_bounds(h: Histogram) -> list[float]:
        return [*h.bounds, math.inf]


class Registry:
    """Metric families of one node, rendered in registration order."""

    def __init__(self, const_labels: Mapping[str, object] | None = None) -> None:
        self._families: dict[str, Family] = {}
        self.const_labels = _labels(const_labels)

    def _family(self, name: str, type_: str, help_: str) -> Family:
        if not _NAME_RE.match(name):
            raise ValueError(f"bad metric name {name!r}")
        family = self._families.get(name)
        if family is None:
            family = Family(name, type_, help_)
            self._families[name] = family
        elif family.type != type_:
            raise ValueError(f"metric {name} already registered as {family.type}")
        return family

    def counter(self, name: str, help_: str, labels: Mapping[str, object] | None = None) -> Counter:
        child = Counter((*self.const_labels, *_labels(labels)))
        self._family(name, "counter", help_).children.append(child)
        return child

    def gauge(self, name: str, help_: str, labels: Mapping[str, object] | None = None) -> Gauge:
        child = Gauge((*self.const_labels, *_labels(labels)))
        self._family(name, "gauge", help_).children.append(child)
        return child

    def histogram(
        self,
        name: str,
        help_: str,
        bounds: Sequence[float] = LATENCY_BUCKETS_S,
        labels: Mapping[str, object] | None = None,
    ) -> Histogram:
        child = Histogram(bounds, (*self.const_labels, *_labels(labels)))
        self._family(name, "histogram", help_).children.append(child)
        return child

    def collect(self, name: str, type_: str, help_: str, collector: Collector) -> None:
        """A family whose samples ``collector`` yields at scrape time as (labels, value)."""
        if type_ not in ("counter", "gauge"):
            raise ValueError("collected families are counters or gauges")
        const = dict(self.const_labels)

        def with_const() -> Iterable[tuple[Mapping[str, object] | None, float]]:
            for labels, value in collector():
                yield ({**const, **(labels or {})}, value)

        self._family(name, type_, help_).collector = with_const if const else collector

    def render(self) -> str:
        return run_to_end(self.render_steps())

    def render_steps(self) -> Steps:
        """The exposition text, yielding after each family and every ``RENDER_STEP_SAMPLES``
        samples."""
        lines: list[str] = []
        for family in self._families.values():
            try:
                samples = family.samples()
            except Exception as exc:  # one broken collector must not hide the others
                lines.append(f"# collector for {family.name} failed: {type(exc).__name__}")
                continue
            lines.append(f"# HELP {family.name} {_escape_help(family.help)}")
            lines.append(f"# TYPE {family.name} {family.type}")
            for i, s in enumerate(samples, 1):
                lines.append(f"{s.name}{_format_labels(s.labels)} {_format_value(s.value)}")
                if i % RENDER_STEP_SAMPLES == 0:
                    yield
            yield
        return "\n".join(lines) + "\n"


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _escape_label(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _format_labels(labels: Labels) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape_label(v)}"' for k, v in labels) + "}"


def _format_value(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer() and abs(value) < 2**63:
        return str(int(value))
    return repr(float(value))


# ============================================================================ strict parsing


class ExpositionError(ValueError):
    """Text that is not valid Prometheus exposition format."""


_SAMPLE_RE: Final = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?"
    r" (?P<value>\S+)(?: (?P<ts>-?\d+))?$"
)
_LABEL_PAIR_RE: Final = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"')


def _parse_labels(text: str, line_no: int) -> Labels:
    pairs: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        m = _LABEL_PAIR_RE.match(text, pos)
        if m is None:
            raise ExpositionError(f"line {line_no}: bad label set {{{text}}}")
        value = m.group(2).replace("\\n", "\n").replace('\\"', '"').replace("\\\\", "\\")
        if any(k == m.group(1) for k, _ in pairs):
            raise ExpositionError(f"line {line_no}: duplicate label {m.group(1)}")
        pairs.append((m.group(1), value))
        pos = m.end()
        if pos < len(text):
            if text[pos] != ",":
                raise ExpositionError(f"line {line_no}: expected ',' in labels")
            pos += 1
    return tuple(pairs)


def _parse_value(text: str, line_no: int) -> float:
    if text in ("+Inf", "Inf"):
        return math.inf
    if text == "-Inf":
        return -math.inf
    if text == "NaN":
        return math.nan
    try:
        return float(text)
    except ValueError:
        raise ExpositionError(f"line {line_no}: bad value {text!r}") from None


def parse_exposition(text: str) -> dict[str, tuple[str, list[Sample]]]:
    """family name -> (type, samples). Raises ``ExpositionError`` on anything off-format:
    samples before their TYPE, a TYPE twice, unknown types, bad names/labels/values, histogram
    buckets not cumulative or without ``+Inf`` matching ``_count``."""
    if text and not text.endswith("\n"):
        raise ExpositionError("text must end with a newline")
    families: dict[str, tuple[str, list[Sample]]] = {}
    seen_help: set[str] = set()
    current: str | None = None
    for line_no, line in enumerate(text.split("\n")[:-1], 1):
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[1] == "HELP":
                if parts[2] in seen_help:
                    raise ExpositionError(f"line {line_no}: second HELP for {parts[2]}")
                seen_help.add(parts[2])
            elif len(parts) >= 3 and parts[1] == "TYPE":
                if len(parts) != 4 or parts[3] not in TYPES:
                    raise ExpositionError(f"line {line_no}: bad TYPE line")
                if not _NAME_RE.match(parts[2]):
                    raise ExpositionError(f"line {line_no}: bad metric name {parts[2]!r}")
                if parts[2] in families:
                    raise ExpositionError(f"line {line_no}: second TYPE for {parts[2]}")
                families[parts[2]] = (parts[3], [])
                current = parts[2]
            continue
        m = _SAMPLE_RE.match(line)
        if m is None:
            raise ExpositionError(f"line {line_no}: not a sample: {line!r}")
        name = m.group("name")
        if current is None:
            raise ExpositionError(f"line {line_no}: sample {name} before any TYPE")
        ftype = families[current][0]
        allowed = {current}
        if ftype == "counter":
            allowed = {current, current + "_total"} if not current.endswith("_total") else {current}
        elif ftype in ("histogram", "summary"):
            allowed = {current + "_bucket", current + "_sum", current + "_count", current}
        if name not in allowed:
            raise ExpositionError(f"line {line_no}: sample {name} outside family {current}")
        labels = _parse_labels(m.group("labels") or "", line_no)
        value = _parse_value(m.group("value"), line_no)
        if ftype == "counter" and (value < 0 or math.isnan(value)):
            raise ExpositionError(f"line {line_no}: counter {name} is {value}")
        families[current][1].append(Sample(name, labels, value))
    for fname, (ftype, samples) in families.items():
        if ftype == "histogram":
            _check_histogram(fname, samples)
    return families


def _check_histogram(name: str, samples: list[Sample]) -> None:
    series: dict[Labels, list[tuple[float, float]]] = {}
    counts: dict[Labels, float] = {}
    for s in samples:
        base = tuple(kv for kv in s.labels if kv[0] != "le")
        if s.name.endswith("_bucket"):
            le = dict(s.labels).get("le")
            if le is None:
                raise ExpositionError(f"{name}: bucket without le")
            series.setdefault(base, []).append((_parse_value(le, 0), s.value))
        elif s.name.endswith("_count"):
            counts[base] = s.value
    for base, buckets in series.items():
        bounds = [b for b, _ in buckets]
        if bounds != sorted(bounds) or not math.isinf(bounds[-1]):
            raise ExpositionError(f"{name}: buckets out of order or no +Inf")
        values = [v for _, v in buckets]
        if values != sorted(values):
            raise ExpositionError(f"{name}: buckets not cumulative")
        if counts.get(base) != values[-1]:
            raise ExpositionError(f"{name}: +Inf bucket differs from _count")


def sample_value(
    families: Mapping[str, tuple[str, list[Sample]]],
    name: str,
    **labels: str,
) -> float | None:
    """Sum of the samples called ``name`` (family name or full sample name) whose labels
    include ``labels``; None when there is none."""
    total: float | None = None
    for _fname, (_t, samples) in families.items():
        for s in samples:
            if s.name != name and s.name != name + "_total":
                continue
            have = dict(s.labels)
            if all(have.get(k) == v for k, v in labels.items()):
                total = (total or 0.0) + s.value
    return total


class WindowRates:
    """Per-key rate of a growing total over a stated window, from samples of the total.

    Every ``*_tps`` figure is one of these: ``observe(key, total, now)`` records a sample (one
    per ``period_s`` at most: a sooner one is ignored), and ``rate(key)`` is the total's rise
    from its *anchor* to its newest sample divided by the time between them. The anchor is the
    newest sample at least ``window_s`` older than the newest one, so under a sampler ticking
    every ``period_s`` a rate covers between ``window_s`` and ``window_s + period_s`` seconds;
    a key younger than the window is measured over its whole life (as RocketMQ's StatsItem
    does over the snapshots it has). One sample gives 0; a total that went down (a counter
    reset) starts the key again. Reading a rate changes nothing: who reads, or how often, never
    moves a figure. ``forget(now)`` drops keys with no sample for a window.
    """

    def __init__(self, window_s: float, period_s: float = 1.0) -> None:
        if not 0 < period_s <= window_s:
            raise ValueError("0 < period_s <= window_s")
        self.window_s = window_s
        self.period_s = period_s
        self._samples: dict[object, collections.deque[tuple[float, float]]] = {}

    def observe(self, key: object, total: float, now: float) -> None:
        samples = self._samples.get(key)
        if samples is None:
            samples = self._samples[key] = collections.deque()
        elif samples and now - samples[-1][0] < self.period_s:
            return
        if samples and total < samples[-1][1]:
            samples.clear()
        samples.append((now, total))
        horizon = now - self.window_s
        while len(samples) > 2 and samples[1][0] <= horizon:
            samples.popleft()

    def rate(self, key: object) -> float:
        samples = self._samples.get(key)
        if not samples or len(samples) < 2:
            return 0.0
        (t0, v0), (t1, v1) = samples[0], samples[-1]
        return (v1 - v0) / (t1 - t0) if t1 > t0 else 0.0

    def forget(self, now: float) -> None:
        stale = [k for k, s in self._samples.items() if not s or now - s[-1][0] > self.window_s]
        for k in stale:
            del self._samples[k]

    def __len__(self) -> int:
        return len(self._samples)
