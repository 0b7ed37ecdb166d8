"""Node and pod utilisation history from Prometheus, as ``dict[node, dict[resource, UtilisationSeries]]``.

Every query and the node-name mapping are settings, because that is what users of the peer systems ask
for first: ``instance`` is ``IP:port``, not the Kubernetes node name. Three mappings:

- ``LABEL``: a label that already holds the node name (``node``, ``kubernetes_node``, ...);
- ``UNAME``: join on node-exporter's ``node_uname_info`` (``instance`` -> ``nodename``); instances that
  have no ``node_uname_info`` fall back to the regex mapping (noted in ``notes``);
- ``REGEX``: a regex with one capture group applied to a label (default: ``instance`` minus ``:port``).

Queries may contain ``$by`` (replaced by the labels the mapping needs, so an aggregation keeps them) and
``$window`` (the history window as a PromQL duration). A down, slow or failing Prometheus raises
``PrometheusUnavailable`` naming the URL and the cause; requests carry timeouts and a bounded retry, so
a refresh never hangs.
"""

from __future__ import annotations

import logging
import math
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
import requests
from prometheus_api_client import PrometheusApiClientException, PrometheusConnect
from urllib3.util.retry import Retry

from forecasting.prometheus_settings import (  # re-exported: the source's settings and errors are imported from here
    PrometheusError,
    PrometheusMappingError,
    PrometheusQueryError,
    PrometheusSettings,
    PrometheusUnavailable,
)
from forecasting.quality import LAGGING_SAMPLES
from forecasting.types import UtilisationSeries
from kso.core.logs import FirstWarnings
from kso.core.settings import load_settings

log = logging.getLogger("kso.forecasting.prometheus")

__all__ = ["PrometheusError", "PrometheusMappingError", "PrometheusQueryError", "PrometheusSettings", "PrometheusSource",
           "PrometheusUnavailable", "SeriesByNode", "sample_value"]

SeriesByNode = dict[str, dict[str, UtilisationSeries]]


MAX_POINTS_PER_SERIES = 11_000  # Prometheus's range-query resolution limit
# Steps per range request: a week at 5-minute steps is 2,016, read in 9 requests of at most 240 (20 h) each, so that one
# request over a large cluster stays within KSO_PROMETHEUS_TIMEOUT (Prometheus's cost grows with series x steps).
CHUNK_POINTS = 240


class _NeedFullRead(Exception):
    """An incremental read found what only a read of the whole history can give (a node or instance seen first)."""


@dataclass(slots=True)
class _History:
    """The history read so far: per resource and node, the utilisation at each step of ``grid`` (whole steps),
    stale steps already dropped; the node-name mapping it was read with (``key``) and the UNAME map."""

    key: tuple[Any, ...]
    grid: np.ndarray
    values: dict[str, dict[str, np.ndarray]]
    uname: dict[str, str]
    instances: set[str]  # the cpu series' instances of the last full read


def sample_value(raw: Any) -> float:
    """A Prometheus sample value ("0.5", "NaN", "+Inf", ...) as a float; anything non-finite -> NaN."""
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return math.nan
    return value if math.isfinite(value) else math.nan


def _duration(seconds: float) -> str:
    return f"{int(max(seconds, 1))}s"


