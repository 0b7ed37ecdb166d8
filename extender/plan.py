"""The extender's copy of the PlacementPlan: free slots per class and node, kept off the request path.

The request path only reads ``slots_for(pod)`` (one dict lookup after computing the pod's class key).
Everything else runs in background jobs: loading the plan file, re-solving in a separate process,
and reconciling which slots have been taken (by kso's own binds at once, by anything the watch sees
bound since the plan was made on the next reconcile).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kso.cluster import ClusterState
from kso.objects import PodInfo
from optimizer.plan import PlacementPlan, PlanError, load_plan, write_plan
from optimizer.problem import class_key
from optimizer.settings import PlanSettings

log = logging.getLogger("kso.plan")


@dataclass(slots=True)
class _Active:
    plan: PlacementPlan
    source: str
    free: dict[str, dict[str, int]]  # class -> node -> free slots (only > 0)
    baseline: frozenset[str] = field(default_factory=frozenset)


class PlanCache:
    def __init__(self, settings: PlanSettings, state: ClusterState,
                 on_event: Callable[[str, str], None] | None = None) -> None:
        self.settings = settings
        self.state = state
        self._active: _Active | None = None
        self._lock = threading.Lock()  # writers only; readers take the reference
        self._file_mtime: float | None = None
        self._stale_logged: str | None = None
        self.on_event: Callable[[str, str], None] = on_event or (lambda kind, detail: None)
        self.last_error: str | None = None

    # ---- request path ------------------------------------------------------------------------
    def slots_for(self, pod: PodInfo, now: float | None = None) -> dict[str, int] | None:
        """Nodes with a free slot of the pod's class, or None when no usable plan covers the pod."""
        active = self._active
        if active is None:
            return None
        if active.plan.age_s(now) > self.settings.max_age_s:
            if self._stale_logged != active.plan.plan_id:
                self._stale_logged = active.plan.plan_id
                log.warning("plan %s is %.0f s old (limit %.0f s): ignored until a new plan arrives; heuristic agents "
                            "decide", active.plan.plan_id, active.plan.age_s(now), self.settings.max_age_s)
                self.on_event("stale", active.plan.plan_id)
            return None
        free = active.free.get(class_key(pod))
        return free or None

    # ---- updates (background) ----------------------------------------------------------------
    def install(self, plan: PlacementPlan, source: str) -> bool:
        if plan.age_s() > self.settings.max_age_s:
            self._reject(f"{source}: plan {plan.plan_id} is already {plan.age_s():.0f} s old", "stale")
            return False
        with self._lock:
            baseline = frozenset(plan.baseline_pods)
            self._active = _Active(plan, source, self._free_slots(plan, baseline), baseline)
        self.last_error = None
        log.info("plan %s from %s installed: %s", plan.plan_id, source, plan.summary())
        self.on_event("installed", plan.plan_id)
        return True

    def consume(self, pod: PodInfo, node: str) -> None:
        """kso bound ``pod`` to ``node``: take the slot now (the next reconcile agrees)."""
        with self._lock:
            active = self._active
            if active is None:
                return
            free = active.free.get(class_key(pod))
            if free and free.get(node, 0) > 0:
                free[node] -= 1
                if not free[node]:
                    del free[node]

    def reconcile(self) -> None:
        """Slots left = planned - pods of the class bound there since the plan was made."""
        with self._lock:
            active = self._active
            if active is None:
                return
            active.free = self._free_slots(active.plan, active.baseline)

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
        if not path:
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

    def save(self, plan: PlacementPlan) -> None:
        if self.settings.plan_file:
            try:
                write_plan(plan, self.settings.plan_file)
                self._file_mtime = os.stat(self.settings.plan_file).st_mtime
            except OSError as exc:
                log.error("could not write the plan to %s: %s (the plan is used from memory)", self.settings.plan_file, exc)

    def _reject(self, why: str, reason: str) -> None:
        if why != self.last_error:
            log.error("plan rejected: %s; keeping %s", why,
                      f"plan {self._active.plan.plan_id}" if self._active else "the heuristic agents")
        self.last_error = why
        self.on_event("rejected:" + reason, why)

    def describe(self, now: float | None = None) -> dict[str, Any]:
        active = self._active
        if active is None:
            return {"plan": None, "last_error": self.last_error}
        return {"plan": active.plan.summary(), "source": active.source, "age_s": round(active.plan.age_s(now), 1),
                "usable": active.plan.age_s(now) <= self.settings.max_age_s,
                "free_slots": sum(sum(v.values()) for v in active.free.values()), "last_error": self.last_error}

    def age_s(self) -> float:
        active = self._active
        return active.plan.age_s() if active else float("nan")


class PlanSolver:
    """Re-solves in a spawned process on a timer, or early when the cluster changed enough; installs
    and saves each new plan. Runs in an APScheduler thread, never on the request path."""

    def __init__(self, cache: PlanCache, forecasts: Callable[[], dict[str, Any] | None] | None = None,
                 on_solved: Callable[[str, float], None] | None = None) -> None:
        from optimizer.planner import PlanWorker

        self.cache = cache
        self.forecasts = forecasts or (lambda: None)
        self.on_solved = on_solved or (lambda result, seconds: None)
        self.worker = PlanWorker()
        self._last_version = -1
        self._last_solve = 0.0
        self._busy = threading.Lock()

    def changed_enough(self) -> bool:
        state = self.cache.state
        size = max(len(state) + len(state.pods), 1)
        return state.version - self._last_version >= max(self.cache.settings.change_threshold * size, 1)

    def maybe_solve(self) -> None:
        due = time.time() - self._last_solve >= self.cache.settings.interval_s
        if due or self.changed_enough():
            self.solve()

    def solve(self) -> PlacementPlan | None:
        from optimizer.inputs import problem_from_state

        if not self._busy.acquire(blocking=False):
            return None
        t0 = time.perf_counter()
        try:
            s = self.cache.settings
            version = self.cache.state.version
            problem = problem_from_state(self.cache.state, self.forecasts(), s.u_star, s.eps, cost_key=s.cost_key)
            if not problem.classes:
                self._last_version, self._last_solve = version, time.time()
                return None
            plan = self.worker.submit(problem, s.solver_options()).result(timeout=s.time_limit_s * 3 + 60)
        except Exception as exc:  # noqa: BLE001 - a failed solve keeps the old plan and is reported
            log.error("plan solve failed: %s; keeping the current plan", exc)
            self.on_solved("error", time.perf_counter() - t0)
            return None
        finally:
            self._busy.release()
        self._last_version, self._last_solve = version, time.time()
        self.cache.save(plan)
        self.cache.install(plan, "solver")
        self.on_solved("ok", time.perf_counter() - t0)
        return plan

    def close(self) -> None:
        self.worker.close()
