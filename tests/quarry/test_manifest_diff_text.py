"""The readable form of a manifest diff (``quarry manifests diff`` without ``--json``), for
metadata the stack test does not reach: a version-1 manifest's CDC position (JSON text) next
to a version-2 one (an object), a sample spec key by key, normalization of another shape."""

from __future__ import annotations

import json

from manifests.diff import ManifestDiff
from quarry.commands._manifest_diff import SHOWN_IDS, describe_diff

POSITION = {"lsn": 23, "lsn_text": "0/17", "tx_id": 9, "slot": "quarry"}
STATS = {"count": 4, "sum": [4.0, 8.0], "sum_sq": [4.0, 20.0]}


def test_positions_of_both_versions_read_as_lsns() -> None:
    diff = ManifestDiff(
        added=[],
        removed=[],
        changed=[],
        unchanged=3,
        metadata={
            "format_version": (1, 2),
            "cdc_position": (json.dumps(POSITION), {**POSITION, "lsn_text": "0/18"}),
        },
    )
    text = describe_diff("a" * 64, "b" * 64, diff)
    assert "format_version:\n  1 -> 2" in text
    assert "cdc_position:\n  lsn 0/17, tx 9 -> lsn 0/18, tx 9" in text


def test_spec_keys_ids_and_stats_of_another_shape() -> None:
    ids = [f"e{i}" for i in range(SHOWN_IDS + 2)]
    diff = ManifestDiff(
        added=ids,
        removed=[],
        changed=[],
        unchanged=0,
        metadata={
            "sample_spec": ({"action_horizon": 16, "cameras": []}, {"action_horizon": 8}),
            "norm_stats": ({"state": STATS}, {"state": {**STATS, "sum": [4.0], "sum_sq": [4.0]}}),
        },
        rows=(0, 7),
        samples=(10, 5),
    )
    lines = describe_diff("a" * 64, "b" * 64, diff).splitlines()
    assert f"  added    {', '.join(ids[:SHOWN_IDS])} and 2 more" in lines
    assert "  action_horizon: 16 -> 8" in lines
    assert "  cameras: [] -> (none)" in lines
    assert "  state: 2 dimensions over 4 steps -> 1 dimension over 4 steps" in lines
    assert next(line for line in lines if line.startswith("samples")).split() == [
        "samples",
        "10",
        "5",
        "-5",
        "(-50.0%)",
    ]
    assert next(line for line in lines if line.startswith("rows")).split()[-1] == "+7"
