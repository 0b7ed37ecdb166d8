"""Prometheus text exposition as the benchmarks read it (kso's /metrics, kube-apiserver's, kube-scheduler's):
one scrape parsed by ``prometheus_client.parser`` into samples, the sum of a metric's matching series, and
a histogram's change between two scrapes (calls, mean and quantiles).

One quantile rule for every benchmark, PromQL's ``histogram_quantile``: the rank q * count falls in the
first bucket whose cumulative count reaches it, and the value is interpolated linearly inside that bucket
(the lowest bucket starts at 0); a rank in the +Inf bucket gets the highest finite bound. So a number here
is the one a Prometheus dashboard shows for the same interval, at bucket resolution.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

Labels = frozenset[tuple[str, str]]


@dataclass(frozen=True, slots=True)
class Scrape:
    """One scrape: (sample name, its labels) -> value."""

    samples: dict[tuple[str, Labels], float]

    def total(self, name: str, **labels: str) -> float:
        """The sum of sample ``name`` over the series whose labels include ``labels``."""
        want = set(labels.items())
        return sum(v for (n, lab), v in self.samples.items() if n == name and want <= lab)


EMPTY = Scrape({})


def parse_metrics(text: str) -> Scrape:
    """Prometheus text -> Scrape (a ValueError from the parser for text that is not the exposition format)."""
    samples: dict[tuple[str, Labels], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            key = (s.name, frozenset(s.labels.items()))
            samples[key] = samples.get(key, 0.0) + s.value
    return Scrape(samples)


def metric_sum(scrape: Scrape, name: str, **labels: str) -> float:
    """``scrape.total(name, **labels)``: the sum over the series of ``name`` with those labels."""
    return scrape.total(name, **labels)


@dataclass(frozen=True, slots=True)
class HistogramDelta:
    """What a histogram (its series with the chosen labels, summed) recorded between two scrapes: the
    observations, their sum (the histogram's unit, seconds for kso's) and the cumulative bucket counts."""

    count: float
    sum: float
    buckets: tuple[tuple[float, float], ...]  # (upper bound le, cumulative count), le ascending, +Inf last

    @property
    def mean(self) -> float:
        return self.sum / self.count if self.count > 0 else math.nan

    def quantile(self, q: float) -> float:
        """PromQL's histogram_quantile (see the module docstring); NaN without observations."""
        total = self.buckets[-1][1] if self.buckets else 0.0
        if total <= 0:
            return math.nan
        rank = q * total
        prev_le, prev_count = 0.0, 0.0
        for le, count in self.buckets:
            if count >= rank:
                if math.isinf(le):
                    return prev_le
                if count == prev_count:
                    return le
                return prev_le + (le - prev_le) * (rank - prev_count) / (count - prev_count)
            prev_le, prev_count = le, count
        return prev_le

    def summary_ms(self) -> dict[str, float]:
        """calls, mean_ms, p50_ms, p99_ms (for a histogram in seconds)."""
        return {"calls": self.count, "mean_ms": 1e3 * self.mean, "p50_ms": 1e3 * self.quantile(0.5),
                "p99_ms": 1e3 * self.quantile(0.99)}


def histogram(after: Scrape, name: str, before: Scrape = EMPTY, **labels: str) -> HistogramDelta:
    """Histogram ``name`` (its ``_bucket``/``_sum``/``_count`` series whose labels include ``labels``, summed)
    as recorded between ``before`` and ``after`` (everything so far without ``before``)."""
    want = set(labels.items())
    per_le: dict[float, float] = {}
    for (n, lab), v in after.samples.items():
        if n == f"{name}_bucket" and want <= lab:
            le = float(dict(lab)["le"])
            per_le[le] = per_le.get(le, 0.0) + v - before.samples.get((n, lab), 0.0)
    return HistogramDelta(after.total(f"{name}_count", **labels) - before.total(f"{name}_count", **labels),
                          after.total(f"{name}_sum", **labels) - before.total(f"{name}_sum", **labels),
                          tuple(sorted(per_le.items())))
