"""The extender's copy of the PlacementPlan: free slots per class and node, kept off the request path.

The request path only reads ``slots_for(pod)`` (one dict lookup after computing the pod's class key).
Everything else runs in background jobs: loading the plan file, re-solving in a separate process,
and reconciling which slots have been taken (by kso's own binds at once, by anything the watch sees
bound since the plan was made on the next reconcile).
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from kso.core.cluster import ClusterState, PlanCopy
from kso.core.logs import fields
from kso.core.objects import PodInfo
from optimizer.plan.cluster_problem import PLAN_CHILD_NICENESS, BuildInputs, NodePickles
from optimizer.plan.placement_plan import PlacementPlan, PlanError, load_plan
from optimizer.plan.problem import PlacementProblem, class_key
from optimizer.settings import PlanSettings

if TYPE_CHECKING:
    from forecasting.prometheus import PrometheusSettings
    from optimizer.plan.compiled import SolverOptions

log = logging.getLogger("kso.plan")


@dataclass(slots=True)
class _Active:
    plan: PlacementPlan  # the solver's plans without their per-node part (nodes: the plan file has it)
    source: str
    free: dict[str, dict[str, int]]  # class -> node -> free slots (only > 0)
    baseline: frozenset[str] = field(default_factory=frozenset)
    summary: dict[str, Any] = field(default_factory=dict)  # PlacementPlan.summary of the whole plan


class PlanCache:
    def __init__(self, settings: PlanSettings, state: ClusterState,
                 on_event: Callable[[str, str], None] | None = None) -> None:
        self.settings = settings
        self.state = state
        self._active: _Active | None = None
        # A plan published by `kso reoptimize --execute` (ConfigMap kso-plan): the targets of the pods it
        # evicted. Its slots rank first next to the solver's own plan, and are not replaced by re-solves.
        self._migration: _Active | None = None
        self._configmap_plan_id: str | None = None
        self._lock = threading.Lock()  # writers only; readers take the reference
        self._file_mtime: float | None = None
        self._stale_logged: str | None = None
        self.on_event: Callable[[str, str], None] = on_event or (lambda kind, detail: None)
        self.last_error: str | None = None
        # Set while the solver's child may write the plan file: that plan comes back from the child, and reading it
        # from the file here would cost the extender its parse (PlanSolver).
        self.child_writing = False

    # ---- request path ------------------------------------------------------------------------
    def slots_for(self, pod: PodInfo, now: float | None = None) -> dict[str, int] | None:
        """Nodes with a free slot of the pod's class (the solver's plan and the re-optimisation's targets
        together), or None when no usable plan covers the pod."""
        if self._migration is None and self._active is None:  # no plan at all: no class key to work out
            return None
        key = class_key(pod)
        merged: dict[str, int] | None = None
        for active in (self._migration, self._active):
            if active is None or not self._usable(active, now):
                continue
            free = active.free.get(key)
            if free:
                merged = dict(free) if merged is None else {n: merged.get(n, 0) + free.get(n, 0)
                                                            for n in merged.keys() | free.keys()}
        return merged or None

    def _usable(self, active: _Active, now: float | None) -> bool:
        if active.plan.age_s(now) <= self.settings.max_age_s:
            return True
        if self._stale_logged != active.plan.plan_id:
            self._stale_logged = active.plan.plan_id
            log.warning("plan %s is %.0f s old (limit %.0f s): ignored until a new plan arrives; heuristic agents "
                        "decide", active.plan.plan_id, active.plan.age_s(now), self.settings.max_age_s)
            self.on_event("stale", active.plan.plan_id)
        return False

    # ---- updates (background) ----------------------------------------------------------------
    def install(self, plan: PlacementPlan, source: str, summary: dict[str, Any] | None = None) -> bool:
        """Use ``plan`` as the solver's plan (replacing the previous one); ``summary``: its summary, when known."""
        if not self._install(plan, source, "_active", "plan", summary):
            return False
        self.last_error = None
        return True

    def install_migration(self, plan: PlacementPlan, source: str) -> bool:
        """Use ``plan`` as the re-optimisation's targets, beside the solver's plan."""
        return self._install(plan, source, "_migration", "re-optimisation plan")

    def _install(self, plan: PlacementPlan, source: str, slot: str, what: str,
                 summary: dict[str, Any] | None = None) -> bool:
        if plan.age_s() > self.settings.max_age_s:
            self._reject(f"{source}: plan {plan.plan_id} is already {plan.age_s():.0f} s old", "stale")
            return False
        with self._lock:
            baseline = frozenset(plan.baseline_pods)
            summary = summary or plan.summary()
            setattr(self, slot, _Active(plan, source, self._free_slots(plan, baseline), baseline, summary))
        log.info("%s %s from %s installed: %s", what, plan.plan_id, source, fields(summary))
        self.on_event("installed", plan.plan_id)
        return True

    def consume(self, pod: PodInfo, node: str) -> None:
        """kso bound ``pod`` to ``node``: take the slot now (the re-optimisation's first; the next
        reconcile agrees)."""
        with self._lock:
            for active in (self._migration, self._active):
                if active is None:
                    continue
                free = active.free.get(class_key(pod))
                if free and free.get(node, 0) > 0:
                    free[node] -= 1
                    if not free[node]:
                        del free[node]
                    return

    def reconcile(self) -> None:
        """Slots left = planned - pods of the class bound there since the plan was made."""
        with self._lock:
            for active in (self._active, self._migration):
                if active is not None:
                    active.free = self._free_slots(active.plan, active.baseline)

    def poll_configmap(self, api_client: Any, namespace: str, name: str, key: str = "plan.json") -> None:
        """Read the plan ``kso reoptimize --execute`` published (ConfigMap ``namespace/name``, key
        ``plan.json``); a new one is installed, a missing one is normal, a corrupt one is reported."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        where = f"ConfigMap {namespace}/{name}"
        try:
            resp = client.CoreV1Api(api_client).read_namespaced_config_map(name, namespace, _preload_content=False,
                                                                           _request_timeout=10)
            doc = orjson.loads(resp.data)
        except ApiException as exc:
            if exc.status != 404:
                self._reject(f"{where}: HTTP {exc.status}", "unreadable")
            return
        except Exception as exc:  # noqa: BLE001 - an unreachable API server must not stop the job
            self._reject(f"{where}: {type(exc).__name__}: {exc}", "unreadable")
            return
        raw = (doc.get("data") or {}).get(key) if isinstance(doc, dict) else None
        if raw is None:
            self._reject(f"{where}: no {key!r} key", "corrupt")
            return
        try:
            plan = PlacementPlan.from_json(raw, f"{where} {key}")
        except PlanError as exc:
            self._reject(str(exc), "corrupt")
            return
        if plan.plan_id != self._configmap_plan_id:
            self._configmap_plan_id = plan.plan_id
            self.install_migration(plan, where)

    def _free_slots(self, plan: PlacementPlan, baseline: frozenset[str]) -> dict[str, dict[str, int]]:
        taken: dict[tuple[str, str], int] = {}
        for pod in self.state.bound_pods():
            if pod.uid in baseline:
                continue
            key = (class_key(pod), pod.node_name)
            taken[key] = taken.get(key, 0) + 1
        free: dict[str, dict[str, int]] = {}
        for key, c in plan.classes.items():
            left = {n: k - taken.get((key, n), 0) for n, k in c.slots.items()}
            left = {n: k for n, k in left.items() if k > 0}
            if left:
                free[key] = left
        return free

    def load_file(self) -> None:
        """(Re)load the plan file when it changed on disk (a plan solved elsewhere, e.g. ``kso plan`` or
        the re-optimisation CronJob). A missing file is normal; a corrupt or stale one is reported."""
        path = self.settings.plan_file
        if not path or self.child_writing:
            return
        try:
            mtime = os.stat(path).st_mtime
        except FileNotFoundError:
            return
        except OSError as exc:
            self._reject(f"{path}: cannot stat ({exc.strerror})", "unreadable")
            return
        if mtime == self._file_mtime:
            return
        self._file_mtime = mtime
        try:
            plan = load_plan(path, self.settings.max_age_s)
        except PlanError as exc:
            self._reject(str(exc), "stale" if "old, over" in str(exc) else "corrupt")
            return
        active = self._active
        if active is None or plan.plan_id != active.plan.plan_id:
            self.install(plan, f"file {path}")

    def written(self) -> None:
        """The plan file was just written by the solver's child: not a plan to load."""
        try:
            self._file_mtime = os.stat(self.settings.plan_file).st_mtime
        except OSError:  # the child could not write it (it said why)
            pass

    def _reject(self, why: str, reason: str) -> None:
        if why != self.last_error:
            log.error("plan rejected: %s; keeping %s", why,
                      f"plan {self._active.plan.plan_id}" if self._active else "the heuristic agents")
        self.last_error = why
        self.on_event("rejected:" + reason, why)

    def describe(self, now: float | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {"plan": None, "last_error": self.last_error}
        for label, active in (("", self._active), ("migration_", self._migration)):
            if active is None:
                continue
            out.update({f"{label}plan": active.summary, f"{label}source": active.source,
                        f"{label}age_s": round(active.plan.age_s(now), 1),
                        f"{label}usable": active.plan.age_s(now) <= self.settings.max_age_s,
                        f"{label}free_slots": sum(sum(v.values()) for v in active.free.values())})
        return out

    def age_s(self) -> float:
        active = self._active
        return active.plan.age_s() if active else float("nan")


class PlanSolver:
    """Re-solves on a timer, or early when the cluster changed enough, through the one protected solve
    (optimizer.plan.protected_solver.ProtectedSolver: a child process, seed retry, wall-clock limit, FFD fallback held
    to the exact bound); installs and saves each new plan. Runs in an APScheduler thread, never on the
    request path. New pods of a class count at their running siblings' measured usage when Prometheus
    is configured (KSO_PROMETHEUS_URL), else at their requests."""

    def __init__(self, cache: PlanCache, forecasts: Callable[[], dict[str, Any] | None] | None = None,
                 on_solved: Callable[[str, float], None] | None = None,
                 usage: Callable[[ClusterState], dict[str, Any]] | None = None) -> None:
        from optimizer.plan.protected_solver import ProtectedSolver

        self.cache = cache
        self.forecasts = forecasts or (lambda: None)
        self.on_solved = on_solved or (lambda result, seconds: None)
        self.usage = usage if usage is not None else prometheus_usage(None)
        self.solver = ProtectedSolver(retries=1, on_crash=lambda note: log.error("plan solve: %s", note))
        self._last_version = -1
        self._last_solve = 0.0
        self._busy = threading.Lock()
        self._said_no_statistics = False
        self.node_pickles = NodePickles()  # the nodes as the solver child gets them, pickled once per NodeInfo
        self.closed = False  # set by close(): a solve failing after it is the shutdown, not a broken solver

    def changed_enough(self) -> bool:
        state = self.cache.state
        size = max(len(state) + len(state.pods), 1)
        return state.version - self._last_version >= max(self.cache.settings.change_threshold * size, 1)

    def maybe_solve(self) -> None:
        due = time.time() - self._last_solve >= self.cache.settings.interval_s
        if due or self.changed_enough():
            self.solve()

    def solve(self) -> PlacementPlan | None:
        from optimizer.plan.cluster_problem import copy_has_statistics, plannable

        if not self._busy.acquire(blocking=False):
            return None
        t0 = time.perf_counter()
        try:
            s = self.cache.settings
            # The state's lock is held only for this copy (filter and prioritize need it); the problem's build, its
            # compiling and the plan are the solver child's (plan_from_copy): most of a second of Python at 150k pods,
            # which in this process would hold the GIL against the request path.
            copy = self.cache.state.plan_copy()
            version = copy.version
            if not plannable(copy.pending, s.scheduler_names):
                self._last_version, self._last_solve = version, time.time()
                return None
            forecasts = self.forecasts()
            if not s.plan_without_statistics and not copy_has_statistics(copy, forecasts):
                # Nothing to plan on: no problem built, no usage asked for.
                if not self._said_no_statistics:
                    log.warning("plan: not solving while no node has load statistics (no fresh forecast, no load "
                                "annotations): the agents decide; KSO_PLAN_WITHOUT_STATISTICS=true plans by requests")
                    self._said_no_statistics = True
                self._last_version, self._last_solve = version, time.time()
                self.on_solved("no-statistics", time.perf_counter() - t0)
                return None
            inputs = BuildInputs(forecasts, s.u_star, s.eps, s.cost_key, tuple(s.scheduler_names),
                                 self.usage(self.cache.state), PLAN_CHILD_NICENESS, s.plan_file)
            self._said_no_statistics = False
            plan, summary = self._plan_in_child(s.solver_options(), copy, inputs)
        except Exception as exc:  # noqa: BLE001 - a failed solve keeps the old plan and is reported
            if self.closed:  # the server is stopping and close() ended the solver under this solve
                log.info("plan solve stopped: the extender is shutting down")
                return None
            log.error("plan solve failed: %s; keeping the current plan until it is %.0f s old (KSO_PLAN_MAX_AGE_S), "
                      "the next cycle retries", exc or type(exc).__name__, self.cache.settings.max_age_s)
            self.cache.last_error = f"plan solve failed: {exc or type(exc).__name__}"
            self.on_solved("error", time.perf_counter() - t0)
            return None
        finally:
            self._busy.release()
        self._last_version, self._last_solve = version, time.time()
        self.cache.install(plan, "solver", summary)
        self.on_solved("ok", time.perf_counter() - t0)
        return plan

    def _plan_in_child(self, options: SolverOptions, copy: PlanCopy, inputs: BuildInputs
                       ) -> tuple[PlacementPlan, dict[str, Any]]:
        """plan_from_copy in the protected child (a dead child retried with another seed, as ProtectedSolver.solve_plan
        does); when none returns, first-fit-decreasing's plan from one more child (no CP-SAT, so not OR-Tools' abort);
        when that dies too, SolverDied. The child has written the plan file; the plan comes back without its per-node
        part (~60k objects at 5,000 nodes, whose young-generation collections stalled filter for 100-300 ms at load 10)
        and without its baseline pods, which are the copy's."""
        from optimizer.plan.cluster_problem import plan_from_copy
        from optimizer.plan.protected_solver import SolverDied

        packed = self.node_pickles.pack(copy)
        self.cache.child_writing = True
        try:
            try:
                (plan, summary), notes = self.solver.call(plan_from_copy, options, packed, inputs)
            except SolverDied as exc:
                if self.closed:
                    raise
                (plan, summary), notes = self.solver.call(plan_from_copy, options, packed, inputs,
                                                          self.solver.fallback_notes(exc))
            if inputs.plan_file:
                self.cache.written()
        finally:
            self.cache.child_writing = False
        plan.notes[:0] = notes
        plan.baseline_pods = copy.bound
        return plan, summary

    def close(self) -> None:
        self.closed = True
        self.solver.close()


def has_load_statistics(problem: PlacementProblem) -> bool:
    """Whether any node's current load is known (a fresh forecast or load annotations) for any resource."""
    return any(math.isfinite(load.mean) for node in problem.nodes for load in node.load.values())


def prometheus_usage(settings: PrometheusSettings | None) -> Callable[[ClusterState], dict[str, Any]]:
    """Class usage from Prometheus when it is in use (``settings``: extender.config.Config.prometheus), else
    nothing (classes at their requests). A failed query is logged once per distinct message."""
    if settings is None:
        return lambda state: {}
    from optimizer.plan.cluster_problem import class_usage_from_prometheus

    last: list[str] = [""]

    def usage(state: ClusterState) -> dict[str, Any]:
        out, note = class_usage_from_prometheus(settings, state.bound_pods())
        if note != last[0]:
            (log.warning if not out and "failed" in note else log.info)("plan solve: %s", note)
            last[0] = note
        return out

    return usage
