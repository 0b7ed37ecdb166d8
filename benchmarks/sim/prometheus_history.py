"""The replay's input built from a cluster's own Prometheus history (``kso bench --prometheus URL --from --to``).

What is read (metric and label names are ``HistoryNames`` fields, kube-prometheus defaults, each settable with
its ``KSO_HISTORY_*`` variable):

- pods, from kube-state-metrics: ``kube_pod_created`` (which pods exist and when they were created),
  ``kube_pod_deletion_timestamp`` / ``kube_pod_completion_time`` (when they ended), ``kube_pod_owner``
  (the Deployment: a ReplicaSet owner minus its pod-template-hash), ``kube_pod_container_resource_requests``
  and ``..._limits`` (summed over the pod's containers);
- nodes: ``kube_node_status_allocatable`` (cpu, memory) and ``kube_node_labels``;
- usage, from cAdvisor: ``container_cpu_usage_seconds_total`` as a rate and
  ``container_memory_working_set_bytes``, summed over the pod's containers (``container!="", image!=""``:
  the per-container series, not the pod cgroup's own).

How it is queried: the inventory (pods, nodes) as instant queries over consecutive windows of
``inventory_chunk_s`` (``max_over_time(...[window])`` and friends: one point per series per window), the usage as
range queries on the replay's step grid, in chunks of at most ``max_points`` points (series x steps) per query;
a progress line on stderr.

The replay's clock: step k is [start + k step, start + (k+1) step); its usage is what Prometheus returns at
the step's end (the rate over the window ending there, the working set sampled there). Every rule that fills a
hole is an *assumption* and every hole found is a *gap*; ``History`` carries both lists and the report prints
them.
"""

from __future__ import annotations

import json
import math
import re
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.sim.trace import Scenario
from forecasting.history_names import HistoryNames
from forecasting.prometheus import PrometheusSettings, PrometheusSource, sample_value
from kso.core.settings import load_settings

HISTORY_LABEL = "usage: measured (cAdvisor) on the cluster's own history; requests and lifetimes from kube-state-metrics"
HISTORY_SOURCES = ("the cluster's own Prometheus history: kube-state-metrics (pods, owners, requests, lifetimes, "
                   "node allocatable and labels) and cAdvisor (container cpu and memory usage)",)
MAX_SERIES_POINTS = 11_000  # Prometheus rejects a range query of more points per series
MIN_CPU_MILLI = 1.0  # the request given to a pod that requests no cpu (the usage ratio needs a denominator)
MIN_MEMORY_BYTES = 1024.0**2
# kube-state-metrics turns a node label into label_<name with every non [a-zA-Z0-9_] as _>; the usual ones back
WELL_KNOWN_NODE_LABELS = ("kubernetes.io/hostname", "kubernetes.io/os", "kubernetes.io/arch",
                          "node.kubernetes.io/instance-type", "topology.kubernetes.io/zone",
                          "topology.kubernetes.io/region")
POD_TEMPLATE_HASH = re.compile(r"-[bcdfghjklmnpqrstvwxz2456789]{5,10}$")


class HistoryError(ValueError):
    """The history cannot make a scenario (bad range, nothing in it): a user-facing one-line message."""




@dataclass
class History:
    scenario: Scenario
    gaps: list[str] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)
    queries: int = 0
    points: int = 0  # samples returned by Prometheus (series x steps)
    seconds: float = 0.0

    def markdown(self) -> list[str]:
        """The report's section on what the history lacked and what the replay assumed."""
        return ["## The history: gaps and assumptions", "",
                f"Built from {self.queries} queries ({self.points:,} points) in {self.seconds:.1f} s.", "",
                "### Gaps in the history", "", *(f"- {g}" for g in self.gaps or ["none found"]), "",
                "### Assumptions", "", *(f"- {a}" for a in self.assumptions), ""]


# ---- times ----------------------------------------------------------------------------------------------------

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


