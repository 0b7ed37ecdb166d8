"""The multi-seed runner behind ``kso bench --scenario``: every (scenario, seed, policy) cell in its own task,
spread over local worker processes (the default) or handed to Ray (``--executor ray``: one task per cell, on
the cluster ``ray.init()`` finds), each cell's metrics written to ``cells.jsonl`` as it finishes (a long run
keeps what it has), then aggregated over seeds with 95% intervals (Student t).

A policy spec is ``name`` or ``name:key=value;key=value``: ``trimaran-tlp:target=80``,
``koordinator:cpu_threshold=85``, ``kso-plan:env=SAFEUTILIZATION=80`` (``env`` takes ``K=V`` pairs joined by
``&``). The spec is the policy's label in every table, so a non-default knob is always visible.
"""

from __future__ import annotations

import json
import math
import multiprocessing as mp
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

SCALAR_METRICS = ("overload_episodes", "overload_node_steps", "unmet_cpu_core_min", "oom_kills", "provisioned_node_hours",
                  "pending_mean", "pending_p95_min", "pods_moved", "ca_evictions", "scheduled", "pods_total", "failed",
                  "pending_end", "scale_ups", "scale_downs", "mean_util_cpu", "wall_s", "overloaded_node_hours",
                  "unmet_cpu_core_hours", "memory_overcommit_tib_hours", "pods_oom_killed", "pod_hours_lost_to_kills",
                  "pending_pod_hours", "pods_never_served", "pod_time_served_pct", "provisioned_core_hours",
                  "provisioned_memory_tib_hours", "mem_pressure_node_hours", "warmup_steps", "overloaded_node_hours_80",
                  "overloaded_node_hours_90", "overloaded_node_hours_100", "memory_over_allocatable_node_hours",
                  "start_latency_p50_s", "start_latency_p99_s", "start_latency_mean_s", "pods_started")
STARTS = ("cold", "warm")  # Cell.start: an empty cluster at step 0, or the warm-up under the default policy


@dataclass(frozen=True)
class Cell:
    scenario: str  # google-limits | google-rightsized | openb | embedded | google-embedded
    nodes: int
    hours: float
    seed: int
    target_load: float
    policy: str  # spec
    start: str = "cold"  # "warm": the default policy (LeastAllocated) schedules the warm-up, then the spec takes over
    autoscale: bool = True  # False: no autoscaler, every node of the scenario for the whole replay (a fixed-size cluster)


def parse_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """``name:key=value;key=value`` -> (name, kwargs); numbers become floats, ``env=VAR=value&VAR=value`` a dict (a
    value may hold "=" and ","). ValueError names what does not follow this grammar."""
    name, _, rest = spec.partition(":")
    if not name.strip():
        raise ValueError(f"policy spec {spec!r}: no policy name before ':'")
    kwargs: dict[str, Any] = {}
    for item in filter(None, rest.split(";")):
        key, eq, value = item.partition("=")
        if not key or not eq:
            raise ValueError(f"policy spec {spec!r}: {item!r} is not key=value")
        if key == "env":
            entries = [kv.partition("=") for kv in value.split("&")]
            bad = next((f"{var}{eq_}{v}" for var, eq_, v in entries if not var or not eq_), None)
            if bad is not None:
                raise ValueError(f"policy spec {spec!r}: env entry {bad!r} is not VARIABLE=value")
            kwargs["env"] = {var: v for var, _, v in entries}
            continue
        try:
            kwargs[key] = float(value)
        except ValueError:
            kwargs[key] = value
    return name, kwargs


HISTORY_ENV = "KSO_BENCH_HISTORY"  # the saved scenario of ``kso bench --prometheus`` (scenario kind "history")


