"""Pinned parameters of ``benchmarks/curation.py`` (written into its JSON line)."""

from __future__ import annotations

from dataclasses import dataclass

from episodes.spec import SampleSpec
from episodes.synth import FleetConfig

BUCKET = "quarry-bench"
REAL_PREFIX = f"{BUCKET}/episodes"
BULK_PREFIX = f"s3://{BUCKET}/bulk"
MB = 1e6

# One curation for every size: a robot's clean, successful pick-and-place episodes from two
# operators. About 1% of the bulk rows (1/6 robots x 1/3 tasks x 1/2 success x 92% clean x
# 2/5 operators); the synthetic fleet's own rates differ a little.
CURATION_SQL = (
    "SELECT id, robot_id, task_id, operator FROM episodes "
    "WHERE robot_id = 'koi-02' AND task_id = 'pick_place_cube' AND success "
    "AND len(quality_flags) = 0 AND operator IN ('op-ana', 'op-ben')"
)
SPEC = SampleSpec(frames_per_camera=2, state_history=8, action_horizon=16, anchor_stride=5)
# Small containers: the walk's cost is its round trips, not its bytes. (At least 3 s long:
# the fleet's fault injector needs room for a 1-2 s fault span.)
FLEET = FleetConfig(
    width=32, height=24, cameras=(("front", 10.0),), duration_s=(3.0, 4.0), fault_rate=0.08
)


@dataclass(frozen=True)
class Params:
    """Sizes and repeats. ``sql_rows`` are the episode-table sizes SQL alone is timed at
    (real episodes plus bulk rows); the last one is the bulk size (43M at full size)."""

    episodes: int
    sql_rows: tuple[int, ...]
    sql_repeats: int = 3
    walk_workers: int = 1  # the file-walking builder visits one episode after another
    ingest_workers: int = 2
    bulk_chunk_rows: int = 4_000_000
    bulk_flag_rate: float = 0.08
    curation_timeout_s: float = 120.0  # report slow runs as times, not as 408s
    cdc_maintenance_s: float = 86_400.0  # no compaction passes over the bulk table mid-run
    seed: int = 11

    @property
    def bulk_rows(self) -> int:
        return self.sql_rows[-1]


FULL = Params(episodes=2_000, sql_rows=(10_000, 100_000, 43_000_000))
SMALL = Params(episodes=400, sql_rows=(10_000, 100_000, 1_000_000), sql_repeats=2)
