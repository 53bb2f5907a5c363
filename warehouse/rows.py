"""Row changes of one table in Postgres text form, folded to one staged row per key.

Every change the warehouse applies is staged here: the follower's (pgoutput sends every value
as text) and the Debezium endpoint's (its decoded values rendered by :func:`text_value`). The
warehouse casts the text the same way for the initial snapshot (``COPY ... CSV``) and for the
stream. The follower's values stay ``bytes`` from the wire until Arrow turns whole columns into
strings, so a change costs a few dictionary operations in Python and no per-value conversion.

A key's newest change in the batch wins; deletes become tombstones (key columns only); an
update that changed the key also tombstones the old key; unchanged TOAST columns, and columns
a change's layout lacks, are listed in ``_keep`` so the stored value survives.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa

from warehouse.errors import SchemaError

#: Staged column naming the columns whose stored value a row keeps.
KEEP = "_keep"
#: The version and tombstone columns every mirrored table has besides its source columns.
META_COLUMNS = ("_lsn", "_seq", "_deleted")

TextValue = bytes | None


@dataclass(frozen=True)
class Layout:
    """A source relation's columns in wire order and the positions of its key columns."""

    table: str
    columns: tuple[str, ...]
    key: tuple[int, ...]

    @classmethod
    def of(cls, table: str, columns: Sequence[str], key: Sequence[str]) -> Layout:
        missing = [name for name in key if name not in columns]
        if not key or missing:
            raise SchemaError(
                f"table {table!r} has no usable key (missing {missing}); give it a primary key "
                "or a replica identity index",
                table=table,
            )
        return cls(table, tuple(columns), tuple(columns.index(name) for name in key))


@dataclass(slots=True)
class _Row:
    version: tuple[int, int]
    deleted: bool
    layout: Layout
    values: tuple[TextValue, ...]
    keep: tuple[str, ...] = ()


@dataclass
class TextRows:
    """What a batch does to one table: an optional truncate, then one row per key.

    Feed changes in commit order with their version ``(commit LSN, ordinal)``; an older
    version than the one already staged for a key is ignored.
    """

    table: str
    rows: dict[Any, _Row] = field(default_factory=dict)
    truncated_at: tuple[int, int] | None = None
    changes: int = 0

    def upsert(
        self,
        layout: Layout,
        values: tuple[TextValue, ...],
        version: tuple[int, int],
        unchanged: Sequence[int] = (),
    ) -> None:
        """Stage an insert or update; ``unchanged`` are positions of TOAST values not sent."""
        self.changes += 1
        self._put(layout, values, version, unchanged)

    def update(
        self,
        layout: Layout,
        old: tuple[TextValue, ...] | None,
        values: tuple[TextValue, ...],
        version: tuple[int, int],
        unchanged: Sequence[int] = (),
    ) -> None:
        """Stage an update (or an insert, without ``old``). When ``old`` (the old row, or at
        least its key columns) holds another key than ``values``, the row moved: the old key
        gets a tombstone at the same version."""
        self.changes += 1
        if old is not None and _key(layout, old) != _key(layout, values):
            self._tombstone(layout, old, version)
        self._put(layout, values, version, unchanged)

    def delete(
        self, layout: Layout, values: tuple[TextValue, ...], version: tuple[int, int]
    ) -> None:
        """Stage a tombstone for the key held in ``values`` (other columns are ignored)."""
        self.changes += 1
        self._tombstone(layout, values, version)

    def truncate(self, version: tuple[int, int]) -> None:
        """Drop what is staged from before the truncate (in stream order: everything)."""
        self.changes += 1
        if self.truncated_at is None or version > self.truncated_at:
            self.rows = {k: r for k, r in self.rows.items() if r.version > version}
            self.truncated_at = version

    def _put(
        self,
        layout: Layout,
        values: tuple[TextValue, ...],
        version: tuple[int, int],
        unchanged: Sequence[int],
    ) -> None:
        key = _key(layout, values)
        current = self.rows.get(key)
        if (current is not None and current.version > version) or self._truncated(version):
            return
        keep: tuple[str, ...] = ()
        if unchanged:
            values, keep = _fill_unchanged(layout, values, unchanged, current)
        self.rows[key] = _Row(version, False, layout, values, keep)

    def _tombstone(
        self, layout: Layout, values: tuple[TextValue, ...], version: tuple[int, int]
    ) -> None:
        key = _key(layout, values)
        current = self.rows.get(key)
        if (current is not None and current.version > version) or self._truncated(version):
            return
        kept = tuple(values[i] if i in layout.key else None for i in range(len(values)))
        self.rows[key] = _Row(version, True, layout, kept)

    def _truncated(self, version: tuple[int, int]) -> bool:
        return self.truncated_at is not None and version < self.truncated_at

    def to_arrow(self, columns: Sequence[str]) -> pa.Table:
        """The staged rows over the warehouse table's ``columns`` (text, null where a layout
        lacks one), plus ``_lsn``, ``_seq``, ``_deleted`` and ``_keep``."""
        groups: dict[Layout, list[_Row]] = {}
        for row in self.rows.values():
            groups.setdefault(row.layout, []).append(row)
        parts = [_group_table(layout, rows, columns) for layout, rows in groups.items()]
        if not parts:
            return _group_table(Layout(self.table, (), ()), [], columns)
        return parts[0] if len(parts) == 1 else pa.concat_tables(parts)


