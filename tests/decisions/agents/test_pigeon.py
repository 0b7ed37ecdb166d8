"""decisions.agents.pigeon: property tests against a plain loop-based reference written from the spec (libpigeon's
policies, feasibility, the score rule)."""

from __future__ import annotations

import math
import statistics
import threading
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from decisions.agents.base import Call
from decisions.agents.pigeon import (
    A_BINPACK,
    CONSOLIDATE,
    LOAD_BALANCE,
    pigeon_scores,
)
from kso.core.cluster import ClusterState
from kso.core.objects import node_from_k8s, pod_from_k8s
from tests.support.pigeon_cases import (
    agent,
    names,
)


def node_dict(name: str, cpu: int, mem_mi: int, pods: int = 110, gpu: int = 0, eph_gi: int = 100) -> dict[str, Any]:
    alloc = {"cpu": f"{cpu}m", "memory": f"{mem_mi}Mi", "pods": str(pods), "nvidia.com/gpu": str(gpu),
             "ephemeral-storage": f"{eph_gi}Gi"}
    return {"metadata": {"name": name}, "status": {"allocatable": alloc}}


def pod_dict(name: str, node: str = "", cpu: int = 0, mem_mi: int = 0, gpu: int = 0, eph_gi: int = 0) -> dict[str, Any]:
    req: dict[str, str] = {}
    if cpu:
        req["cpu"] = f"{cpu}m"
    if mem_mi:
        req["memory"] = f"{mem_mi}Mi"
    if gpu:
        req["nvidia.com/gpu"] = str(gpu)
    if eph_gi:
        req["ephemeral-storage"] = f"{eph_gi}Gi"
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox", "resources": {"requests": req}}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "uid": f"uid-{name}", "namespace": "default"}, "spec": spec}


def cpu_cluster(used: list[int], cap: int = 1000) -> ClusterState:
    """Nodes n0.. with ``cap`` milli cpu and 8 GiB each; node i has one pod using used[i] milli cpu."""
    state = ClusterState()
    for i, u in enumerate(used):
        state.upsert_node(node_from_k8s(node_dict(f"n{i}", cap, 8192)))
        if u:
            state.upsert_pod(pod_from_k8s(pod_dict(f"p{i}", f"n{i}", cpu=u)))
    return state


def call_for(state: ClusterState, names: list[str], **pod: int) -> Call:
    return Call(pod=pod_from_k8s(pod_dict("new", **pod)), view=state.view(names))


def cv(*u: float) -> float:
    """Coefficient of variation (population std / mean) of a few numbers."""
    return statistics.pstdev(u) / statistics.fmean(u)


@dataclass
class RefNode:
    known: bool
    cap: list[float]  # spec units: cpu milli, memory MB, pods, gpu, ephemeral GB
    pods: list[list[int]] = field(default_factory=list)  # each (cpu milli, MiB, gpu, GiB)

    def usage(self) -> list[float]:
        u = [0.0] * 5
        for cpu, mem, gpu, eph in self.pods:
            u[0] += cpu
            u[1] += mem
            u[2] += 1
            u[3] += gpu
            u[4] += eph
        return u