class PrometheusSource:
    """Reads node (and pod) utilisation history from Prometheus.

    ``notes`` and ``unmapped`` describe the last call (merged duplicates, fallbacks, series without a
    node), so the CLI and the store can explain what was done with the data."""

    name = "prometheus"

    def __init__(self, settings: PrometheusSettings | None = None, url: str | None = None,
                 session: requests.Session | None = None) -> None:
        self.settings = settings or load_settings(PrometheusSettings)
        if url:
            self.settings.url = url
        self.url = self.settings.url.rstrip("/")
        self._regex = re.compile(self.settings.node_regex)
        if self._regex.groups < 1:
            raise ValueError(f"KSO_PROMETHEUS_NODE_REGEX {self.settings.node_regex!r} needs a capture group")
        # The client's default retry is 3 attempts with backoff 1 s on every 5xx: with a long timeout
        # that is minutes of waiting on a dead server. Bounded retries of connection errors and
        # gateway errors only; read timeouts are not retried (a slow server stays slow).
        retry = Retry(total=self.settings.retries, connect=self.settings.retries, read=0,
                      backoff_factor=0.2, status_forcelist=(502, 503, 504), raise_on_status=False)
        self.client = PrometheusConnect(url=self.url, disable_ssl=self.settings.insecure, retry=retry,
                                        session=session, timeout=self.settings.timeout_s)
        self.notes: list[str] = []
        self.unmapped: list[dict[str, str]] = []
        self._cache: _History | None = None
        self._warnings = FirstWarnings(log)
        self.last_read = ""  # "full" or "incremental": how the last node_series call read the history

    def now(self) -> float:
        return time.time()

    # ---- queries ------------------------------------------------------------------------------
    def _by(self) -> str:
        s = self.settings
        if s.node_mapping == "LABEL":
            return s.node_label
        if s.node_mapping == "REGEX":
            return s.node_regex_label
        return "instance"

    def _render(self, query: str) -> str:
        return query.replace("$by", self._by()).replace("$window", _duration(self.settings.history_s))

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        try:
            result = fn(*args, **kwargs)
        except PrometheusApiClientException as exc:
            m = re.search(r"HTTP Status Code (\d+)", str(exc))
            code = int(m.group(1)) if m else 0
            if 400 <= code < 500:
                raise PrometheusQueryError(f"Prometheus at {self.url} rejected {what}: {exc}") from exc
            # Prometheus answers a query past its timeout with 503 and errorType "timeout"
            timed_out = re.search(r'"errorType"\s*:\s*"timeout"', str(exc)) is not None
            raise PrometheusUnavailable(self.url, f"{what}: {exc}", "timeout" if timed_out else "http_error") from exc
        except requests.exceptions.Timeout as exc:
            raise PrometheusUnavailable(self.url, f"{what}: timed out: {type(exc).__name__}: {exc}", "timeout") from exc
        except requests.exceptions.RequestException as exc:
            reason = "timeout" if "timed out" in str(exc).lower() else "unreachable"
            raise PrometheusUnavailable(self.url, f"{what}: {type(exc).__name__}: {exc}", reason) from exc
        except (ValueError, KeyError, TypeError) as exc:  # not JSON, or JSON without data.result
            raise PrometheusUnavailable(self.url, f"{what}: unreadable response: {exc}", "bad_data") from exc
        if not isinstance(result, list):
            raise PrometheusUnavailable(self.url, f"{what}: expected a list of series, got {type(result).__name__}",
                                        "bad_data")
        return result

    # step = max(KSO_PROMETHEUS_STEP, ceil(history / 11,000)): Prometheus rejects a range query of more than
    # 11,000 points per series (HTTP 400 "exceeded maximum resolution"), e.g. 8 days at a 60 s step
    def step_s(self) -> int:
        s = self.settings
        return max(int(s.step_s), math.ceil(s.history_s / MAX_POINTS_PER_SERIES))

    # end = now rounded down to a whole minute (at most the step): the newest point is at most a minute old
    # even with a 5-minute step, and repeated calls within a minute ask for the same grid
    def _end(self, now: float | None) -> float:
        align = min(self.step_s(), 60)
        return math.floor((time.time() if now is None else now) / align) * align

    def _range(self, query: str, start: float, end: float) -> list[dict[str, Any]]:
        """A range query over [start, end] at the step, in requests of at most CHUNK_POINTS steps each (a week of a
        large cluster in one request outlasts KSO_PROMETHEUS_TIMEOUT; each part is its own request within it), the
        parts' samples joined per series."""
        q = self._render(query)
        step = self.step_s()
        parts: list[list[dict[str, Any]]] = []
        at = start
        while at <= end:
            upto = min(end, at + step * (CHUNK_POINTS - 1))
            parts.append(self._call(f"range query {q!r}", self.client.custom_query_range, q,
                                    start_time=datetime.fromtimestamp(at, UTC),
                                    end_time=datetime.fromtimestamp(upto, UTC),
                                    step=str(step),
                                    # Server-side limit too, so Prometheus abandons a query we gave up on.
                                    params={"timeout": _duration(self.settings.timeout_s)}))
            at = upto + step
        if len(parts) == 1:
            return parts[0]
        joined: dict[tuple[tuple[str, str], ...], dict[str, Any]] = {}
        for part in parts:
            for item in part:
                key = tuple(sorted((str(k), str(v)) for k, v in (item.get("metric") or {}).items()))
                have = joined.get(key)
                if have is None:
                    joined[key] = {"metric": item.get("metric") or {}, "values": list(item.get("values") or [])}
                else:
                    have["values"].extend(item.get("values") or [])
        return list(joined.values())

    def _instant(self, query: str, at: float) -> list[dict[str, Any]]:
        q = self._render(query)
        return self._call(f"query {q!r}", self.client.custom_query, q,
                          params={"time": f"{at:.3f}", "timeout": _duration(self.settings.timeout_s)})

    # ---- node names ---------------------------------------------------------------------------
    def _uname_map(self, at: float) -> dict[str, str]:
        out: dict[str, str] = {}
        for item in self._instant(self.settings.query_node_uname, at):
            labels = item.get("metric") or {}
            inst, name = labels.get("instance"), labels.get(self.settings.uname_label)
            if inst and name:
                if inst in out and out[inst] != name:
                    self.notes.append(f"instance {inst} reports nodenames {out[inst]} and {name}; using {name}")
                out[inst] = name
        return out

    def _by_regex(self, labels: dict[str, str]) -> str | None:
        raw = labels.get(self.settings.node_regex_label)
        if raw is None:
            return None
        m = self._regex.search(raw)
        return m.group(1) if m and m.group(1) else None

    def _node_name(self, labels: dict[str, str], uname: dict[str, str]) -> str | None:
        s = self.settings
        if s.node_mapping == "LABEL":
            return labels.get(s.node_label) or None
        if s.node_mapping == "REGEX":
            return self._by_regex(labels)
        inst = labels.get("instance", "")
        if inst in uname:
            return uname[inst]
        name = self._by_regex(labels)
        if name is not None:
            self.notes.append(f"instance {inst} has no node_uname_info; named {name} by regex")
        return name

    # ---- parsing ------------------------------------------------------------------------------
    def _grid(self, start: float, end: float) -> np.ndarray:
        step = float(self.step_s())
        return start + step * np.arange(int(math.floor((end - start) / step + 1e-9)) + 1)

    def _to_grid(self, values: list[Any], grid: np.ndarray) -> np.ndarray:
        """Samples onto the query's step grid; steps Prometheus returned nothing for stay NaN (gaps)."""
        y = np.full(len(grid), math.nan)
        if not values:
            return y
        t = np.array([float(v[0]) for v in values])
        v = np.array([sample_value(v[1]) for v in values])
        idx = np.rint((t - grid[0]) / self.step_s()).astype(int)
        ok = (idx >= 0) & (idx < len(grid))
        y[idx[ok]] = v[ok]
        return y

    def _newest(self, query: str, start: float, end: float, tip: float | None,
                uname: dict[str, str]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Per node, the time of its newest raw sample at each step of [start, end] and at ``tip`` (an instant
        evaluation past the last step), as (times, newest): NaN where none within Prometheus's lookback; the oldest
        of a node's series when several report it. Empty without a query."""
        if not query:
            return {}
        parts: list[tuple[np.ndarray, list[dict[str, Any]], bool]] = []
        if end >= start:
            parts.append((self._grid(start, end), self._range(query, start, end), False))
        if tip is not None:
            parts.append((np.array([tip]), self._instant(query, tip), True))
        times = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0)
        offset = 0
        out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for grid, result, instant in parts:
            for item in result:
                labels = {str(k): str(v) for k, v in (item.get("metric") or {}).items()}
                node = self._node_name(labels, uname)
                if node is None:
                    continue
                ts = np.full(len(times), math.nan)
                if instant:
                    ts[offset] = sample_value((item.get("value") or [0, "NaN"])[1])
                else:
                    ts[offset:offset + len(grid)] = self._to_grid(item.get("values") or [], grid)
                prev = out.get(node)
                out[node] = (times, ts if prev is None else np.fmin(prev[1], ts))
            offset += len(grid)
        return out

    # step k is stale when t_k - newest_k > scrape interval (or no newest sample at a checked step): its value came
    # from a partial rate window or is a repeated gauge, not the node's load at that step
    def _drop_lagging(self, node: str, resource: str, y: np.ndarray, t: np.ndarray,
                      newest: np.ndarray) -> bool:
        """NaN out ``y`` (in place) where it is stale (``newest``: +Inf at steps not checked); True when the
        trailing steps were (the forecast is then marked)."""
        with np.errstate(invalid="ignore"):
            stale = ~(t - newest <= self.settings.scrape_interval_s) & ~np.isnan(y)
        if not stale.any():
            return False
        have = np.flatnonzero(~np.isnan(y))
        trailing = bool(stale[have[-1]])
        y[stale] = math.nan
        self.notes.append(f"{node}/{resource}: {int(stale.sum())} steps whose newest sample was more than "
                          f"{self.settings.scrape_interval_s:.0f}s older (partial windows) not read as load")
        return trailing

    def _group(self, result: list[dict[str, Any]], resource: str, grid: np.ndarray,
               uname: dict[str, str]) -> dict[str, np.ndarray]:
        """A range query's series onto ``grid`` per node; several series of one node averaged per step (two
        exporters / jobs / relabelled instances reporting one node: every real sample kept, one series' gaps filled
        from the other). Series without a node go to ``unmapped``."""
        groups: dict[str, list[np.ndarray]] = {}
        for item in result:
            labels = {str(k): str(v) for k, v in (item.get("metric") or {}).items()}
            node = self._node_name(labels, uname)
            if node is None:
                self.unmapped.append({"resource": resource, **labels})
                continue
            groups.setdefault(node, []).append(self._to_grid(item.get("values") or [], grid))
        out: dict[str, np.ndarray] = {}
        for node, ys in groups.items():
            if len(ys) > 1:
                self.notes.append(f"{node}/{resource}: merged {len(ys)} series (mean per step)")
                log.info("prometheus: %s/%s: merged %d duplicate series", node, resource, len(ys))
                stack = np.vstack(ys)
                count = (~np.isnan(stack)).sum(axis=0)
                out[node] = np.where(count > 0, np.nansum(stack, axis=0) / np.maximum(count, 1), math.nan)
            else:
                out[node] = ys[0]
        return out

    def _instant_values(self, query: str, at: float, resource: str, uname: dict[str, str]) -> dict[str, float]:
        """An instant query's value per node (the mean of a node's several series), for the tip past the last step."""
        sums: dict[str, list[float]] = {}
        for item in self._instant(query, at):
            labels = {str(k): str(v) for k, v in (item.get("metric") or {}).items()}
            node = self._node_name(labels, uname)
            if node is None:
                self.unmapped.append({"resource": resource, **labels})
                continue
            v = sample_value((item.get("value") or [0, "NaN"])[1])
            if not math.isnan(v):
                sums.setdefault(node, []).append(v)
        return {node: float(np.mean(vs)) for node, vs in sums.items()}

    def _series(self, node: str, resource: str, y: np.ndarray, t: np.ndarray, capacity: dict[str, float],
                newest: dict[str, tuple[np.ndarray, np.ndarray]], out: SeriesByNode) -> None:
        """One node's series over ``t`` (the history grid and the tip), its stale steps dropped (in ``y``: the caller
        keeps them dropped), leading and trailing steps without data trimmed."""
        lagging = False
        fresh = newest.get(node)
        if fresh is not None and np.isfinite(fresh[1]).any():
            checked = np.full(len(t), math.inf)
            idx = np.searchsorted(t, fresh[0])
            ok = (idx < len(t)) & (t[np.minimum(idx, len(t) - 1)] == fresh[0])
            checked[idx[ok]] = fresh[1][ok]
            lagging = self._drop_lagging(node, resource, y, t, checked)
        elif newest:
            self.notes.append(f"{node}/{resource}: no newest-sample times; partial windows not detected")
        have = np.flatnonzero(~np.isnan(y))
        if have.size == 0:
            self.notes.append(f"{node}/{resource}: no finite samples in the window")
            return
        # Trim leading/trailing steps without data (the node appeared late or stopped reporting: the newest sample's
        # time then shows its age); interior gaps stay NaN.
        lo, hi = have[0], have[-1] + 1
        series = UtilisationSeries(node, resource, t[lo:hi].copy(), y[lo:hi].copy(), capacity.get(node, math.nan))
        if lagging:
            series.flags.append(LAGGING_SAMPLES)
            series.notes.append(f"newest {int(len(t) - hi)} steps dropped: the node's newest samples are more "
                                f"than {self.settings.scrape_interval_s:.0f}s behind the query end")
        out.setdefault(node, {})[resource] = series

    def _capacity(self, query: str, at: float, uname: dict[str, str]) -> dict[str, float]:
        if not query:
            return {}
        out: dict[str, float] = {}
        for item in self._instant(query, at):
            labels = {str(k): str(v) for k, v in (item.get("metric") or {}).items()}
            node = self._node_name(labels, uname)
            value = item.get("value") or [0, "NaN"]
            v = sample_value(value[1])
            if node is not None and not math.isnan(v):
                out[node] = max(out.get(node, 0.0), v)
        return out

    # ---- public -------------------------------------------------------------------------------
    def node_series(self, now: float | None = None) -> SeriesByNode:
        """cpu and memory utilisation (ratio of capacity) per node over the history window ending now.

        The history is kept between calls on a grid of whole steps: a call reads the steps that are new since the
        last one plus the last KSO_PROMETHEUS_OVERLAP (late samples), and the rest from memory; the first call, a
        change of the node-name mapping, a node or instance not seen before with older history, or "now" going
        back reads it all. The step at "now" itself (a minute-aligned time between two whole steps) is one instant
        evaluation of each query. Raises PrometheusUnavailable, PrometheusQueryError or PrometheusMappingError."""
        s = self.settings
        self.notes, self.unmapped = [], []
        end = self._end(now)
        step = self.step_s()
        last = math.floor(end / step) * step  # the last whole step
        n = int(s.history_s // step)
        grid = last - step * np.arange(n, -1, -1, dtype=float)
        tip = end if end > last else None
        cache = self._cache
        key = (self._render(s.query_node_cpu), self._render(s.query_node_memory), step, n, s.node_mapping,
               s.node_label, s.node_regex, s.node_regex_label, s.uname_label, s.scrape_interval_s)
        incremental = (cache is not None and cache.key == key and s.overlap_s > 0
                       and grid[0] <= cache.grid[-1] <= last and cache.grid[-1] - s.overlap_s > grid[0])
        self.last_read = "full"
        if incremental:
            assert cache is not None
            read_from = max(grid[0], cache.grid[-1] - step * math.ceil(s.overlap_s / step))
            uname = cache.uname
            try:
                out = self._read(grid, tip, read_from, uname, cache)
                self.last_read = "incremental"
                return out
            except _NeedFullRead as why:
                log.info("prometheus: reading the whole history again: %s", why)
                self.notes, self.unmapped = [], []
        uname = self._uname_map(end) if s.node_mapping == "UNAME" else {}
        return self._read(grid, tip, grid[0], uname, None, key)

    def _read(self, grid: np.ndarray, tip: float | None, read_from: float, uname: dict[str, str],
              cache: _History | None, key: tuple[Any, ...] | None = None) -> SeriesByNode:
        """Read [read_from, grid's end] (and ``tip``) and merge it into ``cache`` (None: the whole history, a new
        cache); raises _NeedFullRead when the new steps hold a node or an instance the cache never had, with data
        from their first step on (older history to read)."""
        s = self.settings
        step = self.step_s()
        last = float(grid[-1])
        part = self._grid(read_from, last)
        cpu_raw = self._range(s.query_node_cpu, read_from, last)
        mem_raw = self._range(s.query_node_memory, read_from, last)
        at = last if tip is None else tip
        tips = ({"cpu": self._instant_values(s.query_node_cpu, tip, "cpu", uname),
                 "memory": self._instant_values(s.query_node_memory, tip, "memory", uname)}
                if tip is not None else {"cpu": {}, "memory": {}})
        cap_cpu = self._capacity(s.query_node_cpu_capacity, at, uname)
        cap_mem = self._capacity(s.query_node_memory_capacity, at, uname)
        # Newest-sample times at the steps read, at most the last max(overlap, 15 min) of a whole read: the check is
        # for late scrapes at the edge (the whole week of them cost 12-18 s for 80 series); interior gaps found later
        # are checked as they arrive.
        check_from = max(read_from, last - max(s.overlap_s, 900.0))
        check_from = read_from + step * math.ceil((check_from - read_from) / step)
        new_cpu = self._newest(s.query_node_cpu_newest, check_from, last, tip, uname)
        new_mem = self._newest(s.query_node_memory_newest, check_from, last, tip, uname)
        values: dict[str, dict[str, np.ndarray]] = {}
        k0 = int(round((read_from - grid[0]) / step))
        for resource, raw in (("cpu", cpu_raw), ("memory", mem_raw)):
            fresh = self._group(raw, resource, part, uname)
            if cache is not None:
                old = cache.values.get(resource, {})
                for node, y in fresh.items():
                    if node not in old and not math.isnan(y[0]):
                        raise _NeedFullRead(f"{node}/{resource} is new with data from {part[0]:.0f} on")
                shift = int(round((cache.grid[0] - grid[0]) / step))
                merged: dict[str, np.ndarray] = {}
                for node in set(old) | set(fresh):
                    y = np.full(len(grid), math.nan)
                    if node in old:
                        src = old[node]
                        lo, hi = max(0, shift), min(len(grid), shift + len(src))
                        y[lo:hi] = src[lo - shift: hi - shift]
                    y[k0:] = fresh[node] if node in fresh else math.nan
                    if not np.isnan(y).all():
                        merged[node] = y
                values[resource] = merged
            else:
                values[resource] = fresh
        instances = {str((item.get("metric") or {}).get("instance", "")) for item in cpu_raw}
        if cache is not None:
            unknown = sorted(i for i in instances - cache.instances if i and i not in uname)
            if unknown and s.node_mapping == "UNAME":
                raise _NeedFullRead(f"instance {unknown[0]} was not there at the last full read")
            instances = cache.instances
        t = grid if tip is None else np.append(grid, tip)
        out: SeriesByNode = {}
        for resource, newest in (("cpu", new_cpu), ("memory", new_mem)):
            cap = cap_cpu if resource == "cpu" else cap_mem
            for node in sorted(values[resource]):
                y = values[resource][node]
                full = y if tip is None else np.append(y, tips[resource].get(node, math.nan))
                self._series(node, resource, full, t, cap, newest, out)
                y[:] = full[:len(grid)]  # steps found stale stay dropped; the overlap is read again next time
        self._cache = _History(key if cache is None else cache.key, grid, values, uname, instances)
        self.notes = list(dict.fromkeys(self.notes))  # a fallback note per series would repeat
        if (cpu_raw or mem_raw) and not out and self.unmapped:
            seen_labels = sorted({k for labels in self.unmapped for k in labels if k != "resource"})
            self._cache = None
            raise PrometheusMappingError(
                f"none of {len(self.unmapped)} series from {self.url} maps to a node with "
                f"{s.node_mapping} mapping ({self._mapping_desc()}); labels present: {', '.join(seen_labels) or 'none'}")
        if self.unmapped:  # every refresh would say it again: once at WARNING, then DEBUG (the notes have it)
            self._warnings.log("unmapped", "prometheus: %d series without a node name (%s) ignored", len(self.unmapped),
                               self._mapping_desc())
        return out

    def pod_series(self, now: float | None = None) -> SeriesByNode:
        """Per-pod usage keyed ``namespace/pod``. Pods have no capacity here, so ``y`` is the absolute
        usage in canonical units (cpu millicores, memory bytes) with ``capacity`` 1.0: ``y * capacity``
        is the usage, as for node series."""
        s = self.settings
        self.notes, self.unmapped = [], []
        end = self._end(now)
        start = end - s.history_s
        grid = self._grid(start, end)
        out: SeriesByNode = {}
        for resource, query, scale in (("cpu", s.query_pod_cpu, 1000.0), ("memory", s.query_pod_memory, 1.0)):
            for item in self._range(query, start, end):
                labels = item.get("metric") or {}
                key = f"{labels.get('namespace', '')}/{labels.get('pod', '')}"
                if key == "/":
                    self.unmapped.append({"resource": resource, **labels})
                    continue
                y = self._to_grid(item.get("values") or [], grid) * scale
                have = np.flatnonzero(~np.isnan(y))
                if have.size:
                    lo, hi = have[0], have[-1] + 1
                    out.setdefault(key, {})[resource] = UtilisationSeries(key, resource, grid[lo:hi].copy(),
                                                                          y[lo:hi].copy(), 1.0)
        return out

    def check(self) -> None:
        """One cheap instant query (``vector(1)``) within KSO_PROMETHEUS_TIMEOUT: raises what a refresh would raise
        when Prometheus does not answer (PrometheusUnavailable) or rejects queries (PrometheusQueryError)."""
        self._instant("vector(1)", self.now())

    def _mapping_desc(self) -> str:
        s = self.settings
        if s.node_mapping == "LABEL":
            return f"label {s.node_label!r}"
        if s.node_mapping == "REGEX":
            return f"regex {s.node_regex!r} on label {s.node_regex_label!r}"
        return f"node_uname_info {s.uname_label!r} by instance, else regex {s.node_regex!r}"

    def close(self) -> None:
        self.client.close()
