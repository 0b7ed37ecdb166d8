"""What happened on a bind's two nodes during its horizon, according to Prometheus: each node's peak cpu and memory
utilisation (KSO_QUERY_NODE_CPU / KSO_QUERY_NODE_MEMORY: the series kso's forecasts predict), its OOM kills
(KSO_SHADOW_QUERY_OOM) and its peak share of throttled CFS periods (KSO_SHADOW_QUERY_THROTTLED), where those metrics
exist. Queried through forecasting.prometheus's client (its timeouts, bounded retries and errors), for a batch of
binds at once: one range query per metric over the batch's time range, at the scrape interval."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from forecasting.prometheus import PrometheusSettings, PrometheusSource, sample_value
from shadow.judge import NodeOutcome, Record
from shadow.settings import ShadowSettings

NodeSeries = dict[str, tuple[np.ndarray, np.ndarray]]  # node -> (times, values), time-ordered


UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}


def rate_window_s(query: str) -> float:
    """The longest range selector of a PromQL query (``[5m]``, ``[1h30m]``), seconds; 0 without one."""
    longest = 0.0
    for body in re.findall(r"\[([0-9a-z]+)(?::[0-9a-z]*)?\]", query):
        parts = re.findall(r"(\d+)(ms|s|m|h|d|w|y)", body)
        if parts and "".join(n + u for n, u in parts) == body:
            longest = max(longest, sum(int(n) * UNITS[u] for n, u in parts))
    return longest


def check_horizon(prometheus: PrometheusSettings, horizon_s: float) -> None:
    """ValueError when the forecast horizon is shorter than the rate window of the utilisation queries: an outcome
    read through that window would average the horizon with the load before the bind (a node at 99.5 % for the last
    minute reads 79 % through a 5-minute rate)."""
    for name, query in (("KSO_QUERY_NODE_CPU", prometheus.query_node_cpu),
                        ("KSO_QUERY_NODE_MEMORY", prometheus.query_node_memory)):
        window = rate_window_s(query)
        if horizon_s < window:
            raise ValueError(f"KSO_FORECAST_HORIZON {horizon_s:g} s is shorter than the {window:g} s window of {name} "
                             f"({query}): each outcome would be read through that window, mostly before the bind. "
                             f"Set KSO_FORECAST_HORIZON to {window:g} s or more, or use a shorter window in {name}")


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
        self.pod_queries = (shadow.query_pod_cpu.replace("$containers", container_selector),
                            shadow.query_pod_memory.replace("$containers", container_selector))
        self.queries = 0
        # (role, node) -> the time up to which its OOM kills are counted: a kill in the windows of several binds is
        # counted once (NodeOutcome.oom_new)
        self.oom_counted: dict[tuple[str, str], float] = {}
        self.missing: set[str] = set()  # the optional metrics Prometheus had no series of (named in the report)

    @property
    def url(self) -> str:
        return self.source.url

    def window(self, record: Record) -> tuple[float, float]:
        return record.at, record.at + self.horizon_s

    def read(self, records: Sequence[Record]) -> None:
        """Fill each record's chosen_outcome and pick_outcome (kso's node in its schedule: the measured node plus
        what that schedule put there beyond what ran there, Record.pick_share). ``records`` in bind order."""
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
        # each moved pod's own usage where it ran: kso's pick is read with it, not its requests (where known)
        moved = any(r.pick is not None and r.pick != r.chosen for r in records)
        pod_cpu = self._series(self.pod_queries[0], start, end, None, "pod cpu", pod=True) if moved else None
        pod_mem = self._series(self.pod_queries[1], start, end, None, "pod memory", pod=True) if moved else None
        for r in records:
            lo, hi = self.window(r)
            r.chosen_outcome = self._outcome("chosen", r.chosen, lo, hi, cpu, memory, oom, throttled)
            if r.pick is not None:
                r.pick_outcome = self._outcome("kso_pick", r.pick, lo, hi, cpu, memory, oom, throttled)
                r.pick_outcome.pod_share = r.pick_share
                if r.pick != r.chosen and (pod_cpu is not None or pod_mem is not None):
                    self._measured_pod(r, _peak(pod_cpu, r.pod, lo, hi), _peak(pod_mem, r.pod, lo, hi))

    @staticmethod
    def _measured_pod(r: Record, cores: float | None, memory: float | None) -> None:
        """kso's pick with the pod at its measured peak usage instead of its requests, per resource where known."""
        cpu_m = None if cores is None else cores * 1000.0
        mem_mb = None if memory is None else memory / 2**20
        r.pod_usage = (cpu_m, mem_mb)
        o = r.pick_outcome
        if o is None or o.pod_share is None or r.pick_alloc is None:
            return
        shares = list(o.pod_share)
        for k, (used, req, alloc) in enumerate(zip((cpu_m, mem_mb), (r.cpu_m, r.memory_mb), r.pick_alloc,
                                                   strict=True)):
            if used is not None and alloc > 0:
                shares[k] += (used - req) / alloc
                o.pod_measured = True
        o.pod_share = (shares[0], shares[1])

    def _series(self, query: str, start: float, end: float, uname: dict[str, str] | None,
                optional: str = "", pod: bool = False) -> NodeSeries | None:
        """Per node (per namespace/pod with ``pod``), the query's samples; None for an optional query that is off
        ('') or has no series."""
        if not query:
            return None
        src = self.source
        result = src._range(query, start, end)
        self.queries += 1
        out: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
        for item in result:
            labels = {str(k): str(v) for k, v in (item.get("metric") or {}).items()}
            if pod:
                node = f"{labels['namespace']}/{labels['pod']}" if "namespace" in labels and "pod" in labels else None
            else:
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

    def _outcome(self, role: str, node: str, lo: float, hi: float, cpu: NodeSeries | None,
                 memory: NodeSeries | None, oom: NodeSeries | None, throttled: NodeSeries | None) -> NodeOutcome:
        counted = self.oom_counted.get((role, node), -np.inf)
        kills = _increase(oom, node, lo, hi)
        new = _increase(oom, node, max(lo, counted), hi) if counted > lo else kills
        if kills is not None:
            self.oom_counted[(role, node)] = max(counted, hi)
        return NodeOutcome(peak_cpu=_peak(cpu, node, lo, hi), peak_memory=_peak(memory, node, lo, hi),
                           oom_kills=kills, oom_new=new, throttled=_peak(throttled, node, lo, hi))




def _peak(series: NodeSeries | None, node: str, lo: float, hi: float) -> float | None:
    """The largest finite sample of ``node`` in [lo, hi]; None without one."""
    if series is None or node not in series:
        return None
    t, y = series[node]
    inside = y[(t >= lo) & (t <= hi)]
    inside = inside[np.isfinite(inside)]
    return float(inside.max()) if inside.size else None


def _increase(series: NodeSeries | None, node: str, lo: float, hi: float) -> float | None:
    """How much a counter rose in (lo, hi]: the rises from each sample to the next whose time is in (lo, hi] (the
    sample before it may be older); a drop is a reset (a restart: the counter starts again from 0, so its value after
    the drop is the rise). Two windows that touch count a rise once. None without a sample before hi."""
    if series is None or node not in series:
        return None
    t, y = series[node]
    keep = np.isfinite(y)
    t, y = t[keep], y[keep]
    if y.size < 2:
        return None
    later = (t[1:] > lo) & (t[1:] <= hi)
    d = np.diff(y)
    return float(np.where(d >= 0, d, y[1:])[later].sum())
