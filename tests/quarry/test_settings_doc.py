"""docs/settings.md is generated from the settings models and fails this test when stale."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from quarry.settings_doc import PAGE, main, render


def test_the_settings_page_is_current() -> None:
    assert PAGE.read_text() == render(), "docs/settings.md is stale: python -m quarry.settings_doc"


def test_every_setting_has_a_row_with_a_description() -> None:
    rows = [line for line in render().splitlines() if line.startswith("| `")]
    assert len(rows) > 100
    undocumented = [row.split("|")[1].strip() for row in rows if row.endswith("|  |")]
    assert undocumented == []
    names = {row.split("|")[1].strip().strip("`") for row in rows}
    for name in ("QUARRY_SERVICE__PORT", "QUARRY_CURATION__MAX_LAG_S", "QUARRY_SOURCE_DSN"):
        assert name in names
    assert {"QUARRY_WAREHOUSE__CATALOG_DSN", "QUARRY_WAREHOUSE__DSN", "optim.lr"} <= names


def test_check_fails_on_a_stale_page(tmp_path: Path) -> None:
    stale = tmp_path / "settings.md"
    stale.write_text(render() + "| `QUARRY_GONE` | int | `1` | a setting since removed |\n")
    assert main(["--check", "--out", str(stale)]) == 1
    assert main(["--out", str(stale)]) == 0
    assert main(["--check", "--out", str(stale)]) == 0
    done = subprocess.run(
        [sys.executable, "-m", "quarry.settings_doc", "--check"], capture_output=True, check=False
    )
    assert done.returncode == 0, done.stderr
