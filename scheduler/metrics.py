"""The scheduler's Prometheus metrics (one registry per scheduler, so tests can run several), including
the QoS table as gauges computed at scrape time."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from scheduler.qos import ControllerQoS

CYCLE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
BIND_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class _QoSCollector(Collector):
    def __init__(self, table: Callable[[], dict[str, ControllerQoS]]) -> None:
        self.table = table

    def collect(self) -> Iterator[GaugeMetricFamily]:
        rows = list(self.table().values())
        for name, doc, value in (
            ("kso_scheduler_controller_qos", "QoS = R / (R + W + B) of the controller's pods", lambda q: q.qos),
            ("kso_scheduler_controller_slo", "The controller's availability SLO", lambda q: q.slo),
            ("kso_scheduler_controller_ttv_seconds", "Time to violation R / SLO - (R + W + B)", lambda q: q.ttv),
            ("kso_scheduler_controller_running_seconds", "R: running time summed over the controller's pods",
             lambda q: q.running),
            ("kso_scheduler_controller_waiting_seconds", "W: waiting (unscheduled) time summed over its pods",
             lambda q: q.waiting),
            ("kso_scheduler_controller_binding_seconds", "B: time from scheduled to Ready summed over its pods",
             lambda q: q.binding),
        ):
            family = GaugeMetricFamily(name, doc, labels=["controller"])
            for q in rows:
                family.add_metric([q.controller], value(q))
            yield family


class SchedulerMetrics:
    def __init__(self, table: Callable[[], dict[str, ControllerQoS]]) -> None:
        self.registry = r = CollectorRegistry()
        self.attempts = Counter("kso_scheduler_schedule_attempts_total",
                                "Scheduling attempts by result (scheduled, unschedulable, error)", ["result"], registry=r)
        self.cycle_seconds = Histogram("kso_scheduler_scheduling_cycle_seconds",
                                       "Time to decide one pod (filters and scores, without the bind)",
                                       buckets=CYCLE_BUCKETS, registry=r)
        self.bind_seconds = Histogram("kso_scheduler_binding_seconds",
                                      "From the decision to the Binding's answer (waiting for a bind worker included)",
                                      buckets=BIND_BUCKETS, registry=r)
        self.pending = Gauge("kso_scheduler_pending_pods", "Pods in the queue at its last read", registry=r)
        self.leader = Gauge("kso_scheduler_leader", "1 while this replica holds the lease", registry=r)
        r.register(_QoSCollector(table))