class Reference:
    """pigeon-holing from the spec, one node at a time, with the running demand average as state."""

    def __init__(self, policy: str, num_resources: int) -> None:
        self.policy = policy
        self.r = num_resources
        self.count = 0
        self.mean: list[float] = []
        self.second: list[list[float]] = []

    @staticmethod
    def gamma(mu: list[float], cov: list[list[float]]) -> float:
        p = len(mu)
        quad = sum(mu[a] * cov[a][b] * mu[b] for a in range(p) for b in range(p))
        den = sum(m * m for m in mu)
        if den <= 0 or quad <= 0:
            return 0.0
        return math.sqrt(quad) / den

    def add_demand(self, d: list[float]) -> None:
        self.count = min(self.count + 1, 100)
        w = 1.0 / self.count
        if not self.mean:
            self.mean = list(d)
            self.second = [[d[a] * d[b] for b in range(self.r)] for a in range(self.r)]
            return
        for a in range(self.r):
            self.mean[a] = (1 - w) * self.mean[a] + w * d[a]
            for b in range(self.r):
                self.second[a][b] = (1 - w) * self.second[a][b] + w * d[a] * d[b]

    def values(self, nodes: list[RefNode], pod: list[int]) -> list[float]:
        cpu, mem, gpu, eph = pod
        demand = [float(cpu or 10), float(mem or 16), 1.0, float(gpu), float(eph)][: self.r]
        if self.policy == A_BINPACK:
            self.add_demand(demand)
        known = [nd for nd in nodes if nd.known]
        out: list[float] = []
        for nd in nodes:
            if not nd.known:
                out.append(math.nan)
                continue
            cap, use = nd.cap[: self.r], nd.usage()[: self.r]
            if any(demand[k] > cap[k] - use[k] for k in range(self.r)):
                out.append(math.nan)
                continue
            rows = []
            for other in known:
                u = other.usage()[: self.r]
                if other is nd:
                    u = [u[k] + demand[k] for k in range(self.r)]
                rows.append((other.cap[: self.r], u))
            out.append(self.objective(rows))
        return out

    def objective(self, rows: list[tuple[list[float], list[float]]]) -> float:
        n = len(rows)
        if self.policy in (LOAD_BALANCE, CONSOLIDATE):
            u = [use[0] / cap[0] if cap[0] > 0 else 1.0 for cap, use in rows]
            avg = sum(u) / n
            if self.policy == LOAD_BALANCE:
                return math.sqrt(sum((x - avg) ** 2 for x in u) / n)
            if not 0 < avg < 1:
                return 0.0
            terms = [(avg - x) / avg if x < avg else (x - avg) / (1 - avg) for x in u]
            return 1 - math.sqrt(sum(t * t for t in terms) / n)
        # A_BINPACK
        util = []
        for cap, use in rows:
            util.append([min(max(use[k] / cap[k], 0.0), 1.0) if cap[k] > 0 else (1.0 if use[k] > 0 else 0.0)
                         for k in range(self.r)])
        mu = [sum(row[k] for row in util) / n for k in range(self.r)]
        cov = [[sum((row[a] - mu[a]) * (row[b] - mu[b]) for row in util) / n for b in range(self.r)]
               for a in range(self.r)]
        g_sys = self.gamma(mu, cov)
        avgcap = []
        for k in range(self.r):
            caps = [cap[k] for cap, _ in rows if cap[k] > 0]
            avgcap.append(sum(caps) / len(caps) if caps else 1.0)
        dmu = [self.mean[k] / avgcap[k] for k in range(self.r)]
        dcov = [[self.second[a][b] / (avgcap[a] * avgcap[b]) - dmu[a] * dmu[b] for b in range(self.r)]
                for a in range(self.r)]
        return abs(g_sys - self.gamma(dmu, dcov))


def reference_scores(values: list[float]) -> tuple[list[int], list[int]]:
    """Scores from the spec, and how far float noise (in either implementation) may legitimately move
    each: 1 on a rounding knife-edge (x within 1e-6 of a half), 9 when the whole spread is so small
    (< 1e-6) that noise of a few ulps is a visible part of it; 0 otherwise."""
    finite = [v for v in values if not math.isnan(v)]
    if not finite:
        return [0] * len(values), [0] * len(values)
    vmax, vmin = max(finite), min(finite)
    span = vmax - vmin
    if span <= 1e-12 * max(1.0, abs(vmax)):
        return [0 if math.isnan(v) else 10 for v in values], [0] * len(values)
    scores, slack = [], []
    for v in values:
        if math.isnan(v):
            scores.append(0)
            slack.append(0)
            continue
        x = 1 + 9 * (vmax - v) / span
        scores.append(min(max(math.floor(x + 0.5), 0), 10))
        slack.append(9 if span < 1e-6 else 1 if abs(x - math.floor(x) - 0.5) < 1e-6 else 0)
    return scores, slack


