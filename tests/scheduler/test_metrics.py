"""scheduler.metrics: the scheduler's registry, the QoS table's rows exported as gauges per controller, read from
the table at each scrape."""

from __future__ import annotations

from prometheus_client import generate_latest

from scheduler.metrics import SchedulerMetrics
from scheduler.qos import ControllerQoS


def test_the_qos_table_is_read_at_each_scrape() -> None:
    table: dict[str, ControllerQoS] = {}
    metrics = SchedulerMetrics(lambda: table)
    assert b'kso_scheduler_controller_qos{controller=' not in generate_latest(metrics.registry)
    table["ns/Deployment/web"] = ControllerQoS("ns/Deployment/web", 0.9, running=30.0, waiting=10.0, binding=0.0,
                                               pods=2, system=False)
    text = generate_latest(metrics.registry).decode()
    assert 'kso_scheduler_controller_qos{controller="ns/Deployment/web"} 0.75' in text
    assert 'kso_scheduler_controller_waiting_seconds{controller="ns/Deployment/web"} 10.0' in text
    metrics.attempts.labels("scheduled").inc()
    assert 'kso_scheduler_schedule_attempts_total{result="scheduled"} 1.0' in generate_latest(metrics.registry).decode()


def test_two_schedulers_in_one_process_keep_their_own_registries() -> None:
    first, second = SchedulerMetrics(dict), SchedulerMetrics(dict)
    first.pending.set(3)
    assert "kso_scheduler_pending_pods 0.0" in generate_latest(second.registry).decode()
