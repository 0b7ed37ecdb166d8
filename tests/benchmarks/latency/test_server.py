"""benchmarks.latency.server: the extender under test in its own process, and its own numbers read off its
/metrics between two scrapes (server_delta, server_p99), driven by benchmarks.latency.measure's closed loop."""

from __future__ import annotations

import math
import random
from collections.abc import Iterator

import numpy as np
import pytest

from benchmarks.latency.cluster import OPENB_NODES, OPENB_PODS, Cluster, make_cluster, pending_pod, read_csv
from benchmarks.latency.matrix import build_bodies
from benchmarks.latency.measure import Row, drive, fmt_row, pct
from benchmarks.latency.server import DEFAULT_MAX_BODY, HTTP_TIMEOUT_S, Server, server_delta, server_p99
from benchmarks.prometheus_text import histogram

pytestmark = pytest.mark.skipif(not OPENB_NODES.exists(), reason=f"no openb trace at {OPENB_NODES}")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Cluster, list[dict]]]:
    tmp = tmp_path_factory.mktemp("latency-server")
    cluster = make_cluster(10, seed=5)
    snap = tmp / "cluster.json"
    snap.write_bytes(cluster.snapshot())
    pods = [pending_pod(random.Random(2), cluster.catalog, k, read_csv(OPENB_PODS)) for k in range(2)]
    server = Server(snap, None, DEFAULT_MAX_BODY, tmp / "server.log")
    try:
        server.wait_ready()
        yield server, cluster, pods
    finally:
        server.stop()


def test_the_servers_own_numbers_count_exactly_the_calls_between_two_scrapes(served: tuple[Server, Cluster, list[dict]]) -> None:
    server, cluster, pods = served
    bodies = build_bodies(cluster, "names", "all", "filter", pods, server.port, 2)
    before = server.metrics()
    samples = drive(server.port, "filter", bodies, 25, 30.0, HTTP_TIMEOUT_S)
    after = server.metrics()
    assert len(samples.lat) == 25 and not samples.errors
    calls = histogram(after, "kso_extender_request_duration_seconds", before, verb="filter")
    assert calls.count == 25  # every call, once
    mean_ms, errors = server_delta(before, after, "filter")
    assert errors == 0 and 0 < mean_ms < 1e3 * float(np.mean(samples.lat))  # inside the server: less than a round trip
    p99 = server_p99(before, after, "filter")
    assert 0 < p99 and math.isfinite(p99)
    assert math.isnan(server_delta(after, after, "filter")[0]) and math.isnan(server_p99(after, after, "prioritize"))
    lat = np.array(samples.lat) * 1e3
    row = Row(10, "names", "filter", "all", 10, 1.0, 1.0, lat.size, pct(lat, 50), pct(lat, 99), float(lat.max()), 1.0,
              mean_ms, p99, 0, "")
    assert fmt_row(row).split()[:4] == ["10", "names", "filter", "all"]
