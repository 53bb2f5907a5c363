"""Many slow queries at once never block the health routes or the metrics scrape.

More runaway queries than the service has worker threads (40) run until their timeout
stops them; meanwhile ``/healthz``, ``/readyz`` and ``/metrics`` must answer at once.
"""

from __future__ import annotations

import re
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from quarry.stack.lifecycle import Stack

# ~10^8 md5 calls over the corpus's statistics rows: runs far past QUERY_TIMEOUT_S.
RUNAWAY = (
    "SELECT count(*) AS n FROM episode_stats a, episode_stats b, episode_stats c, "
    "episode_stats d WHERE md5(a.field || b.field || c.field || d.dim) < 'a'"
)
QUERIES = 48
QUERY_TIMEOUT_S = 8.0
# A probe that waited for a query (or for a worker thread) would take seconds: the probes
# start a second after the queries, which end after QUERY_TIMEOUT_S. A probe that is only
# slowed by the queries' CPU load (two cores here) takes a fraction of that.
PROBE_LIMIT_S = QUERY_TIMEOUT_S / 2
TYPICAL_PROBE_S = 0.5


def in_flight(metrics: str) -> float:
    match = re.search(r"^quarry_http_requests_in_flight (\S+)$", metrics, re.MULTILINE)
    assert match is not None
    return float(match.group(1))


@pytest.mark.slow
def test_runaway_queries_never_block_health_checks(corpus: Stack) -> None:
    url = corpus.status().service_url
    token = corpus.paths.admin_token.read_text().strip()
    headers = {"Authorization": f"Bearer {token}"}
    body = {"sql": RUNAWAY, "timeout_s": QUERY_TIMEOUT_S}

    def run_query() -> int:
        return httpx.post(f"{url}/v1/sql", json=body, headers=headers, timeout=120).status_code

    probes: list[tuple[str, float, int]] = []
    busiest = 0.0
    with ThreadPoolExecutor(QUERIES) as pool, httpx.Client(base_url=str(url)) as probe:
        futures = [pool.submit(run_query) for _ in range(QUERIES)]
        time.sleep(1.0)
        while not all(f.done() for f in futures):
            for path in ("/healthz", "/readyz", "/metrics"):
                started = time.monotonic()
                response = probe.get(path, timeout=30)
                probes.append((path, time.monotonic() - started, response.status_code))
                if path == "/metrics":
                    busiest = max(busiest, in_flight(response.text))
            time.sleep(0.1)
        statuses = [f.result() for f in futures]
    assert statuses == [408] * QUERIES
    assert busiest >= QUERIES // 2, "the probes did not overlap the queries"
    slow = [(path, round(s, 3)) for path, s, _ in probes if s > PROBE_LIMIT_S]
    assert slow == []
    assert statistics.median(s for _, s, _ in probes) < TYPICAL_PROBE_S
    assert {status for _, _, status in probes} == {200}