@lru_cache(maxsize=2)
def scenario_for(kind: str, nodes: int, hours: float, seed: int, target_load: float) -> Any:
    from benchmarks.sim.google import build_embedded_google_scenario, build_google_scenario
    from benchmarks.sim.trace import build_scenario

    if kind == "history":
        from benchmarks.sim.prometheus_history import load_scenario

        if not os.environ.get(HISTORY_ENV):
            raise ValueError(f"scenario 'history' needs {HISTORY_ENV}: the .npz that kso bench --prometheus saved")
        return load_scenario(Path(os.environ[HISTORY_ENV]))

    if kind in ("google-limits", "google-rightsized"):
        return build_google_scenario(nodes, hours, seed, target_load, "p90" if kind.endswith("rightsized") else "limit")
    if kind == "google-embedded":
        return build_embedded_google_scenario(hours)
    return build_scenario(kind, nodes, hours, seed, target_load)


def policy_for(spec: str, seed: int) -> Any:
    """The policy a cell's spec names, labelled with the spec. The kso policies other than ``kso`` (kso's default
    configuration: its forecaster's statistics) read the 15-minute window's statistics unless the spec says
    ``stats=``."""
    from benchmarks.sim.policies import make_policy

    name, kwargs = parse_spec(spec)
    if name.startswith("kso") and name != "kso":
        kwargs.setdefault("stats", "window")
    policy = make_policy(name, seed, **kwargs)
    policy.name = spec if ":" in spec else policy.name
    return policy


def run_cell(cell: Cell, progress: Callable[[int, int], None] | None = None) -> tuple[dict[str, Any], Any]:
    """One replay; returns (scalar metrics row, RunMetrics)."""
    import logging

    from benchmarks.sim.engine import Autoscaler, run
    from benchmarks.sim.metrics import compute

    logging.getLogger("kso").setLevel(logging.ERROR)
    scenario = scenario_for(cell.scenario, cell.nodes, cell.hours, cell.seed, cell.target_load)
    policy = policy_for(cell.policy, cell.seed)
    if cell.start not in STARTS:
        raise ValueError(f"start must be one of {', '.join(STARTS)}, not {cell.start!r}")
    warm = policy_for("default", cell.seed) if cell.start == "warm" else None
    m = compute(run(scenario, policy, progress, autoscaler=Autoscaler() if cell.autoscale else None, warm_start=warm))
    row = {"scenario": cell.scenario, "nodes": scenario.n_nodes, "hours": scenario.n_steps * scenario.step_s / 3600,
           "seed": cell.seed, "policy": cell.policy, "start": cell.start, "pool": "autoscaler" if cell.autoscale else "fixed",
           "mode": m.mode, "scenario_name": scenario.name, **{k: float(getattr(m, k)) for k in SCALAR_METRICS},
           "extra": {k: float(v) for k, v in m.extra.items() if isinstance(v, int | float)}}
    return row, m


def _worker(cell: Cell) -> dict[str, Any]:
    t0 = time.perf_counter()
    try:
        row, _ = run_cell(cell)
    except Exception as exc:  # a failed cell is reported, the others go on
        return {"scenario": cell.scenario, "seed": cell.seed, "policy": cell.policy, "error": f"{type(exc).__name__}: {exc}",
                "wall_s": time.perf_counter() - t0}
    return row


EXECUTORS = ("local", "ray")  # where cells run: worker processes here, or Ray tasks (the optional ``ray`` extra)


def _local_rows(cells: Sequence[Cell], jobs: int) -> Iterator[dict[str, Any]]:
    ctx = mp.get_context("fork")
    with ctx.Pool(max(1, jobs)) as pool:
        yield from pool.imap_unordered(_worker, cells, chunksize=1)


def _ray_rows(cells: Sequence[Cell]) -> Iterator[dict[str, Any]]:
    """Each cell a Ray task asking for 1 CPU, on the cluster ``ray.init()`` finds (``RAY_ADDRESS``, else a local one
    started here); rows come back as tasks finish."""
    import ray

    if not ray.is_initialized():
        # a history's saved scenario: the workers load it from the path in the environment (on a cluster, a path
        # every worker sees)
        env = {HISTORY_ENV: os.environ[HISTORY_ENV]} if os.environ.get(HISTORY_ENV) else {}
        ray.init(**({"runtime_env": {"env_vars": env}} if env else {}))
    remote = ray.remote(num_cpus=1)(_worker)
    pending = [remote.remote(c) for c in cells]
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        yield ray.get(done[0])


