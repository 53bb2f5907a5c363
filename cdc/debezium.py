"""Change events in Debezium's JSON envelope, applied through the warehouse's one apply path.

Accepts what Debezium Server's HTTP sink posts (one event per request) and batches of them:
a JSON object or an array; each item with or without the ``{"schema", "payload"}`` wrapper
(``value.converter.schemas.enable``), or a CloudEvents envelope whose ``data`` is one. A
``null`` item is a tombstone: Debezium follows every delete with one for Kafka log compaction,
and the delete itself already removed the row, so it is counted and skipped; ``op: "m"``
(logical messages) is skipped too.

Each event becomes a change of its table's :class:`warehouse.rows.TextRows`, the staged rows
the pgoutput follower fills: values decoded for the column's type, then rendered in the Postgres
text form the follower stages (:func:`warehouse.rows.text_value`), and Debezium's unavailable
placeholder (or a column the event lacks) an unchanged column the warehouse keeps (``_keep``).
A change's version is ``(source.lsn, 0)``: the WAL position of the change, which increases
along a row's history (a row's next change waits for the lock its last one held until
commit), so re-delivered or reordered events converge under the warehouse's LSN guard. The
whole request is validated before anything is applied, then applied in one warehouse commit:
a bad event fails the request with its index and field, and nothing of it is applied.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cdc.debezium_types import UNAVAILABLE, EncodingError, decode_value
from cdc.errors import EventError, SourceConflictError
from cdc.source import warehouse_table
from warehouse.base import MirrorTable, Warehouse
from warehouse.changes import ChangeBatch, Op, Position, format_lsn
from warehouse.rows import Layout, TextRows, TextValue, text_value

SLOT_PREFIX = "debezium:"
_OPS = {"c": Op.CREATE, "r": Op.READ, "u": Op.UPDATE, "d": Op.DELETE, "t": Op.TRUNCATE}
_SKIPPED_OPS = frozenset({"m"})
_apply_lock = threading.Lock()

Columns = Mapping[str, Mapping[str, str]]  # table -> column -> DuckDB type


@dataclass(frozen=True)
class DebeziumResult:
    """What one request did. ``snapshot_id`` is ``None`` when nothing was applied;
    ``position`` is the warehouse's position after the request."""

    applied: int
    tombstones: int
    skipped: int
    snapshot_id: int | None
    position_lsn: str | None
    position: Position | None = None


@dataclass(frozen=True, slots=True)
class Source:
    """Where a change came from (the event's ``source`` block).

    :param table: the warehouse table.
    :param lsn: WAL position of the change, an integer byte position.
    :param ts_ms: commit time, integer milliseconds since the Unix epoch.
    :param tx_id: Postgres transaction ID, if sent.
    """

    table: str
    lsn: int
    ts_ms: int
    tx_id: int | None = None


@dataclass(frozen=True, slots=True)
class _Event:
    """One validated event, its values in staged text form; ``unchanged`` names the columns
    of ``after`` that Debezium sent as its unavailable placeholder."""

    op: Op
    source: Source
    before: dict[str, TextValue] | None
    after: dict[str, TextValue] | None
    unchanged: frozenset[str]


@dataclass(frozen=True)
class _Parsed:
    events: list[_Event]
    tombstones: int
    skipped: int
    source_name: str | None


def apply_debezium(warehouse: Warehouse, body: Any) -> DebeziumResult:
    """Validate every event of ``body`` (decoded JSON), then apply them in one commit.

    :raises EventError: a malformed event (nothing applied).
    :raises SourceConflictError: the warehouse follows another source.
    """
    tables = warehouse.describe_tables()
    columns = {name: dict(table.columns) for name, table in tables.items()}
    keys = {name: table.key for name, table in tables.items()}
    parsed = parse_events(body, columns, keys)
    if not parsed.events:
        return DebeziumResult(0, parsed.tombstones, parsed.skipped, None, None)
    staged = _stage_events(parsed.events, tables)
    sources = [event.source for event in parsed.events]
    with _apply_lock:  # read the position, then commit past it: one request at a time
        position = next_position(warehouse.position(), sources, parsed.source_name)
        snapshot_id = warehouse.apply(ChangeBatch(staged, position))
    return DebeziumResult(
        len(parsed.events),
        parsed.tombstones,
        parsed.skipped,
        snapshot_id,
        format_lsn(position.lsn),
        position,
    )


