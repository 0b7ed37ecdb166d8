"""benchmarks.scheduler_throughput.latency_summary: a scheduler's cycle and binding histograms read off one scrape
(every label set summed; benchmarks.prometheus_text's quantile rule)."""

from __future__ import annotations

import math

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from benchmarks.scheduler_throughput import latency_summary


def test_count_mean_and_quantiles_of_every_profile_together() -> None:
    registry = CollectorRegistry()
    h = Histogram("scheduler_scheduling_attempt_duration_seconds", "attempts", ["profile", "result"],
                  buckets=(0.001, 0.002, 0.004, 0.008), registry=registry)
    for v in (0.0005, 0.0015, 0.0015, 0.003):
        h.labels("default-scheduler", "scheduled").observe(v)
    h.labels("other", "unschedulable").observe(0.006)
    text = generate_latest(registry).decode()
    got = latency_summary(text, "scheduler_scheduling_attempt_duration_seconds")
    assert got["count"] == 5 and got["mean_ms"] == pytest.approx(2.5)
    # rank 2.5 of 5: in (1 ms, 2 ms], which holds observations 2 and 3 -> 1 + 1 * (2.5 - 1) / 2 ms
    assert got["p50_ms"] == pytest.approx(1.75)
    assert got["p99_ms"] == pytest.approx(4 + 4 * (4.95 - 4) / 1)
    assert latency_summary(text, "no_such_histogram") == {"count": 0}
    assert not math.isnan(got["p99_ms"])
