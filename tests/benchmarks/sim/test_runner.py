"""The runner's executors: Ray tasks give the same cells as local worker processes."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from benchmarks.sim.runner import Cell, run_cells

ROOT = Path(__file__).resolve().parents[3]
TINY = [Cell("google-embedded", 40, 0.5, 0, 0.6, "default"), Cell("google-embedded", 40, 0.5, 0, 0.6, "oracle")]


def _comparable(row: dict[str, Any]) -> dict[str, Any]:
    """A row without its timings (wall-clock seconds differ run to run)."""
    return {k: ({e: v for e, v in row["extra"].items() if not e.endswith("_s")} if k == "extra" else v)
            for k, v in row.items() if k != "wall_s"}


def test_unknown_executor_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="executor"):
        run_cells(TINY, tmp_path, executor="dask")


def test_ray_executor_gives_the_same_metrics_as_local_processes(tmp_path: Path) -> None:
    try:
        import ray
    except ModuleNotFoundError:
        if os.environ.get("KSO_REQUIRE_RAY"):
            raise
        pytest.skip("ray is not installed (pip install 'kube-safe-optimizer[ray]'); KSO_REQUIRE_RAY makes this a failure")
    local = run_cells(TINY, tmp_path / "local", jobs=1)
    # a local Ray cluster whose workers import this checkout's code
    ray.init(num_cpus=2, include_dashboard=False, runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}},
             log_to_driver=False)
    try:
        remote = run_cells(TINY, tmp_path / "ray", executor="ray")
    finally:
        ray.shutdown()
    assert not any("error" in r for r in local + remote)
    key = lambda r: r["policy"]  # noqa: E731
    assert [_comparable(r) for r in sorted(remote, key=key)] == [_comparable(r) for r in sorted(local, key=key)]
    assert len((tmp_path / "ray" / "cells.jsonl").read_text().splitlines()) == 2