CAP_CPU = [0, 500, 1000, 2000, 4000]


CAP_MEM = [0, 64, 1024, 4096]


CAP_PODS = [0, 1, 3, 110]


CAP_GPU = [0, 1, 2]


CAP_EPH = [0, 10, 100]


REQ = st.tuples(st.sampled_from([0, 10, 100, 250, 1000, 3000]), st.sampled_from([0, 16, 256, 1024]),
                st.sampled_from([0, 0, 1]), st.sampled_from([0, 0, 1, 5]))


NODE = st.builds(
    lambda known, cap, pods: RefNode(known, [float(c) for c in cap], pods),
    st.sampled_from([True, True, True, False]),
    st.tuples(*(st.sampled_from(v) for v in (CAP_CPU, CAP_MEM, CAP_PODS, CAP_GPU, CAP_EPH))),
    st.lists(REQ.map(list), max_size=3),
)


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[RefNode], str]:
    nodes = draw(st.lists(NODE, min_size=1, max_size=8))
    clone = draw(st.sampled_from(["none", "none", "half", "all"]))
    if clone != "none":
        upto = len(nodes) if clone == "all" else (len(nodes) + 1) // 2
        for i in range(1, upto):
            nodes[i] = RefNode(nodes[0].known, list(nodes[0].cap), [list(p) for p in nodes[0].pods])
    return nodes, clone


def build_state(nodes: list[RefNode]) -> ClusterState:
    state = ClusterState()
    for i, nd in enumerate(nodes):
        name = f"n{i}"
        if nd.known:
            cpu, mem, pods, gpu, eph = (int(c) for c in nd.cap)
            state.upsert_node(node_from_k8s(node_dict(name, cpu, mem, pods, gpu, eph)))
        for j, (cpu_r, mem_r, gpu_r, eph_r) in enumerate(nd.pods):
            state.upsert_pod(pod_from_k8s(pod_dict(f"{name}-p{j}", name, cpu_r, mem_r, gpu_r, eph_r)))
    return state


def test_load_balance_prefers_least_loaded() -> None:
    # std: n0 sqrt(2)/12 = .118, n1 sqrt(14)/12 = .312, n2 sqrt(8)/12 = .236. Lowest wins (10), highest
    # gets 1, n2: 1 + 9 (sqrt14 - sqrt8) / (sqrt14 - sqrt2) = 4.53 -> 5.
    call = call_for(cpu_cluster([0, 500, 250]), names(3), cpu=250)
    a = agent(LOAD_BALANCE)
    assert a.score(call).tolist() == [10, 1, 5]
    vals = a.explain(call)["pigeon_value"]
    assert vals == pytest.approx([math.sqrt(2) / 12, math.sqrt(14) / 12, math.sqrt(8) / 12])


def test_consolidate_prefers_most_loaded() -> None:
    # avg = 1/3; term below = (avg - u) / avg, above = (u - avg) / (1 - avg):
    #   n0: terms (.25, .25, .25)       -> 1 - sqrt(.0625)            = .75
    #   n1: terms (1, .625, .25)        -> 1 - sqrt(1.453125 / 3)     = .30403
    #   n2: terms (1, .25, .25)         -> 1 - sqrt(1.125 / 3)        = .38763
    # n1 (packing onto the busiest node) wins; n2: 1 + 9 (.75 - .38763) / (.75 - .30403) = 8.31 -> 8.
    call = call_for(cpu_cluster([0, 500, 250]), names(3), cpu=250)
    a = agent(CONSOLIDATE)
    assert a.score(call).tolist() == [1, 10, 8]
    vals = a.explain(call)["pigeon_value"]
    assert vals == pytest.approx([0.75, 1 - math.sqrt(1.453125 / 3), 1 - math.sqrt(1.125 / 3)])