def parse_events(body: Any, columns: Columns, keys: Mapping[str, Sequence[str]]) -> _Parsed:
    """The change events of a request body, in order, all validated."""
    items = body if isinstance(body, list) else [body]
    events: list[_Event] = []
    tombstones = skipped = 0
    names: set[str] = set()
    for index, item in enumerate(items):
        payload, schema = _unwrap(item, index)
        if payload is None:
            tombstones += 1
            continue
        op = payload.get("op")
        if op in _SKIPPED_OPS:
            skipped += 1
            continue
        event, name = _event(payload, schema, index, columns, keys)
        events.append(event)
        names.add(name)
    if len(names) > 1:
        raise EventError(
            f"events from several Debezium connectors in one request: {sorted(names)}",
            index=0,
            field="source.name",
        )
    return _Parsed(events, tombstones, skipped, next(iter(names), None))


def _unwrap(item: Any, index: int) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(payload, value schema) of one item; payload ``None`` for a tombstone."""
    if isinstance(item, dict) and "specversion" in item and "data" in item:
        item = item["data"]  # CloudEvents (debezium.format.value=cloudevents)
    if item is None:
        return None, None
    if not isinstance(item, dict):
        raise EventError("an event must be a JSON object or null", index=index, field="")
    if "payload" in item and "schema" in item:
        schema = item["schema"] if isinstance(item["schema"], dict) else None
        payload = item["payload"]
        if payload is not None and not isinstance(payload, dict):
            raise EventError("payload must be an object or null", index=index, field="payload")
        return payload, schema
    return item, None


def _event(
    payload: dict[str, Any],
    schema: dict[str, Any] | None,
    index: int,
    columns: Columns,
    keys: Mapping[str, Sequence[str]],
) -> tuple[_Event, str]:
    op = _OPS.get(str(payload.get("op")))
    if op is None:
        raise EventError(
            f"op must be one of {sorted(_OPS)} (or 'm'), not {payload.get('op')!r}",
            index=index,
            field="op",
        )
    source, name = _source(payload.get("source"), index, columns)
    table = columns[source.table]
    fields = _field_schemas(schema)
    before = _row(payload, "before", index, table, fields.get("before", {}))
    after = _row(payload, "after", index, table, fields.get("after", {}))
    unchanged = frozenset(n for n, v in (after or {}).items() if v is _UNCHANGED)
    plain_before, plain_after = _plain(before), _plain(after)
    _require_rows(op, plain_before, plain_after, keys[source.table], index)
    return _Event(op, source, plain_before, plain_after, unchanged), name


def _source(raw: Any, index: int, columns: Columns) -> tuple[Source, str]:
    if not isinstance(raw, dict):
        raise EventError("source must be an object", index=index, field="source")
    table, schema = raw.get("table"), raw.get("schema") or "public"
    if not isinstance(table, str) or not table or not isinstance(schema, str):
        raise EventError("source.table must name the table", index=index, field="source.table")
    name = warehouse_table(schema, table)
    if name not in columns:
        raise EventError(
            f"table {schema}.{table} is not mirrored by the warehouse",
            index=index,
            field="source.table",
        )
    lsn, ts_ms, tx_id = raw.get("lsn"), raw.get("ts_ms"), raw.get("txId")
    for field_name, value, required in (("lsn", lsn, True), ("ts_ms", ts_ms, True)):
        if required and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise EventError(
                f"source.{field_name} must be a non-negative integer",
                index=index,
                field=f"source.{field_name}",
            )
    if tx_id is not None and (isinstance(tx_id, bool) or not isinstance(tx_id, int)):
        raise EventError("source.txId must be an integer", index=index, field="source.txId")
    connector = raw.get("name")
    source = Source(name, lsn, ts_ms, tx_id)  # type: ignore[arg-type]
    return source, connector if isinstance(connector, str) else ""


class _Unchanged:
    """Marks Debezium's placeholder for an unchanged TOAST value (keep the stored one)."""


_UNCHANGED = _Unchanged()


def _row(
    payload: dict[str, Any],
    part: str,
    index: int,
    table: Mapping[str, str],
    fields: Mapping[str, Mapping[str, Any]],
) -> dict[str, TextValue | _Unchanged] | None:
    raw = payload.get(part)
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise EventError(f"{part} must be an object or null", index=index, field=part)
    row: dict[str, TextValue | _Unchanged] = {}
    for column, value in raw.items():
        duck_type = table.get(column)
        if duck_type is None:
            raise EventError(
                f"column {column!r} is not in the warehouse table",
                index=index,
                field=f"{part}.{column}",
            )
        if value == UNAVAILABLE:
            row[column] = _UNCHANGED
            continue
        try:
            row[column] = text_value(decode_value(duck_type, value, fields.get(column)))
        except EncodingError as error:
            raise EventError(
                f"{part}.{column}: {error}", index=index, field=f"{part}.{column}"
            ) from None
    return row


