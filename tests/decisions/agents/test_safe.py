"""decisions.agents.safe: the safe agent's inputs, risks, reasons and scores equal the full computation they
replaced."""

from __future__ import annotations

import random

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from decisions.agents.base import Call, PredicateResult
from decisions.agents.safe import RESOURCE_NAMES, RiskMemo, SafeAgent, SafeInputs, SafeParams
from kso.core.cluster import ClusterState
from kso.core.objects import node_from_k8s, pod_from_k8s
from kso.core.safety import beta_cases
from tests.support.decision_cases import (
    SETTINGS,
    tricky,
)
from tests.support.fixtures import make_node, make_pod
from tests.support.reference_risk import reference_safe_overload_risk
from tests.support.view_cases import (
    random_event,
    random_node,
)


def reference_filter_overload(agent: SafeAgent, call: Call) -> PredicateResult:
    """SafeAgent.filter_overload before the %-templates: one f-string per value."""
    s = agent.inputs(call)
    failed = s.valid & (s.risk > agent.eps)
    passed = ~failed.any(axis=1)
    reasons: dict[int, str] = {}
    bad = np.flatnonzero(~passed)
    if len(bad):
        risk, mu, sigma, fail = (a[bad].tolist() for a in (s.risk, s.mu, s.sigma, failed))
        head = f"P(util > {agent.u_star:.0%}) ="
        for k, i in enumerate(bad.tolist()):
            parts = [
                f"{RESOURCE_NAMES[r]} {head} {risk[k][r]:.3g} > eps {agent.eps:.2g} "
                f"(forecast util {mu[k][r]:.1%} +- {sigma[k][r]:.1%} with this pod, from {s.source[i]})"
                for r in range(2)
                if fail[k][r]
            ]
            reasons[i] = "safe-overload: " + "; ".join(parts)
    notes = {int(i): "safe-overload: no load statistics for this node; passed unjudged"
             for i in np.flatnonzero(~s.valid.any(axis=1))}
    return PredicateResult(passed, reasons, notes)