def _key(layout: Layout, values: tuple[TextValue, ...]) -> Any:
    if len(layout.key) == 1:
        value = values[layout.key[0]]
        if value is not None:
            return value
    else:
        values_of_key = tuple(values[i] for i in layout.key)
        if None not in values_of_key:
            return values_of_key
    names = [layout.columns[i] for i in layout.key]
    raise SchemaError(f"a change of {layout.table!r} lacks its key {names}", table=layout.table)


def _fill_unchanged(
    layout: Layout,
    values: tuple[TextValue, ...],
    unchanged: Sequence[int],
    current: _Row | None,
) -> tuple[tuple[TextValue, ...], tuple[str, ...]]:
    """Take unchanged TOAST values from the batch's earlier row for the key when there is
    one; else name them in ``_keep`` so the warehouse keeps its stored value."""
    if current is None or current.deleted:
        return values, tuple(layout.columns[i] for i in unchanged)
    previous = dict(zip(current.layout.columns, current.values, strict=True))
    filled = list(values)
    keep = []
    for i in unchanged:
        name = layout.columns[i]
        if name in previous:
            filled[i] = previous[name]
        else:
            keep.append(name)
    return tuple(filled), tuple(keep + [k for k in current.keep if k in layout.columns])


def _group_table(layout: Layout, rows: list[_Row], columns: Sequence[str]) -> pa.Table:
    n = len(rows)
    wire = list(zip(*(row.values for row in rows), strict=True)) if rows else []
    position = {name: i for i, name in enumerate(layout.columns)}
    absent = tuple(name for name in columns if name not in position)
    arrays: dict[str, pa.Array] = {}
    for name in columns:
        i = position.get(name)
        if i is None:
            arrays[name] = pa.nulls(n, pa.string())
        else:
            arrays[name] = pa.array(wire[i] if rows else [], pa.binary()).cast(pa.string())
    arrays["_lsn"] = pa.array([row.version[0] for row in rows], pa.uint64())
    arrays["_seq"] = pa.array([row.version[1] for row in rows], pa.int32())
    arrays["_deleted"] = pa.array([row.deleted for row in rows], pa.bool_())
    arrays[KEEP] = pa.array(
        [(list(row.keep + absent) or None) if not row.deleted else None for row in rows],
        pa.list_(pa.string()),
    )
    return pa.table(arrays)


def snapshot_rows(rows: pa.Table, lsn: int) -> pa.Table:
    """Initial-snapshot text rows with their version ``(lsn, 0)`` and the staging columns."""
    n = rows.num_rows
    return (
        rows.append_column("_lsn", pa.array(np.full(n, lsn, np.uint64)))
        .append_column("_seq", pa.array(np.zeros(n, np.int32)))
        .append_column("_deleted", pa.array(np.zeros(n, np.bool_)))
        .append_column(KEEP, pa.nulls(n, pa.list_(pa.string())))
    )


def text_value(value: object) -> TextValue:
    """A Python value in the Postgres text form the warehouse casts (what the follower
    stages): booleans ``t``/``f``, numbers in plain notation (``Infinity``, ``NaN`` as Postgres
    spells them), timestamps and dates ISO 8601 (aware ones with their offset), ``bytes``
    (``bytea``) as bare hex, lists (arrays) and mappings as JSON, anything else as ``str``;
    ``None`` stays null."""
    if value is None:
        return None
    if isinstance(value, bool):
        return b"t" if value else b"f"
    if isinstance(value, float):
        return _float_text(value).encode()
    if isinstance(value, Decimal):
        return format(value, "f").encode()
    if isinstance(value, datetime):
        return value.isoformat(sep=" ").encode()
    if isinstance(value, bytes):
        return value.hex().encode()
    if isinstance(value, list | dict):
        return json_text(value)
    return str(value).encode()


def json_text(value: object) -> bytes:
    """An array (nested lists) or a document as the JSON text the warehouse casts; values JSON
    lacks become text: timestamps and dates ISO 8601, ``bytes`` hex, decimals ``str``."""
    return json.dumps(value, default=_json_default).encode()


def _json_default(value: object) -> object:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def _float_text(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return repr(value)
