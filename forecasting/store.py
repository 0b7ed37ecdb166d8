"""ForecastStore: the latest forecast per node and resource, kept across source outages.

``refresh(source, forecaster, horizon_s)`` reads history from a source (``node_series(now)``, e.g.
PrometheusSource or TraceSource) and replaces the forecasts. When the source raises (Prometheus down,
bad query) nothing is replaced: the last good forecasts stay in use, reported stale with their age, and
the error is kept in ``last_error`` until a refresh succeeds. Readers (the extender's threads) get a
consistent table: a refresh builds a new one and swaps it under the lock.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from forecasting.models._base import STALE_AFTER_S
from forecasting.types import RESOURCES, NodeForecast, UtilisationSeries
from kso.core.settings import load_settings, setting

log = logging.getLogger("kso.forecasting.store")

SeriesByNode = dict[str, dict[str, UtilisationSeries]]


class SeriesSource(Protocol):
    name: str

    def node_series(self, now: float | None = None) -> SeriesByNode: ...


class ForecasterLike(Protocol):
    name: str

    def forecast_many(self, series: list[UtilisationSeries], horizon_s: float,
                      now: float | None = None) -> list[NodeForecast]: ...


@dataclass(slots=True)
class StoreSettings:
    # the same threshold as NodeForecast.stale (three 5-minute grid steps), so "stale" means one thing
    stale_after_s: float = setting("KSO_FORECAST_STALE_AFTER", STALE_AFTER_S, lo=1.0, hi=7 * 86400.0,
                                   help="a forecast whose newest sample is older than this is not used")
    horizon_s: float = setting("KSO_FORECAST_HORIZON", 600.0, lo=1.0, hi=7 * 86400.0,
                               help="forecast horizon, seconds")
    refresh_s: float = setting("KSO_FORECAST_REFRESH", 60.0, lo=1.0, hi=86400.0,
                               help="how often a running kso refreshes forecasts")


@dataclass(slots=True)
class _Table:
    """Forecasts of one successful refresh, as columns for vectorised lookups by ForecastStats."""

    index: dict[str, int]  # node -> row
    mean: np.ndarray  # (n, 2) cpu, memory; NaN = no forecast for that resource
    std: np.ndarray
    born: np.ndarray  # (n, 2) wall-clock time of the newest sample behind each forecast
    forecasts: dict[str, dict[str, NodeForecast]]
    model: str
    refreshed_at: float  # wall clock


@dataclass
class RefreshStatus:
    last_success: float | None = None  # wall clock of the last successful refresh
    last_attempt: float | None = None
    last_error: str | None = None  # set by a failed refresh, cleared by a successful one
    last_error_at: float | None = None
    consecutive_failures: int = 0
    source: str = ""
    notes: list[str] = field(default_factory=list)


def _empty_table() -> _Table:
    z = np.zeros((0, 2))
    return _Table({}, z, z.copy(), z.copy(), {}, "", 0.0)


class ForecastStore:
    """Thread-safe holder of the latest forecasts. ``clock`` is wall time (injectable for tests)."""

    def __init__(self, settings: StoreSettings | None = None, clock: Callable[[], float] = time.time) -> None:
        self.settings = settings or load_settings(StoreSettings)
        self.clock = clock
        self._lock = threading.RLock()
        self._refresh_lock = threading.Lock()  # one refresh at a time; readers never wait for it
        self._table = _empty_table()
        self._stale_marked = False  # set when the latest refresh failed
        self.status = RefreshStatus()

    # ---- writing ------------------------------------------------------------------------------
    def refresh(self, source: SeriesSource, forecaster: ForecasterLike, horizon_s: float | None = None,
                now: float | None = None) -> bool:
        """Recompute every forecast from ``source``. Returns False (and records the error) if the
        source or the forecaster raised or gave nothing; the previous forecasts are then kept."""
        horizon = self.settings.horizon_s if horizon_s is None else horizon_s
        with self._refresh_lock:
            wall = self.clock()
            with self._lock:
                self.status.last_attempt = wall
                self.status.source = getattr(source, "name", type(source).__name__)
            try:
                series_now = now if now is not None else _source_now(source)
                by_node = source.node_series(series_now)
                flat = [s for res in by_node.values() for s in res.values() if len(s)]
                if not flat:
                    raise RuntimeError(f"{self.status.source} returned no series")
                forecasts = forecaster.forecast_many(flat, horizon, series_now)
                if len(forecasts) != len(flat):
                    raise RuntimeError(f"forecaster {forecaster.name} returned {len(forecasts)} forecasts "
                                       f"for {len(flat)} series")
            except Exception as exc:  # noqa: BLE001 - any failure keeps the old forecasts; recorded below
                self._failed(exc, wall)
                return False
            table = self._build(forecasts, wall, getattr(forecaster, "name", "?"))
            with self._lock:
                self._table = table
                self._stale_marked = False
                self.status.last_success = wall
                self.status.last_error = None
                self.status.consecutive_failures = 0
                self.status.notes = list(getattr(source, "notes", []) or [])
            return True

    def _failed(self, exc: BaseException, wall: float) -> None:
        msg = f"{type(exc).__name__}: {exc}"
        with self._lock:
            self._stale_marked = True
            self.status.last_error = msg
            self.status.last_error_at = wall
            self.status.consecutive_failures += 1
            kept = len(self._table.index)
        log.warning("forecast refresh from %s failed (%s); keeping %d nodes' previous forecasts",
                    self.status.source, msg, kept)

    def _build(self, forecasts: Iterable[NodeForecast], wall: float, model: str) -> _Table:
        by_node: dict[str, dict[str, NodeForecast]] = {}
        for fc in forecasts:
            by_node.setdefault(fc.node, {})[fc.resource] = fc
        names = sorted(by_node)
        n = len(names)
        mean = np.full((n, 2), math.nan)
        std = np.full((n, 2), math.nan)
        born = np.full((n, 2), -math.inf)
        for i, name in enumerate(names):
            for j, res in enumerate(RESOURCES):
                fc = by_node[name].get(res)
                if fc is None:
                    continue
                mean[i, j] = fc.mean if math.isfinite(fc.mean) else math.nan
                std[i, j] = fc.std if math.isfinite(fc.std) else math.nan
                # Wall time of the newest sample: the source's clock may differ from ours (traces), so
                # only the age at computation is carried over.
                born[i, j] = wall - max(fc.newest_sample_age_s, 0.0) if math.isfinite(fc.newest_sample_age_s) \
                    else -math.inf
        return _Table({n_: i for i, n_ in enumerate(names)}, mean, std, born, by_node, model, wall)

    # ---- reading ------------------------------------------------------------------------------
    def lookup(self, names: list[str], now: float | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
        """(mean, std, age_s) arrays of shape (len(names), 2) and the model name. Unknown nodes get NaN
        mean/std and infinite age."""
        now = self.clock() if now is None else now
        with self._lock:
            t = self._table
        rows = np.array([t.index.get(n, -1) for n in names], dtype=int)
        have = rows >= 0
        mean = np.full((len(names), 2), math.nan)
        std = np.full((len(names), 2), math.nan)
        age = np.full((len(names), 2), math.inf)
        if have.any():
            mean[have] = t.mean[rows[have]]
            std[have] = t.std[rows[have]]
            age[have] = now - t.born[rows[have]]
        return mean, std, age, t.model

    def is_fresh(self, age_s: float) -> bool:
        return age_s <= self.settings.stale_after_s

    def get(self, node: str, resource: str, now: float | None = None) -> NodeForecast | None:
        """A copy of the latest forecast, ``stale`` set when the latest refresh failed or it is too old,
        with a note giving its age."""
        now = self.clock() if now is None else now
        with self._lock:
            t, marked, err = self._table, self._stale_marked, self.status.last_error
        fc = t.forecasts.get(node, {}).get(resource)
        if fc is None:
            return None
        row = t.index[node]
        age = now - t.born[row, RESOURCES.index(resource)]
        out = dataclasses.replace(fc, notes=list(fc.notes))
        if marked or not self.is_fresh(age):
            out.stale = True
            why = f"refresh failing: {err}" if marked and err else f"older than {self.settings.stale_after_s:.0f}s"
            out.notes.append(f"stale: newest sample {age:.0f}s old; {why}")
        return out

    def snapshot(self, now: float | None = None) -> dict[str, dict[str, NodeForecast]]:
        """Every node's forecasts (copies, staleness applied as in ``get``)."""
        with self._lock:
            t = self._table
        out: dict[str, dict[str, NodeForecast]] = {}
        for node, per in t.forecasts.items():
            for res in per:
                fc = self.get(node, res, now)
                if fc is not None:
                    out.setdefault(node, {})[res] = fc
        return out

    def age_s(self, node: str, resource: str, now: float | None = None) -> float:
        """Age of the newest sample behind a node's forecast (inf if none)."""
        _, _, age, _ = self.lookup([node], now)
        return float(age[0, RESOURCES.index(resource)])

    @property
    def model(self) -> str:
        with self._lock:
            return self._table.model

    @property
    def last_error(self) -> str | None:
        return self.status.last_error

    @property
    def last_success(self) -> float | None:
        return self.status.last_success

    def describe(self, now: float | None = None) -> dict[str, Any]:
        """Status for /status pages and the CLI."""
        now = self.clock() if now is None else now
        with self._lock:
            st = dataclasses.asdict(self.status)
            st["nodes"] = len(self._table.index)
            st["model"] = self._table.model
            st["stale"] = self._stale_marked
        st["since_success_s"] = None if st["last_success"] is None else now - st["last_success"]
        return st


def _source_now(source: SeriesSource) -> float | None:
    """The source's "now" (a trace's end time), else None = wall clock for the source and newest sample
    for the forecaster."""
    fn = getattr(source, "now", None)
    return float(fn()) if callable(fn) else None