def reference_safe_inputs(agent: SafeAgent, call: Call) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """mu, sigma, valid as SafeAgent._inputs computed them before it was made faster (np.clip, nan_to_num)."""
    view = call.view
    stats = agent.stats.free_stats(view)
    cap = view.stat_capacity()
    free = np.where(np.isnan(stats.forecast_free), stats.mean_free,
                    (1.0 - agent.w) * stats.mean_free + agent.w * stats.forecast_free)
    demand = np.array([call.pod.requests.get("cpu", 0.0), call.pod.requests.get("memory", 0.0) / 2**20])
    used = np.maximum(cap - free, 0.0) + view.recent
    valid = ~np.isnan(free) & (cap > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        mu = np.clip((used + demand) / cap, 0.0, 1.0)
        sigma = np.clip(np.nan_to_num(stats.std_free, nan=0.0) / cap, 0.0, 1.0)
    return np.where(valid, mu, 0.0), np.where(valid, sigma, 0.0), valid


annotation = st.one_of(st.none(), st.sampled_from(["0", "-0", "-1", "1e400", "inf", "nan", "x", "0.5", "1e-300"]),
                       st.floats(0, 1e6, allow_nan=False).map(repr))


@SETTINGS
@given(
    n=st.integers(0, 12),
    data=st.data(),
    u_star=st.integers(1, 100),
    eps=st.integers(0, 100),
    given_risk=st.booleans(),
)
def test_safe_filter_equals_the_full_computation(n: int, data: st.DataObject, u_star: int, eps: int,
                                                 given_risk: bool) -> None:
    """The filter's reasons against per-value f-strings, and its Cantelli shortcut against betainc
    everywhere: with the risk given (tricky values for the text) or computed from mu and sigma."""
    agent = SafeAgent(SafeParams(utilization=u_star, percentile=eps))
    pair = st.tuples(tricky, tricky)
    small = st.one_of(tricky, st.sampled_from([1e-12, 1e-9, 1e-6, 1e-4, 0.001, 0.01, 0.02, 0.05]))
    mu = np.array(data.draw(st.lists(pair, min_size=n, max_size=n)), dtype=float).reshape(n, 2)
    sigma = np.array(data.draw(st.lists(st.tuples(small, small), min_size=n, max_size=n)), dtype=float).reshape(n, 2)
    valid = np.array(data.draw(st.lists(st.tuples(st.booleans(), st.booleans()), min_size=n, max_size=n)),
                     dtype=bool).reshape(n, 2)
    mu, sigma = np.where(valid, mu, 0.0), np.where(valid, sigma, 0.0)  # as SafeAgent._inputs leaves them
    risk = None
    if given_risk:
        risk = np.array(data.draw(st.lists(pair, min_size=n, max_size=n)), dtype=float).reshape(n, 2)
        risk = np.where(valid, risk, 0.0)
    source = data.draw(st.lists(st.sampled_from(["annotations", "none", "forecast:holt-winters", "100%"]),
                                min_size=n, max_size=n))
    state = ClusterState()
    pod = pod_from_k8s(make_pod("p"))

    def call() -> Call:
        c = Call(pod, state.view([f"x{i}" for i in range(n)]))
        c.memo[agent.name] = SafeInputs(mu, sigma, valid, np.ones((n, 2)), source, agent.u_star,
                                        None if risk is None else risk.copy())
        return c

    fast, slow = agent.filter_overload(call()), reference_filter_overload(agent, call())
    assert fast.passed.tolist() == slow.passed.tolist()
    assert list(fast.reasons.items()) == list(slow.reasons.items())
    assert list(fast.notes.items()) == list(slow.notes.items())


@SETTINGS
@given(st.lists(st.tuples(st.integers(0, 10), st.integers(0, 10), st.booleans(), st.booleans()), max_size=12))
def test_safe_combine_equals_row_reductions(rows: list[tuple[int, int, bool, bool]]) -> None:
    scores = np.array([[a, b] for a, b, _, _ in rows], dtype=np.int64).reshape(len(rows), 2)
    valid = np.array([[c, d] for _, _, c, d in rows], dtype=bool).reshape(len(rows), 2)
    masked = np.where(valid, scores, np.iinfo(np.int64).max)
    expected = np.where(valid.any(axis=1), masked.min(axis=1), 0).astype(int)
    got = SafeAgent._combine(scores, valid)
    assert got.dtype == expected.dtype and got.tolist() == expected.tolist()


def test_safe_reason_text_is_unchanged() -> None:
    # seed-behaviours.md's second vector, through the real agent: the text kube-scheduler shows
    state = ClusterState()
    state.upsert_node(node_from_k8s(make_node("n1", cpu="4000m", annotations={"mean-free-cpu": "600",
                                                                               "std-free-cpu": "300"})))
    agent = SafeAgent(SafeParams())
    res = agent.filter_overload(Call(pod_from_k8s(make_pod("p", cpu="200m", memory=None)), state.view(["n1"])))
    assert res.reasons == {0: "safe-overload: cpu P(util > 90%) = 0.592 > eps 0.3 (forecast util 90.0% +- 7.5% "
                               "with this pod, from annotations)"}


@SETTINGS
@given(st.lists(st.tuples(st.sampled_from(["0", "1", "4", "500m", "64"]), st.sampled_from(["0", "1Mi", "8Gi"]),
                          st.lists(annotation, min_size=6, max_size=6)), min_size=1, max_size=10),
       st.sampled_from(["0", "250m", "3"]), st.sampled_from(["0", "100Mi", "9Gi"]), st.integers(0, 100))
def test_safe_inputs_equal_the_reference(nodes: list[tuple[str, str, list[str | None]]], cpu: str, memory: str,
                                         weight: int) -> None:
    """mu, sigma and valid bit for bit as the straightforward formula, with missing, unparsable, zero,
    negative-zero and huge statistics, forecasts on some nodes, and nodes without capacity."""
    keys = ("mean-free-cpu", "mean-free-memory", "std-free-cpu", "std-free-memory", "forcasted-free-cpu",
            "forcasted-free-memory")
    state = ClusterState()
    for i, (c, m, values) in enumerate(nodes):
        ann = {k: v for k, v in zip(keys, values, strict=True) if v is not None}
        state.upsert_node(node_from_k8s(make_node(f"n{i}", cpu=c, memory=m, annotations=ann)))
    agent = SafeAgent(SafeParams(forecast_weight=weight))
    pod = pod_from_k8s(make_pod("p", cpu=cpu, memory=memory))
    view = state.view([f"n{i}" for i in range(len(nodes))] + ["unknown"])
    got = agent._inputs(Call(pod, view))
    for a, b in zip((got.mu, got.sigma, got.valid), reference_safe_inputs(agent, Call(pod, view)), strict=True):
        assert a.tobytes() == b.tobytes()


@SETTINGS
@given(st.lists(st.lists(st.tuples(st.integers(0, 40), tricky, st.one_of(tricky, st.just(0.05))), min_size=1, max_size=12),
                min_size=1, max_size=6), st.integers(1, 100))
def test_risk_memo_answers_as_betainc(calls: list[list[tuple[int, float, float]]], u_star: int) -> None:
    """Call after call (slots reused with the same or other inputs, the memo growing), the memo's risk is
    bit for bit safe_overload_risk's."""
    memo = RiskMemo(u_star / 100)
    for entries in calls:
        slots = np.array([e[0] for e in entries], dtype=np.intp)
        mu = np.array([e[1] for e in entries])
        sigma = np.array([e[2] for e in entries])
        var, spread, fits, _ = beta_cases(mu, sigma)
        got = memo.fitted_risk(slots[fits], mu[fits], sigma[fits], var[fits], spread[fits])
        assert got.tobytes() == reference_safe_overload_risk(mu[fits], sigma[fits], u_star / 100).tobytes()


@SETTINGS
@given(st.lists(st.tuples(st.integers(0, 64_000), st.integers(0, 256), st.sampled_from(["", "-0", "nan", "x"])),
                min_size=1, max_size=8),
       st.integers(0, 4000), st.integers(0, 8192))
def test_safe_agent_without_statistics_equals_the_full_computation(nodes: list[tuple[int, int, str]], cpu_m: int,
                                                                   mem_mi: int) -> None:
    """Where no node of a call has load statistics the safe agent skips its maths; its verdicts, notes and scores
    are those of the full computation (which runs when one node of the call has statistics: the safe agent
    judges each node on its own, so the other nodes' results must not change)."""
    state = ClusterState()
    names = []
    for i, (cpu, gib, std) in enumerate(nodes):
        # no mean free at all (std-only or unparseable annotations included): nothing to judge
        ann = {"std-free-cpu": std} if std else {}
        state.upsert_node(node_from_k8s(make_node(f"n{i}", cpu=f"{cpu}m", memory=f"{gib}Gi", annotations=ann)))
        names.append(f"n{i}")
    state.upsert_node(node_from_k8s(make_node("judged", cpu="4000m", memory="16Gi",
                                              annotations={"mean-free-cpu": "600", "std-free-cpu": "300",
                                                           "mean-free-memory": "4000", "std-free-memory": "10"})))
    pod = pod_from_k8s(make_pod("p", cpu=f"{cpu_m}m", memory=f"{mem_mi}Mi"))
    agent = SafeAgent(SafeParams())
    bare, full = Call(pod, state.view(names)), Call(pod, state.view([*names, "judged"]))
    assert not agent.inputs(bare).valid.any() and agent.inputs(full).valid[-1].any()
    fast, slow = agent.filter_overload(bare), agent.filter_overload(full)
    k = len(names)
    assert fast.passed.tolist() == slow.passed[:k].tolist()
    assert fast.reasons == {i: r for i, r in slow.reasons.items() if i < k}
    assert list(fast.notes.items()) == [(i, r) for i, r in slow.notes.items() if i < k]
    for score in (agent.score_overload, agent.score_balance):
        got, expected = score(bare), score(full)[:k]
        assert got.dtype == expected.dtype and got.tolist() == expected.tolist()
    explained, reference = agent.explain(bare), agent.explain(full)
    assert explained.keys() == reference.keys()
    assert all(explained[key] == reference[key][:k] for key in explained)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**9))
