"""decisions.agents.pigeon's fast forms (stacked sums, in-place scores, settled demand, the feasibility shortcut)
against the formulas and reference paths they keep to, bit for bit."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from decisions.agents.base import Call
from decisions.agents.pigeon import (
    DemandStats,
    PigeonAgent,
    PigeonParams,
    albert_zhang,
    pigeon_scores,
)
from kso.core.objects import pod_from_k8s
from tests.support.decision_cases import (
    SETTINGS,
    random_state,
)
from tests.support.engine_cases import (
    MANY_EXAMPLES,
)
from tests.support.fixtures import make_pod


def reference_pigeon_values(agent: Any, call: Call, stats: Any) -> np.ndarray:
    """PigeonAgent._compute's A_BINPACK values before its fast paths (utilisation() always, demand_gamma per
    call, the known rows gathered even when every node is known), given the demand statistics it saw."""
    from decisions.agents.pigeon import binpack_values, demand_gamma, utilisation

    view = call.view
    values = np.full(len(view), np.nan)
    rows = np.flatnonzero(view.known)
    if rows.size == 0:
        return values
    cols = [view.columns[r] for r in agent.resources]
    cap = view.alloc.take(rows, axis=0)[:, cols]
    gamma_dem = demand_gamma(stats, cap, agent.units)
    d = agent.demand(call)
    usage = call.requested().take(rows, axis=0)[:, cols]
    new_usage = usage + d
    feasible = ~(d > cap - usage).any(axis=1)
    if not feasible.any():
        return values
    util = np.clip(utilisation(usage, cap, (usage > 0).astype(float)), 0.0, 1.0)
    util_new = np.clip(utilisation(new_usage, cap, (new_usage > 0).astype(float)), 0.0, 1.0)
    values[rows] = np.where(feasible, binpack_values(util, util_new, gamma_dem), np.nan)
    return values


FLOATS = st.one_of(st.floats(-1e6, 1e6, allow_nan=False), st.sampled_from([0.0, -0.0, 0.5, 1.0, 0.1, 0.3]))


def reference_pigeon_scores(values: np.ndarray) -> np.ndarray:
    """pigeon_scores by its masked rule: with a NaN appended (scored 0 and dropped again) no input is all finite."""
    return pigeon_scores(np.append(np.asarray(values, dtype=float), np.nan))[:-1]


def demand_of(cpu_m: float, mem: float) -> np.ndarray:
    return np.array([cpu_m, mem])


WIDE = st.one_of(st.floats(allow_nan=False, allow_infinity=False), FLOATS)


UNIT = st.one_of(st.floats(0.0, 1.0), st.sampled_from([0.0, 1.0, 0.5, 0.25, 0.1]))


@SETTINGS
@given(seed=st.integers(0, 10**9), n=st.integers(1, 40), calls=st.integers(1, 4))
def test_pigeon_values_equal_the_reference_bit_for_bit(seed: int, n: int, calls: int) -> None:
    from decisions.agents.pigeon import PigeonAgent, PigeonParams

    rng = random.Random(seed)
    state = random_state(rng, n)  # some nodes with 0 cpu: the general utilisation path
    agent = PigeonAgent(PigeonParams())
    for _ in range(calls):  # the capacity memo is reused, or not, from call to call
        names = [f"n{i}" for i in range(n) if rng.random() < 0.8] + (["ghost"] if rng.random() < 0.3 else [])
        pod = pod_from_k8s(make_pod("p", cpu=f"{rng.randint(1, 8000)}m", memory=f"{rng.randint(1, 8000)}Mi"))
        call = Call(pod, state.view(names))
        stats = agent._demand.updated(agent.demand(call))
        got = agent._compute(call, commit=True).values
        assert got.tobytes() == reference_pigeon_values(agent, call, stats).tobytes()


@MANY_EXAMPLES
@given(st.lists(st.one_of(FLOATS, st.just(float("nan"))), max_size=60), st.booleans())
def test_pigeon_scores_equal_the_masked_rule(values: list[float], finite_only: bool) -> None:
    v = np.array([x for x in values if not (finite_only and x != x)], dtype=float)
    got, want = pigeon_scores(v), reference_pigeon_scores(v)
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


@MANY_EXAMPLES
@given(st.lists(st.tuples(FLOATS, FLOATS, FLOATS), min_size=1, max_size=40),
       st.sampled_from([None, float("nan"), 0.0, -1.0]))
def test_albert_zhang_equals_the_masked_rule(rows: list[tuple[float, float, float]], odd: float | None) -> None:
    a = np.array(rows)
    mu, quad = a[:, :2], np.abs(a[:, 2]) + 1e-9
    if odd is not None:
        quad[len(quad) // 2] = odd
    denom = np.einsum("...i,...i->...", mu, mu)
    ok = (denom > 0) & (quad > 0)
    with np.errstate(all="ignore"):
        want = np.where(ok, np.sqrt(np.where(ok, quad, 0.0)) / np.where(ok, denom, 1.0), 0.0)
    assert albert_zhang(mu, quad).tobytes() == want.tobytes()


def test_e2e_pods_demand_settles() -> None:
    agent = PigeonAgent(PigeonParams())
    for _ in range(200):
        agent._updated(demand_of(100.0, 2.0**27), commit=True)
    assert agent._settled == demand_of(100.0, 2.0**27).tobytes()


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([100.0, 250.0, 1000.0, 33.3]), st.sampled_from([2.0**27, 5e8, 1.0])),
                min_size=1, max_size=8),
       st.lists(st.integers(1, 160), min_size=8, max_size=8))
def test_a_settled_demand_skips_the_update_and_keeps_the_same_moments(demands: list[tuple[float, float]],
                                                                     repeats: list[int]) -> None:
    """Runs of one demand (long enough for the running average to settle) and changes of demand: the agent's
    moments equal those of updating every call, bit for bit, and so does explain's peek."""
    agent = PigeonAgent(PigeonParams())
    plain = DemandStats()
    skipped = 0
    for (cpu, mem), times in zip(demands, repeats, strict=False):  # as many runs as demands
        d = demand_of(cpu, mem)
        for _ in range(times):
            peek = agent._updated(d, commit=False)
            before = agent._settled
            got = agent._updated(d, commit=True)
            skipped += before == d.tobytes()
            plain = plain.updated(d)
            for s in (got, peek):
                assert s.count == plain.count
                assert s.mean is not None and plain.mean is not None and s.second is not None and plain.second is not None
                assert s.mean.tobytes() == plain.mean.tobytes() and s.second.tobytes() == plain.second.tobytes()
    runs = list(zip(demands, repeats, strict=False))
    # e2e's pods (100m, 128Mi) alone settle the average: the shortcut is taken. After another demand the running
    # mean of all pods never returns to e2e's exactly, so nothing settles there.
    if all(demand == (100.0, 2.0**27) for demand, _ in runs) and sum(times for _, times in runs) >= 150:
        assert skipped > 0


