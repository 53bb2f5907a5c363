"""Rewrite a container with mcap's own reader and writer, to build damaged inputs for tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from mcap.reader import make_reader
from mcap.writer import Writer

EditMessage = Callable[[str, bytes], bytes]


def rewrite(
    src: Path,
    dst: Path,
    *,
    edit: EditMessage | None = None,
    drop: tuple[str, ...] = (),
    encodings: dict[str, str] | None = None,
    schemas: dict[str, bytes] | None = None,
) -> Path:
    """Copy ``src`` to ``dst``: drop topics, edit payloads, or swap encodings and schemas."""
    encodings, schemas = encodings or {}, schemas or {}
    with src.open("rb") as stream:
        reader = make_reader(stream)
        summary = reader.get_summary()
        assert summary is not None
        metadata = list(reader.iter_metadata())
        messages = list(reader.iter_messages(log_time_order=False))
    with dst.open("wb") as out:
        writer = Writer(out)
        writer.start("quarry", "tests")
        ids = {}
        for channel in summary.channels.values():
            if channel.topic in drop:
                continue
            schema = summary.schemas[channel.schema_id]
            data = schemas.get(channel.topic, schema.data)
            schema_id = writer.register_schema(schema.name, schema.encoding, data)
            encoding = encodings.get(channel.topic, channel.message_encoding)
            ids[channel.id] = writer.register_channel(
                channel.topic, encoding, schema_id, channel.metadata
            )
        for record in metadata:
            writer.add_metadata(record.name, record.metadata)
        for _, channel, message in messages:
            if channel.id in ids:
                data = edit(channel.topic, message.data) if edit else message.data
                writer.add_message(
                    ids[channel.id], message.log_time, data, message.publish_time, message.sequence
                )
        writer.finish()  # type: ignore[no-untyped-call]
    return dst