def run_cells(cells: Sequence[Cell], out: Path, jobs: int = 1, stream: Any = None,
              executor: str = "local") -> list[dict[str, Any]]:
    """Run every cell (``executor``: "local" = ``jobs`` worker processes, "ray" = Ray tasks), writing rows to
    ``out/cells.jsonl`` as they finish (a fresh file); prints one progress line per cell."""
    if executor not in EXECUTORS:
        raise ValueError(f"executor must be one of {', '.join(EXECUTORS)}, not {executor!r}")
    stream = stream or sys.stderr
    out.mkdir(parents=True, exist_ok=True)
    path = out / "cells.jsonl"
    rows: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    # seed by seed (a run stopped early keeps whole seeds), expensive policies first within a seed
    order = sorted(cells, key=lambda c: (c.seed, not c.policy.startswith("kso")))
    source = _ray_rows(order) if executor == "ray" else _local_rows(order, jobs)
    with path.open("w") as f:
        for n, row in enumerate(source, 1):
            rows.append(row)
            f.write(json.dumps(row) + "\n")
            f.flush()
            harm = f"overloaded node-h {row['overloaded_node_hours']:.1f}" if "overloaded_node_hours" in row else \
                f"episodes {row.get('overload_episodes', math.nan):.0f}"
            status = row.get("error") or (f"{harm}, node-h {row.get('provisioned_node_hours', math.nan):.1f}, "
                                          f"OOM kills {row.get('oom_kills', math.nan):.0f}")
            stream.write(f"[{n}/{len(order)}] {time.perf_counter() - t0:7.0f} s  {row['scenario']} seed {row['seed']} "
                         f"{row['policy']}: {status} ({row['wall_s']:.0f} s)\n")
            stream.flush()
    return rows


def read_rows(out: Path) -> list[dict[str, Any]]:
    path = out / "cells.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


# 95% interval of the mean over seeds: mean +- t_{0.975, n-1} s / sqrt(n) (s: sample std); n = 1 -> no interval.
def mean_ci(values: Sequence[float]) -> tuple[float, float, int]:
    from scipy.stats import t

    v = np.asarray(values, dtype=float)
    n = len(v)
    if n == 0:
        return math.nan, math.nan, 0
    if n == 1:
        return float(v[0]), math.nan, 1
    return float(v.mean()), float(t.ppf(0.975, n - 1) * v.std(ddof=1) / math.sqrt(n)), n


ROW_KEYS = frozenset({"scenario", "nodes", "hours", "seed", "policy", "mode", "scenario_name", "extra", "error",
                      "start"})


def aggregate(rows: Sequence[dict[str, Any]]) -> dict[tuple[str, str], dict[str, tuple[float, float, int]]]:
    """(scenario, policy) -> metric -> (mean, 95% half-width, seeds), for every numeric metric of the rows
    (``SCALAR_METRICS`` and any a newer engine wrote). A metric only some seeds' rows have is averaged over
    those (its n says how many); one no row has is (NaN, NaN, 0): the report shows it as n/a."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        if "error" not in r:
            groups.setdefault((r["scenario"], r["policy"]), []).append(r)
    out = {}
    for key, rs in groups.items():
        names = list(SCALAR_METRICS) + sorted({k for r in rs for k, v in r.items() if k not in ROW_KEYS
                                               and k not in SCALAR_METRICS and isinstance(v, int | float)
                                               and not isinstance(v, bool)})
        out[key] = {m: mean_ci([float(r[m]) for r in rs if isinstance(r.get(m), int | float)]) for m in names}
    return out