def parse_duration(text: str) -> float:
    """``5m``, ``1h30m``, ``300s`` or ``300`` (seconds) -> seconds."""
    raw = text.strip()
    if re.fullmatch(r"\d+(\.\d+)?", raw):
        return float(raw)
    if not raw or DURATION.sub("", raw) != "":
        raise HistoryError(f"{text!r} is not a duration (e.g. 5m, 1h30m, 300s)")
    return float(sum(float(n) * UNITS[u] for n, u in DURATION.findall(raw)))


def parse_time(text: str, now: float | None = None) -> float:
    """RFC3339 (``2026-11-20T00:00:00Z``), ``now``, relative to now (``-7d``, ``-1h30m``) or unix seconds."""
    raw = text.strip()
    now = time.time() if now is None else now
    if raw == "now":
        return now
    if raw.startswith("-"):
        try:
            return now - parse_duration(raw[1:])
        except HistoryError:
            raise HistoryError(f"{text!r} is not a time: RFC3339 (2026-11-20T00:00:00Z), now, -7d or unix seconds") from None
    if re.fullmatch(r"\d{9,}(\.\d+)?", raw):
        return float(raw)
    try:
        when = datetime.fromisoformat(raw)
    except ValueError:
        raise HistoryError(f"{text!r} is not a time: RFC3339 (2026-11-20T00:00:00Z), now, -7d or unix seconds") from None
    if when.tzinfo is None:
        raise HistoryError(f"{text!r} has no UTC offset: add Z or +01:00 (RFC3339)")
    return when.timestamp()


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# ---- querying -----------------------------------------------------------------------------------------------

