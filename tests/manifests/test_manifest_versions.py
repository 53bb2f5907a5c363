"""Format versions: this release writes version 2 (``quarry.cdc_position`` a JSON object);
a version-1 manifest written by the code before it (``data/``, made at commit 8521038) still
opens, and its rows and metadata still build the very same bytes, so a rebuild at its pinned
snapshot keeps its ID."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from manifests import (
    FORMAT_VERSION,
    SUPPORTED_VERSIONS,
    ManifestFormatError,
    ManifestIdError,
    ManifestMeta,
    build_manifest,
    manifest_ref,
    open_manifest,
)

V1_ID = "5987829e1f326344a8a562a58c833c950dff8153b53e1d7d4b44b0a9baa6ea21"
V1_PATH = Path(__file__).parent / "data" / f"{V1_ID}.arrow"


def test_this_release_writes_version_2_with_the_position_as_one_object(
    make_table, meta: ManifestMeta, out_dir: Path
) -> None:
    assert FORMAT_VERSION == 2 and SUPPORTED_VERSIONS == (1, 2)
    info = build_manifest(make_table([1, 2]), meta, out_dir)
    raw = ipc.open_file(pa.memory_map(str(info.path))).schema.metadata
    assert raw[b"quarry.format_version"] == b"2"
    assert json.loads(raw[b"quarry.cdc_position"]) == meta.cdc_position  # no JSON in a string
    assert open_manifest(info.path).meta == meta


def test_a_version_1_manifest_still_opens() -> None:
    manifest = open_manifest(V1_PATH)
    assert manifest.verify() == V1_ID
    assert manifest.meta.format_version == 1
    position = manifest.cdc_position
    assert isinstance(position, str)  # version 1: the object's JSON text
    assert json.loads(position)["lsn_text"] == "0/16B3748"
    assert manifest.snapshot_id == 42
    assert (manifest.num_rows, manifest.num_samples) == (4, 10)
    assert manifest.extra_columns == ["task", "success"]
    assert manifest.field_stats("state") is not None


def test_a_version_1_manifest_rebuilds_byte_identical(tmp_path: Path) -> None:
    original = open_manifest(V1_PATH)
    rebuilt = build_manifest(original.table(), original.meta, tmp_path, batch_rows=3)
    assert rebuilt.manifest_id == V1_ID
    assert rebuilt.path.read_bytes() == V1_PATH.read_bytes()


def test_each_version_records_the_position_as_its_own_kind() -> None:
    text = '{"lsn": 1}'
    assert ManifestMeta(sql="q", cdc_position=text, format_version=1).cdc_position == text
    assert ManifestMeta(sql="q", cdc_position={"lsn": 1}).format_version == 2
    with pytest.raises(ManifestFormatError, match="JSON object"):
        ManifestMeta(sql="q", cdc_position=text)
    with pytest.raises(ManifestFormatError, match="a string"):
        ManifestMeta(sql="q", cdc_position={"lsn": 1}, format_version=1)


def test_a_version_2_file_holding_a_position_string_is_refused(
    make_table, meta: ManifestMeta, out_dir: Path
) -> None:
    table = open_manifest(build_manifest(make_table([1]), meta, out_dir).path).table()
    metadata = {**table.schema.metadata, b"quarry.cdc_position": b'"0/16B3748"'}
    path = out_dir / "mixed.arrow"
    with ipc.new_file(str(path), table.schema.with_metadata(metadata)) as writer:
        writer.write_table(table.replace_schema_metadata(metadata))
    with pytest.raises(ManifestFormatError, match="wrong JSON type"):
        open_manifest(path)


@pytest.mark.parametrize(
    ("text", "ref"),
    [(V1_ID, V1_ID), (V1_ID[:8], V1_ID[:8]), (" " + V1_ID[:12].upper() + "\n", V1_ID[:12])],
)
def test_an_id_or_a_prefix_of_8_hex_digits_names_a_manifest(text: str, ref: str) -> None:
    assert manifest_ref(text) == ref


@pytest.mark.parametrize("text", ["", V1_ID[:7], "latest", "../etc/passwd", V1_ID + "0"])
def test_anything_else_is_not_a_manifest_id(text: str) -> None:
    with pytest.raises(ManifestIdError, match="at least 8"):
        manifest_ref(text)
