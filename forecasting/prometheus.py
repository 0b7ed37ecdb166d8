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

from forecasting.quality import LAGGING_SAMPLES
from forecasting.types import UtilisationSeries
from kso.core.settings import load_settings, setting

log = logging.getLogger("kso.forecasting.prometheus")

SeriesByNode = dict[str, dict[str, UtilisationSeries]]


class PrometheusError(RuntimeError):
    """Base of the errors this source raises (the store records any of them as the refresh error)."""


class PrometheusUnavailable(PrometheusError):
    """Prometheus could not answer: refused, timed out, 5xx, or an unreadable response."""

    def __init__(self, url: str, cause: str) -> None:
        super().__init__(f"Prometheus at {url} unavailable: {cause}")
        self.url = url
        self.cause = cause


class PrometheusQueryError(PrometheusError):
    """Prometheus answered but rejected the query (HTTP 4xx): a configuration error, not an outage."""


class PrometheusMappingError(PrometheusError):
    """Series came back but none could be mapped to a node name: the mapping settings are wrong."""


MAX_POINTS_PER_SERIES = 11_000  # Prometheus's range-query resolution limit


@dataclass(slots=True)
class PrometheusSettings:
    url: str = setting("KSO_PROMETHEUS_URL", "http://127.0.0.1:9090", help="Prometheus base URL")
    timeout_s: float = setting("KSO_PROMETHEUS_TIMEOUT", 10.0, lo=0.1, hi=300.0, help="per-request connect/read timeout, seconds")
    retries: int = setting("KSO_PROMETHEUS_RETRIES", 1, lo=0, hi=10,
                           help="retries of a failed connection or 502/503/504 before giving up")
    insecure: bool = setting("KSO_PROMETHEUS_INSECURE", False, help="skip TLS certificate verification")
    # 5 minutes: the grid every model works on (forecasting.models._base.STEP_S), so a finer step only
    # costs Prometheus work; 7 days: the history the models were measured with (Holt-Winters needs 2 days
    # and falls back to EWMA below that).
    step_s: int = setting("KSO_PROMETHEUS_STEP", 300, lo=1, hi=3600,
                          help="range-query step, seconds (widened if history/step would exceed 11,000 points)")
    history_s: int = setting("KSO_PROMETHEUS_HISTORY", 7 * 86400, lo=60, hi=30 * 86400, help="history window queried, seconds")
    node_mapping: str = setting("KSO_PROMETHEUS_NODE_MAPPING", "UNAME", kind="choice:LABEL,UNAME,REGEX",
                                help="how a series is mapped to a node name")
    node_label: str = setting("KSO_PROMETHEUS_NODE_LABEL", "node", help="LABEL mapping: label holding the node")
    node_regex: str = setting("KSO_PROMETHEUS_NODE_REGEX", r"^(.+?)(?::\d+)?$",
                              help="REGEX mapping (and UNAME fallback): regex whose group 1 is the node")
    node_regex_label: str = setting("KSO_PROMETHEUS_NODE_REGEX_LABEL", "instance",
                                    help="REGEX mapping: label the regex applies to")
    query_node_cpu: str = setting(
        "KSO_QUERY_NODE_CPU", '1 - avg by ($by) (rate(node_cpu_seconds_total{mode="idle"}[5m]))',
        help="range query: node cpu utilisation, 0..1 ($by = the grouping labels)")
    query_node_memory: str = setting(
        "KSO_QUERY_NODE_MEMORY", "1 - node_memory_MemAvailable_bytes / node_memory_MemTotal_bytes",
        help="range query: node memory utilisation, 0..1")
    # Partial windows: at a step after a node's newest scrape, rate(...[5m]) sees only part of its window and
    # extrapolates (an idle node 2-3 minutes behind reads 30-70 % busy), and a gauge repeats its last value.
    # Steps whose newest raw sample is more than one scrape interval old are dropped; '' turns a check off.
    scrape_interval_s: float = setting("KSO_PROMETHEUS_SCRAPE_INTERVAL", 60.0, lo=1.0, hi=3600.0,
                                       help="node-exporter scrape interval, seconds (steps with older samples "
                                            "are not read as load)")
    query_node_cpu_newest: str = setting(
        "KSO_QUERY_NODE_CPU_NEWEST", 'min by ($by) (timestamp(node_cpu_seconds_total{mode="idle"}))',
        help="range query: time of the newest raw cpu sample per node at each step ('' to skip the check)")
    query_node_memory_newest: str = setting(
        "KSO_QUERY_NODE_MEMORY_NEWEST", "min by ($by) (timestamp(node_memory_MemAvailable_bytes))",
        help="range query: time of the newest raw memory sample per node at each step ('' to skip the check)")
    query_node_cpu_capacity: str = setting(
        "KSO_QUERY_NODE_CPU_CAPACITY", '1000 * count by ($by) (node_cpu_seconds_total{mode="idle"})',
        help="instant query: node cpu capacity in millicores ('' to skip)")
    query_node_memory_capacity: str = setting(
        "KSO_QUERY_NODE_MEMORY_CAPACITY", "node_memory_MemTotal_bytes",
        help="instant query: node memory capacity in bytes ('' to skip)")
    query_node_uname: str = setting("KSO_QUERY_NODE_UNAME", "last_over_time(node_uname_info[$window])",
                                    help="UNAME mapping: instant query giving instance and nodename")
    uname_label: str = setting("KSO_PROMETHEUS_UNAME_LABEL", "nodename",
                               help="UNAME mapping: label of node_uname_info holding the node name")
    query_pod_cpu: str = setting(
        "KSO_QUERY_POD_CPU",
        'sum by (namespace, pod) (rate(container_cpu_usage_seconds_total{container!="", image!=""}[5m]))',
        help="range query: each pod's cpu use, cores (the plan's usage of a workload class)")
    query_pod_memory: str = setting(
        "KSO_QUERY_POD_MEMORY",
        'sum by (namespace, pod) (container_memory_working_set_bytes{container!="", image!=""})',
        help="range query: each pod's memory use, bytes")


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
            raise PrometheusUnavailable(self.url, f"{what}: {exc}") from exc
        except requests.exceptions.RequestException as exc:
            raise PrometheusUnavailable(self.url, f"{what}: {type(exc).__name__}: {exc}") from exc
        except (ValueError, KeyError, TypeError) as exc:  # not JSON, or JSON without data.result
            raise PrometheusUnavailable(self.url, f"{what}: unreadable response: {exc}") from exc
        if not isinstance(result, list):
            raise PrometheusUnavailable(self.url, f"{what}: expected a list of series, got {type(result).__name__}")
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
        q = self._render(query)
        return self._call(f"range query {q!r}", self.client.custom_query_range, q,
                          start_time=datetime.fromtimestamp(start, UTC),
                          end_time=datetime.fromtimestamp(end, UTC),
                          step=str(self.step_s()),
                          # Server-side limit too, so Prometheus abandons a query we gave up on.
                          params={"timeout": _duration(self.settings.timeout_s)})

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
        return start + step * np.arange(int(math.floor((end - start) / step)) + 1)

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

    def _newest(self, query: str, start: float, end: float, grid: np.ndarray,
                uname: dict[str, str]) -> dict[str, np.ndarray]:
        """Per node, the time of its newest raw sample at each step (NaN: none within the lookback); the
        oldest of a node's series when several report it."""
        if not query:
            return {}
        out: dict[str, np.ndarray] = {}
        for item in self._range(query, start, end):
            labels = {str(k): str(v) for k, v in (item.get("metric") or {}).items()}
            node = self._node_name(labels, uname)
            if node is None:
                continue
            ts = self._to_grid(item.get("values") or [], grid)
            out[node] = np.fmin(out[node], ts) if node in out else ts
        return out

    # step k is stale when grid_k - newest_k > scrape interval (or no newest sample): its value came from a
    # partial rate window or is a repeated gauge, not the node's load at that step
    def _drop_lagging(self, node: str, resource: str, y: np.ndarray, grid: np.ndarray,
                      newest: np.ndarray) -> bool:
        """NaN out ``y`` (in place) where it is stale; True when the trailing steps were (the forecast is
        then marked)."""
        with np.errstate(invalid="ignore"):
            stale = ~(grid - newest <= self.settings.scrape_interval_s) & ~np.isnan(y)
        if not stale.any():
            return False
        have = np.flatnonzero(~np.isnan(y))
        trailing = bool(stale[have[-1]])
        y[stale] = math.nan
        self.notes.append(f"{node}/{resource}: {int(stale.sum())} steps whose newest sample was more than "
                          f"{self.settings.scrape_interval_s:.0f}s older (partial windows) not read as load")
        return trailing

    def _collect(self, result: list[dict[str, Any]], resource: str, grid: np.ndarray, uname: dict[str, str],
                 capacity: dict[str, float], out: SeriesByNode,
                 newest: dict[str, np.ndarray] | None = None) -> None:
        groups: dict[str, list[np.ndarray]] = {}
        for item in result:
            labels = {str(k): str(v) for k, v in (item.get("metric") or {}).items()}
            node = self._node_name(labels, uname)
            if node is None:
                self.unmapped.append({"resource": resource, **labels})
                continue
            groups.setdefault(node, []).append(self._to_grid(item.get("values") or [], grid))
        for node, ys in groups.items():
            if len(ys) > 1:
                # Two exporters / jobs / relabelled instances reporting one node: averaging keeps
                # every real sample and fills one series' gaps from the other.
                self.notes.append(f"{node}/{resource}: merged {len(ys)} series (mean per step)")
                log.info("prometheus: %s/%s: merged %d duplicate series", node, resource, len(ys))
                stack = np.vstack(ys)
                count = (~np.isnan(stack)).sum(axis=0)
                y = np.where(count > 0, np.nansum(stack, axis=0) / np.maximum(count, 1), math.nan)
            else:
                y = ys[0].copy()
            lagging = False
            fresh = (newest or {}).get(node)
            if fresh is not None and np.isfinite(fresh).any():
                lagging = self._drop_lagging(node, resource, y, grid, fresh)
            elif newest:
                self.notes.append(f"{node}/{resource}: no newest-sample times; partial windows not detected")
            have = np.flatnonzero(~np.isnan(y))
            if have.size == 0:
                self.notes.append(f"{node}/{resource}: no finite samples in the window")
                continue
            # Trim leading/trailing steps without data (the node appeared late or stopped reporting:
            # the newest sample's time then shows its age); interior gaps stay NaN.
            lo, hi = have[0], have[-1] + 1
            series = UtilisationSeries(node, resource, grid[lo:hi].copy(), y[lo:hi].copy(), capacity.get(node, math.nan))
            if lagging:
                series.flags.append(LAGGING_SAMPLES)
                series.notes.append(f"newest {int(len(grid) - hi)} steps dropped: the node's newest samples are more "
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

        Raises PrometheusUnavailable, PrometheusQueryError or PrometheusMappingError."""
        s = self.settings
        self.notes, self.unmapped = [], []
        end = self._end(now)
        start = end - s.history_s
        grid = self._grid(start, end)
        uname = self._uname_map(end) if s.node_mapping == "UNAME" else {}
        cpu_raw = self._range(s.query_node_cpu, start, end)
        mem_raw = self._range(s.query_node_memory, start, end)
        cap_cpu = self._capacity(s.query_node_cpu_capacity, end, uname)
        cap_mem = self._capacity(s.query_node_memory_capacity, end, uname)
        new_cpu = self._newest(s.query_node_cpu_newest, start, end, grid, uname)
        new_mem = self._newest(s.query_node_memory_newest, start, end, grid, uname)
        out: SeriesByNode = {}
        self._collect(cpu_raw, "cpu", grid, uname, cap_cpu, out, new_cpu)
        self._collect(mem_raw, "memory", grid, uname, cap_mem, out, new_mem)
        self.notes = list(dict.fromkeys(self.notes))  # a fallback note per series would repeat
        if (cpu_raw or mem_raw) and not out and self.unmapped:
            seen = sorted({k for labels in self.unmapped for k in labels if k != "resource"})
            raise PrometheusMappingError(
                f"none of {len(self.unmapped)} series from {self.url} maps to a node with "
                f"{s.node_mapping} mapping ({self._mapping_desc()}); labels present: {', '.join(seen) or 'none'}")
        if self.unmapped:
            log.warning("prometheus: %d series without a node name (%s) ignored", len(self.unmapped),
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

    def _mapping_desc(self) -> str:
        s = self.settings
        if s.node_mapping == "LABEL":
            return f"label {s.node_label!r}"
        if s.node_mapping == "REGEX":
            return f"regex {s.node_regex!r} on label {s.node_regex_label!r}"
        return f"node_uname_info {s.uname_label!r} by instance, else regex {s.node_regex!r}"

    def close(self) -> None:
        self.client.close()
