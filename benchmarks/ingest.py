"""Ingest pipeline benchmark: durable workflows on DBOS, real ``quarry worker`` processes.

Starts its own Postgres (pgserver wheel) in a temp folder, writes synthetic ROS 2 recordings
(MCAP) of skewed durations (a pinned log-normal) into a folder, lands them in the landing
area (profile ``full``'s path) and runs them through the pipeline's steps several times, each
pass stamping a new pipeline version (so each pass does the same work: a new container
version of every episode):

1. plain: the same steps (``pipeline.steps``) called one after the other in one process,
   without DBOS (warm-up, not reported);
2. durable, one worker: the same recordings as bin-packed batches on the queue -> T1;
3. plain again -> T_plain;  ``durability_overhead`` = T1 / T_plain;
4. durable, two workers -> T2 (bin-packed);  ``scaling_2_workers`` = T1 / T2;
5. durable, two workers, the same number of batches cut in arrival order -> T2u;
   ``binpack_speedup`` = T2u / T2. The pinned arrival lands the long recordings last (a
   long-horizon task's recordings upload together, at the end), the case arrival order
   handles worst: its last batch, the longest recordings, starts when the others are done.
   ``binpack_speedup_shuffled_model`` is the same ratio for a seeded shuffle of the arrival,
   modelled (``pipeline.packing.makespan``) from the per-recording times of pass 2;
6. durable, one worker SIGKILLed once half the recordings registered, then restarted with
   its executor ID (DBOS recovers its workflows): ``resume_lost`` / ``resume_duplicated``
   count the episodes with 0 / more than 1 container of that pass's version.

Every worker, and the plain process, is pinned to its own core with ``taskset`` (worker k
on core k mod the cores there are) with one thread for the encoder, the decoder and the
numeric libraries, so the scaling figure measures the queue, not threading. Timing starts
when the run is enqueued (workers already up, idle on the queue) and stops when its last
workflow finished. Prints one JSON line with the params, the figures, ``targets_met``, the
load average and the cores.

    python benchmarks/ingest.py [--small] [--episodes N] [--keep] [--async-commit]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from episodes.foreign import file_sha256, land_recording, recording_id  # noqa: E402
from episodes.mapping import mapping_from_dict  # noqa: E402
from episodes.synth import FleetConfig  # noqa: E402
from pipeline import steps  # noqa: E402
from pipeline.engine import SYSTEM_SCHEMA, migrate_system  # noqa: E402
from pipeline.job import Job, WorkerPaths  # noqa: E402
from pipeline.packing import in_order, makespan  # noqa: E402
from pipeline.runs import (  # noqa: E402
    client,
    enqueue_batches,
    job_item,
    new_run_id,
    plan_batches,
    wait_run,
)
from quarry.stack.migrations import apply_migrations  # noqa: E402
from quarry.stack.paths import StatePaths  # noqa: E402
from quarry.stack.postgres import EmbeddedPostgres  # noqa: E402

# The recordings' writer is the test suite's (a ROS 2 robot: two JPEG cameras, joints,
# gripper, command), so the benchmark ingests what the tests check.
from tests.episodes.foreign_files import ROS2_MAPPING, source_episode, write_ros2  # noqa: E402

FULL: dict[str, Any] = {"episodes": 48, "batch_episodes": 4, "fixed_cost": 1.0}
SMALL: dict[str, Any] = {"episodes": 32, "batch_episodes": 4, "fixed_cost": 1.0}
# fixed_cost (setting pipeline.fixed_cost): at these frame sizes a recording's durable records
# take about what its steps' work takes (durability_overhead ~2 on this machine), so a
# recording costs 1 average recording's bytes whatever its size.
#: The pinned skew: durations log-normal (median, sigma), clipped, seeded; long ones first.
SKEW: dict[str, Any] = {
    "distribution": "lognormal",
    "median_s": 3.0,
    "sigma": 0.9,
    "min_s": 1.5,
    "max_s": 24.0,
    "seed": 17,
    "arrival": "shortest first",
}
#: The pinned step granularity: what one durable step is, what one worker takes at a time.
GRANULARITY = {
    "steps_per_recording": len(("fetch", "decode", "transform", "encode", "qc", "stats")) + 2,
    "step": "one DBOS step per pipeline step (fetch ... register), output recorded",
    "batch": "one batch workflow per worker at a time, its recordings child workflows",
    "frames": "128x96, cameras front 30 Hz and wrist 15 Hz",
}
TARGETS = {
    "scaling_2_workers": (">=", 1.7),
    "binpack_speedup": (">=", 1.3),
    "durability_overhead": ("<=", 1.05),
    "resume_lost": ("==", 0),
    "resume_duplicated": ("==", 0),
}
#: Frame size of the recordings' cameras: what one step costs (the durable steps' overhead
#: is per step, so smaller frames raise its share).
FRAME = (128, 96)
#: A recording's fixed cost in packing (set from the params in main).
FIXED = 0.0
#: One thread for everything numeric in every process the benchmark starts.
ONE_THREAD = {k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}


def durations(n: int) -> list[float]:
    rng = np.random.default_rng(SKEW["seed"])
    raw = rng.lognormal(np.log(float(SKEW["median_s"])), float(SKEW["sigma"]), n)
    clipped = np.clip(raw, float(SKEW["min_s"]), float(SKEW["max_s"]))
    return sorted(round(float(d), 2) for d in clipped)


def write_recordings(folder: Path, objects: Path, n: int) -> tuple[list[Any], float]:
    """``n`` recordings in ``folder``, landed; their sources and total hours."""
    folder.mkdir(parents=True)
    mapping = mapping_from_dict(ROS2_MAPPING)
    sources = []
    for i, duration in enumerate(durations(n)):
        config = FleetConfig(
            width=FRAME[0],
            height=FRAME[1],
            duration_s=(duration, duration),
            cameras=(("front", 30.0), ("wrist", 15.0)),
        )
        path = write_ros2(folder / f"rec-{i:04d}.mcap", source_episode(seed=100 + i, config=config))
        digest = file_sha256(path)
        sources.append(land_recording(objects, path, digest, recording_id(digest), mapping))
    return sources, sum(durations(n)) / 3600


def cores() -> list[int]:
    return sorted(os.sched_getaffinity(0))


def pinned(core_index: int, command: list[str]) -> list[str]:
    available = cores()
    taskset = shutil.which("taskset")
    if taskset is None:
        raise SystemExit("taskset not found (util-linux): the benchmark pins each worker")
    return [taskset, "-c", str(available[core_index % len(available)]), *command]


class Workers:
    def __init__(self, root: Path, dsn: str, poll_s: float) -> None:
        self.root, self.dsn = root, dsn
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("QUARRY_")},
            **ONE_THREAD,
            "QUARRY_STATE_DIR": str(root),
            "QUARRY_SOURCE_DSN": dsn,
            "QUARRY_PIPELINE__POLLING_INTERVAL_S": str(poll_s),
        }
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, core_index: int, executor_id: str) -> subprocess.Popen[bytes]:
        log = (self.root / f"{executor_id}.log").open("ab")
        command = [sys.executable, "-m", "quarry", "worker", "--executor-id", executor_id]
        proc = subprocess.Popen(
            pinned(core_index, command), cwd=ROOT, env=self.env, stdout=log, stderr=log
        )
        self.procs.append(proc)
        return proc

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs = []


def jobs_of(sources: list[Any], version: int) -> list[Job]:
    run_id = new_run_id()
    return [Job(run_id, "full", source, version) for source in sources]


def wait_started(workers: Workers, dsn: str, sources: list[Any], version: int, n: int) -> None:
    """Run one tiny warm-up batch per worker so each has launched DBOS and polls the queue."""
    jobs = jobs_of(sources[-n:], version)
    enqueue_batches(dsn, [[job] for job in jobs])
    state = wait_run(dsn, jobs[0].run_id, timeout_s=300, poll_s=0.1)
    if state.counts() != {"SUCCESS": n}:
        raise SystemExit(f"warm-up failed: {state}")


def durable_pass(dsn: str, batches: list[list[Job]]) -> float:
    """Seconds from enqueueing ``batches`` to the last recording's workflow finishing (read
    off DBOS's records: the poll's period does not count)."""
    started = time.time()
    enqueue_batches(dsn, batches)
    run_id = batches[0][0].run_id
    n = sum(len(b) for b in batches)
    while done_count(dsn, run_id) < n:
        time.sleep(0.5)
    state = wait_run(dsn, run_id, timeout_s=0)
    if state.counts() != {"SUCCESS": n}:
        raise SystemExit(f"run failed: {state.counts()} {state.errors}")
    return last_finished(dsn, run_id) - started


def done_count(dsn: str, run_id: str) -> int:
    """Finished recordings' workflows of the run, read off DBOS's table with one query (a
    DBOS client per poll would cost the measured cores more)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            f"SELECT count(*) FROM {SYSTEM_SCHEMA}.workflow_status WHERE workflow_uuid LIKE %s"
            " AND status IN ('SUCCESS', 'ERROR', 'CANCELLED')",
            (f"{run_id}:%",),
        ).fetchone()
    return int(row[0]) if row else 0


