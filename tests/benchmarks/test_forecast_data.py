"""benchmarks.forecast_data: the forecast benchmark's sets (the young-task tuning set stays inside the tuning part)."""

from __future__ import annotations

import numpy as np

from benchmarks.forecast_data import TUNE_SHARE, load, origin_span, young_origins


def test_young_set_is_starts_and_restarts_inside_the_tuning_part() -> None:
    series = load("google2019", "tune", None)
    young = young_origins(series)
    first, last = origin_span(series)
    cut = first + TUNE_SHARE * (last - first)
    assert max(young) + 3600.0 < cut  # every origin's horizon ends before the reporting part
    keys = {k for ks in young.values() for k in ks}
    # the three tasks that start in the tuning part, the two that restart there, and the collection that starts
    assert {"google/113812204462/11", "google/113812204462/46", "google/113812204462/61",
            "google/113812204462/75", "google/113812204462/82"} <= keys
    assert sum(k.startswith("google/382417448240/") for k in keys) == 10
    assert not any(k.startswith("google/399444405700/") for k in keys)  # starts in the reporting part
    by_key = {s.key: s for s in series if s.resource == "memory"}
    for o, ks in young.items():
        for k in ks:
            t = by_key[k].t
            before = t[t < o]
            starts = np.concatenate([before[:1], before[1:][np.diff(before) > 3600.0]])
            age = o - starts[-1]
            assert 3600.0 - 1.0 <= age <= 60 * 3600.0 + 1.0
