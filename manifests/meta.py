"""Manifest metadata: the record stored in the Arrow schema's ``quarry.*`` keys."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .errors import ManifestFormatError
from .schema import (
    FORMAT_VERSION,
    KEY_CDC_POSITION,
    KEY_FORMAT_VERSION,
    KEY_NORM_STATS,
    KEY_SAMPLE_SPEC,
    KEY_SNAPSHOT_ID,
    KEY_SQL,
    SUPPORTED_VERSIONS,
)

MAX_METADATA_BYTES = 64 * 1024 * 1024
"""Upper bound on the JSON metadata read from an untrusted file, bytes."""


def dump_json(value: Any) -> bytes:
    """Canonical JSON (sorted keys, no spaces), so equal metadata gives equal file bytes."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return text.encode()


@dataclass(frozen=True)
class ManifestMeta:
    """What a manifest records about how it was built.

    :param sql: the normalized curation SQL.
    :param sample_spec: the sample spec in its dict form (``SampleSpec.to_dict()``).
    :param snapshot_id: the warehouse snapshot the query ran at (a DuckLake version, or a
        backend-defined string); ``None`` when the backend has none.
    :param cdc_position: the CDC position the warehouse had reached (its commit LSN, slot,
        ...): from format version 2 a JSON object (a dict), in version 1 a string (the
        service wrote that object's JSON text); ``None`` when there was none.
    :param norm_stats: normalization statistics per field (``state``, ``action``), each a dict
        with ``count`` and per-dimension ``sum``, ``sum_sq``, ``min``, ``max``.
    :param format_version: the manifest format version, one of
        :data:`~manifests.schema.SUPPORTED_VERSIONS` (a rebuild writes its original's).
    :raises ManifestFormatError: ``cdc_position`` is not of that version's kind (an
        unsupported version is refused when the file is opened).
    """

    sql: str
    sample_spec: dict[str, Any] = field(default_factory=dict)
    snapshot_id: int | str | None = None
    cdc_position: dict[str, Any] | str | None = None
    norm_stats: dict[str, Any] = field(default_factory=dict)
    format_version: int = FORMAT_VERSION

    def __post_init__(self) -> None:
        kind = _position_kind(self.format_version)
        if not isinstance(self.cdc_position, kind):
            raise ManifestFormatError(
                f"format version {self.format_version} records cdc_position as "
                f"{'a JSON object' if self.format_version >= 2 else 'a string'}, "
                f"not {type(self.cdc_position).__name__}"
            )

    def to_metadata(self) -> dict[bytes, bytes]:
        """The schema metadata, keys in a fixed order, values canonical JSON or text."""
        return {
            KEY_FORMAT_VERSION: str(self.format_version).encode(),
            KEY_SQL: self.sql.encode(),
            KEY_SAMPLE_SPEC: dump_json(self.sample_spec),
            KEY_SNAPSHOT_ID: dump_json(self.snapshot_id),
            KEY_CDC_POSITION: dump_json(self.cdc_position),
            KEY_NORM_STATS: dump_json(self.norm_stats),
        }

    @classmethod
    def from_metadata(cls, metadata: dict[bytes, bytes] | None) -> ManifestMeta:
        """Read the record back from schema metadata.

        :raises ManifestFormatError: a key is missing, too large, malformed, or the format
            version is not one of :data:`~manifests.schema.SUPPORTED_VERSIONS`.
        """
        if not metadata or KEY_FORMAT_VERSION not in metadata:
            raise ManifestFormatError("not a Quarry manifest: no quarry.format_version")
        text = metadata[KEY_FORMAT_VERSION].decode(errors="replace")
        version = next((v for v in SUPPORTED_VERSIONS if text == str(v)), None)
        if version is None:
            raise ManifestFormatError(f"unsupported manifest format version {text!r}")
        try:
            return cls(
                sql=_text(metadata, KEY_SQL),
                sample_spec=_json(metadata, KEY_SAMPLE_SPEC, dict),
                snapshot_id=_json(metadata, KEY_SNAPSHOT_ID, (int, str, type(None))),
                cdc_position=_json(metadata, KEY_CDC_POSITION, _position_kind(version)),
                norm_stats=_json(metadata, KEY_NORM_STATS, dict),
                format_version=version,
            )
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ManifestFormatError(f"malformed manifest metadata: {exc}") from exc

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (for ``quarry manifests show`` and the HTTP API)."""
        return {
            "format_version": self.format_version,
            "sql": self.sql,
            "sample_spec": self.sample_spec,
            "snapshot_id": self.snapshot_id,
            "cdc_position": self.cdc_position,
            "norm_stats": self.norm_stats,
        }


def _position_kind(version: int) -> tuple[type, ...]:
    """What ``quarry.cdc_position`` holds in format ``version``: an object from version 2,
    a string (the object's JSON text, as the service wrote it) in version 1."""
    return (dict, type(None)) if version >= 2 else (str, type(None))


def _text(metadata: dict[bytes, bytes], key: bytes) -> str:
    raw = metadata.get(key)
    if raw is None:
        raise ManifestFormatError(f"manifest metadata lacks {key.decode()}")
    if len(raw) > MAX_METADATA_BYTES:
        raise ManifestFormatError(f"manifest metadata {key.decode()} is over the size limit")
    return raw.decode()


def _json(metadata: dict[bytes, bytes], key: bytes, kind: type | tuple[type, ...]) -> Any:
    value = json.loads(_text(metadata, key))
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ManifestFormatError(f"manifest metadata {key.decode()} has the wrong JSON type")
    return value
