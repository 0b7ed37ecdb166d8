"""The names ``kso bench --prometheus`` reads (kube-prometheus defaults) and its query sizes, each settable with its
``KSO_HISTORY_*`` variable. A module of its own, light to import: every kso command checks the configuration
against the declared settings before it starts."""

from __future__ import annotations

from dataclasses import dataclass

from kso.core.settings import setting

METRIC = "the metric name read (kube-prometheus default)"
LABEL = "the label name read (kube-prometheus default)"


@dataclass(slots=True)
class HistoryNames:
    """Metric and label names (kube-prometheus defaults) and query sizes."""

    pod_created: str = setting("KSO_HISTORY_POD_CREATED", "kube_pod_created", help=METRIC)
    pod_deletion: str = setting("KSO_HISTORY_POD_DELETION", "kube_pod_deletion_timestamp", help=METRIC)
    pod_completion: str = setting("KSO_HISTORY_POD_COMPLETION", "kube_pod_completion_time", help=METRIC)
    pod_owner: str = setting("KSO_HISTORY_POD_OWNER", "kube_pod_owner", help=METRIC)
    pod_requests: str = setting("KSO_HISTORY_POD_REQUESTS", "kube_pod_container_resource_requests", help=METRIC)
    pod_limits: str = setting("KSO_HISTORY_POD_LIMITS", "kube_pod_container_resource_limits", help=METRIC)
    node_allocatable: str = setting("KSO_HISTORY_NODE_ALLOCATABLE", "kube_node_status_allocatable", help=METRIC)
    node_labels: str = setting("KSO_HISTORY_NODE_LABELS", "kube_node_labels", help=METRIC)
    pod_info: str = setting("KSO_HISTORY_POD_INFO", "kube_pod_info", help=METRIC + "; its node label places a pod")
    container_restarts: str = setting("KSO_HISTORY_CONTAINER_RESTARTS", "kube_pod_container_status_restarts_total",
                                      help=METRIC)
    last_terminated_reason: str = setting("KSO_HISTORY_LAST_TERMINATED_REASON",
                                          "kube_pod_container_status_last_terminated_reason", help=METRIC)
    container_cpu: str = setting("KSO_HISTORY_CONTAINER_CPU", "container_cpu_usage_seconds_total", help=METRIC)
    container_memory: str = setting("KSO_HISTORY_CONTAINER_MEMORY", "container_memory_working_set_bytes", help=METRIC)
    ksm_selector: str = setting("KSO_HISTORY_KSM_SELECTOR", "",
                                help="extra label matchers for kube-state-metrics series, e.g. job=\"kube-state-metrics\"")
    container_selector: str = setting("KSO_HISTORY_CONTAINER_SELECTOR", 'container!="",image!=""',
                                      help="label matchers picking cAdvisor's per-container series")
    cpu_rate: str = setting("KSO_HISTORY_CPU_RATE", "rate", kind="choice:RATE,IRATE",
                            help="rate (mean over the window) or irate (last two samples) of the cpu counter")
    cpu_window: str = setting("KSO_HISTORY_CPU_WINDOW", "5m", help="the rate's window (at least two scrapes)")
    namespace_label: str = setting("KSO_HISTORY_NAMESPACE_LABEL", "namespace", help=LABEL)
    pod_label: str = setting("KSO_HISTORY_POD_LABEL", "pod", help=LABEL)
    uid_label: str = setting("KSO_HISTORY_UID_LABEL", "uid", help=LABEL)
    container_label: str = setting("KSO_HISTORY_CONTAINER_LABEL", "container", help=LABEL)
    node_label: str = setting("KSO_HISTORY_NODE_LABEL", "node", help=LABEL)
    resource_label: str = setting("KSO_HISTORY_RESOURCE_LABEL", "resource", help=LABEL)
    owner_kind_label: str = setting("KSO_HISTORY_OWNER_KIND_LABEL", "owner_kind", help=LABEL)
    owner_name_label: str = setting("KSO_HISTORY_OWNER_NAME_LABEL", "owner_name", help=LABEL)
    max_points: int = setting("KSO_HISTORY_MAX_POINTS", 1_000_000, lo=1000, hi=50_000_000,
                              help="points (series x steps) per range query")
    inventory_chunk_s: int = setting("KSO_HISTORY_INVENTORY_CHUNK", 6 * 3600, lo=300, hi=7 * 86400,
                                     help="window of each inventory query, seconds")
    timeout_s: float = setting("KSO_HISTORY_TIMEOUT", 120.0, lo=1.0, hi=3600.0, help="per-query timeout, seconds")
