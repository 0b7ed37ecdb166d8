"""The forecast benchmark's sets and switches (benchmarks/forecast_data.py, forecast_accuracy.py): the young-task
tuning set stays inside the tuning part, model@param=value builds the candidate, library fits read from an archive."""

from __future__ import annotations

import tarfile
from pathlib import Path

import numpy as np
import pytest

from benchmarks.forecast_accuracy import _factory
from benchmarks.forecast_data import TUNE_SHARE, load, origin_span, young_origins
from benchmarks.forecast_library import cache_path, load_cached


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


def test_model_param_suffix_builds_the_candidate() -> None:
    f = _factory("holt-winters+conformal@cap_trend=0")()
    assert f.name == "holt-winters+conformal" and f.cap_trend == 0.0  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="does not take"):
        _factory("holt-winters@cap_trend=1")()
    two = _factory("holt-winters+conformal@cap_trend=0@window_bins=288")()
    assert two.cap_trend == 0.0 and two.window_bins == 288  # type: ignore[attr-defined]


def test_library_fits_load_from_a_directory_and_an_archive(tmp_path: Path) -> None:
    fits = tmp_path / "fits"
    fits.mkdir()
    res = {"keys": np.array(["a/cpu"]), "mean_steps": np.zeros((1, 12)), "p95": np.ones((1, 12)),
           "p99": np.ones((1, 12)), "seconds": np.array(1.0)}
    np.savez(cache_path(fits, "bitbrains", 1000.0, "sf-autoets"), **res)
    assert load_cached(fits, "bitbrains", 1000.0, "sf-autoets")["p95"].shape == (1, 12)  # type: ignore[index]
    assert load_cached(fits, "bitbrains", 2000.0, "sf-autoets") is None
    archive = tmp_path / "fits.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for p in fits.iterdir():
            tar.add(p, arcname=p.name)
    from benchmarks.forecast_accuracy import open_cache

    z = load_cached(open_cache(str(archive)), "bitbrains", 1000.0, "sf-autoets")
    assert z is not None and float(z["seconds"]) == 1.0