class _Progress:
    """One line on stderr per query on a terminal (rewritten), every 10% otherwise."""

    def __init__(self, total: int, stream: Any = None, header: str = "") -> None:
        self.total, self.done, self.stream, self.header = max(total, 1), 0, stream or sys.stderr, header
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.t0 = time.perf_counter()
        self._last = -1

    def __call__(self, what: str, points: int) -> None:
        if self.done == 0 and self.header:
            self.stream.write(self.header + "\n")  # once Prometheus has answered
        self.done += 1
        pct = 100 * self.done // self.total
        if not self.tty and pct // 10 == self._last // 10 and self.done < self.total:
            return
        self._last = pct
        bar = "#" * (30 * self.done // self.total) + "." * (30 - 30 * self.done // self.total)
        end = "\n" if self.done >= self.total or not self.tty else "\r"
        self.stream.write(f"prometheus [{bar}] {self.done}/{self.total} queries {time.perf_counter() - self.t0:6.1f} s "
                          f"({what}, {points:,} points){end}")
        self.stream.flush()


class _Client:
    """The project's Prometheus client (forecasting.prometheus: timeouts, bounded retries, errors that name the
    URL and the cause) for instant and range queries at given times."""

    def __init__(self, url: str, names: HistoryNames) -> None:
        settings = load_settings(PrometheusSettings)
        settings.timeout_s = names.timeout_s
        self.source = PrometheusSource(settings, url=url)
        self.url = self.source.url
        self.queries = 0
        self.points = 0

    def instant(self, query: str, at: float) -> list[dict[str, Any]]:
        src = self.source
        out = src._call(f"query {query!r}", src.client.custom_query, query,
                        params={"time": f"{at:.3f}", "timeout": f"{int(src.settings.timeout_s)}s"})
        self.queries += 1
        self.points += len(out)
        return out

    def range(self, query: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        src = self.source
        out = src._call(f"range query {query!r}", src.client.custom_query_range, query,
                        start_time=datetime.fromtimestamp(start, UTC), end_time=datetime.fromtimestamp(end, UTC),
                        step=f"{step:g}", params={"timeout": f"{int(src.settings.timeout_s)}s"})
        self.queries += 1
        self.points += sum(len(s.get("values") or ()) for s in out)
        return out


# ---- the builder ----------------------------------------------------------------------------------------------

@dataclass
class _Pod:
    namespace: str
    name: str
    uid: str
    created: float = math.inf
    last_seen: float = -math.inf
    deleted: float = math.inf
    completed: float = math.inf
    owner_kind: str = ""
    owner_name: str = ""
    requests: dict[str, float] = field(default_factory=dict)
    limits: dict[str, float] = field(default_factory=dict)
    changed: set[str] = field(default_factory=set)


def _sel(names: HistoryNames, metric: str, extra: str = "") -> str:
    matchers = ",".join(m for m in (names.ksm_selector, extra) if m)
    return f"{metric}{{{matchers}}}" if matchers else metric


def _node_sort_key(name: str) -> list[Any]:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


class HistoryBuilder:
    def __init__(self, url: str, start: float, end: float, step_s: float = 300.0, names: HistoryNames | None = None,
                 stream: Any = None) -> None:
        if not math.isfinite(start) or not math.isfinite(end) or end <= start:
            raise HistoryError(f"--from {_iso(start) if math.isfinite(start) else start} is not before --to "
                               f"{_iso(end) if math.isfinite(end) else end}")
        if step_s < 1:
            raise HistoryError(f"--step {step_s:g} s: at least 1 s")
        self.n_steps = int(math.floor((end - start) / step_s + 1e-9))
        if self.n_steps < 1:
            raise HistoryError(f"--from {_iso(start)} --to {_iso(end)} is shorter than one step of {step_s:g} s")
        self.start, self.end, self.step = float(start), float(start + self.n_steps * step_s), float(step_s)
        self.names = names or load_settings(HistoryNames)
        self.client = _Client(url, self.names)
        self.stream = stream or sys.stderr
        self.gaps: list[str] = []
        self.assumptions: list[str] = []

    # -- inventory --
    def _windows(self) -> list[tuple[float, float]]:
        chunk = max(self.step, float(self.names.inventory_chunk_s))
        edges = list(np.arange(self.start, self.end, chunk)) + [self.end]
        return [(float(a), float(b)) for a, b in zip(edges[:-1], edges[1:], strict=True)]

    def _inventory(self, progress: _Progress) -> tuple[dict[tuple[str, str, str], _Pod], dict[str, dict[str, float]],
                                                       dict[str, dict[str, str]], set[str]]:
        n = self.names
        pod_by = f"{n.namespace_label},{n.pod_label},{n.uid_label}"
        pods: dict[tuple[str, str, str], _Pod] = {}
        alloc: dict[str, dict[str, float]] = {}
        changed_alloc: set[str] = set()
        labels: dict[str, dict[str, str]] = {}
        seen: dict[str, int] = {}

        def pod_of(m: dict[str, str]) -> _Pod | None:
            key = (m.get(n.namespace_label, ""), m.get(n.pod_label, ""), m.get(n.uid_label, ""))
            if not key[1]:
                return None
            if key not in pods:
                pods[key] = _Pod(*key)
            return pods[key]

        for a, b in self._windows():
            w = f"{int(round(b - a))}s"
            step = f"{int(self.step)}s"
            queries = {
                "created": f"max by ({pod_by}) (max_over_time({_sel(n, n.pod_created)}[{w}]))",
                "last_seen": f"max by ({pod_by}) (max_over_time(timestamp({_sel(n, n.pod_created)})[{w}:{step}]))",
                "deleted": f"min by ({pod_by}) (min_over_time({_sel(n, n.pod_deletion)}[{w}]))",
                "completed": f"min by ({pod_by}) (min_over_time({_sel(n, n.pod_completion)}[{w}]))",
                "owner": f"max by ({pod_by},{n.owner_kind_label},{n.owner_name_label}) "
                         f"(last_over_time({_sel(n, n.pod_owner)}[{w}]))",
                "requests": f"sum by ({pod_by},{n.resource_label}) (max by ({pod_by},{n.container_label},"
                            f"{n.resource_label}) (max_over_time({_sel(n, n.pod_requests)}[{w}])))",
                "requests_min": f"sum by ({pod_by},{n.resource_label}) (max by ({pod_by},{n.container_label},"
                                f"{n.resource_label}) (min_over_time({_sel(n, n.pod_requests)}[{w}])))",
                "limits": f"sum by ({pod_by},{n.resource_label}) (max by ({pod_by},{n.container_label},"
                          f"{n.resource_label}) (max_over_time({_sel(n, n.pod_limits)}[{w}])))",
                "alloc": f"max by ({n.node_label},{n.resource_label}) (max_over_time({_sel(n, n.node_allocatable)}[{w}]))",
                "alloc_min": f"min by ({n.node_label},{n.resource_label}) "
                             f"(min_over_time({_sel(n, n.node_allocatable)}[{w}]))",
                "labels": f"last_over_time({_sel(n, n.node_labels)}[{w}])",
            }
            for what, q in queries.items():
                result = self.client.instant(q, b)
                progress(f"{what} to {_iso(b)}", len(result))
                seen[what] = seen.get(what, 0) + len(result)
                for item in result:
                    m = item.get("metric") or {}
                    v = sample_value((item.get("value") or [None, None])[1])
                    if what in ("alloc", "alloc_min"):
                        node, res = m.get(n.node_label, ""), m.get(n.resource_label, "")
                        if node and res in ("cpu", "memory") and math.isfinite(v):
                            d = alloc.setdefault(node, {})
                            if what == "alloc_min" and res in d and v != d[res]:
                                changed_alloc.add(node)
                            if what == "alloc" and res in d and v != d[res]:
                                changed_alloc.add(node)
                            d[res] = max(d.get(res, v), v)
                        continue
                    if what == "labels":
                        node = m.get(n.node_label, "")
                        if node:
                            labels[node] = {k: val for k, val in m.items() if k.startswith("label_")}
                        continue
                    pod = pod_of(m)
                    if pod is None:
                        continue
                    if what == "created" and math.isfinite(v):
                        pod.created = min(pod.created, v)
                    elif what == "last_seen" and math.isfinite(v):
                        pod.last_seen = max(pod.last_seen, v)
                    elif what == "deleted" and math.isfinite(v):
                        pod.deleted = min(pod.deleted, v)
                    elif what == "completed" and math.isfinite(v) and v > 0:
                        pod.completed = min(pod.completed, v)
                    elif what == "owner":
                        pod.owner_kind = m.get(n.owner_kind_label, "")
                        pod.owner_name = m.get(n.owner_name_label, "")
                    elif what in ("requests", "limits", "requests_min"):
                        res = m.get(n.resource_label, "")
                        if res not in ("cpu", "memory") or not math.isfinite(v):
                            continue
                        if what == "requests_min":
                            if abs(pod.requests.get(res, v) - v) > 1e-9 * max(abs(v), 1.0):
                                pod.changed.add(res)
                            continue
                        d = pod.requests if what == "requests" else pod.limits
                        if res in d and abs(d[res] - v) > 1e-9 * max(abs(v), 1.0):
                            pod.changed.add(res)
                        d[res] = max(d.get(res, v), v)
        for what, metric in (("created", n.pod_created), ("requests", n.pod_requests), ("alloc", n.node_allocatable)):
            if not seen.get(what):
                raise HistoryError(f"no {metric} series between {_iso(self.start)} and {_iso(self.end)} at "
                                   f"{self.client.url}: is kube-state-metrics scraped there (and the range right)?")
        for what, metric, meaning in (
                ("deleted", n.pod_deletion, "pods end at their last sample"),
                ("completed", n.pod_completion, "pods end at their deletion or last sample"),
                ("owner", n.pod_owner, "no owners: every pod is bare"),
                ("limits", n.pod_limits, "no limits: no pod has any"),
                ("labels", n.node_labels, "nodes get only kubernetes.io/hostname")):
            if not seen.get(what):
                self.gaps.append(f"missing series: no {metric} in the range ({meaning})")
        return pods, alloc, labels, changed_alloc

    # -- usage --
    def _usage(self, keys: dict[tuple[str, str], list[int]], arrival: np.ndarray, departure: np.ndarray,
               progress: _Progress, chunk_steps: int) -> tuple[np.ndarray, dict[str, int]]:
        n = self.names
        fn = n.cpu_rate.lower()
        by = f"{n.namespace_label},{n.pod_label}"
        sel = n.container_selector
        # per container first (max: one value if two scrape jobs or exporters report the same container), then the pod
        per = f"{by},{n.container_label}"
        queries = (f"sum by ({by}) (max by ({per}) ({fn}({n.container_cpu}{{{sel}}}[{n.cpu_window}])))",
                   f"sum by ({by}) (max by ({per}) ({n.container_memory}{{{sel}}}))")
        T = self.n_steps
        usage = np.full((len(arrival), T, 2), np.nan, dtype=np.float64)
        counts = {"nan": 0, "unknown_series": 0, "outside_life": 0}
        unknown: set[tuple[str, str]] = set()
        for k0 in range(0, T, chunk_steps):
            k1 = min(T, k0 + chunk_steps)
            for r, q in enumerate(queries):
                # step k's value is read at the step's end: start + (k + 1) step
                result = self.client.range(q, self.start + (k0 + 1) * self.step, self.start + k1 * self.step, self.step)
                progress(f"{'cpu' if r == 0 else 'memory'} steps {k0}-{k1 - 1}",
                         sum(len(s.get('values') or ()) for s in result))
                for item in result:
                    m = item.get("metric") or {}
                    key = (m.get(n.namespace_label, ""), m.get(n.pod_label, ""))
                    owners = keys.get(key)
                    values = item.get("values") or []
                    if owners is None:
                        unknown.add(key)
                        continue
                    t = np.array([float(v[0]) for v in values])
                    y = np.array([sample_value(v[1]) for v in values])
                    k = np.rint((t - self.start) / self.step).astype(np.int64) - 1
                    ok = (k >= 0) & (k < T)
                    k, y = k[ok], y[ok]
                    counts["nan"] += int(np.isnan(y).sum())
                    if len(owners) == 1:
                        p = np.full(len(k), owners[0])
                    else:  # one name, several pods over time (a StatefulSet's pod, a re-created pod): the live one
                        p = np.full(len(k), -1)
                        for i in owners:
                            p[(arrival[i] <= k) & (departure[i] > k)] = i
                    live = (p >= 0)
                    live[live] &= (arrival[p[live]] <= k[live]) & (departure[p[live]] > k[live])
                    counts["outside_life"] += int((~live).sum())
                    usage[p[live], k[live], r] = y[live]
        counts["unknown_series"] = len(unknown)
        return usage, counts

    def build(self) -> History:
        t0 = time.perf_counter()
        n = self.names
        windows = self._windows()
        progress = _Progress(len(windows) * 11, self.stream, f"reading {self.client.url}: {_iso(self.start)} to "
                             f"{_iso(self.end)}, {self.n_steps} steps of {self.step:g} s")
        pods, alloc, node_labels, changed_alloc = self._inventory(progress)
        T, S, step = self.n_steps, self.start, self.step

        # nodes: every node seen with both allocatable resources, in name order (the autoscaler's pool order)
        named = set(alloc) | set(node_labels)
        nodes = sorted((x for x in alloc if {"cpu", "memory"} <= set(alloc[x])), key=_node_sort_key)
        if missing := sorted(named - set(nodes), key=_node_sort_key):
            self.gaps.append(f"nodes without allocatable cpu and memory ({len(missing)}, left out of the pool): "
                             f"{', '.join(missing[:10])}{' ...' if len(missing) > 10 else ''}")
        if not nodes:
            raise HistoryError(f"no node with allocatable cpu and memory ({n.node_allocatable}) between {_iso(S)} and "
                               f"{_iso(self.end)}")
        if changed_alloc:
            self.gaps.append(f"allocatable changed within the range on {len(changed_alloc)} node(s) "
                             f"({', '.join(sorted(changed_alloc)[:5])}): the largest value is used")

        # pods: lifetimes on the step grid
        no_created = [p for p in pods.values() if not math.isfinite(p.created)]
        if no_created:
            self.gaps.append(f"pods with series but no {n.pod_created} ({len(no_created)}): left out")
        rows = [p for p in pods.values() if math.isfinite(p.created)]
        no_req = [p for p in rows if not p.requests]
        if no_req:
            self.gaps.append(f"pods without {n.pod_requests} ({len(no_req)}, e.g. {no_req[0].namespace}/{no_req[0].name})"
                             f": given {MIN_CPU_MILLI:g} millicore and {MIN_MEMORY_BYTES / 2**20:g} MiB")
        changed = [p for p in rows if p.changed]
        if changed:
            self.gaps.append(f"requests or limits changed within a pod's life ({len(changed)} pods): the largest "
                             "value is used")
        arrival_l, departure_l, keep = [], [], []
        outlive = 0
        for p in rows:
            a = max(0, int(math.ceil((p.created - S) / step - 1e-9)))
            ended = min(p.deleted, p.completed)
            if math.isfinite(ended):
                end_t = ended
            elif p.last_seen > self.end - step:
                end_t = math.inf  # still there at the end of the range
            else:
                end_t = p.last_seen
            if math.isinf(end_t) or end_t >= self.end:
                d = T + 1
                outlive += 1
            elif math.isfinite(ended):
                d = max(a + 1, int(math.ceil((end_t - S) / step - 1e-9)))
            else:  # last reported during a step: it lived through that step
                d = max(a + 1, int(math.floor((end_t - S) / step)) + 1)
            if a >= T or (math.isfinite(end_t) and end_t <= S):
                continue
            arrival_l.append(a)
            departure_l.append(d)
            keep.append(p)
        if not keep:
            raise HistoryError(f"no pod alive between {_iso(S)} and {_iso(self.end)} in {n.pod_created} at {self.client.url}")
        order = sorted(range(len(keep)), key=lambda i: (arrival_l[i], keep[i].created, keep[i].namespace, keep[i].name))
        keep = [keep[i] for i in order]
        arrival = np.array([arrival_l[i] for i in order], dtype=np.int64)
        departure = np.array([departure_l[i] for i in order], dtype=np.int64)
        cpu = np.array([max(p.requests.get("cpu", 0.0) * 1000.0, MIN_CPU_MILLI) for p in keep])
        mem = np.array([max(p.requests.get("memory", 0.0), MIN_MEMORY_BYTES) for p in keep])
        lim_c = np.array([p.limits.get("cpu", 0.0) * 1000.0 for p in keep])
        lim_m = np.array([p.limits.get("memory", 0.0) for p in keep])

        # usage
        keys: dict[tuple[str, str], list[int]] = {}
        for i, p in enumerate(keep):
            keys.setdefault((p.namespace, p.name), []).append(i)
        chunk_steps = int(max(1, min(MAX_SERIES_POINTS - 1, n.max_points // max(1, len(keys)))))
        progress.total = progress.done + 2 * math.ceil(T / chunk_steps)
        absolute, counts = self._usage(keys, arrival, departure, progress, chunk_steps)
        absolute[:, :, 0] *= 1000.0  # cores -> millicores
        ratio, filled = self._fill(absolute, arrival, departure, cpu, mem, keep)
        if counts["nan"]:
            self.gaps.append(f"NaN usage samples: {counts['nan']} (treated as missing)")
        if counts["unknown_series"]:
            self.gaps.append(f"cAdvisor pods with no {n.pod_created} ({counts['unknown_series']}): their usage is not "
                             "replayed")
        if counts["outside_life"]:
            self.gaps.append(f"usage samples outside the pod's life by kube-state-metrics: {counts['outside_life']} "
                             "(ignored; e.g. a last sample still seen through Prometheus' lookback after the pod ended)")
        self.gaps += filled

        owners = [POD_TEMPLATE_HASH.sub("", p.owner_name) if p.owner_kind == "ReplicaSet" else
                  (p.owner_name if p.owner_kind not in ("", "<none>") else "") for p in keep]
        qos = [("BestEffort" if not p.requests and not p.limits else
                "Guaranteed" if p.limits and all(p.limits.get(r, 0) == p.requests.get(r, -1) for r in ("cpu", "memory"))
                else "Burstable") for p in keep]
        labels = [_node_labels(node_labels.get(x, {}), x) for x in nodes]
        names_ = [p.name if p.namespace in ("", "default") else f"{p.namespace}/{p.name}" for p in keep]
        self.assumptions += [
            f"clock: step k = [from + k x {step:g} s, from + (k+1) x {step:g} s); its usage is what Prometheus returns at "
            f"the step's end: cpu = {n.cpu_rate.lower()}({n.container_cpu}[{n.cpu_window}]), memory = {n.container_memory} "
            "(the newest sample), each summed over the pod's containers",
            "arrival: the first step boundary at or after the pod's creation (kube_pod_created); pods created before "
            "--from arrive at step 0. Every policy places every pod itself: where it ran is not read",
            "departure: the step boundary at or after the deletion timestamp or completion time, else the end of the "
            "step of the pod's last kube-state-metrics sample (it ran until the next scrape); a pod still "
            f"reported within the last step outlives the replay ({outlive} pods)",
            "usage holes inside a pod's life: the previous sample carried forward; before its first sample: the first "
            "sample; a pod with no usage sample at all uses exactly its request",
            "requests and limits: the sum over the pod's containers (init containers not counted); QoS from them. "
            "A container reported twice (two kube-state-metrics or cAdvisor scrape jobs) counts once (max)",
            "Deployment: the ReplicaSet owner's name minus its pod-template-hash; other owners kept as they are",
            "nodes: every node with allocatable cpu and memory in the range, in name order (the autoscaler's pool "
            "order), each for the whole replay; node labels from kube_node_labels (names as kube-state-metrics wrote "
            "them, the usual ones mapped back); taints are not read",
        ]
        s = Scenario(
            name=f"history-{len(nodes)}n-{T * step / 3600:g}h", step_s=step, n_steps=T, node_names=nodes,
            node_cpu=np.array([alloc[x]["cpu"] * 1000.0 for x in nodes]),
            node_memory=np.array([alloc[x]["memory"] for x in nodes]),
            pod_names=names_, pod_cpu=cpu, pod_memory=mem, pod_arrival=arrival, pod_departure=departure,
            pod_usage=ratio, pod_qos=qos, pod_profile=list(owners), node_labels=labels,
            sources=HISTORY_SOURCES, pod_cpu_limit=lim_c, pod_memory_limit=lim_m, pod_owner=owners,
            usage_label=HISTORY_LABEL,
            notes=[f"history: {self.client.url} from {_iso(S)} to {_iso(self.end)} at a {step:g} s step "
                   f"({len(nodes)} nodes, {len(keep)} pods); gaps and assumptions in their own section"])
        return History(s, self.gaps, self.assumptions, self.client.queries, self.client.points,
                       time.perf_counter() - t0)

    def _fill(self, absolute: np.ndarray, arrival: np.ndarray, departure: np.ndarray, cpu: np.ndarray,
              mem: np.ndarray, keep: list[_Pod]) -> tuple[np.ndarray, list[str]]:
        T = self.n_steps
        req = np.stack([cpu, mem], axis=1)
        ratio = np.zeros(absolute.shape, dtype=np.float32)
        no_usage: list[str] = []
        holes = np.zeros(2, dtype=np.int64)
        life_steps = 0
        empty_steps = np.ones((T, 2), dtype=bool)  # no pod has a sample at this step
        any_alive = np.zeros(T, dtype=bool)
        for i in range(len(arrival)):
            a, d = int(arrival[i]), int(min(departure[i], T))
            any_alive[a:d] = True
            life_steps += d - a
            for r in range(2):
                y = absolute[i, a:d, r]
                have = np.isfinite(y)
                empty_steps[a:d, r] &= ~have
                if not have.any():
                    if r == 0:
                        no_usage.append(keep[i].name)
                    ratio[i, a:d, r] = 1.0
                    continue
                holes[r] += int((~have).sum())
                if not have.all():
                    idx = np.where(have, np.arange(len(y)), -1)
                    idx = np.maximum.accumulate(idx)
                    idx[idx < 0] = int(np.flatnonzero(have)[0])
                    y = y[idx]
                ratio[i, a:d, r] = (y / req[i, r]).astype(np.float32)
        gaps = []
        if no_usage:
            gaps.append(f"pods without usage ({len(no_usage)}, e.g. {', '.join(no_usage[:5])}): each uses its request")
        if holes.any():
            gaps.append(f"missing usage steps inside pods' lives: cpu {holes[0]:,}, memory {holes[1]:,} of "
                        f"{life_steps:,} pod-steps (filled as the assumptions say)")
        for r, res in enumerate(("cpu", "memory")):
            dead = np.flatnonzero(empty_steps[:, r] & any_alive)
            if len(dead) and len(dead) < T:
                gaps.append(f"missing steps: no {res} sample for any pod at {len(dead)} step(s): "
                            f"{_ranges(dead, self.start, self.step)}")
        return ratio, gaps


def _ranges(steps: np.ndarray, start: float, step: float) -> str:
    """Consecutive steps as 'from-to' time ranges (at most 5 listed)."""
    breaks = np.flatnonzero(np.diff(steps) > 1)
    firsts = np.concatenate([[steps[0]], steps[breaks + 1]])
    lasts = np.concatenate([steps[breaks], [steps[-1]]])
    parts = [f"{_iso(start + a * step)}..{_iso(start + (b + 1) * step)}" for a, b in zip(firsts, lasts, strict=True)]
    return ", ".join(parts[:5]) + (f" and {len(parts) - 5} more" if len(parts) > 5 else "")


def _node_labels(raw: dict[str, str], node: str) -> dict[str, str]:
    back = {"label_" + re.sub(r"[^a-zA-Z0-9_]", "_", k): k for k in WELL_KNOWN_NODE_LABELS}
    out = {back.get(k, k.removeprefix("label_")): v for k, v in raw.items() if v != ""}
    out["kubernetes.io/hostname"] = out.get("kubernetes.io/hostname") or node
    return out


def build_history(url: str, start: float, end: float, step_s: float = 300.0, names: HistoryNames | None = None,
                  stream: Any = None) -> History:
    """The scenario of the module docstring, with its gaps and assumptions."""
    return HistoryBuilder(url, start, end, step_s, names, stream).build()


# ---- a built scenario on disk (worker processes load it rather than query again) ------------------------------

ARRAYS = ("node_cpu", "node_memory", "pod_cpu", "pod_memory", "pod_arrival", "pod_departure", "pod_usage",
          "pod_cpu_limit", "pod_memory_limit")
META = ("name", "step_s", "n_steps", "node_names", "pod_names", "pod_qos", "pod_profile", "node_labels", "node_taints",
        "sources", "notes", "pod_owner", "usage_label")


def save_scenario(s: Scenario, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {k: getattr(s, k) for k in META}
    meta["sources"] = list(s.sources)
    arrays = {k: getattr(s, k) for k in ARRAYS if getattr(s, k) is not None}
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, meta=np.array(json.dumps(meta)), **arrays)
    tmp.replace(path)
    return path


def load_scenario(path: Path) -> Scenario:
    with np.load(path) as z:
        meta = json.loads(str(z["meta"]))
        arrays = {k: z[k] for k in ARRAYS if k in z.files}
    meta["sources"] = tuple(meta["sources"])
    meta["node_taints"] = [[tuple(t) for t in ts] for ts in meta["node_taints"]]
    return Scenario(**meta, **arrays)
