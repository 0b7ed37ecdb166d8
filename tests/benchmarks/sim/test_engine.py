"""The replay engine's accounting, the metrics on hand-made usage, and the embedded scenario."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.sim.engine import Policy, SimPod, SimView, run
from benchmarks.sim.metrics import compute, fragmentation, overload_counts
from benchmarks.sim.policies import make_policy
from benchmarks.sim.trace import USAGE_LABEL, Scenario, build_embedded_scenario

GIB = 1024.0**3


def scenario(node_cpu: list[float], pods: list[tuple[float, int, int, list[float]]], n_steps: int) -> Scenario:
    """pods: (cpu request, arrival step, departure step, cpu usage ratio per step); memory 1 GiB, ratio 0.1."""
    usage = np.zeros((len(pods), n_steps, 2), dtype=np.float32)
    for i, (_, _, _, ratio) in enumerate(pods):
        usage[i, :, 0] = ratio
        usage[i, :, 1] = 0.1
    return Scenario("hand", 300.0, n_steps, [f"n{i}" for i in range(len(node_cpu))], np.array(node_cpu, float),
                    np.full(len(node_cpu), 8 * GIB), [f"p{i}" for i in range(len(pods))],
                    np.array([p[0] for p in pods], float), np.full(len(pods), GIB),
                    np.array([p[1] for p in pods], np.int64), np.array([p[2] for p in pods], np.int64), usage)


def test_pod_that_fits_nowhere_stays_pending_and_is_counted() -> None:
    s = scenario([1000, 1000], [(500, 0, 10, [0.5] * 4), (4000, 1, 10, [0.5] * 4), (4000, 0, 2, [0.5] * 4)], 4)
    res = run(s, make_policy("default", 0))
    m = compute(res)
    big_pending, big_failed = res.pods[1], res.pods[2]
    assert big_pending.node == -1 and big_pending.attempts == 3  # steps 1, 2, 3
    assert big_failed.node == -1 and big_failed.attempts == 2  # steps 0, 1; gone at its departure step 2
    assert (m.scheduled, m.pending_end, m.failed) == (1, 1, 1)
    assert m.attempts == 1 + 3 + 2


def test_departure_frees_capacity_for_a_pending_pod() -> None:
    s = scenario([4000], [(4000, 0, 2, [0.5] * 5), (4000, 0, 5, [0.25] * 5)], 5)
    res = run(s, make_policy("default", 0))
    first, second = res.pods
    assert first.bound_step == 0 and second.bound_step == 2 and second.attempts == 3
    # usage: steps 0-1 the first pod (2000m), steps 2-4 the second (1000m)
    assert res.usage[0, :, 0].tolist() == [2000, 2000, 1000, 1000, 1000]
    assert res.pods_on_node[0].tolist() == [1, 1, 1, 1, 1]
    assert compute(res).node_hours == pytest.approx(5 * 300 / 3600)


def test_overload_counting_on_hand_made_usage() -> None:
    s = scenario([1000], [(1000, 0, 9, [0.5, 0.95, 1.2, 0.8])], 4)
    m = compute(run(s, make_policy("default", 0)), u_star=0.9)
    assert m.overload_events == 2 and m.overload_cpu == 2 and m.overload_memory == 0
    assert m.overload_events_100 == 1
    assert m.severity_sum == pytest.approx(0.05 + 0.3, abs=1e-6)
    assert m.severity_max == pytest.approx(0.3, abs=1e-6)
    assert m.per_step_overloads.tolist() == [0, 1, 1, 0]
    util = np.array([[[0.95, 0.1], [0.5, 0.92]], [[0.1, 0.1], [1.01, 0.2]]])
    events, severity = overload_counts(util, 0.9)
    assert events.tolist() == [[True, True], [False, True]]
    assert severity[1, 1] == pytest.approx(0.11)


def test_fragmentation_by_hand() -> None:
    # two used nodes at one step: free (300 m, 4 GiB) cannot hold the median pod (500 m, 1 GiB); free (1000 m, 2 GiB) can
    free = np.array([[[300.0, 4 * GIB]], [[1000.0, 2 * GIB]], [[5000.0, 9 * GIB]]])
    in_use = np.array([[True], [True], [False]])
    frac = fragmentation(free, in_use, np.array([500.0, GIB]))
    assert frac[0].tolist() == pytest.approx([300 / 1300, 4 / 6])


class Recorder(Policy):
    """Checks what a policy is shown: no metrics of the current step, the recent bindings, the queue."""

    name = "recorder"

    def __init__(self) -> None:
        super().__init__(0)
        self.seen: list[tuple[int, int, int, int]] = []

    def observe(self, sim: SimView) -> None:
        self.seen.append((sim.step, sim.usage_history.shape[1], len(sim.recent), len(sim.pending)))

    def place(self, pod: SimPod, sim: SimView) -> str | None:
        return "nowhere" if pod.index == 1 else sim.node_names[0]


def test_policy_sees_only_the_past_and_bad_answers_are_refused() -> None:
    s = scenario([4000], [(1000, 0, 3, [0.5] * 3), (1000, 1, 3, [0.5] * 3)], 3)
    rec = Recorder()
    res = run(s, rec)
    assert rec.seen == [(0, 0, 0, 1), (1, 1, 0, 1), (2, 2, 0, 1)]
    assert res.pods[1].node == -1 and res.rejected_placements == 2


def test_embedded_scenario_is_deterministic_and_labelled() -> None:
    a, b = build_embedded_scenario(hours=2, seed=3), build_embedded_scenario(hours=2, seed=3)
    assert a.n_nodes == 40 and a.n_steps == 24 and a.n_pods > 100
    assert np.array_equal(a.pod_usage, b.pod_usage) and a.pod_names == b.pod_names
    assert not np.array_equal(a.pod_usage, build_embedded_scenario(hours=2, seed=4).pod_usage)
    assert (np.diff(a.pod_arrival) >= 0).all() and (a.pod_departure > a.pod_arrival).all()
    assert USAGE_LABEL in a.describe() and USAGE_LABEL in a.notes
