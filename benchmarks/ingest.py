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
   handles worst: at the pinned one batch per worker, one worker gets the shorter half of
   the recordings and the other the longer half.
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
load average and the cores, and the machine's own two-core ceiling
(``machine_scaling_2_cores``: the throughput of the same pure-Python work on both cores at
once over that on core 0 alone, before and after the passes; ``scaling_vs_machine`` is
``scaling_2_workers`` over their mean).

    python benchmarks/ingest.py [--small] [--episodes N] [--keep]
        [--async-commit] [--poll-s S] [--frame WxH] [--duration-scale X]
        [--batches-per-worker N]    (the last five: diagnosis, see --help)
"""

from __future__ import annotations

import argparse
import json
import math
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
from pipeline.config import PipelineConfig  # noqa: E402
from pipeline.engine import SYSTEM_SCHEMA, migrate_system  # noqa: E402
from pipeline.job import STEPS, Job, WorkerPaths  # noqa: E402
from pipeline.packing import in_order, makespan  # noqa: E402
from pipeline.runs import (  # noqa: E402
    client,
    enqueue_batches,
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

#: A recording's fixed cost in packing (setting pipeline.fixed_cost), fitted from the
#: per-recording times of the one-worker pass (the line's ``cost_fit``, docs/benchmarks.md).
FIXED_COST = 0.15

#: Frame size of the recordings' cameras (width, height): what a recording's steps cost. The
#: durable records are a fixed cost per step and per recording (docs/benchmarks.md), so the
#: smaller the frames, the larger their share. QVGA, below a fleet's cameras (DROID stores
#: 320x180 per camera, LeRobot's ALOHA sets 640x480); 192x144 until 2026-12-04.
FRAME = (320, 240)
FULL: dict[str, Any] = {
    "episodes": 48,
    # One batch per worker: the corpus split once over the workers, the case packing is
    # for (with many batches per worker the queue's dispatch evens the loads out as well:
    # the line's binpack_model_batches_per_worker). 2 until 2026-12-04.
    "batches_per_worker": 1,
    "fixed_cost": FIXED_COST,
    "frame": FRAME,
}
SMALL: dict[str, Any] = {**FULL, "episodes": 24}
#: The pinned skew: durations log-normal (median, sigma), clipped, seeded; long ones first.
#: Robot episodes, not clips: the synthetic fleet's 10-20 s episodes sit in its middle, the
#: long-horizon tail runs to a minute (mean about 11 s). Until 2026-12-04 the median was 3 s
#: (clipped to 1.5-24 s), recordings of 0.1-1.4 s of processing at 192x144, on which DBOS's
#: fixed cost per recording (about 45 ms on a quiet core, 120 ms under load:
#: ``benchmarks/dbos_records.py``) and its background polls were about 15 % of the work;
#: ``--batches-per-worker`` names the flags that run that workload again.
SKEW: dict[str, Any] = {
    "distribution": "lognormal",
    "median_s": 8.0,
    "sigma": 0.9,
    "min_s": 4.0,
    "max_s": 64.0,
    "seed": 17,
    "arrival": "shortest first",
}
#: The pinned step granularity: what one durable step is, what one worker takes at a time.
GRANULARITY = {
    "steps_per_recording": len(("fetch", "decode", "transform", "encode", "qc", "stats")) + 2,
    "step": "one DBOS step per pipeline step (fetch ... register), output recorded",
    "batch": "one batch workflow per worker at a time, its recordings child workflows",
    "cameras": "front 30 Hz and wrist 15 Hz, JPEG in the recording",
}
TARGETS = {
    "scaling_2_workers": (">=", 1.7),
    "binpack_speedup": (">=", 1.3),
    "durability_overhead": ("<=", 1.05),
    "resume_lost": ("==", 0),
    "resume_duplicated": ("==", 0),
}
#: One thread for everything numeric in every process the benchmark starts.
ONE_THREAD = {k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}


def durations(n: int) -> list[float]:
    rng = np.random.default_rng(SKEW["seed"])
    raw = rng.lognormal(np.log(float(SKEW["median_s"])), float(SKEW["sigma"]), n)
    clipped = np.clip(raw, float(SKEW["min_s"]), float(SKEW["max_s"]))
    return sorted(round(float(d), 2) for d in clipped)


def write_recordings(
    folder: Path, objects: Path, n: int, frame: tuple[int, int]
) -> tuple[list[Any], float]:
    """``n`` recordings in ``folder``, landed; their sources and total hours."""
    folder.mkdir(parents=True)
    mapping = mapping_from_dict(ROS2_MAPPING)
    sources = []
    for i, duration in enumerate(durations(n)):
        config = FleetConfig(
            width=frame[0],
            height=frame[1],
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
        if os.environ.get("BENCH_PROFILE"):  # diagnosis: each worker under cProfile
            prof = str(self.root / f"{executor_id}-{len(self.procs)}.prof")
            command = [sys.executable, "-m", "cProfile", "-o", prof, *command[1:]]
        proc = subprocess.Popen(
            pinned(core_index, command), cwd=ROOT, env=self.env, stdout=log, stderr=log
        )
        self.procs.append(proc)
        return proc

    def pause(self) -> None:
        """SIGSTOP the workers: an idle worker polls the queue, which costs its core CPU
        (measured: about 9 % of it at a 0.1 s poll), so the plain pass on that core runs
        with the worker stopped (SIGCONT: :meth:`resume`)."""
        for proc in self.procs:
            proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        for proc in self.procs:
            proc.send_signal(signal.SIGCONT)

    def pids(self) -> list[int]:
        return [proc.pid for proc in self.procs if proc.poll() is None]

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


# A fixed amount of pure-Python work; prints its own seconds.
_SPIN = (
    "import time\nt = time.perf_counter()\ns = 0\n"
    "for i in range(15_000_000): s += i\nprint(time.perf_counter() - t)"
)


def machine_scaling() -> float:
    """This machine's own ceiling for ``scaling_2_workers``: the throughput of the same
    CPU-bound work on cores 0 and 1 at once over its throughput on core 0 alone (where the
    one-worker pass runs), the median of three turns. Two vCPUs that share a physical core,
    or a host that slows one of them, give well under 2, and cap the pipeline's figure too."""

    def spin(*core_indexes: int) -> list[float]:
        procs = [
            subprocess.Popen(pinned(i, [sys.executable, "-c", _SPIN]), stdout=subprocess.PIPE)
            for i in core_indexes
        ]
        return [float(p.communicate()[0]) for p in procs]

    turns = []
    for _ in range(3):  # taking turns: one spin swings by 20 % here
        (alone,) = spin(0)
        turns.append(alone * sum(1 / seconds for seconds in spin(0, 1)))
    return round(float(np.median(turns)), 3)


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
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:  # one connection for the polls
        while done_count(conn, run_id) < n:
            time.sleep(0.5)
    state = wait_run(dsn, run_id, timeout_s=0)
    if state.counts() != {"SUCCESS": n}:
        raise SystemExit(f"run failed: {state.counts()} {state.errors}")
    return last_finished(dsn, run_id) - started