def test_binpack_uniform_demand_spreads() -> None:
    # One resource, first pod: the demand history is that one pod, so its variation is 0 and the value
    # is the cpu utilisation's coefficient of variation std/mean. Nodes use 0, 500, 800 of 1000m; the
    # pod asks 100m: CV n0 (.1,.5,.8) = .6145, n1 (0,.6,.8) = .7284, n2 (0,.5,.9) = .7890.
    # Least loaded wins; n1: 1 + 9 (.7890 - .7284) / (.7890 - .6145) = 4.13 -> 4.
    call = call_for(cpu_cluster([0, 500, 800]), names(3), cpu=100)
    a = agent(A_BINPACK, num_resources=1)
    assert a.score(call).tolist() == [10, 4, 1]
    ex = a.explain(call)
    assert ex["gamma_demand"] == pytest.approx(0.0, abs=1e-12)
    assert ex["pigeon_value"] == pytest.approx([cv(0.1, 0.5, 0.8), cv(0, 0.6, 0.8), cv(0, 0.5, 0.9)])


def test_binpack_variable_demand_packs() -> None:
    # Same cluster, but a 900m pod was seen first: demand mean (900+100)/2 = 500, E[d^2] = 410000, so
    # std 400; over the mean capacity 1000: mu .5, sigma .4, gamma_dem = .8. Values |CV - .8| =
    # (.1855, .0716, .0110): mixed sizes make the busiest node the best fit (pack, keep n0 free for
    # the next big pod); n1: 1 + 9 (.1855 - .0716) / (.1855 - .0110) = 6.87 -> 7.
    state = cpu_cluster([0, 500, 800])
    a = agent(A_BINPACK, num_resources=1)
    a.score(call_for(state, names(3), cpu=900))
    call = call_for(state, names(3), cpu=100)
    assert a.score(call).tolist() == [1, 7, 10]
    ex = a.explain(call)
    assert ex["gamma_demand"] == pytest.approx(0.8)
    assert ex["demand_samples"] == 2
    want = [abs(cv(0.1, 0.5, 0.8) - 0.8), abs(cv(0, 0.6, 0.8) - 0.8), abs(cv(0, 0.5, 0.9) - 0.8)]
    assert ex["pigeon_value"] == pytest.approx(want)


def test_binpack_demand_defaults_and_window() -> None:
    # A pod without requests counts as 10m / 16 MiB; the running average weights 1/min(count, 100).
    state = cpu_cluster([0, 0])
    a = agent(A_BINPACK, num_resources=2)
    for _ in range(150):
        a.score(call_for(state, names(2)))
    assert a._demand.count == 100
    assert a._demand.mean is not None
    assert a._demand.mean.tolist() == pytest.approx([10.0, 16 * 1024 * 1024])


def test_binpack_resource_no_node_has_in_original_units() -> None:
    # No node has ephemeral storage, so gamma_dem leaves it unnormalised, in the original's unit (GB),
    # not in bytes (where a 1 GiB request is 2^30 and gamma_dem becomes the CV of that alone, 1.0).
    # Pods seen: (10m, 16Mi, 1 pod, 0 gpu, 1Gi) and (10m, 16Mi, 1, 0, 0); capacity (500m, 64Mi, 1):
    # mu = (.02, .25, 1, 0, .5), the only variance is .25 in eph: gamma_dem = .5 * .5 / (mu'mu).
    state = ClusterState()
    state.upsert_node(node_from_k8s(node_dict("n0", 0, 0, 0, 0, 0)))
    state.upsert_node(node_from_k8s(node_dict("n1", 500, 64, 1, 0, 0)))
    a = agent(A_BINPACK, num_resources=5)
    a.score(call_for(state, names(2), eph_gi=1))
    ex = a.explain(call_for(state, names(2)))
    mu2 = 0.02**2 + 0.25**2 + 1 + 0.5**2
    assert ex["gamma_demand"] == pytest.approx(0.25 / mu2)
    # gamma_sys: rows 0 and u = (.02, .25, 1, 0, 0) -> sqrt((u'u)^2 / 16) / (u'u / 4) = 1
    assert ex["pigeon_value"] == pytest.approx([None, 1 - 0.25 / mu2])


