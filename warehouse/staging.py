"""Collapse a batch of change events into one staged row per key, as Arrow tables.

Applying the staged rows is one delete and one insert per table (:mod:`warehouse.ducklake.apply`): a
row's last change in the batch wins, deletes become tombstones (the key and the version;
other columns null), and the columns an insert or update did not carry (unchanged TOAST
values) are listed in ``_keep`` so that the stored value survives.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from warehouse.changes import ChangeEvent, Op
from warehouse.errors import SchemaError
from warehouse.types import arrow_type, is_list

KEEP = "_keep"
META_COLUMNS = ("_lsn", "_seq", "_deleted")


@dataclass
class StagedRow:
    values: dict[str, Any]
    version: tuple[int, int]
    deleted: bool = False


@dataclass
class TableStage:
    """What one batch does to one table: an optional truncate, then the staged rows."""

    rows: dict[tuple[Any, ...], StagedRow] = field(default_factory=dict)
    truncated_at: tuple[int, int] | None = None


def stage_events(
    events: Iterable[ChangeEvent], keys: Mapping[str, Sequence[str]]
) -> dict[str, TableStage]:
    """Fold ``events`` (in commit order) into one :class:`TableStage` per table."""
    stages: dict[str, TableStage] = {}
    for event in events:
        table = event.source.table
        if table not in keys:
            raise SchemaError(
                f"change for table {table!r}, which the warehouse does not mirror", table=table
            )
        stage = stages.setdefault(table, TableStage())
        _stage_one(stage, event, tuple(keys[table]))
    return stages


def _stage_one(stage: TableStage, event: ChangeEvent, key: tuple[str, ...]) -> None:
    version = event.source.version
    if event.op is Op.TRUNCATE:
        if stage.truncated_at is None or version > stage.truncated_at:
            stage.rows = {k: r for k, r in stage.rows.items() if r.version > version}
            stage.truncated_at = version
        return
    if event.op is Op.DELETE:
        _put(
            stage,
            _key_of(event.before, key, event),
            dict(_key_values(event.before, key)),
            version,
            deleted=True,
        )
        return
    after = event.after
    if after is None:
        raise SchemaError(f"{event.op.value!r} event without 'after'", table=event.source.table)
    new_key = _key_of(after, key, event)
    if event.op is Op.UPDATE and event.before is not None:
        old_key = _key_of(event.before, key, event)
        if old_key != new_key:
            _put(stage, old_key, dict(_key_values(event.before, key)), version, deleted=True)
    values = {name: v for name, v in after.items() if name not in event.unchanged}
    previous = stage.rows.get(new_key)
    if previous is not None and not previous.deleted:
        values = {**previous.values, **values}
    _put(stage, new_key, values, version, deleted=False)


def _put(
    stage: TableStage,
    key: tuple[Any, ...],
    values: dict[str, Any],
    version: tuple[int, int],
    *,
    deleted: bool,
) -> None:
    if stage.truncated_at is not None and version < stage.truncated_at:
        return  # a re-delivered change from before the batch's truncate
    current = stage.rows.get(key)
    if current is not None and current.version > version:
        return  # the batch already holds a newer change for this key
    stage.rows[key] = StagedRow(values, version, deleted)


def _key_values(row: Mapping[str, Any] | None, key: tuple[str, ...]) -> Iterable[tuple[str, Any]]:
    assert row is not None
    return ((name, row[name]) for name in key)


def _key_of(
    row: Mapping[str, Any] | None, key: tuple[str, ...], event: ChangeEvent
) -> tuple[Any, ...]:
    if row is None or any(row.get(name) is None for name in key):
        raise SchemaError(
            f"{event.op.value!r} event for {event.source.table!r} lacks its key {list(key)}",
            table=event.source.table,
            key=list(key),
        )
    return tuple(str(row[name]) for name in key)


def stage_to_arrow(
    stage: TableStage, columns: Sequence[tuple[str, str]], key: Sequence[str]
) -> pa.Table:
    """The staged rows as an Arrow table: the table's columns, ``_lsn``, ``_seq``,
    ``_deleted`` and ``_keep`` (names of columns whose stored value stays)."""
    rows = list(stage.rows.values())
    arrays: dict[str, pa.Array] = {}
    for name, duck_type in columns:
        arrays[name] = _column(name, duck_type, [row.values.get(name) for row in rows])
    arrays["_lsn"] = pa.array([row.version[0] for row in rows], pa.uint64())
    arrays["_seq"] = pa.array([row.version[1] for row in rows], pa.int32())
    arrays["_deleted"] = pa.array([row.deleted for row in rows], pa.bool_())
    keyed = set(key)
    arrays[KEEP] = pa.array(
        [
            None
            if row.deleted
            else [name for name, _ in columns if name not in keyed and name not in row.values]
            or None
            for row in rows
        ],
        pa.list_(pa.string()),
    )
    return pa.table(arrays)


def _column(name: str, duck_type: str, values: list[Any]) -> pa.Array:
    """Typed when the values fit the column's Arrow type; else as text for DuckDB to cast
    (Debezium sends timestamps as ISO strings, for example)."""
    try:
        return pa.array(values, arrow_type(duck_type))
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        return pa.array([_as_text(v, duck_type) for v in values], pa.string())


def _as_text(value: Any, duck_type: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if is_list(duck_type) or isinstance(value, dict | list):
        return json.dumps(value, default=str)
    return str(value)