def done_count(conn: Any, run_id: str) -> int:
    """Finished recordings' workflows of the run, read off DBOS's table with one query on
    the open connection ``conn`` (a DBOS client, or a connection, per poll would cost the
    measured cores more)."""
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


def plain_pass(root: Path, dsn: str, batches: list[list[Job]], warm: list[Job]) -> dict[str, Any]:
    """The same steps without DBOS: one process pinned to core 0 (the one-worker pass's
    layout) runs ``warm`` (untimed: the imports and first calls a worker paid in its warm-up
    batch), then ``batches`` in their order, each recording's steps as its workflow calls
    them; the seconds of the batches."""
    spec = root / "plain-jobs.json"
    spec.write_text(
        json.dumps(
            {
                "warm": [job.to_dict() for job in warm],
                "batches": [[job.to_dict() for job in batch] for batch in batches],
            }
        )
    )
    command = [sys.executable, str(Path(__file__).resolve()), "--plain", str(spec)]
    env = {**os.environ, **ONE_THREAD, "BENCH_DSN": dsn, "BENCH_STATE": str(root)}
    done = subprocess.run(
        pinned(0, command), cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"plain pass failed: {done.stderr[-2000:]}")
    out: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return out


def plain_recording(
    job: Job, paths: WorkerPaths, conn: Any, step_s: dict[str, float] | None = None
) -> bool:
    """One recording's steps without DBOS: what ``pipeline.workflow.process_recording`` and
    its step wrappers call for profile ``full``, in order, with the same arguments (each
    step's ``steps.log`` line and its ``*_here`` check included), each step's output kept
    in memory instead of recorded; ``conn`` the process's one connection, as a worker
    thread's (``pipeline.workflow._connection``)."""
    wid = job.workflow_id
    clock: dict[str, Any] = {"at": time.monotonic(), "step": ""}

    def enter(step: str) -> None:
        now = time.monotonic()
        if step_s is not None and clock["step"]:
            name = str(clock["step"])
            step_s[name] = step_s.get(name, 0.0) + now - float(clock["at"])
        clock.update(at=now, step=step)
        if step:
            with (paths.folder(wid) / "steps.log").open("a") as log:
                log.write(step + "\n")

    store = paths.storage_options
    enter("fetch")
    source_path = steps.fetch(job, paths, wid)
    enter("decode")
    decoded = steps.decode(job, paths, wid, steps.source_here(job, paths, wid, source_path))
    enter("transform")
    transformed = steps.transform(job, paths, wid, steps.decoded_here(job, paths, wid, decoded))
    enter("encode")
    container = steps.encode(job, paths, steps.episode_here(job, paths, wid, transformed))
    enter("qc")
    quality = steps.qc(container, steps.episode_here(job, paths, wid, transformed), None, store)
    enter("stats")
    dims = steps.stats(container, store)
    enter("enrich")
    labels = steps.enrich(container, store)
    enter("register")
    changed = steps.register(conn, job, container, quality, dims, labels, store)
    enter("")
    steps.clean(paths, wid)
    return changed


