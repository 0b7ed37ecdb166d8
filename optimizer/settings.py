"""The optimizer's settings, parsed from env / settings file in one place (kso.core.settings)."""

from __future__ import annotations

from dataclasses import dataclass

from kso.core.node_costs import CostKeySettings
from kso.core.safety import SafeBoundSettings
from kso.core.settings import setting
from optimizer.plan.compiled import SolverOptions


@dataclass
class PlanSettings(SafeBoundSettings, CostKeySettings):
    """U* and eps (SafeBoundSettings, shared with the safe agent), the cost key (CostKeySettings, shared with
    the cost agent and ``kso annotate --cost``) and the plan's own settings."""

    policy: str = setting("KSO_PLAN_POLICY", "BINPACK", kind="choice:BINPACK,LOAD-BALANCE,CONSOLIDATE,A-BINPACK,COST,NONE",
                          help="the plan's objective; NONE = the extender neither solves nor follows a plan")
    plan_file: str = setting("KSO_PLAN_FILE", "",
                             help="where plans are written (atomically) and read back; a restarted extender answers from it, "
                                  "and plans written by kso plan / kso reoptimize are picked up within 10 s; empty = in memory "
                                  "only")
    interval_s: float = setting("KSO_PLAN_INTERVAL_S", 180.0, lo=5, hi=86400,
                                help="the extender re-solves its plan this often, seconds")
    max_age_s: float = setting("KSO_PLAN_MAX_AGE_S", 900.0, lo=1, help="an older plan is ignored (the agents decide), seconds")
    change_threshold: float = setting("KSO_PLAN_CHANGE_THRESHOLD", 0.05, lo=0, hi=1,
                                      help="re-solve early when this share of nodes/pods changed")
    time_limit_s: float = setting("KSO_SOLVER_TIME_LIMIT_S", 30.0, lo=1, hi=3600, help="CP-SAT time limit of one solve, seconds")
    workers: int = setting("KSO_SOLVER_WORKERS", 2, lo=1, hi=64, help="CP-SAT workers")
    relative_gap: float = setting("KSO_SOLVER_GAP", 0.01, lo=0, hi=1, help="CP-SAT stops at this relative gap")
    configmap: str = setting("KSO_PLAN_CONFIGMAP", "kso-system/kso-plan",
                             help="namespace/name of the ConfigMap kso reoptimize --execute publishes; empty = off")
    # With no load statistics the safe bound sees requests only, and a binpack plan then fills nodes to their
    # pod limit (measured end to end: 100-110 pods on 5-8 of 100 nodes, against 18 for kube-scheduler alone),
    # which is packing by requests, not by forecast load: the extender does not solve until some node has a
    # forecast or load annotations, unless asked to.
    plan_without_statistics: bool = setting("KSO_PLAN_WITHOUT_STATISTICS", False,
                                            help="re-solve in the extender even when no node has load statistics")
    # A plan that counts pods another scheduler will place reserves room for them that kso's own pods then
    # cannot use; deploy/settings.yaml sets kso-scheduler.
    scheduler_names: list[str] = setting("KSO_SCHEDULER_NAMES", [], kind="list",
                                         help="plan only pending pods with one of these spec.schedulerName; empty = all")

    @property
    def policy_name(self) -> str:
        return self.policy.lower()

    def solver_options(self) -> SolverOptions:
        return SolverOptions(self.policy_name, self.time_limit_s, self.workers, self.relative_gap)
