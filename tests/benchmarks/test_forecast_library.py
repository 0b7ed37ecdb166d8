"""benchmarks.forecast_library: the library models' fits, cached per set and model, read back from a directory and
from an archive (benchmarks.forecast_accuracy.open_cache)."""

from __future__ import annotations

import tarfile
from pathlib import Path

import numpy as np

from benchmarks.forecast_library import cache_path, load_cached


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