def last_finished(dsn: str, run_id: str) -> float:
    return max(times(dsn, run_id).values(), key=lambda t: t[1])[1]


def times(dsn: str, run_id: str) -> dict[str, tuple[float, float]]:
    """Each recording's workflow: (created, updated) Unix seconds, by episode ID."""
    dbos = client(dsn)
    try:
        found = dbos.list_workflows(workflow_id_prefix=f"{run_id}:", load_input=False)
    finally:
        dbos.destroy()
    return {
        w.workflow_id.split(":", 1)[1]: ((w.created_at or 0) / 1000, (w.updated_at or 0) / 1000)
        for w in found
    }


def plain_pass(root: Path, dsn: str, jobs: list[Job]) -> float:
    """The same steps without DBOS, in a process of its own pinned to core 0."""
    spec = root / "plain-jobs.json"
    spec.write_text(json.dumps([job.to_dict() for job in jobs]))
    command = [sys.executable, str(Path(__file__).resolve()), "--plain", str(spec)]
    env = {**os.environ, **ONE_THREAD, "BENCH_DSN": dsn, "BENCH_STATE": str(root)}
    done = subprocess.run(
        pinned(0, command), cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"plain pass failed: {done.stderr[-2000:]}")
    return float(json.loads(done.stdout.splitlines()[-1])["seconds"])


