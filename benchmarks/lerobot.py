"""LeRobot in and out: ingest throughput of the fixture datasets and the round trip's PSNR.

Starts its own Postgres (pgserver wheel) in a temp folder with the operational schema, then
ingests tests/data/lerobot/rig2 and rig3 (written by lerobot's own writer) episode by episode
through the code `quarry ingest lerobot` runs (read, decode AV1, re-encode H.264, QC,
statistics, register), `--repeat` times into fresh databases, and reports episodes and hours
of recording per minute. Then it exports each rig's episodes with `loader.export` (both
codecs) and reads them back with lerobot's `LeRobotDataset` in the peer venv
(tests/data/lerobot/read_back.py), reporting the lowest frame PSNR against the source's
frames. Prints one JSON line.

    python benchmarks/lerobot.py [--small] [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from episodes.lerobot.ingest import LeRobotOptions, ingest_episode  # noqa: E402
from episodes.lerobot.source import LeRobotSource  # noqa: E402
from loader.export import ExportOptions, export_lerobot  # noqa: E402
from manifests.build import build_manifest  # noqa: E402
from manifests.manifest import open_manifest  # noqa: E402
from manifests.meta import ManifestMeta  # noqa: E402
from quarry.stack.migrations import apply_migrations  # noqa: E402
from quarry.stack.paths import StatePaths  # noqa: E402
from quarry.stack.postgres import EmbeddedPostgres  # noqa: E402

FIXTURES = ROOT / "tests" / "data" / "lerobot"
RIGS = ("rig2", "rig3")


def ingest_all(
    dsn: str, objects: Path
) -> tuple[float, int, float, dict[str, list[dict[str, Any]]]]:
    """Ingest every fixture episode; seconds, episodes, recorded seconds, rows per rig."""
    rows: dict[str, list[dict[str, Any]]] = {}
    episodes, recorded = 0, 0.0
    started = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        for rig in RIGS:
            source = LeRobotSource(str(FIXTURES / rig))
            rows[rig] = []
            for meta in source.episodes:
                result = ingest_episode(conn, objects, source, meta, LeRobotOptions())
                assert result.created, "a fresh database registers every episode"
                episodes += 1
                recorded += meta.length / source.fps
                rows[rig].append({"episode_id": result.episode_id, "uri": result.uri})
    return time.perf_counter() - started, episodes, recorded, rows


def manifest_of(dsn: str, rows: list[dict[str, Any]], folder: Path) -> Path:
    """A manifest of the rig's registered episodes, whole (no curation needed here)."""
    with psycopg.connect(dsn) as conn:
        found = conn.execute(
            "SELECT id::text, uri, start_ns, end_ns, size_bytes, sha256 FROM episodes "
            "WHERE id = ANY(%s::uuid[])",
            ([r["episode_id"] for r in rows],),
        ).fetchall()
    names = ("episode_id", "uri", "start_ns", "end_ns", "size_bytes", "sha256")
    table = pa.Table.from_pylist(
        [dict(zip(names, r, strict=True)) | {"num_samples": 1} for r in found]
    )
    return build_manifest(table, ManifestMeta(sql="SELECT * FROM episodes"), folder).path


def round_trip(manifest: Path, rig: str, codec: str, out: Path) -> dict[str, Any]:
    export_lerobot(open_manifest(manifest), out, ExportOptions(codec=codec))
    done = subprocess.run(
        [
            "bash",
            str(ROOT / "benchmarks/peers_bench/run.sh"),
            "python",
            str(FIXTURES / "read_back.py"),
            f"{out}={FIXTURES / rig}",
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
        check=True,
    )
    (record,) = json.loads(done.stdout.strip().splitlines()[-1]).values()
    compared = record["compared"]
    exact = all(c["states_equal"] and c["actions_equal"] and c["task_equal"] for c in compared)
    worst = min(db for c in compared for db in c["min_psnr_db"].values())
    return {"exact_states_actions_tasks": exact, "min_psnr_db": round(worst, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="CI size: one ingest, H.264 only")
    parser.add_argument("--repeat", type=int, default=3, help="ingests into fresh databases")
    args = parser.parse_args()
    repeat = 1 if args.small else args.repeat
    codecs = ("h264",) if args.small else ("h264", "av1")
    with tempfile.TemporaryDirectory(prefix="quarry-bench-lerobot-") as tmp:
        root = Path(tmp)
        paths = StatePaths.at(root / "state")
        paths.ensure()
        server = EmbeddedPostgres(paths)
        server.start()
        try:
            timings = []
            for n in range(repeat):
                database = f"quarry_{n}"
                server.ensure_database(database)
                apply_migrations(server.dsn(database), ROOT / "sql" / "postgres")
                seconds, episodes, recorded, rows = ingest_all(
                    server.dsn(database), root / f"objects{n}"
                )
                timings.append(seconds)
            best = min(timings)
            trips = {}
            for rig in RIGS:
                manifest = manifest_of(server.dsn("quarry_0"), rows[rig], root / "manifests")
                for codec in codecs:
                    trips[f"{rig}/{codec}"] = round_trip(
                        manifest, rig, codec, root / f"{rig}-{codec}"
                    )
        finally:
            server.stop()
    print(
        json.dumps(
            {
                "benchmark": "lerobot",
                "params": {"fixtures": list(RIGS), "repeat": repeat, "codecs": list(codecs)},
                "episodes": episodes,
                "recorded_s": round(recorded, 2),
                "ingest_s": round(best, 3),
                "episodes_per_min": round(episodes / best * 60, 1),
                "hours_per_min": round(recorded / 3600 / best * 60, 4),
                "recorded_s_per_wall_s": round(recorded / best, 2),
                "round_trip": trips,
            }
        )
    )


if __name__ == "__main__":
    main()
