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


# Why a refresh failed (RefreshStatus.failures, kso_forecast_refresh_failures_total{reason}): the source's own
# ``reason`` (forecasting.prometheus: timeout, unreachable, http_error, rejected, bad_data, no_node_names), else
# no_data (the source answered with no series), forecaster (the model raised), source_error (anything else).
NO_DATA, FORECASTER, SOURCE_ERROR = "no_data", "forecaster", "source_error"


class NoSeries(RuntimeError):
    reason = NO_DATA


class ForecasterFailed(RuntimeError):
    reason = FORECASTER


@dataclass
class RefreshStatus:
    last_success: float | None = None  # wall clock of the last successful refresh
    last_attempt: float | None = None
    last_error: str | None = None  # set by a failed refresh, cleared by a successful one
    last_error_at: float | None = None
    last_reason: str | None = None  # the last failure's reason (kept after a success)
    consecutive_failures: int = 0
    failing_since: float | None = None  # wall clock of the first failure of the current run of failures
    source: str = ""
    notes: list[str] = field(default_factory=list)
    failures: dict[str, int] = field(default_factory=dict)  # refreshes failed since the start, by reason
    successes: int = 0
    last_duration_s: float | None = None  # the last refresh's wall time (read, forecast), failed or not
    last_read: str = ""  # the source's last read: "full" or "incremental" (PrometheusSource)
    started: float = field(default_factory=time.time)  # wall clock of the store's creation


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
            started = time.perf_counter()
            try:
                series_now = now if now is not None else _source_now(source)
                by_node = source.node_series(series_now)
                flat = [s for res in by_node.values() for s in res.values() if len(s)]
                if not flat:
                    raise NoSeries(f"{self.status.source} returned no series")
                try:
                    forecasts = forecaster.forecast_many(flat, horizon, series_now)
                except Exception as exc:  # noqa: BLE001 - counted as the forecaster's failure, not the source's
                    raise ForecasterFailed(f"forecaster {getattr(forecaster, 'name', '?')}: "
                                           f"{type(exc).__name__}: {exc}") from exc
                if len(forecasts) != len(flat):
                    raise ForecasterFailed(f"forecaster {forecaster.name} returned {len(forecasts)} forecasts "
                                           f"for {len(flat)} series")
            except Exception as exc:  # noqa: BLE001 - any failure keeps the old forecasts; recorded below
                self._failed(exc, wall, time.perf_counter() - started, getattr(source, "url", ""))
                return False
            table = self._build(forecasts, wall, getattr(forecaster, "name", "?"))
            with self._lock:
                self._table = table
                self._stale_marked = False
                st = self.status
                failed, since = st.consecutive_failures, st.failing_since
                st.last_success = wall
                st.last_error = None
                st.consecutive_failures = 0
                st.failing_since = None
                st.successes += 1
                st.last_duration_s = time.perf_counter() - started
                st.last_read = str(getattr(source, "last_read", "") or "")
                st.notes = list(getattr(source, "notes", []) or [])
            if failed:
                log.warning("forecast refresh from %s works again after %d failed refreshes over %.0f s",
                            _where(st.source, getattr(source, "url", "")), failed, wall - (since or wall))
            return True

    def _failed(self, exc: BaseException, wall: float, seconds: float, url: str) -> None:
        """Record a failed refresh: counted by reason; logged at WARNING when a run of failures starts (ERROR when no
        refresh ever succeeded: the source kso was told to read has never answered) and at DEBUG while it goes on."""
        msg = f"{type(exc).__name__}: {exc}"
        reason = failure_reason(exc)
        with self._lock:
            st = self.status
            self._stale_marked = True
            st.last_error = msg
            st.last_error_at = wall
            st.last_reason = reason
            st.consecutive_failures += 1
            st.failures[reason] = st.failures.get(reason, 0) + 1
            st.last_duration_s = seconds
            first = st.failing_since is None
            if first:
                st.failing_since = wall
            kept = len(self._table.index)
            never = st.last_success is None
        where = _where(st.source, url)
        if not first:
            log.debug("forecast refresh from %s failed again (%s, %s)", where, reason, msg)
        elif never:
            log.error("forecast refresh from %s failed (%s: %s): no forecasts yet, nodes are judged on their "
                      "annotations (or without load data) until it answers; retried every refresh, counted in "
                      "kso_forecast_refresh_failures_total{reason=\"%s\"}, logged again when it works",
                      where, reason, msg, reason)
        else:
            log.warning("forecast refresh from %s failed (%s: %s); keeping %d nodes' previous forecasts until they "
                        "are older than KSO_FORECAST_STALE_AFTER; counted in kso_forecast_refresh_failures_total, "
                        "logged again when it works", where, reason, msg, kept)

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

    def fresh_until(self) -> float | None:
        """Wall clock at which the freshest forecast turns stale (its newest sample older than
        KSO_FORECAST_STALE_AFTER); None without forecasts."""
        with self._lock:
            born = self._table.born
        if born.size == 0 or not np.isfinite(born).any():
            return None
        return float(born[np.isfinite(born)].max()) + self.settings.stale_after_s

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


def failure_reason(exc: BaseException) -> str:
    """The ``reason`` label of a failed refresh (see NO_DATA): the exception's own ``reason``, else source_error."""
    reason = getattr(exc, "reason", None)
    return reason if isinstance(reason, str) and reason else SOURCE_ERROR


def _where(source: str, url: str) -> str:
    return f"{source} at {url}" if url else source


def _source_now(source: SeriesSource) -> float | None:
    """The source's "now" (a trace's end time), else None = wall clock for the source and newest sample
    for the forecaster."""
    fn = getattr(source, "now", None)
    return float(fn()) if callable(fn) else None
