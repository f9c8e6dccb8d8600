"""Parquet files of sentence pairs, the format download and clean write: string columns
``src`` and ``tgt``, in row groups of ``ROW_GROUP`` pairs.

Row groups are what lets later stages read a slice of a split (``read_rows``) without
reading the file: a clean or tokenize task on any node reads only its own rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

ROW_GROUP = 50_000
PAIR_SCHEMA = pa.schema([("src", pa.string()), ("tgt", pa.string())])


def write_pairs(pairs: Iterator[tuple[str, str]], path: Path) -> int:
    """Write (source, target) pairs as they come, a row group at a time; the pair count."""
    def tables() -> Iterator[pa.Table]:
        batch: list[tuple[str, str]] = []
        for pair in pairs:
            batch.append(pair)
            if len(batch) == ROW_GROUP:
                yield _table(batch)
                batch = []
        if batch:
            yield _table(batch)

    return write_pair_tables(tables(), path)


def write_pair_tables(tables: Iterable[pa.Table], path: Path) -> int:
    """Write tables of pairs (any sizes) as row groups of exactly ``ROW_GROUP`` pairs,
    the last one shorter; the pair count."""
    count = 0
    pending: list[pa.Table] = []
    pending_rows = 0
    with pq.ParquetWriter(path, PAIR_SCHEMA) as writer:
        for table in tables:
            pending.append(table.select(["src", "tgt"]).cast(PAIR_SCHEMA))
            pending_rows += table.num_rows
            while pending_rows >= ROW_GROUP:
                joined = pa.concat_tables(pending)
                writer.write_table(joined.slice(0, ROW_GROUP).combine_chunks())
                pending, pending_rows = [joined.slice(ROW_GROUP)], pending_rows - ROW_GROUP
                count += ROW_GROUP
        if pending_rows:
            writer.write_table(pa.concat_tables(pending).combine_chunks())
            count += pending_rows
    return count


def count_rows(path: Path) -> int:
    return pq.ParquetFile(path).metadata.num_rows


def read_rows(path: Path, start: int, stop: int) -> pa.Table:
    """Rows ``start`` to ``stop`` (exclusive), reading only the row groups that hold them."""
    parquet = pq.ParquetFile(path)
    groups, first_row, offset = [], None, 0
    for index in range(parquet.metadata.num_row_groups):
        rows = parquet.metadata.row_group(index).num_rows
        if offset < stop and offset + rows > start:
            groups.append(index)
            first_row = offset if first_row is None else first_row
        offset += rows
    if not groups:
        return PAIR_SCHEMA.empty_table()
    table = parquet.read_row_groups(groups)
    return table.slice(start - first_row, stop - start)


def _table(batch: list[tuple[str, str]]) -> pa.Table:
    src, tgt = zip(*batch)
    return pa.table({"src": list(src), "tgt": list(tgt)}, schema=PAIR_SCHEMA)
