"""``kso shadow``'s own settings (``KSO_SHADOW_*``). A module of its own, light to import: every kso command checks
the configuration against the declared settings before it starts. The rest of its configuration is kso's: the
agents, weights and U* of the extender (extender.config), Prometheus and the forecast horizon (forecasting), and the
cAdvisor names of ``kso bench --prometheus`` (forecasting.history_names) for the throttling query."""

from __future__ import annotations

from dataclasses import dataclass

from kso.core.settings import setting

# cAdvisor's CFS counters, per node: $node is KSO_HISTORY_NODE_LABEL, $containers KSO_HISTORY_CONTAINER_SELECTOR.
THROTTLED_QUERY = ("sum by ($node) (rate(container_cpu_cfs_throttled_periods_total{$containers}[5m])) / "
                   "sum by ($node) (rate(container_cpu_cfs_periods_total{$containers}[5m]))")


# cAdvisor's per-pod usage: $containers is KSO_HISTORY_CONTAINER_SELECTOR; cpu in cores, memory in bytes.
POD_CPU_QUERY = "sum by (namespace, pod) (rate(container_cpu_usage_seconds_total{$containers}[5m]))"
POD_MEMORY_QUERY = "sum by (namespace, pod) (container_memory_working_set_bytes{$containers})"


@dataclass
class ShadowSettings:
    address: str = setting("KSO_SHADOW_ADDRESS", "127.0.0.1:9110",
                           help="host:port of kso shadow's /metrics, /healthz and /report (--address); empty = not served")
    report_path: str = setting("KSO_SHADOW_REPORT", "shadow-report.md",
                               help="the Markdown report kso shadow rewrites every KSO_SHADOW_REPORT_EVERY_S (--report)")
    report_every_s: float = setting("KSO_SHADOW_REPORT_EVERY_S", 600.0, lo=1, hi=86400,
                                    help="how often kso shadow rewrites its report, seconds")
    max_pending: int = setting("KSO_SHADOW_MAX_PENDING", 10_000, lo=1, hi=10_000_000,
                               help="judged binds kept waiting for their outcome (about 1 KiB each); past it the oldest "
                                    "are dropped, counted")
    queue: int = setting("KSO_SHADOW_QUEUE", 512, lo=1, hi=1_000_000,
                         help="binds waiting to be judged, each with a copy of the node cache's rows (about 150 bytes "
                              "a node: 77 MB at 1,000 nodes); past it a bind is skipped, counted")
    records_path: str = setting("KSO_SHADOW_RECORDS", "",
                                help="a JSON-lines file kso shadow appends one line to per judged bind, once its outcome "
                                     "is read (--records); '' = none")
    state_path: str = setting("KSO_SHADOW_STATE", "",
                              help="a JSON file kso shadow saves its totals and waiting binds to with each report and "
                                   "at exit, and reads at start: a restart keeps them (a volume in the cluster); '' = "
                                   "none")
    query_oom: str = setting("KSO_SHADOW_QUERY_OOM", "sum by ($by) (node_vmstat_oom_kill)",
                             help="range query: each node's OOM-kill counter (node-exporter); '' to skip")
    query_throttled: str = setting("KSO_SHADOW_QUERY_THROTTLED", THROTTLED_QUERY,
                                   help="range query: each node's share of throttled CFS periods ($node, $containers: "
                                        "KSO_HISTORY_NODE_LABEL and KSO_HISTORY_CONTAINER_SELECTOR); '' to skip")
    query_pod_cpu: str = setting("KSO_SHADOW_QUERY_POD_CPU", POD_CPU_QUERY,
                                 help="range query: each pod's cpu usage in cores, by namespace and pod (cAdvisor; "
                                      "$containers: KSO_HISTORY_CONTAINER_SELECTOR); kso's pick is then read with the "
                                      "pod at its measured peak, not its requests; '' to skip")
    query_pod_memory: str = setting("KSO_SHADOW_QUERY_POD_MEMORY", POD_MEMORY_QUERY,
                                    help="range query: each pod's memory in bytes, by namespace and pod (cAdvisor); "
                                         "'' to skip")
    # Not settings of their own (fixed here, changed by tests):
    # judged binds kept for the report's tables (safety changes, misses)
    keep: int = 200
    # a bind's outcome is read this long after its horizon ended, and outcomes are checked this often: one scrape
    # interval (KSO_PROMETHEUS_SCRAPE_INTERVAL) when None, for the newest samples to land
    settle_s: float | None = None
    check_every_s: float | None = None
    # the longest time range of one batch of outcome queries, seconds
    max_window_s: float = 3600.0
    # a node whose throttled share of CFS periods passes this in a bind's window counts as throttled
    throttled_share: float = 0.25
