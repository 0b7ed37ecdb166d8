"""What happened on a bind's two nodes during its horizon, according to Prometheus: each node's peak cpu and memory
utilisation (KSO_QUERY_NODE_CPU / KSO_QUERY_NODE_MEMORY: the series kso's forecasts predict), its OOM kills
(KSO_SHADOW_QUERY_OOM) and its peak share of throttled CFS periods (KSO_SHADOW_QUERY_THROTTLED), where those metrics
exist. Queried through forecasting.prometheus's client (its timeouts, bounded retries and errors), for a batch of
binds at once: one range query per metric over the batch's time range, at the scrape interval."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from forecasting.prometheus import PrometheusSettings, PrometheusSource, sample_value
from shadow.judge import NodeOutcome, Record
from shadow.settings import ShadowSettings

NodeSeries = dict[str, tuple[np.ndarray, np.ndarray]]  # node -> (times, values), time-ordered


class Outcomes:
    """Reads the outcomes of binds whose horizon has passed. Raises forecasting.prometheus's PrometheusError
    (PrometheusUnavailable when Prometheus cannot answer)."""

    def __init__(self, prometheus: PrometheusSettings, shadow: ShadowSettings, horizon_s: float,
                 node_label: str, container_selector: str) -> None:
        # The scrape interval as the step: a horizon of minutes is a handful of points, not one.
        step = max(1, int(prometheus.scrape_interval_s))
        self.source = PrometheusSource(replace(prometheus, step_s=step))
        self.shadow = shadow
        self.horizon_s = horizon_s
        self.node_label = node_label
        self.throttled_query = (shadow.query_throttled.replace("$node", node_label)
                                .replace("$containers", container_selector))
        self.queries = 0
        self.missing: set[str] = set()  # the optional metrics Prometheus had no series of (named in the report)

    @property
    def url(self) -> str:
        return self.source.url

    def window(self, record: Record) -> tuple[float, float]:
        return record.at, record.at + self.horizon_s

    def read(self, records: Sequence[Record]) -> None:
        """Fill each record's chosen_outcome and pick_outcome (the pick's only when kso picked another node)."""
        if not records:
            return
        start = min(r.at for r in records) - self.source.step_s()
        end = max(r.at for r in records) + self.horizon_s
        s = self.source.settings
        uname = self.source._uname_map(end) if s.node_mapping == "UNAME" else {}
        cpu = self._series(s.query_node_cpu, start, end, uname)
        memory = self._series(s.query_node_memory, start, end, uname)
        oom = self._series(self.shadow.query_oom, start, end, uname, "oom")
        throttled = self._series(self.throttled_query, start, end, None, "throttled")
        for r in records:
            lo, hi = self.window(r)
            r.chosen_outcome = self._outcome(r.chosen, lo, hi, cpu, memory, oom, throttled)
            if r.pick is not None and r.pick != r.chosen:
                r.pick_outcome = self._outcome(r.pick, lo, hi, cpu, memory, oom, throttled)
                r.pick_outcome.pod_share = r.pick_share

    def _series(self, query: str, start: float, end: float, uname: dict[str, str] | None,
                optional: str = "") -> NodeSeries | None:
        """Per node, the query's samples; None for an optional query that is off ('') or has no series."""
        if not query:
            return None
        src = self.source
        result = src._range(query, start, end)
        self.queries += 1
        out: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
        for item in result:
            labels = {str(k): str(v) for k, v in (item.get("metric") or {}).items()}
            node = labels.get(self.node_label) if uname is None else src._node_name(labels, uname)
            values = item.get("values") or []
            if node is None or not values:
                continue
            t = np.array([float(v[0]) for v in values])
            y = np.array([sample_value(v[1]) for v in values])
            out.setdefault(node, []).append((t, y))
        if optional:
            if out:
                self.missing.discard(optional)
            else:
                self.missing.add(optional)
                return None
        merged: NodeSeries = {}
        for node, parts in out.items():
            t = np.concatenate([p[0] for p in parts])
            y = np.concatenate([p[1] for p in parts])
            order = np.argsort(t, kind="stable")
            merged[node] = (t[order], y[order])
        return merged

    def _outcome(self, node: str, lo: float, hi: float, cpu: NodeSeries | None, memory: NodeSeries | None,
                 oom: NodeSeries | None, throttled: NodeSeries | None) -> NodeOutcome:
        return NodeOutcome(peak_cpu=_peak(cpu, node, lo, hi), peak_memory=_peak(memory, node, lo, hi),
                           oom_kills=_increase(oom, node, lo, hi, self.source.step_s()),
                           throttled=_peak(throttled, node, lo, hi))




def _peak(series: NodeSeries | None, node: str, lo: float, hi: float) -> float | None:
    """The largest finite sample of ``node`` in [lo, hi]; None without one."""
    if series is None or node not in series:
        return None
    t, y = series[node]
    inside = y[(t >= lo) & (t <= hi)]
    inside = inside[np.isfinite(inside)]
    return float(inside.max()) if inside.size else None


def _increase(series: NodeSeries | None, node: str, lo: float, hi: float, step: float) -> float | None:
    """How much a counter rose over [lo, hi], from the sample before lo on; a drop is a reset (a restart: the
    counter starts again from 0, so its value after the drop is the rise). None without two samples."""
    if series is None or node not in series:
        return None
    t, y = series[node]
    keep = (t >= lo - step) & (t <= hi) & np.isfinite(y)
    y = y[keep]
    if y.size < 2:
        return None
    d = np.diff(y)
    return float(np.where(d >= 0, d, y[1:]).sum())
