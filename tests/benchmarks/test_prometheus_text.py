"""benchmarks.prometheus_text: a scrape parsed by prometheus_client.parser, a histogram's change between two
scrapes, and its one quantile rule checked against the real Prometheus's ``histogram_quantile`` on the same
exposition (scraped by the ``prometheus`` binary, tests/support/prom_server.py)."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest, start_http_server

from benchmarks.prometheus_text import EMPTY, histogram, metric_sum, parse_metrics
from kso.core.net import free_port
from tests.support import prom_server

BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1)


def registry_with(observations: dict[str, list[float]], errors: float = 0.0) -> CollectorRegistry:
    """A registry holding a histogram with these observations per verb, and an error counter."""
    registry = CollectorRegistry()
    h = Histogram("kso_test_seconds", "per-verb seconds", ["verb"], buckets=BUCKETS, registry=registry)
    c = Counter("kso_test_errors", "errors", ["kind"], registry=registry)
    for verb, values in observations.items():
        for v in values:
            h.labels(verb).observe(v)
    c.labels('a,b="c"').inc(errors)
    return registry


def exposition(observations: dict[str, list[float]], errors: float = 0.0) -> str:
    """The text prometheus_client exposes for a histogram with these observations per verb."""
    return generate_latest(registry_with(observations, errors)).decode()


def test_series_are_summed_by_the_labels_asked_for() -> None:
    scrape = parse_metrics(exposition({"filter": [0.002, 0.003], "bind": [0.02]}, errors=2))
    assert metric_sum(scrape, "kso_test_seconds_count") == 3
    assert metric_sum(scrape, "kso_test_seconds_count", verb="filter") == 2
    assert scrape.total("kso_test_seconds_count", verb="nope") == 0
    assert scrape.total("kso_test_errors_total", kind='a,b="c"') == 2  # commas and quotes inside a label value


def test_a_histogram_between_two_scrapes_counts_only_what_came_between() -> None:
    before = parse_metrics(exposition({"filter": [0.002, 0.003]}))
    after = parse_metrics(exposition({"filter": [0.002, 0.003, 0.004, 0.02, 0.2], "bind": [0.5]}))
    got = histogram(after, "kso_test_seconds", before, verb="filter")
    assert got.count == 3 and got.sum == pytest.approx(0.224)
    assert got.buckets == ((0.001, 0.0), (0.005, 1.0), (0.01, 1.0), (0.05, 2.0), (0.1, 2.0), (math.inf, 3.0))
    assert got.mean == pytest.approx(0.224 / 3)
    assert got.quantile(0.99) == 0.1  # the rank in the +Inf bucket: the highest finite bound
    nothing = histogram(after, "kso_test_seconds", after, verb="filter")
    assert nothing.count == 0 and math.isnan(nothing.mean) and math.isnan(nothing.quantile(0.5))
    assert math.isnan(histogram(EMPTY, "kso_test_seconds").summary_ms()["p99_ms"])


@pytest.fixture
def scraped(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(exposition text, URL of a real Prometheus that scrapes it every second)."""
    bins = prom_server.prometheus_binaries()
    assert bins is not None, "prometheus/promtool not installed (apt-get install -y prometheus)"
    registry = registry_with({"filter": [0.0004, 0.002, 0.003, 0.004, 0.007, 0.03, 0.08],
                              "bind": [0.0015, 0.006, 0.009, 0.04, 0.3, 0.6]})
    target, _ = start_http_server(free_port(), "127.0.0.1", registry)  # prometheus_client's own exposition server
    port = free_port()
    config = ("global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: t\n    static_configs:\n"
              f"      - targets: ['127.0.0.1:{target.server_port}']\n")
    proc = prom_server.launch(bins[0], tmp_path, port, config)
    try:
        yield generate_latest(registry).decode(), f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)
        target.shutdown()
        target.server_close()


def promql(url: str, query: str) -> float | None:
    result = requests.get(f"{url}/api/v1/query", params={"query": query}, timeout=5).json()["data"]["result"]
    return float(result[0]["value"][1]) if result else None


def test_quantiles_are_the_real_prometheus_histogram_quantile(scraped: tuple[str, str]) -> None:
    text, url = scraped
    deadline = time.monotonic() + 60
    while promql(url, "sum(kso_test_seconds_count)") is None:
        assert time.monotonic() < deadline, "Prometheus never scraped the target"
        time.sleep(0.5)
    scrape = parse_metrics(text)
    for labels, selector in (({}, ""), ({"verb": "filter"}, '{verb="filter"}'), ({"verb": "bind"}, '{verb="bind"}')):
        ours = histogram(scrape, "kso_test_seconds", **labels)
        for q in (0.05, 0.25, 0.5, 0.9, 0.99):
            theirs = promql(url, f"histogram_quantile({q}, sum by (le) (kso_test_seconds_bucket{selector}))")
            assert theirs is not None and ours.quantile(q) == pytest.approx(theirs, rel=1e-9), (labels, q)