def run_plain(spec: Path) -> None:
    """``--plain``: each job's steps called in order, as the workflow calls them."""
    import psycopg

    dsn, state = os.environ["BENCH_DSN"], StatePaths.at(Path(os.environ["BENCH_STATE"]))
    paths = WorkerPaths(state.objects, state.pipeline_work / "plain")
    jobs = [Job.from_dict(d) for d in json.loads(spec.read_text())]
    started = time.monotonic()
    for job in jobs:
        wid = job.workflow_id
        source_path = steps.fetch(job)
        decoded = steps.decode(job, paths, wid, source_path)
        transformed = steps.transform(job, paths, wid, decoded)
        container = steps.encode(job, paths, transformed)
        quality = steps.qc(container, transformed, None)
        dims = steps.stats(container)
        labels = steps.enrich(container)
        with psycopg.connect(dsn, autocommit=True) as conn:
            steps.register(conn, job, container, quality, dims, labels)
    print(json.dumps({"seconds": time.monotonic() - started}))


def resume_pass(
    workers: Workers, dsn: str, batches: list[list[Job]], version: int
) -> dict[str, Any]:
    """One worker SIGKILLed once half the recordings registered, restarted with its ID."""
    import psycopg

    victim = workers.start(0, "bench-resume")
    ids = [job.source.episode_id for batch in batches for job in batch]
    run_id = batches[0][0].run_id
    enqueue_batches(dsn, batches)
    deadline = time.monotonic() + 3600
    while True:
        done = done_count(dsn, run_id)
        if done >= len(ids) // 2 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=30)
    killed_after = done
    workers.start(0, "bench-resume")
    state = wait_run(dsn, run_id, timeout_s=3600, poll_s=0.1)
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows: dict[str, int] = dict(
            conn.execute(
                "SELECT episode_id::text, count(*) FROM episode_containers"
                " WHERE pipeline_version = %s GROUP BY episode_id",
                (version,),
            ).fetchall()
        )
    return {
        "resume_lost": sum(1 for eid in ids if rows.get(eid, 0) == 0),
        "resume_duplicated": sum(1 for eid in ids if rows.get(eid, 0) > 1),
        "resume_killed_after": killed_after,
        "resume_states": state.counts(),
    }