def _plain(row: Mapping[str, TextValue | _Unchanged] | None) -> dict[str, TextValue] | None:
    """The row with Debezium's unavailable placeholders as nulls."""
    if row is None:
        return None
    return {n: (None if isinstance(v, _Unchanged) else v) for n, v in row.items()}


def _require_rows(
    op: Op,
    before: Mapping[str, object] | None,
    after: Mapping[str, object] | None,
    key: Sequence[str],
    index: int,
) -> None:
    """The part the op needs is there with its whole key (a key column holding the
    unchanged-value placeholder counts as missing); an update's ``before``, when sent, holds
    the old key too."""
    needed = {Op.DELETE: "before", Op.TRUNCATE: None}.get(op, "after")
    if needed is None:
        return
    row = before if needed == "before" else after
    if row is None:
        raise EventError(f"a {op.value!r} event needs {needed}", index=index, field=needed)
    parts = [(needed, row)] + ([("before", before)] if op is Op.UPDATE and before else [])
    for part, values in parts:
        missing = [k for k in key if values.get(k) is None]
        if missing:
            raise EventError(
                f"{part} lacks the key column {missing[0]!r}",
                index=index,
                field=f"{part}.{missing[0]}",
            )


def _field_schemas(schema: dict[str, Any] | None) -> dict[str, dict[str, Mapping[str, Any]]]:
    """Per envelope part (before/after), each column's Connect field schema."""
    out: dict[str, dict[str, Mapping[str, Any]]] = {}
    for part in (schema or {}).get("fields") or []:
        if isinstance(part, dict) and part.get("field") in ("before", "after"):
            out[part["field"]] = {
                f["field"]: f for f in part.get("fields") or [] if isinstance(f, dict)
            }
    return out


def next_position(
    current: Position | None, sources: Sequence[Source], connector: str | None
) -> Position:
    """The position after changes from ``sources``: the highest LSN seen so far (deliveries
    may repeat or reorder; the position never goes back)."""
    slot = SLOT_PREFIX + (connector or "")
    if current is not None and current.slot != slot:
        raise SourceConflictError(
            f"the warehouse follows {current.slot!r}, not Debezium connector "
            f"{connector or '(unnamed)'!r}: one warehouse mirrors one source",
            slot=current.slot,
        )
    last = max(sources, key=lambda s: s.lsn)
    lowest = min(s.lsn for s in sources)
    if current is not None and current.lsn >= last.lsn:
        return current
    return Position(
        lsn=last.lsn,
        snapshot_lsn=current.snapshot_lsn if current is not None else lowest,
        slot=slot,
        commit_lsn=last.lsn,
        tx_id=last.tx_id,
        commit_ts_ms=last.ts_ms,
    )


def _stage_events(events: Sequence[_Event], tables: Mapping[str, MirrorTable]) -> list[TextRows]:
    """The events, in request order, staged per table over the table's warehouse columns,
    each versioned ``(source.lsn, 0)``."""
    layouts: dict[str, Layout] = {}
    staged: dict[str, TextRows] = {}
    for event in events:
        name = event.source.table
        layout = layouts.get(name)
        if layout is None:
            table = tables[name]
            layout = layouts[name] = Layout.of(name, table.column_names, table.key)
        rows = staged.setdefault(name, TextRows(name))
        _stage_event(rows, layout, event)
    return list(staged.values())


def _stage_event(rows: TextRows, layout: Layout, event: _Event) -> None:
    version = (event.source.lsn, 0)
    if event.op is Op.TRUNCATE:
        rows.truncate(version)
    elif event.op is Op.DELETE:
        rows.delete(layout, _values(layout, event.before or {}), version)
    else:
        after = event.after or {}
        # A column the event lacks, or sent as the placeholder, keeps its stored value.
        unchanged = [
            i for i, c in enumerate(layout.columns) if c not in after or c in event.unchanged
        ]
        old = event.before if event.op is Op.UPDATE else None
        old_values = None if old is None else _values(layout, old)
        rows.update(layout, old_values, _values(layout, after), version, unchanged)


def _values(layout: Layout, row: Mapping[str, TextValue]) -> tuple[TextValue, ...]:
    return tuple(row.get(name) for name in layout.columns)