def run_plain(spec: Path) -> None:
    """``--plain``: the warm-up jobs, then each batch's jobs (:func:`plain_recording`)."""
    import psycopg

    dsn, state = os.environ["BENCH_DSN"], StatePaths.at(Path(os.environ["BENCH_STATE"]))
    paths = WorkerPaths(state.objects, state.pipeline_work)
    data = json.loads(spec.read_text())
    conn = psycopg.connect(dsn, autocommit=True)
    for job in data["warm"]:
        plain_recording(Job.from_dict(job), paths, conn)
    step_s: dict[str, float] = {}
    took: dict[str, float] = {}
    cpu = time.process_time()
    started = time.monotonic()
    for batch in data["batches"]:
        for item in batch:
            job = Job.from_dict(item)
            begun = time.monotonic()
            plain_recording(job, paths, conn, step_s)
            took[job.source.episode_id] = time.monotonic() - begun
    seconds = time.monotonic() - started
    cpu = time.process_time() - cpu
    line = {"seconds": seconds, "cpu_s": cpu, "steps": step_s, "took": took}
    print(json.dumps(line))


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
    with psycopg.connect(dsn, autocommit=True) as conn:
        while True:
            done = done_count(conn, run_id)
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


def in_steps(dsn: str, run_id: str) -> dict[str, float]:
    """Seconds the run's recordings' workflows spent inside each step (DBOS's records of
    each step's start and end, which take in DBOS's check for a recorded output before the
    step and the write of its output after), by step name, and ``"all"``; the rest of the
    workflows' time is DBOS's bookkeeping around the steps (the child workflow's start and
    end)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT function_name, sum(completed_at_epoch_ms - started_at_epoch_ms)"
            f" FROM {SYSTEM_SCHEMA}.operation_outputs WHERE workflow_uuid LIKE %s"
            " GROUP BY function_name",
            (f"{run_id}:%",),
        ).fetchall()
    out = {str(name): float(ms or 0) / 1000 for name, ms in rows}
    return {**out, "all": sum(out.values())}


def shuffled_model(jobs: list[Job], took: dict[str, float], batch: int, fixed: float) -> float:
    """Makespan on two workers of a seeded shuffle of the arrival cut in order, over the
    packed batches', from each recording's measured time."""
    order = np.random.default_rng(int(SKEW["seed"])).permutation(len(jobs))
    shuffled = [jobs[i] for i in order]

    def span(batches: list[list[Job]]) -> float:
        return makespan([[took[j.source.episode_id] for j in b] for b in batches], workers=2)

    return span(in_order(shuffled, batch)) / span(plan_batches(jobs, batch, fixed))


def met(figures: dict[str, Any]) -> dict[str, bool]:
    out = {}
    for key, (op, bound) in TARGETS.items():
        value = figures[key]
        out[key] = {">=": value >= bound, "<=": value <= bound, "==": value == bound}[op]
    return out


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", action="store_true", help="a quick run (a few minutes)")
    parser.add_argument("--episodes", type=int, help="recordings (default 48, --small 24)")
    parser.add_argument("--keep", action="store_true", help="keep the temp folder")
    parser.add_argument(
        "--async-commit",
        action="store_true",
        help="diagnosis only: Postgres with synchronous_commit off (commits not waiting for "
        "the disk), to see how much of durability_overhead is the commits' flushes",
    )
    parser.add_argument(
        "--poll-s",
        type=float,
        default=PipelineConfig().polling_interval_s,
        help="the workers' queue polling interval, s (default: the setting's default, "
        "pipeline.polling_interval_s)",
    )
    parser.add_argument(
        "--frame", help="diagnosis only: the cameras' frame size WxH instead of the pinned one"
    )
    parser.add_argument(
        "--duration-scale",
        type=float,
        help="diagnosis only: the recordings' durations (the skew's median and clip bounds) "
        "times this factor, to see how the fixed durable cost per recording weighs on "
        "longer recordings (the line's params.skew shows what ran)",
    )
    parser.add_argument(
        "--batches-per-worker",
        type=int,
        help="diagnosis only: batches per worker instead of the pinned 1 (the workload before "
        "2026-12-04: --episodes 32 --frame 192x144 --duration-scale 0.375 "
        "--batches-per-worker 2 --poll-s 0.1)",
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
    if args.frame:
        width, _, height = args.frame.partition("x")
        params["frame"] = (int(width), int(height))
    if args.batches_per_worker:
        params["batches_per_worker"] = args.batches_per_worker
    if args.duration_scale:
        for key in ("median_s", "min_s", "max_s"):
            SKEW[key] = round(float(SKEW[key]) * args.duration_scale, 3)
    n = int(params["episodes"])
    # A backfill's layout: few long-running batches per worker (pinned), so the packing,
    # not the queue's dispatch of many small batches, evens the workers' loads.
    params["batches"] = 2 * int(params["batches_per_worker"])
    params["batch_episodes"] = math.ceil(n / params["batches"])
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
        sources, hours = write_recordings(root / "recordings", paths.objects, n, params["frame"])
        postmaster = (paths.pgdata / "postmaster.pid").read_text().split("\n", 1)[0]
        ceiling = [machine_scaling()]
        figures = measure(root / "state", dsn, workers, sources, hours, params, int(postmaster))
        ceiling.append(machine_scaling())
        figures["machine_scaling_2_cores"] = ceiling  # before and after the passes
        figures["scaling_vs_machine"] = round(
            figures["scaling_2_workers"] / float(np.mean(ceiling)), 3
        )
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
    root: Path,
    dsn: str,
    workers: Workers,
    sources: list[Any],
    hours: float,
    params: dict[str, Any],
    server_pid: int,
) -> dict[str, Any]:
    version = iter(range(10, 100))
    per = int(params["batch_episodes"])
    fixed = float(params["fixed_cost"])
    warm = sources[:2]  # two short recordings: the plain process's warm-up
    plain_pass(root, dsn, [jobs_of(sources, next(version))], [])  # page cache, registers
    load_start = os.getloadavg()[0]

    def packed(v: int) -> list[list[Job]]:
        return plan_batches(jobs_of(sources, v), per, fixed)

    def cpu() -> dict[str, float]:
        return cpu_seconds(workers.pids(), server_pid)

    workers.start(0, "bench-1")
    wait_started(workers, dsn, sources, next(version), 1)
    # One worker and plain, interleaved twice: each figure is the faster of its two passes
    # (the others' load on this machine only ever slows a pass down).
    t1s: list[float] = []
    plains: list[dict[str, Any]] = []
    cpu1: list[dict[str, float]] = []
    cpu_plain: list[dict[str, float]] = []
    for _ in range(2):
        jobs = jobs_of(sources, next(version))  # arrival order
        before = cpu()
        t1s.append(durable_pass(dsn, plan_batches(jobs, per, fixed)))
        cpu1.append(cpu_delta(before, cpu()))
        if len(t1s) == 1:
            first = jobs
        before = cpu()
        workers.pause()
        try:
            warm_jobs = jobs_of(warm, next(version))
            plains.append(plain_pass(root, dsn, packed(next(version)), warm_jobs))
        finally:
            workers.resume()
        cpu_plain.append({**cpu_delta(before, cpu()), "plain": round(plains[-1]["cpu_s"], 2)})
    jobs = first
    took = {e: end - start for e, (start, end) in times(dsn, jobs[0].run_id).items()}
    busy = sum(took.values())
    stepping = in_steps(dsn, jobs[0].run_id)
    t1 = min(t1s)
    plain = min(plains, key=lambda x: float(x["seconds"]))
    t_plain = float(plain["seconds"])

    workers.start(1, "bench-2")
    wait_started(workers, dsn, sources, next(version), 2)
    before = cpu()
    t2 = durable_pass(dsn, packed(next(version)))
    cpu2 = cpu_delta(before, cpu())
    arrival = jobs_of(sources, next(version))  # arrival order: shortest first
    before = cpu()
    t2u = durable_pass(dsn, in_order(arrival, per))
    cpu2u = cpu_delta(before, cpu())
    workers.stop()

    resume_version = next(version)
    resume = resume_pass(workers, dsn, packed(resume_version), resume_version)
    workers.stop()

    fit = cost_fit(jobs, took)
    fit_plain = cost_fit(jobs, {k: float(v) for k, v in plain["took"].items()})

    def ids_of(batches: list[list[Job]]) -> list[list[str]]:
        return [[j.source.episode_id for j in b] for b in batches]

    ids, ids_u = ids_of(plan_batches(jobs, per, fixed)), ids_of(in_order(jobs, per))

    def measured(batches: list[list[str]]) -> list[float]:
        return [round(sum(took[e] for e in b), 2) for b in batches]

    def span(batches: list[list[str]]) -> float:
        return makespan([[took[e] for e in b] for b in batches], workers=2)

    def model(per_worker: int) -> float:
        cut = math.ceil(len(jobs) / (2 * per_worker))
        return span(ids_of(in_order(jobs, cut))) / span(ids_of(plan_batches(jobs, cut, fixed)))

    names = [*STEPS, "all"]
    plain_steps = {**plain["steps"], "all": sum(plain["steps"].values())}
    return {
        "episode_hours_per_worker_hour": round(hours / (t1 / 3600), 2),
        "scaling_2_workers": round(t1 / t2, 3),
        "binpack_speedup": round(t2u / t2, 3),
        "durability_overhead": round(t1 / t_plain, 3),
        # The same ratio from each recording's time in the first one-worker pass, dispatched
        # as the queue does (pipeline.packing.makespan): what packing gives without the noise,
        # at the pinned batches per worker, and at 1-4 batches per worker.
        "binpack_speedup_model": round(span(ids_u) / span(ids), 3),
        "binpack_model_batches_per_worker": {k: round(model(k), 3) for k in (1, 2, 3, 4)},
        "binpack_speedup_shuffled_model": round(shuffled_model(jobs, took, per, fixed), 3),
        # The recordings' workflows alone (their start to end, summed) over the plain pass:
        # durability_overhead less the waits for a worker's next poll between batches.
        "durability_overhead_workflows": round(busy / t_plain, 3),
        **resume,
        "seconds": {
            "one_worker": [round(t, 2) for t in t1s],
            "plain": [round(float(x["seconds"]), 2) for x in plains],
            "two_workers_packed": round(t2, 2),
            "two_workers_arrival_order": round(t2u, 2),
            "one_worker_recordings_busy": round(busy, 2),
        },
        # Each step's seconds summed over the recordings: the first one-worker pass (DBOS's
        # records of the step's start and end) and the faster plain pass (the same calls).
        "step_seconds": {
            n: [round(stepping.get(n, 0.0), 2), round(float(plain_steps.get(n, 0.0)), 2)]
            for n in names
        },
        # CPU seconds the workers and Postgres (server and backends) used in a pass, and the
        # plain process in its own: where the time goes (the machine's other load is not in
        # these).
        "cpu_seconds": {
            "one_worker": cpu1,
            "plain": cpu_plain,
            "two_workers_packed": cpu2,
            "two_workers_arrival_order": cpu2u,
        },
        "cost_fit": fit,
        "cost_fit_plain": fit_plain,
        "batches": {
            "count": len(ids),
            "packed_mb": mb(jobs, ids),
            "packed_measured_s": measured(ids),
            "arrival_order_mb": mb(jobs, ids_u),
            "arrival_order_measured_s": measured(ids_u),
        },
        "load_avg_at_start": round(load_start, 2),
    }


def mb(jobs: list[Job], batches: list[list[str]]) -> list[float]:
    size = {j.source.episode_id: j.source.size_bytes for j in jobs}
    return [round(sum(size[e] for e in b) / 1e6, 2) for b in batches]


def cost_fit(jobs: list[Job], took: dict[str, float]) -> dict[str, Any]:
    """Least squares of each recording's measured time (its workflow's start to end, one
    worker) on its bytes, ``seconds = a + b * MB``, and the fixed cost it implies in
    :func:`pipeline.packing.costs`'s units (``a`` over the mean recording's ``b * MB``)."""
    x = np.array([j.source.size_bytes / 1e6 for j in jobs])
    y = np.array([took[j.source.episode_id] for j in jobs])
    slope, intercept = np.polyfit(x, y, 1)
    predicted = intercept + slope * x
    r2 = 1 - float(np.sum((y - predicted) ** 2)) / float(np.sum((y - y.mean()) ** 2))
    return {
        "seconds_fixed": round(float(intercept), 4),
        "seconds_per_mb": round(float(slope), 4),
        "r2": round(r2, 3),
        "implied_fixed_cost": round(float(intercept) / (float(slope) * float(x.mean())), 3),
        "mb_range": [round(float(x.min()), 2), round(float(x.max()), 2)],
        "seconds_range": [round(float(y.min()), 3), round(float(y.max()), 3)],
    }


def cpu_seconds(pids: list[int], server_pid: int) -> dict[str, float]:
    """CPU seconds so far of the worker processes and of Postgres (the postmaster, its
    children alive now, and the children it reaped: the connections' backends)."""
    tick = os.sysconf("SC_CLK_TCK")

    def stat(pid: int) -> list[str]:
        try:
            text = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return []
        return text.rsplit(")", 1)[1].split()

    def own(fields: list[str]) -> float:
        return (int(fields[11]) + int(fields[12])) / tick if fields else 0.0

    server = stat(server_pid)
    postgres = own(server) + ((int(server[13]) + int(server[14])) / tick if server else 0.0)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = stat(int(entry.name))
            if fields and int(fields[1]) == server_pid:
                postgres += own(fields)
    return {"workers": sum(own(stat(pid)) for pid in pids), "postgres": postgres}


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: round(after[k] - before[k], 2) for k in before}


if __name__ == "__main__":
    main()
