"""QoS-driven queue order (the k8s-qos-driven-plugins seed): per controller, how close its pods are to
violating their availability SLO, from the pods' own timestamps and conditions.

Per pod, at time ``now`` (seconds since the epoch):
    created   = metadata.creationTimestamp
    scheduled = PodScheduled condition (True) lastTransitionTime, else the time kso first saw it bound
    ready     = Ready condition (True) lastTransitionTime
    W (waiting) = (scheduled or now) - created
    B (binding) = (ready or now) - scheduled          (0 while not scheduled)
    R (running) = now - ready                         (0 while not ready)
each clamped at 0 (clocks of different writers disagree a little).

Rules the seed leaves open, chosen here:
- Grouping: the pod annotation ``controller`` (KSO_QOS_CONTROLLER_KEY); a pod without it belongs to its
  owner (``namespace/Kind/name`` of its controller reference), and a pod with neither is its own group.
- Combining: a controller's R, W and B are the sums over its current (non-terminal) pods, so QoS is the
  share of its replica-time spent running. Its SLO is the largest valid ``slo`` annotation among its
  pods (default 0.80): one strict pod makes the whole controller strict, never the reverse.
- Ties: kube-system pods first; then lower TTV; then higher spec.priority; then older creation; then
  namespace/name, so the order is total and does not depend on arrival order.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

DEFAULT_SLO = 0.80
SYSTEM_NAMESPACE = "kube-system"
ORDERS = ("qos", "fifo", "priority")


def parse_time(raw: Any) -> float:
    """An RFC 3339 timestamp as seconds since the epoch; NaN when missing or unparsable."""
    if not isinstance(raw, str) or not raw:
        return math.nan
    try:
        return datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return math.nan


def parse_slo(raw: str | None) -> float | None:
    """An SLO annotation as a fraction in (0, 1]; None when missing or not a number in that range."""
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if 0.0 < value <= 1.0 else None


@dataclass(slots=True)
class PodClock:
    """The timestamps of one pod that QoS needs, and how it is grouped."""

    uid: str
    namespace: str
    name: str
    controller: str
    slo: float | None  # None: no valid annotation
    created: float  # NaN: unknown
    scheduled: float  # NaN: not scheduled (yet)
    ready: float  # NaN: not Ready
    priority: int = 0
    held: str = ""  # why kube-scheduler would not schedule it now (scheduling gates, being deleted); "" = free

    def times(self, now: float) -> tuple[float, float, float]:
        """(R, W, B) in seconds at ``now``."""
        created = self.created if not math.isnan(self.created) else now
        if math.isnan(self.scheduled):
            return 0.0, max(0.0, now - created), 0.0
        waiting = max(0.0, self.scheduled - created)
        if math.isnan(self.ready):
            return 0.0, waiting, max(0.0, now - self.scheduled)
        return max(0.0, now - self.ready), waiting, max(0.0, self.ready - self.scheduled)


def controller_of(meta: dict[str, Any], controller_key: str) -> str:
    """The group a pod's QoS counts toward (see the module docstring)."""
    annotations = meta.get("annotations") or {}
    value = annotations.get(controller_key) if isinstance(annotations, dict) else None
    if isinstance(value, str) and value:
        return value
    namespace = meta.get("namespace") or "default"
    refs = meta.get("ownerReferences") or []
    if isinstance(refs, list):
        for ref in refs:
            if isinstance(ref, dict) and ref.get("controller") and isinstance(ref.get("name"), str):
                return f"{namespace}/{ref.get('kind', '')}/{ref['name']}"
    return f"{namespace}/Pod/{meta.get('name', '')}"


def _condition_time(status: dict[str, Any], kind: str) -> float:
    for cond in status.get("conditions") or ():
        if isinstance(cond, dict) and cond.get("type") == kind and cond.get("status") == "True":
            return parse_time(cond.get("lastTransitionTime"))
    return math.nan


def clock_from_k8s(pod: dict[str, Any], controller_key: str, slo_key: str, seen_bound_at: float = math.nan) -> PodClock:
    """A PodClock from a Pod object (plain dict). Never raises: unusable fields count as unknown."""
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), dict) else {}
    spec = pod.get("spec") if isinstance(pod.get("spec"), dict) else {}
    status = pod.get("status") if isinstance(pod.get("status"), dict) else {}
    annotations = meta.get("annotations") if isinstance(meta.get("annotations"), dict) else {}
    slo_raw = annotations.get(slo_key)
    scheduled = _condition_time(status, "PodScheduled")
    if math.isnan(scheduled) and spec.get("nodeName"):
        scheduled = seen_bound_at
    priority = spec.get("priority")
    held = "scheduling gates" if spec.get("schedulingGates") else "being deleted" if meta.get("deletionTimestamp") else ""
    return PodClock(
        uid=str(meta.get("uid") or ""),
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name") or ""),
        controller=controller_of(meta, controller_key),
        slo=parse_slo(slo_raw if isinstance(slo_raw, str) else None),
        created=parse_time(meta.get("creationTimestamp")),
        scheduled=scheduled,
        ready=_condition_time(status, "Ready"),
        priority=priority if isinstance(priority, int) and not isinstance(priority, bool) else 0,
        held=held,
    )


