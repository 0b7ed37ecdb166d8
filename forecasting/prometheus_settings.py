"""The Prometheus source's settings (every query and the node-name mapping; forecasting/prometheus.py says why) and
the errors it raises."""

from __future__ import annotations

from dataclasses import dataclass

from kso.core.settings import setting


class PrometheusError(RuntimeError):
    """Base of the errors this source raises (the store records any of them as the refresh error). ``reason`` is the
    label the failure is counted under (kso_forecast_refresh_failures_total{reason})."""

    reason = "source_error"


class PrometheusUnavailable(PrometheusError):
    """Prometheus could not answer: refused, timed out, 5xx, or an unreadable response."""

    def __init__(self, url: str, cause: str, reason: str = "unreachable") -> None:
        super().__init__(f"Prometheus at {url} unavailable: {cause}")
        self.url = url
        self.cause = cause
        # timeout (ours, or the server's "query timed out"), bad_data (an answer that is not Prometheus's JSON),
        # http_error (any other HTTP error status), unreachable (no HTTP answer: refused, no route, DNS...)
        self.reason = reason


class PrometheusQueryError(PrometheusError):
    """Prometheus answered but rejected the query (HTTP 4xx): a configuration error, not an outage."""

    reason = "rejected"


class PrometheusMappingError(PrometheusError):
    """Series came back but none could be mapped to a node name: the mapping settings are wrong."""

    reason = "no_node_names"


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
    # A running kso reads the whole history once and then, each refresh, only the steps since the last one plus this
    # much before them (samples that arrived late, windows that were partial): about 2,000 points per series a
    # refresh become a few.
    overlap_s: float = setting("KSO_PROMETHEUS_OVERLAP", 1800.0, lo=0.0, hi=86400.0,
                               help="seconds of the newest history a refresh reads again (the rest is kept from the "
                                    "last refresh); 0 = every refresh reads the whole history")
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
        help="time of the newest raw cpu sample per node, evaluated at the newest steps only (the last "
             "KSO_PROMETHEUS_OVERLAP on a first read, the new steps after; '' to skip the check)")
    query_node_memory_newest: str = setting(
        "KSO_QUERY_NODE_MEMORY_NEWEST", "min by ($by) (timestamp(node_memory_MemAvailable_bytes))",
        help="time of the newest raw memory sample per node, as KSO_QUERY_NODE_CPU_NEWEST ('' to skip the check)")
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