def test_safe_inputs_from_the_kept_base_equal_the_reference(seed: int) -> None:
    """SafeAgent._inputs (the view's pod-independent part kept, the pod's demand added) against _inputs_from (every
    step from the view), field by field, bit for bit; twice, the second from the kept base."""
    from decisions.agents.base import Call
    from decisions.agents.safe import SafeAgent, SafeParams

    rng = random.Random(seed)
    state = ClusterState()
    names = [f"n{i}" for i in range(8)]
    for name in names:
        state.upsert_node(node_from_k8s(random_node(rng, name)))
    for step in range(10):
        random_event(rng, [state], names, step)
    agent = SafeAgent(SafeParams())
    listed = names + ["ghost"]
    for _ in range(2):
        pod = pod_from_k8s(make_pod("p", cpu=rng.choice(["100m", "2"]), memory=rng.choice(["64Mi", "3Gi"])))
        order = rng.sample(listed, len(listed))  # kube-scheduler's completion order: a new one each call
        call = Call(pod, state.view(order))
        got, want = agent._inputs(call), agent._inputs_from(call)
        for field in ("mu", "sigma", "valid", "capacity", "risk"):
            a, b = getattr(got, field), getattr(want, field)
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), field
        assert got.source == want.source and got.u_star == want.u_star
        kept, plain = agent.filter_overload(call), agent.filter_overload(Call(pod, state.view(list(order))))
        assert kept.passed.tobytes() == plain.passed.tobytes()
        assert (kept.reasons, kept.notes) == (plain.reasons, plain.notes)
