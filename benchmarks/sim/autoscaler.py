"""The cluster-autoscaler model of the replay (``Autoscaler``: its settings; ``AutoscalerSteps``: scale-up and
scale-down, run by the engine after each step's truth). ``benchmarks/sim/engine.py`` re-exports ``Autoscaler`` and
``first_fit``."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from benchmarks.sim.view import SCALE_DOWN_DISABLED_KEY, CapacityRequest, SimPod, SimView


@dataclass(frozen=True)
class Autoscaler:
    """The cluster-autoscaler model (defaults: CA's ``--scale-down-utilization-threshold`` 0.5,
    ``--scale-down-unneeded-time`` 10 min, ``--scale-down-delay-after-add`` 10 min; a node takes a few minutes to
    boot: one 5-minute step).

    The model evaluates once per step (at the step's end), CA every ``--scan-interval`` (10 s). CA records the time
    it first finds a node unneeded and removes it once ``now - since >= scale-down-unneeded-time``; the model
    counts the consecutive evaluations a node is unneeded and removes it at the first evaluation at least
    ``scale_down_unneeded_s`` after the first one (rounded up to whole steps: at 5-minute steps, the 3rd
    evaluation, 10 minutes after the first). After a scale-up CA removes nothing while
    ``lastScaleUpTime + scale-down-delay-after-add`` is after now (``isScaleDownInCooldown``; it still updates
    the unneeded times meanwhile): the model removes nothing at an evaluation less than
    ``scale_down_delay_after_add_s`` after the last one that ordered a node (at 5-minute steps, neither in that
    step nor the next), and keeps counting unneeded evaluations. ``scale_down_unneeded_steps``, when set, overrides
    the evaluations a node must be unneeded in a row (the tests' "never")."""

    provision_steps: int = 1
    scale_down_threshold: float = 0.5
    scale_down_unneeded_s: float = 600.0  # --scale-down-unneeded-time
    scale_down_delay_after_add_s: float = 600.0  # --scale-down-delay-after-add
    scale_down_unneeded_steps: int | None = None  # evaluations unneeded in a row before removal; None: from the time
    min_nodes: int = 1
    max_nonempty_per_step: int = 1
    initial_nodes: int | None = None  # nodes ready at step 0, the first of the pool; None: all

    def unneeded_evaluations(self, step_s: float) -> int:
        """Consecutive evaluations (one per step) a node must be unneeded for before it is removed: the first one
        plus the steps that cover ``scale_down_unneeded_s`` (rounded up)."""
        if self.scale_down_unneeded_steps is not None:
            return self.scale_down_unneeded_steps
        return 1 + max(0, int(np.ceil(self.scale_down_unneeded_s / step_s - 1e-9)))

    def in_cooldown(self, step: int, last_scale_up: int, step_s: float) -> bool:
        """No scale-down at evaluation ``step``: less than ``scale_down_delay_after_add_s`` after the evaluation
        ``last_scale_up`` that ordered a node (CA: ``lastScaleUpTime.Add(delay).After(now)``)."""
        return last_scale_up >= 0 and (step - last_scale_up) * step_s < self.scale_down_delay_after_add_s - 1e-9

    def describe(self) -> str:
        return (f"cluster-autoscaler model: scale up when pods are pending (nodes of the pool in order, first-fit by "
                f"requests, ready after {self.provision_steps} step(s)); scale down a node (not annotated "
                f"{SCALE_DOWN_DISABLED_KEY}=true) below "
                f"{self.scale_down_threshold:.0%} requested cpu and memory for {self.scale_down_unneeded_s:.0f} s "
                f"(--scale-down-unneeded-time; evaluated once a step, rounded up to whole steps), none within "
                f"{self.scale_down_delay_after_add_s:.0f} s of a scale-up (--scale-down-delay-after-add) "
                f"(empty ones at once, at most {self.max_nonempty_per_step} non-empty per step, only if its pods fit "
                f"elsewhere by requests; its pods re-queued); min {self.min_nodes} node(s); provisioned node-steps billed")


# First-fit of requests (cpu, memory, one pod slot) into free capacity; returns the node chosen or -1 and
# updates ``free`` / ``slots`` in place. The autoscaler's simulation uses it (CA runs the scheduler's
# resource predicates, not the scoring).
def first_fit(free: np.ndarray, slots: np.ndarray, req: tuple[float, float], candidates: np.ndarray) -> int:
    ok = (free[candidates, 0] >= req[0]) & (free[candidates, 1] >= req[1]) & (slots[candidates] > 0)
    hit = np.flatnonzero(ok)
    if not len(hit):
        return -1
    node = int(candidates[hit[0]])
    free[node] -= req
    slots[node] -= 1
    return node



class AutoscalerSteps:
    """The engine's scale-up and scale-down (``_Replay`` inherits them; the state lives on the replay)."""

    view: SimView
    pods: list[SimPod]
    ready_at: np.ndarray
    unneeded: np.ndarray
    last_scale_up: int
    capacity: CapacityRequest | None
    held: np.ndarray
    held_count: np.ndarray
    held_pods: list[tuple[int, tuple[float, float], int]]
    avoid: np.ndarray
    last_pressure: np.ndarray
    placeholder_steps: int
    placeholder_scale_ups: int
    scale_ups: int
    scale_downs: int
    ca_evictions: int

    def evict(self, i: int, requeue_step: int) -> None:
        raise NotImplementedError

    def _scale_up(self, k: int, pending: list[int], ca: Autoscaler) -> None:
        view = self.view
        up = view.active | (self.ready_at >= 0)
        spare = np.flatnonzero(~up)  # the pool's nodes not provisioned, in pool order
        up &= ~view.no_schedule  # CA's simulation honours NoSchedule taints: a tainted node holds no pending pod
        free = np.where(up[:, None], view.alloc - view.requested, 0.0)
        slots = np.where(up, view.max_pods - view.pod_count, 0)
        opened: list[int] = []
        demands = [(self.pods[i].cpu, self.pods[i].memory) for i in pending]
        n_real = len(demands)
        ph = self.capacity
        avoid = np.zeros((0, len(up)), dtype=bool)
        if ph is not None and len(ph.demands):
            demands += [(float(c), float(m)) for c, m in np.asarray(ph.demands, dtype=float).reshape(-1, 2)]
            avoid = ph.avoid_rows(len(up))
        self.held[:] = 0.0
        self.held_count[:] = 0
        self.held_pods = []
        for j, req in enumerate(demands):
            # a placeholder's required anti-affinity excludes the nodes it avoids (a new node is never one of them)
            where = up if j < n_real else up & ~avoid[j - n_real]
            node = first_fit(free, slots, req, np.flatnonzero(where))
            if node < 0:
                for cand in spare.tolist():
                    if cand in opened or view.alloc[cand, 0] < req[0] or view.alloc[cand, 1] < req[1]:
                        continue
                    opened.append(cand)
                    up[cand] = True
                    avoid[:, cand] = False
                    free[cand] = view.alloc[cand]
                    slots[cand] = view.max_pods[cand]
                    node = first_fit(free, slots, req, np.array([cand]))
                    self.placeholder_scale_ups += j >= n_real
                    break
            if node >= 0 and j >= n_real:  # the room a placeholder holds (scale-down counts it)
                self.held[node] += req
                self.held_count[node] += 1
                self.held_pods.append((node, req, j - n_real))
        self.avoid = avoid
        self.placeholder_steps += len(demands) - n_real
        for node in opened:
            self.ready_at[node] = k + ca.provision_steps
            self.unneeded[node] = 0
        if opened:
            self.last_scale_up = k
        self.scale_ups += len(opened)

    def _scale_down(self, k: int, ca: Autoscaler) -> None:
        view = self.view
        share = ((view.requested + self.held) / view.alloc).max(axis=1)  # the placeholders' room counts as requests
        # a node with the scale-down-disabled annotation is not eligible: never unneeded while it carries it
        low = view.active & (share < ca.scale_down_threshold) & ~view.scale_down_disabled
        self.unneeded = np.where(low, self.unneeded + 1, 0)
        if ca.in_cooldown(k, self.last_scale_up, view.step_s):  # the unneeded times go on counting meanwhile
            return
        candidates = np.flatnonzero(self.unneeded >= ca.unneeded_evaluations(view.step_s))
        n_up = int(view.active.sum() + (self.ready_at >= 0).sum())
        removed: list[int] = []
        for node in candidates[view.pod_count[candidates] + self.held_count[candidates] == 0].tolist():
            if n_up - len(removed) <= ca.min_nodes:
                break
            removed.append(node)
        nonempty = candidates[view.pod_count[candidates] + self.held_count[candidates] > 0]
        nonempty = nonempty[np.argsort(share[nonempty], kind="stable")]
        drained = 0
        for node in nonempty.tolist():
            if drained >= ca.max_nonempty_per_step or n_up - len(removed) <= ca.min_nodes:
                break
            others = np.flatnonzero(view.active & ~view.no_schedule
                                    & ~np.isin(np.arange(len(share)), [*removed, node]))
            free = view.alloc - view.requested - self.held
            slots = view.max_pods - view.pod_count - self.held_count
            on = [(p.cpu, p.memory) for p in view.running.values() if p.node == node]
            held = [(req, j) for n, req, j in self.held_pods if n == node]  # its placeholders must fit elsewhere too
            if (all(first_fit(free, slots, req, others) >= 0 for req in on)
                    and all(first_fit(free, slots, req, others[~self.avoid[j, others]]) >= 0 for req, j in held)):
                removed.append(node)
                drained += 1
        for node in removed:
            for p in [p for p in view.running.values() if p.node == node]:
                self.ca_evictions += 1
                self.evict(p.index, k + 1)
            view.active[node] = False
            view.memory_pressure[node] = False  # a node provisioned again later starts without the condition
            view.scale_down_disabled[node] = False  # and without the annotations of the Node object deleted
            self.last_pressure[node] = -(10**9)
            self.unneeded[node] = 0
        self.scale_downs += len(removed)