@pytest.mark.parametrize("policy", [A_BINPACK, LOAD_BALANCE, CONSOLIDATE])
def test_infeasible_nodes_score_zero(policy: str) -> None:
    # n1 has 100m free for a 250m pod; n3 has no memory for the 16 MiB default.
    state = cpu_cluster([0, 900, 250])
    state.upsert_node(node_from_k8s(node_dict("n3", 1000, 0)))
    call = call_for(state, names(4), cpu=250)
    s = agent(policy).score(call)
    assert s[1] == 0 and s[3] == 0
    assert all(1 <= x <= 10 for x in s[[0, 2]])
    assert agent(policy).explain(call)["pigeon_value"][1] is None


@pytest.mark.parametrize("policy", [A_BINPACK, LOAD_BALANCE, CONSOLIDATE])
def test_identical_nodes_all_ten(policy: str) -> None:
    state = cpu_cluster([300] * 7)
    s = agent(policy, 5).score(call_for(state, names(7), cpu=123, mem_mi=77))
    assert s.tolist() == [10] * 7


@pytest.mark.parametrize("policy", [A_BINPACK, LOAD_BALANCE, CONSOLIDATE])
def test_unknown_nodes_do_not_enter_the_objective(policy: str) -> None:
    state = cpu_cluster([0, 500, 250])
    a, b = agent(policy), agent(policy)
    plain = a.score(call_for(state, names(3), cpu=250))
    mixed = b.score(call_for(state, ["ghost", "n0", "n1", "other", "n2"], cpu=250))
    assert mixed.tolist() == [0, *plain[:2].tolist(), 0, plain[2]]
    assert b.explain(call_for(state, ["ghost"], cpu=250))["pigeon_value"] == [None]


@pytest.mark.parametrize("policy", [A_BINPACK, LOAD_BALANCE, CONSOLIDATE])
def test_zero_capacity_no_warnings(policy: str) -> None:
    # cpu 0 (infeasible: the pod always needs some cpu), gpu 0 with no gpu asked (fine), an
    # overcommitted node, no pods allowed; all without a floating-point warning.
    state = ClusterState()
    state.upsert_node(node_from_k8s(node_dict("n0", 0, 1024)))
    state.upsert_node(node_from_k8s(node_dict("n1", 1000, 1024, gpu=0)))
    state.upsert_node(node_from_k8s(node_dict("n2", 1000, 1024, pods=0)))
    state.upsert_node(node_from_k8s(node_dict("n3", 500, 1024, gpu=2)))
    state.upsert_pod(pod_from_k8s(pod_dict("big", "n3", cpu=2000)))
    with warnings.catch_warnings(), np.errstate(divide="raise", invalid="raise", over="raise"):
        warnings.simplefilter("error")
        s = agent(policy, 5).score(call_for(state, names(4), cpu=100))
        assert s.tolist() == [0, 10, 0, 0]
        s = agent(policy, 5).score(call_for(state, names(4)))
        assert s.tolist() == [0, 10, 0, 0]
        assert agent(policy, 5).score(call_for(state, ["x", "y"])).tolist() == [0, 0]
        assert agent(policy, 5).score(call_for(state, [])).tolist() == []


def test_gpu_demand_needs_gpu_capacity() -> None:
    state = ClusterState()
    state.upsert_node(node_from_k8s(node_dict("n0", 1000, 1024, gpu=0)))
    state.upsert_node(node_from_k8s(node_dict("n1", 1000, 1024, gpu=1)))
    assert agent(LOAD_BALANCE, 4).score(call_for(state, names(2), gpu=1)).tolist() == [0, 10]
    # with 3 resources gpu is not looked at
    assert agent(LOAD_BALANCE, 3).score(call_for(state, names(2), gpu=1)).tolist() == [10, 10]


