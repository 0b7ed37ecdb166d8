"""``kso shadow``'s Prometheus metrics (``kso_shadow_*``), one registry per shadow (tests run several)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from shadow.judge import Record

JUDGE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
RISK_BUCKETS = (0.01, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 1.0)
# kso_shadow_outcomes_total's "warned" label, by Record.verdict
VERDICT_LABELS = {True: "true", False: "false", None: "unknown_node"}


class ShadowMetrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.binds = Counter("kso_shadow_binds_total", "Binds seen, by what became of them: judged; skipped "
                             "(the judging queue was full); unreadable (the pod did not parse)", ["result"], registry=r)
        self.decisions = Counter("kso_shadow_decisions_total", "Judged binds by kso's decision: same (kso would have "
                                 "picked the chosen node), changed (another node), held (no node: kso would have left "
                                 "the pod pending)", ["decision"], registry=r)
        self.changes = Counter("kso_shadow_changes_total", "Judged binds kso would have placed differently, by why: "
                               "safety (it refused the chosen node: another node or none), score (it accepted the "
                               "chosen node and scored another higher), unknown_node (the chosen node not in its "
                               "cache)", ["why"], registry=r)
        self.skipped_share = Gauge("kso_shadow_skipped_share", "Binds skipped with a full judging queue "
                                   "(KSO_SHADOW_QUEUE), as a share of the binds seen", registry=r)
        self.misses = Counter("kso_shadow_misses_total", "Judged binds whose kso pick went over U* in the horizon, in "
                              "kso's schedule (with what it put there at requests; same node included)", registry=r)
        self.over_allocatable = Gauge("kso_shadow_schedule_over_allocatable_nodes", "Nodes whose requests in kso's "
                                      "schedule (its picks applied) passed their allocatable at some bind", registry=r)
        self.warned = Counter("kso_shadow_warned_total", "Judged binds whose chosen node kso would have refused "
                              "(a core filter or one of kso's predicates failed it)", registry=r)
        self.unknown_node = Counter("kso_shadow_unknown_node_total", "Judged binds whose chosen node was not in kso's "
                                    "node cache: kso could not judge it (neither warned about it nor accepted it)",
                                    registry=r)
        self.outcomes = Counter("kso_shadow_outcomes_total", "Nodes of judged binds whose horizon has passed, by role "
                                "(chosen: the scheduler's node; kso_pick: kso's node in its schedule, same node "
                                "included), by what kso said of the chosen node (warned true or false; unknown_node: not in its "
                                "node cache), and by result "
                                "(over or under U* at its peak, or no_data)", ["role", "warned", "result"], registry=r)
        self.oom_kills = Counter("kso_shadow_oom_kills_total", "OOM kills on the binds' nodes during their horizons, by "
                                 "role, each kill once however many binds' windows hold it",
                                 ["role"], registry=r)
        self.throttled = Counter("kso_shadow_throttled_total", "Nodes of judged binds whose throttled CFS share passed "
                                 "KSO_SHADOW_THROTTLED_SHARE during the horizon, by role", ["role"], registry=r)
        self.risk = Histogram("kso_shadow_risk", "The safe agent's P(util > U*) with the pod, by role",
                              ["role"], buckets=RISK_BUCKETS, registry=r)
        self.judge_seconds = Histogram("kso_shadow_judge_seconds", "Time to judge one bind", buckets=JUDGE_BUCKETS,
                                       registry=r)
        self.pending = Gauge("kso_shadow_pending_records", "Judged binds waiting for their outcome", registry=r)
        self.dropped = Counter("kso_shadow_records_dropped_total", "Judged binds dropped before their outcome "
                               "(KSO_SHADOW_MAX_PENDING reached)", registry=r)
        self.prometheus_errors = Counter("kso_shadow_prometheus_errors_total",
                                         "Outcome reads that failed (Prometheus unavailable or the query rejected)",
                                         registry=r)
        self.last_report = Gauge("kso_shadow_last_report_timestamp_seconds", "When the report was last written",
                                 registry=r)
        for result in ("judged", "skipped", "unreadable"):
            self.binds.labels(result)
        for decision in ("same", "changed", "held"):
            self.decisions.labels(decision)
        for why in ("safety", "score", "unknown_node"):
            self.changes.labels(why)

    def judged(self, record: Record) -> None:
        self.binds.labels("judged").inc()
        self.decisions.labels("held" if record.pick is None else "changed" if record.changed else "same").inc()
        if record.kind != "same":
            self.changes.labels(record.kind).inc()
        if record.warned:
            self.warned.inc()
        if record.unknown_node:
            self.unknown_node.inc()
        self.judge_seconds.observe(record.seconds)
        if record.chosen_risk is not None:
            self.risk.labels("chosen").observe(record.chosen_risk)
        if record.pick_risk is not None:
            self.risk.labels("kso_pick").observe(record.pick_risk)

    def outcome(self, record: Record, u_star: float, share: float) -> None:
        warned = VERDICT_LABELS[record.verdict]
        for role, o in (("chosen", record.chosen_outcome), ("kso_pick", record.pick_outcome)):
            if o is None:
                continue
            over = o.over(u_star)
            self.outcomes.labels(role, warned, "no_data" if over is None else "over" if over else "under").inc()
            if o.oom_new:
                self.oom_kills.labels(role).inc(o.oom_new)
            if o.throttled is not None and o.throttled > share:
                self.throttled.labels(role).inc()
        if record.missed(u_star):
            self.misses.inc()