def in_steps(dsn: str, run_id: str) -> float:
    """Seconds the run's recordings' workflows spent inside their steps (DBOS's records of
    each step's start and end); the rest of their time is DBOS's bookkeeping around them."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT sum(completed_at_epoch_ms - started_at_epoch_ms)"
            f" FROM {SYSTEM_SCHEMA}.operation_outputs WHERE workflow_uuid LIKE %s",
            (f"{run_id}:%",),
        ).fetchone()
    return float(row[0] or 0) / 1000 if row else 0.0


def shuffled_model(jobs: list[Job], took: dict[str, float], batch: int) -> float:
    """Makespan on two workers of a seeded shuffle of the arrival cut in order, over the
    packed batches', from each recording's measured time."""
    order = np.random.default_rng(int(SKEW["seed"])).permutation(len(jobs))
    shuffled = [jobs[i] for i in order]

    def span(batches: list[list[Job]]) -> float:
        return makespan([[took[j.source.episode_id] for j in b] for b in batches], workers=2)

    return span(in_order(shuffled, batch)) / span(plan_batches(jobs, batch, FIXED))


def met(figures: dict[str, Any]) -> dict[str, bool]:
    out = {}
    for key, (op, bound) in TARGETS.items():
        value = figures[key]
        out[key] = {">=": value >= bound, "<=": value <= bound, "==": value == bound}[op]
    return out


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", action="store_true", help="a quick run (a few minutes)")
    parser.add_argument("--episodes", type=int, help="recordings (default 48, --small 32)")
    parser.add_argument("--keep", action="store_true", help="keep the temp folder")
    parser.add_argument(
        "--async-commit",
        action="store_true",
        help="diagnosis only: Postgres with synchronous_commit off (commits not waiting for "
        "the disk), to see how much of durability_overhead is the commits' flushes",
    )
    parser.add_argument(
        "--poll-s", type=float, default=0.1, help="the workers' queue polling interval, s"
    )
    parser.add_argument("--plain", type=Path, help=argparse.SUPPRESS)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    if args.plain is not None:
        run_plain(args.plain)
        return
    params = dict(SMALL if args.small else FULL)
    if args.episodes:
        params["episodes"] = args.episodes
    n, batch = int(params["episodes"]), int(params["batch_episodes"])
    global FIXED
    FIXED = float(params["fixed_cost"])
    root = Path(tempfile.mkdtemp(prefix="quarry-ingest-bench-"))
    paths = StatePaths.at(root / "state")
    paths.ensure()
    server = EmbeddedPostgres(paths)
    server.start()
    workers = Workers(paths.root, server.dsn("quarry"), args.poll_s)
    try:
        server.ensure_database("quarry")
        dsn = server.dsn("quarry")
        apply_migrations(dsn, ROOT / "sql" / "postgres")
        if args.async_commit:
            import psycopg

            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("ALTER SYSTEM SET synchronous_commit = off")
                conn.execute("SELECT pg_reload_conf()")
        migrate_system(dsn)
        sources, hours = write_recordings(root / "recordings", paths.objects, n)
        figures = measure(root / "state", dsn, workers, sources, hours, batch)
    finally:
        workers.stop()
        server.stop()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    figures["targets_met"] = met(figures)
    line = {
        "benchmark": "ingest",
        "small": args.small,
        "synchronous_commit": not args.async_commit,
        "poll_s": args.poll_s,
        "params": {**params, "skew": SKEW, "granularity": GRANULARITY},
        "episode_hours": round(hours, 4),
        **figures,
        "load_avg": [round(x, 2) for x in os.getloadavg()],
        "cores": len(cores()),
    }
    print(json.dumps(line))


def measure(
    root: Path, dsn: str, workers: Workers, sources: list[Any], hours: float, batch: int
) -> dict[str, Any]:
    version = iter(range(10, 100))
    plain_pass(root, dsn, jobs_of(sources, next(version)))  # warm-up, registers
    load_start = os.getloadavg()[0]

    workers.start(0, "bench-1")
    wait_started(workers, dsn, sources, next(version), 1)
    jobs = jobs_of(sources, next(version))
    t1 = durable_pass(dsn, plan_batches(jobs, batch, FIXED))
    took = {eid: end - start for eid, (start, end) in times(dsn, jobs[0].run_id).items()}
    busy = sum(took.values())
    stepping = in_steps(dsn, jobs[0].run_id)
    model = shuffled_model(jobs, took, batch)
    t_plain = plain_pass(root, dsn, jobs_of(sources, next(version)))

    workers.start(1, "bench-2")
    wait_started(workers, dsn, sources, next(version), 2)
    t2 = durable_pass(dsn, plan_batches(jobs_of(sources, next(version)), batch, FIXED))
    unpacked = jobs_of(sources, next(version))  # arrival order: longest first
    t2u = durable_pass(dsn, in_order(unpacked, batch))
    workers.stop()

    resume_version = next(version)
    resume = resume_pass(
        workers, dsn, plan_batches(jobs_of(sources, resume_version), batch, FIXED), resume_version
    )
    workers.stop()
    return {
        "episode_hours_per_worker_hour": round(hours / (t1 / 3600), 2),
        "scaling_2_workers": round(t1 / t2, 3),
        "binpack_speedup": round(t2u / t2, 3),
        "durability_overhead": round(t1 / t_plain, 3),
        "binpack_speedup_shuffled_model": round(model, 3),
        # The recordings' workflows alone (their start to end, summed) over the plain pass:
        # durability_overhead less the waits for a worker's next poll between batches.
        "durability_overhead_workflows": round(busy / t_plain, 3),
        **resume,
        "seconds": {
            "one_worker": round(t1, 2),
            "plain": round(t_plain, 2),
            "two_workers_packed": round(t2, 2),
            "two_workers_arrival_order": round(t2u, 2),
            "one_worker_recordings_busy": round(busy, 2),
            "one_worker_inside_steps": round(stepping, 2),
        },
        "batches": {
            "packed_mb": [
                round(sum(job_item(j).size_bytes for j in b) / 1e6, 2)
                for b in plan_batches(jobs, batch, FIXED)
            ],
            "arrival_order_mb": [
                round(sum(job_item(j).size_bytes for j in b) / 1e6, 2)
                for b in in_order(jobs, batch)
            ],
        },
        "load_avg_at_start": round(load_start, 2),
    }


if __name__ == "__main__":
    main()