@dataclass(slots=True)
class ControllerQoS:
    controller: str
    slo: float
    running: float  # R, seconds summed over the controller's pods
    waiting: float  # W
    binding: float  # B
    pods: int
    system: bool  # has kube-system pods

    # QoS = R / (R + W + B); a controller with no time yet has met its SLO (1.0), as the seed prints it.
    @property
    def qos(self) -> float:
        total = self.running + self.waiting + self.binding
        return self.running / total if total > 0 else 1.0

    # TTV = R / SLO - (R + W + B): how much more non-running time the controller can absorb before its
    # QoS falls below its SLO (negative: it is violating it already).
    @property
    def ttv(self) -> float:
        return self.running / self.slo - (self.running + self.waiting + self.binding)

    def row(self) -> dict[str, Any]:
        return {"controller": self.controller, "qos": round(self.qos, 6), "slo": self.slo, "ttv_s": round(self.ttv, 3),
                "running_s": round(self.running, 3), "waiting_s": round(self.waiting, 3),
                "binding_s": round(self.binding, 3), "pods": self.pods}


def controller_table(clocks: Iterable[PodClock], now: float, default_slo: float = DEFAULT_SLO) -> dict[str, ControllerQoS]:
    """Per controller: summed R, W, B and the SLO (the strictest of its pods', else ``default_slo``)."""
    out: dict[str, ControllerQoS] = {}
    for c in clocks:
        r, w, b = c.times(now)
        q = out.get(c.controller)
        if q is None:
            q = out[c.controller] = ControllerQoS(c.controller, math.nan, 0.0, 0.0, 0.0, 0, False)
        q.running += r
        q.waiting += w
        q.binding += b
        q.pods += 1
        q.system = q.system or c.namespace == SYSTEM_NAMESPACE
        if c.slo is not None and (math.isnan(q.slo) or c.slo > q.slo):
            q.slo = c.slo
    for q in out.values():
        if math.isnan(q.slo):
            q.slo = default_slo
    return out


def sort_key(order: str, clock: PodClock, table: dict[str, ControllerQoS]) -> tuple[Any, ...]:
    """The queue key of a pending pod under ``order`` (smaller first); see the module docstring for qos."""
    created = clock.created if not math.isnan(clock.created) else math.inf
    if order == "fifo":
        return (created, clock.namespace, clock.name)
    if order == "priority":  # kube-scheduler's PrioritySort: higher priority, then older
        return (-clock.priority, created, clock.namespace, clock.name)
    q = table.get(clock.controller)
    ttv = q.ttv if q is not None else 0.0
    return (clock.namespace != SYSTEM_NAMESPACE, ttv, -clock.priority, created, clock.namespace, clock.name)


def go_duration(seconds: float) -> str:
    """Seconds as Go's time.Duration.String() prints them (to the millisecond): 2h4m6s, -2m22.541s, 591ms, 0s."""
    if not math.isfinite(seconds):
        return "inf" if seconds > 0 else "-inf" if seconds < 0 else "NaN"
    ms = int(round(seconds * 1000))
    sign = "-" if ms < 0 else ""
    ms = abs(ms)
    if ms == 0:
        return "0s"
    if ms < 1000:
        return f"{sign}{ms}ms"
    h, rest = divmod(ms, 3_600_000)
    m, rest = divmod(rest, 60_000)
    s, frac = divmod(rest, 1000)
    sec = f"{s}.{frac:03d}".rstrip("0").rstrip(".") if frac else str(s)
    text = f"{h}h{m}m{sec}s" if h else f"{m}m{sec}s" if m else f"{sec}s"
    return sign + text


TABLE_HEADER = ("CONTROLLER", "QOS/SLO", "TTV", "RUNNING", "WAITING", "BINDING")


def format_table(table: dict[str, ControllerQoS]) -> str:
    """The seed's debug table: one row per controller, most urgent (lowest TTV) first, columns right-aligned."""
    rows = [TABLE_HEADER]
    for q in sorted(table.values(), key=lambda q: (q.ttv, q.controller)):
        rows.append((q.controller, f"{q.qos:.2f}/{q.slo:.2f}", go_duration(q.ttv), go_duration(q.running),
                     go_duration(q.waiting), go_duration(q.binding)))
    width = [max(20, *(len(r[i]) for r in rows)) for i in range(len(TABLE_HEADER))]
    return "".join(" ".join(cell.rjust(width[i]) for i, cell in enumerate(r)) + "\n" for r in rows)
