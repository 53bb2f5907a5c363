"""The envelopes Debezium Server's HTTP sink posts, unwrapped to a change event's payload.

One item of a request is one of:

- a change event's value, bare (``value.converter.schemas.enable=false``) or in the
  ``{"schema", "payload"}`` wrapper of Kafka Connect's JSON converter;
- a CloudEvent in structured JSON mode (``debezium.format.value=cloudevents``, Debezium's
  ``io.debezium.converters.CloudEventsConverter``): ``data`` holds only ``before`` and
  ``after`` (wrapped in ``schema``/``payload`` when the data's JSON schemas are on), and the
  operation and the ``source`` block travel as extension attributes named ``iodebezium`` +
  the field name (``iodebeziumop``, ``iodebeziumlsn``, ``iodebeziumtxId``...), int64 fields
  as strings, as the CloudEvents type system has no 64-bit integer;
- ``null`` (a tombstone, which Debezium writes after each delete for Kafka's log compaction);
- a transaction boundary (``provide.transaction.metadata=true``: ``{"status": "BEGIN" |
  "END", "id": "txId:LSN", ...}`` on the ``<prefix>.transaction`` topic) or a heartbeat
  (``{"ts_ms": ...}`` on ``__debezium-heartbeat.<prefix>``): both carry no row and are
  counted as skipped, like logical messages (``op: "m"``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cdc.errors import EventError

CE_PREFIX = "iodebezium"
#: ``source`` fields of the PostgreSQL connector that are int64 in its schema: CloudEvents
#: attributes carry them as strings.
_INT64_SOURCE = ("lsn", "ts_ms", "txId", "xmin", "ts_us", "ts_ns")
_TRANSACTION_STATUSES = frozenset({"BEGIN", "END"})


@dataclass(frozen=True, slots=True)
class Unwrapped:
    """One item: its payload (``None`` for an item that carries no change) and value schema.

    ``kind`` is ``change``, ``tombstone`` or ``skipped`` (a logical message, a transaction
    boundary or a heartbeat)."""

    kind: str
    payload: dict[str, Any] | None = None
    schema: dict[str, Any] | None = None


def unwrap(item: Any, index: int) -> Unwrapped:
    """The change event in ``item`` (index ``index`` of its request).

    :raises EventError: an item that is none of the shapes above.
    """
    if isinstance(item, dict) and "specversion" in item:
        item = _from_cloud_event(item, index)
    if item is None:
        return Unwrapped("tombstone")
    if not isinstance(item, dict):
        raise EventError("an event must be a JSON object or null", index=index, field="")
    schema: dict[str, Any] | None = None
    payload: Any = item
    if "payload" in item and "schema" in item:
        schema = item["schema"] if isinstance(item["schema"], dict) else None
        payload = item["payload"]
        if payload is None:
            return Unwrapped("tombstone")
        if not isinstance(payload, dict):
            raise EventError("payload must be an object or null", index=index, field="payload")
    if payload.get("op") == "m" or _is_metadata(payload):
        return Unwrapped("skipped")
    return Unwrapped("change", payload, schema)


def _is_metadata(payload: dict[str, Any]) -> bool:
    """A transaction boundary or a heartbeat: no ``op``, no row."""
    if "op" in payload:
        return False
    if payload.get("status") in _TRANSACTION_STATUSES and isinstance(payload.get("id"), str):
        return True
    return set(payload) == {"ts_ms"}


def _from_cloud_event(event: dict[str, Any], index: int) -> Any:
    """The change event a structured CloudEvent carries, its ``op`` and ``source`` rebuilt
    from the ``iodebezium*`` attributes (``data`` itself may already hold them)."""
    if "data" not in event:
        raise EventError("a CloudEvent needs data", index=index, field="data")
    data = event["data"]
    if isinstance(data, str):
        raise EventError(
            "the CloudEvent's data is not JSON (set value.converter.data.serializer.type=json; "
            "Avro data is not accepted)",
            index=index,
            field="data",
        )
    if data is None or not isinstance(data, dict):
        return data
    wrapped = "payload" in data and "schema" in data
    body = data["payload"] if wrapped else data
    if not isinstance(body, dict):
        return data  # refused by the caller with the field it lacks
    merged = dict(body)
    if "op" not in merged and f"{CE_PREFIX}op" in event:
        merged["op"] = event[f"{CE_PREFIX}op"]
    if "source" not in merged:
        merged["source"] = _source_from_attributes(event, index)
    return {"schema": data["schema"], "payload": merged} if wrapped else merged


def _source_from_attributes(event: dict[str, Any], index: int) -> dict[str, Any]:
    """The ``source`` block of a CloudEvent's extension attributes (``iodebeziumtx*`` are the
    ``transaction`` block's, not the source's)."""
    source: dict[str, Any] = {}
    names = {_attribute(name): name for name in (*_INT64_SOURCE, "name", "schema", "table")}
    for attribute, value in event.items():
        if not attribute.startswith(CE_PREFIX) or attribute in (f"{CE_PREFIX}op",):
            continue
        if attribute.startswith(f"{CE_PREFIX}tx") and attribute != f"{CE_PREFIX}txId":
            continue
        field = names.get(attribute, attribute[len(CE_PREFIX) :])
        if field in _INT64_SOURCE and isinstance(value, str):
            value = _int64(value, attribute, index)
        source[field] = value
    return source


def _attribute(field: str) -> str:
    """The CloudEvents attribute of a ``source`` field: the prefix, then the field's ASCII
    letters and digits (``ts_ms`` becomes ``iodebeziumtsms``)."""
    return CE_PREFIX + "".join(c for c in field if c.isascii() and c.isalnum())


def _int64(value: str, attribute: str, index: int) -> int:
    try:
        return int(value)
    except ValueError:
        raise EventError(
            f"{attribute} must be an integer in a string, not {value!r}",
            index=index,
            field=attribute,
        ) from None