@MANY_EXAMPLES
@given(st.lists(WIDE, min_size=1, max_size=60))
def test_finite_scores_equal_the_clipped_formula(values: list[float]) -> None:
    """Finite_scores in place and without its clip (a no-op up to CLIP_FREE_SPAN) against the formula
    with the clip, bit for bit, over every finite double (spans past 1e300 included, where the clip stays)."""
    from decisions.agents.pigeon import EQUAL_RTOL, MAX_PRIORITY, finite_scores

    v = np.array(values, dtype=float)
    vmax, vmin = float(v.max()), float(v.min())
    span = vmax - vmin
    with np.errstate(all="ignore"):
        if span <= EQUAL_RTOL * max(1.0, abs(vmax)):
            want = np.full(v.shape, MAX_PRIORITY, dtype=np.int64)
        else:
            x = np.floor(1.0 + (MAX_PRIORITY - 1) * (vmax - v) / span + 0.5)
            want = np.minimum(np.maximum(x, 0, out=x), MAX_PRIORITY, out=x).astype(np.int64)
        got = finite_scores(v, vmax, vmin)
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


@MANY_EXAMPLES
@given(free=st.lists(st.lists(st.one_of(FLOATS, st.just(float("nan"))), min_size=3, max_size=3), max_size=20),
       d=st.lists(FLOATS, min_size=3, max_size=3), r=st.integers(1, 3))
def test_least_free_says_what_the_elementwise_comparison_says(free: list[list[float]], d: list[float], r: int) -> None:
    """Pigeon's feasibility shortcut (some d_j > min_k free[k, j], NaN left out) against (d > free).any()."""
    from operator import gt

    f = np.array(free, dtype=float).reshape(len(free), 3)[:, :r]
    dv = np.array(d[:r])
    least = np.fmin.reduce(f, axis=0).tolist() if f.size else []
    shortcut = not least or any(map(gt, dv.tolist(), least))
    assert shortcut == (not f.size or bool((dv > f).any()))


@MANY_EXAMPLES
@given(rows=st.lists(st.lists(UNIT, min_size=5, max_size=5), min_size=1, max_size=40),
       new=st.lists(st.lists(UNIT, min_size=5, max_size=5), min_size=40, max_size=40),
       r=st.integers(1, 5), fortran=st.booleans(), gamma=st.sampled_from([0.0, 0.3, 1e-9]))
def test_binpack_stacked_sums_equal_the_einsums(rows: list[list[float]], new: list[list[float]], r: int, fortran: bool,
                                                gamma: float) -> None:
    """The objective with its four row sums in one einsum gives the four einsums' bits, for every R and
    both memory layouts."""
    from decisions.agents.pigeon import binpack_prelude, binpack_values_einsums, binpack_values_from

    order = "F" if fortran else "C"
    util = np.array(np.array(rows)[:, :r], order=order)
    util_new = np.array(np.array(new)[: len(rows), :r], order=order)
    pre = binpack_prelude(util)
    got, want = binpack_values_from(pre, util_new, gamma), binpack_values_einsums(pre, util_new, gamma)
    assert got.tobytes() == want.tobytes()
