"""Rows of the rocketmq data source as Arrow record batches, one column at a time.

Spark's Python data sources hand their rows to the JVM as Arrow batches; rows yielded as
tuples are converted there value by value (a converter call per cell), which costs more than
decoding the records.  ``record_batches`` takes the raw rows ``mq_model.row_of`` builds
(timestamps in ms, hosts as their 8 stored bytes) and yields ``pyarrow.RecordBatch`` es in
the reader's Arrow schema: the columns transposed in one step, each built by pyarrow in C,
timestamps converted as whole arrays, each distinct host formatted once per batch.

Executors import it (pyarrow comes with PySpark's Python data source support); no Spark
import here: the schema comes from the reader.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Final

import pyarrow as pa

#: A batch holds at most this many rows, or
ARROW_BATCH_ROWS: Final = 8192
#: this many body bytes (the batch is cut after the row that reaches it).
ARROW_BATCH_BYTES: Final = 32 * 1024 * 1024
#: The positions, in SCHEMA_DDL, of the columns built from raw values.
_BODY: Final = 8
_TIMESTAMPS: Final = (10, 11)
_HOSTS: Final = (12, 13)
_MS: Final = pa.timestamp("ms", tz="UTC")


def host_text(raw: bytes) -> str:
    """``a.b.c.d:port`` of a stored IPv4 host (4 address bytes, then the port as int32)."""
    return f"{raw[0]}.{raw[1]}.{raw[2]}.{raw[3]}:{int.from_bytes(raw[4:8], 'big')}"


def to_batch(rows: list[tuple[Any, ...]], schema: pa.Schema) -> pa.RecordBatch:
    """One batch of raw rows (at least one) in ``schema`` (SCHEMA_DDL's Arrow form)."""
    columns: list[Any] = list(zip(*rows, strict=True))
    for i in _HOSTS:
        text = {h: host_text(h) for h in set(columns[i])}
        columns[i] = [text[h] for h in columns[i]]
    arrays = []
    for i, field in enumerate(schema):
        if i in _TIMESTAMPS:
            arrays.append(pa.array(columns[i], type=_MS).cast(field.type))
        else:
            arrays.append(pa.array(columns[i], type=field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def record_batches(rows: Iterable[tuple[Any, ...]], schema: pa.Schema,
                   max_rows: int = ARROW_BATCH_ROWS,
                   max_bytes: int = ARROW_BATCH_BYTES) -> Iterator[pa.RecordBatch]:  # fmt: skip
    """``rows`` in batches of at most ``max_rows`` rows and about ``max_bytes`` body bytes;
    nothing for no rows."""
    pending: list[tuple[Any, ...]] = []
    size = 0
    for row in rows:
        pending.append(row)
        size += len(row[_BODY])
        if len(pending) >= max_rows or size >= max_bytes:
            yield to_batch(pending, schema)
            pending, size = [], 0
    if pending:
        yield to_batch(pending, schema)