def test_preemption_victims_are_freed() -> None:
    state = cpu_cluster([900, 0])
    pod = pod_from_k8s(pod_dict("new", cpu=500))
    view = state.view(names(2))
    assert agent(LOAD_BALANCE).score(Call(pod, view)).tolist() == [0, 10]
    freed = np.zeros_like(view.requested)
    freed[0, view.columns["cpu"]] = 900
    assert agent(LOAD_BALANCE).score(Call(pod, view, freed=freed)).tolist() == [10, 10]


def test_scores_rule() -> None:
    nan = math.nan
    assert pigeon_scores(np.array([nan, nan])).tolist() == [0, 0]
    assert pigeon_scores(np.array([0.3, nan, 0.3])).tolist() == [10, 0, 10]
    # noise below the tolerance is "all equal", not a 1..10 spread
    assert pigeon_scores(np.array([0.5, 0.5 + 1e-15, nan])).tolist() == [10, 10, 0]
    # halves round up (Go's math.Round): 1 + 9 * 0.5 = 5.5 -> 6
    assert pigeon_scores(np.array([0.0, 0.5, 1.0])).tolist() == [10, 6, 1]
    assert pigeon_scores(np.array([])).tolist() == []


def test_memo_and_explain_update_once() -> None:
    state = cpu_cluster([0, 500])
    a = agent(A_BINPACK)
    call = call_for(state, names(2), cpu=100)
    a.explain(call)
    assert a._demand.count == 0  # explain alone only peeks
    first = a.score(call)
    assert a.score(call).tolist() == first.tolist()
    a.explain(call)
    assert a._demand.count == 1


def test_concurrent_calls_each_count_once() -> None:
    state = cpu_cluster([0, 500, 250])
    a = agent(A_BINPACK)

    def work() -> None:
        for _ in range(10):
            a.score(call_for(state, names(3), cpu=100))

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert a._demand.count == 80


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cluster=clusters(),
    policy=st.sampled_from([A_BINPACK, LOAD_BALANCE, CONSOLIDATE]),
    num_resources=st.integers(1, 5),
    pods=st.lists(REQ, min_size=1, max_size=3),
)
def test_matches_reference(cluster: tuple[list[RefNode], str], policy: str, num_resources: int,
                           pods: list[tuple[int, int, int, int]]) -> None:
    nodes, clone = cluster
    state = build_state(nodes)
    a = agent(policy, num_resources)
    ref = Reference(policy, num_resources)
    for cpu, mem, gpu, eph in pods:
        call = call_for(state, names(len(nodes)), cpu=cpu, mem_mi=mem, gpu=gpu, eph_gi=eph)
        with warnings.catch_warnings(), np.errstate(divide="raise", invalid="raise", over="raise"):
            warnings.simplefilter("error")
            got = a.score(call)
        ex = a.explain(call)
        want_vals = ref.values(nodes, [cpu, mem, gpu, eph])
        got_vals = ex["pigeon_value"]
        assert [v is None for v in got_vals] == [math.isnan(v) for v in want_vals]
        for g, w in zip(got_vals, want_vals, strict=True):
            if g is not None:
                assert g == pytest.approx(w, rel=1e-6, abs=1e-6)
        want, slack = reference_scores(want_vals)
        assert got.shape == (len(nodes),)
        for g_s, w_s, tol in zip(got.tolist(), want, slack, strict=True):
            assert abs(g_s - w_s) <= tol, (got.tolist(), want, want_vals)
            assert (g_s == 0) == (w_s == 0)
        if clone == "all":
            # identical nodes: identical values, so every feasible node gets 10
            assert set(got.tolist()) <= {0, 10}
