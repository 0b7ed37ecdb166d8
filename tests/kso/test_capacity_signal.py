"""The capacity signal's pure parts: the decision (which nodes are hot for which refused pod, with hysteresis, and
which placeholders follow), the placeholder Pod it writes, and which filter answers count as a refusal."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from decisions.agents.base import PredicateResult
from decisions.agents.safe import RELEASE_NOTE, SafeAgent, SafeParams
from decisions.capacity import CapacityDecision, Refusal, RefusalLog, node_risks, refused_everywhere, spec_for
from kso.core.capacity import (
    COMPONENT,
    HOLDER,
    MANAGED_BY,
    PLACEHOLDER_FOR,
    UNSERVED_SCHEDULER,
    CapacitySettings,
    Owner,
    PlaceholderSpec,
    is_placeholder,
    needs_limit,
    placeholder_manifest,
)
from kso.core.objects import pod_from_k8s
from tests.support.fixtures import make_node, make_pod, make_state

EPS = 0.3


def refusal(name: str, nodes: tuple[str, ...], at: float = 0.0, cpu: str = "500m", memory: str = "1Gi") -> Refusal:
    return Refusal(pod_from_k8s(make_pod(name, cpu=cpu, memory=memory)), nodes, at)


def test_a_pod_refused_on_every_node_gets_one_placeholder_avoiding_them() -> None:
    d = CapacityDecision(eps=EPS)
    r = refusal("p", ("n2", "n1"))
    [spec] = d.step(0.0, [r], {r.pod.uid: {"n1": 0.9, "n2": 0.5}})
    assert spec.avoid == ("n1", "n2")
    assert spec.for_key == "default/p"
    assert dict(spec.requests)["cpu"] == 500.0
    assert d.hot_nodes() == {"n1", "n2"}


def test_one_node_that_would_take_the_pod_means_no_placeholder() -> None:
    d = CapacityDecision(eps=EPS)
    r = refusal("p", ("n1", "n2"))
    assert d.step(0.0, [r], {r.pod.uid: {"n1": 0.9, "n2": 0.2}}) == []
    assert d.hot_nodes() == {"n1"}


def test_hysteresis_a_hot_node_cools_only_below_the_exit_risk_and_after_min_hot() -> None:
    d = CapacityDecision(eps=EPS, exit_ratio=0.5, min_hot_s=60.0)
    r = refusal("p", ("n1",))
    uid = r.pod.uid
    assert d.step(0.0, [r], {uid: {"n1": 0.5}})
    assert d.step(10.0, [r], {uid: {"n1": 0.25}}), "between exit (0.15) and eps: still hot"
    assert d.step(30.0, [r], {uid: {"n1": 0.1}}), "below exit but only 30 s since it was above eps"
    assert d.step(59.0, [r], {uid: {"n1": 0.1}})
    assert d.step(60.0, [r], {uid: {"n1": 0.1}}) == [], "below exit 60 s after it was last above eps: cool"
    assert d.step(70.0, [r], {uid: {"n1": 0.29}}) == [], "a cool node turns hot only above eps"
    assert d.step(80.0, [r], {uid: {"n1": 0.31}})


def test_a_bound_or_deleted_pod_is_forgotten_with_its_placeholder() -> None:
    d = CapacityDecision(eps=EPS)
    a, b = refusal("a", ("n1",)), refusal("b", ("n1",))
    risks = {a.pod.uid: {"n1": 0.9}, b.pod.uid: {"n1": 0.9}}
    assert len(d.step(0.0, [a, b], risks)) == 2
    [spec] = d.step(1.0, [b], risks)
    assert spec.for_key == "default/b"
    assert set(d.hot) == {b.pod.uid}


def test_gone_nodes_drop_out_and_no_nodes_left_means_no_placeholder() -> None:
    d = CapacityDecision(eps=EPS)
    r = refusal("p", ("n1", "n2"))
    [spec] = d.step(0.0, [r], {r.pod.uid: {"n1": 0.9, "n2": 0.9}})
    [spec] = d.step(1.0, [r], {r.pod.uid: {"n1": 0.9}})
    assert spec.avoid == ("n1",)
    assert d.step(2.0, [r], {r.pod.uid: {}}) == []


def test_at_most_max_placeholders_oldest_refusal_first() -> None:
    d = CapacityDecision(eps=EPS, max_placeholders=2)
    rs = [refusal(f"p{i}", ("n1",), at=float(10 - i)) for i in range(4)]
    specs = d.step(0.0, rs, {r.pod.uid: {"n1": 0.9} for r in rs})
    assert [s.for_key for s in specs] == ["default/p3", "default/p2"]


risk_values = st.sampled_from([0.0, 0.05, 0.1, 0.2, 0.29, 0.3, 0.31, 0.5, 1.0])


@settings(max_examples=300, deadline=None)
@given(steps=st.lists(st.tuples(st.floats(0.0, 100.0), st.lists(risk_values, min_size=3, max_size=3),
                                st.lists(st.booleans(), min_size=3, max_size=3)), min_size=1, max_size=25),
       exit_ratio=st.sampled_from([0.0, 0.5, 0.8, 1.0]), min_hot_s=st.sampled_from([0.0, 30.0, 60.0]))
def test_the_rules_hold_on_any_history(steps: list[tuple[float, list[float], list[bool]]], exit_ratio: float,
                                       min_hot_s: float) -> None:
    """For any sequence of rounds (time steps, each node's risk, which nodes exist): a node is hot for the pod when
    its risk is above eps; a cool node stays cool at or below eps; a hot node stays hot above the exit risk; a node
    at or below the exit risk that has not been above eps for min_hot_s is cool; and the pod has a placeholder
    exactly when every node it was offered that still exists is hot (avoiding exactly those)."""
    d = CapacityDecision(eps=EPS, exit_ratio=exit_ratio, min_hot_s=min_hot_s)
    r = refusal("p", ("n0", "n1", "n2"))
    uid = r.pod.uid
    now = 0.0
    last_above: dict[str, float] = {}
    hot_before: set[str] = set()
    for dt, risks, exists in steps:
        now += dt
        current = {f"n{i}": risk for i, (risk, there) in enumerate(zip(risks, exists, strict=True)) if there}
        specs = d.step(now, [r], {uid: current})
        hot = set(d.hot.get(uid, {}))
        assert hot <= set(current), "a node that is gone is not hot"
        for node, risk in current.items():
            if risk > EPS:
                last_above[node] = now
                assert node in hot
            elif node not in hot_before:
                assert node not in hot
            elif risk > EPS * exit_ratio:
                assert node in hot
            elif now - last_above.get(node, -1e9) >= min_hot_s:
                assert node not in hot
        for node in set(last_above) - set(current):
            del last_above[node]  # a node that went away starts again when it comes back
        if current and hot == set(current):
            assert [s.avoid for s in specs] == [tuple(sorted(current))]
        else:
            assert specs == []
        hot_before = hot


@settings(max_examples=100, deadline=None)
@given(n_pods=st.integers(0, 8), cap=st.integers(0, 5), risky=st.lists(st.booleans(), min_size=8, max_size=8))
def test_placeholders_are_only_for_refused_pods_and_never_more_than_the_cap(n_pods: int, cap: int,
                                                                            risky: list[bool]) -> None:
    d = CapacityDecision(eps=EPS, max_placeholders=cap)
    rs = [refusal(f"p{i}", ("n1", "n2"), at=float(i)) for i in range(n_pods)]
    risks = {r.pod.uid: {"n1": 0.9, "n2": 0.9 if risky[i] else 0.1} for i, r in enumerate(rs)}
    specs = d.step(0.0, rs, risks)
    refused = [f"default/p{i}" for i in range(n_pods) if risky[i]]
    assert [s.for_key for s in specs] == refused[:cap]
    assert len({s.name() for s in specs}) == len(specs)


def test_the_placeholder_pod_is_what_the_autoscaler_reads() -> None:
    raw = make_pod("web-1", cpu="1500m", memory="3Gi")
    raw["spec"]["nodeSelector"] = {"pool": "general"}
    raw["spec"]["tolerations"] = [{"key": "dedicated", "operator": "Equal", "value": "web", "effect": "NoSchedule"},
                                  {"key": "soft", "operator": "Exists", "effect": "PreferNoSchedule"},
                                  {"key": "gone", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}]
    raw["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n9"]}]}]}}}
    pod = pod_from_k8s(raw)
    # every current node excluded: n1 and n2 by their hostname label, n3 (no label) by its name
    spec = replace(spec_for(pod, ("n1", "n2")), exclude=(("n1", "h1"), ("n2", "h2"), ("n3", "")))
    settings_ = CapacitySettings()
    m = placeholder_manifest(spec, settings_, Owner("kso-a", "kso-capacity-kso-a", "lease-uid"))
    meta, body = m["metadata"], m["spec"]
    assert meta["namespace"] == "kso-capacity"
    assert meta["labels"] == {MANAGED_BY: "kso", COMPONENT: "capacity-placeholder", HOLDER: "kso-a"}
    assert meta["annotations"][PLACEHOLDER_FOR] == "default/web-1"
    assert meta["ownerReferences"][0]["kind"] == "Lease" and meta["ownerReferences"][0]["uid"] == "lease-uid"
    assert body["priorityClassName"] == "kso-capacity-placeholder"
    assert body["schedulerName"] == UNSERVED_SCHEDULER, "no scheduler serves it: never bound"
    assert "nodeName" not in body
    assert body["terminationGracePeriodSeconds"] == 0 and body["automountServiceAccountToken"] is False
    assert body["containers"][0]["resources"] == {"requests": {"cpu": "1500m", "memory": str(3 * 1024**3)}}
    assert body["nodeSelector"] == {"pool": "general"}
    # the taints the autoscaler's simulation filters on only, without tolerationSeconds
    assert body["tolerations"] == [{"key": "dedicated", "operator": "Equal", "value": "web", "effect": "NoSchedule"},
                                   {"key": "gone", "operator": "Exists", "effect": "NoExecute"}]
    terms = body["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    hosts = {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["h1", "h2"]}
    bare = {"key": "metadata.name", "operator": "NotIn", "values": ["n3"]}
    # each of the pod's ORed terms keeps its own rules and gets the exclusion ANDed in
    assert terms == [{"matchExpressions": [hosts, {"key": "zone", "operator": "In", "values": ["a", "b"]}],
                      "matchFields": [bare]},
                     {"matchExpressions": [hosts],
                      "matchFields": [bare, {"key": "metadata.name", "operator": "NotIn", "values": ["n9"]}]}]
    assert meta["name"] == spec.name() and len(meta["name"]) <= 63
    assert replace(spec, exclude=(("n1", "h1"),)).name() != spec.name(), "another exclusion is another pod"
    assert replace(spec, avoid=("n1",)).name() == spec.name(), "the hot nodes are covered by the exclusion"


def test_is_placeholder_reads_the_owner_not_an_annotation_a_tenant_can_set() -> None:
    raw = make_pod("sneaky")
    raw["metadata"]["annotations"] = {PLACEHOLDER_FOR: "default/x"}
    assert not is_placeholder(pod_from_k8s(raw))
    raw["metadata"]["ownerReferences"] = [{"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "controller": True,
                                           "name": "kso-capacity-kso-a", "uid": "u"}]
    assert is_placeholder(pod_from_k8s(raw))
    raw["metadata"]["ownerReferences"][0]["kind"] = "ReplicaSet"
    assert not is_placeholder(pod_from_k8s(raw))


def test_extended_resources_and_hugepages_get_limits_equal_to_requests_and_nothing_else_does() -> None:
    assert needs_limit("nvidia.com/gpu") and needs_limit("hugepages-2Mi") and needs_limit("example.org/fpga")
    assert not any(needs_limit(r) for r in ("cpu", "memory", "ephemeral-storage", "pods", "kubernetes.io/x",
                                            "requests.nvidia.com/gpu"))
    spec = PlaceholderSpec("u", "ns/gpu", (("cpu", 500.0), ("hugepages-2Mi", 2.0 * 2**21), ("memory", 2.0**30),
                                           ("nvidia.com/gpu", 1.0)), ("n1",))
    res = placeholder_manifest(spec, CapacitySettings(), Owner("kso-a"))["spec"]["containers"][0]["resources"]
    assert res["limits"] == {"hugepages-2Mi": str(2 * 2**21), "nvidia.com/gpu": "1"}
    assert all(res["requests"][r] == q for r, q in res["limits"].items())


def test_a_refusal_is_every_node_refused_or_passed_only_by_the_hold_release() -> None:
    release = RELEASE_NOTE.format(held=400, hold=300, u=0.9, risk=0.5, eps=0.3)
    assert refused_everywhere(PredicateResult(np.zeros(2, dtype=bool), {0: "x", 1: "y"}))
    assert refused_everywhere(PredicateResult(np.array([True, False]), {1: "y"}, {0: release}))
    assert not refused_everywhere(PredicateResult(np.array([True, False]), {1: "y"}, {0: "no statistics"}))
    assert not refused_everywhere(PredicateResult(np.zeros(0, dtype=bool)))


def test_the_log_keeps_the_first_refusal_time_and_every_node_refused_and_forgets_pods_no_longer_pending() -> None:
    """kube-scheduler offers a large cluster's nodes a sample at a time: the samples a pod was refused on add up."""
    clock = iter([1.0, 2.0, 3.0])
    log = RefusalLog(lambda: next(clock))
    pod = pod_from_k8s(make_pod("p"))
    log.record(pod, ["n1", "n2"])
    log.record(pod, ["n3", "n1"])
    [r] = log.pending(lambda uid: True)
    assert (r.first_at, r.nodes) == (1.0, ("n1", "n2", "n3"))
    assert log.pending(lambda uid: False) == []


HOT = {"mean-free-cpu": "100", "std-free-cpu": "50", "forcasted-free-cpu": "100",
       "mean-free-memory": "6000", "std-free-memory": "100", "forcasted-free-memory": "6000"}


def test_the_risks_are_the_safe_agents_on_the_nodes_kube_scheduler_could_still_offer() -> None:
    """Risk from the safe agent's own inputs; a node the pod no longer fits by requests, one with an untolerated
    taint and one that is gone are not judged (kube-scheduler would not offer them)."""
    full = make_node("full", cpu="4", annotations=HOT)
    tainted = make_node("tainted", annotations=HOT)
    tainted["spec"]["taints"] = [{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}]
    cool = make_node("cool", annotations={**HOT, "mean-free-cpu": "3900", "forcasted-free-cpu": "3900"})
    state = make_state([make_node("hot", annotations=HOT), full, tainted, cool],
                       [make_pod("big", cpu="3800m", node="full")])
    pod = pod_from_k8s(make_pod("p", cpu="500m", memory="512Mi"))
    risks = node_risks(SafeAgent(SafeParams()), state, Refusal(pod, ("hot", "full", "tainted", "cool", "gone"), 0.0))
    assert set(risks) == {"hot", "cool"}
    assert risks["hot"] > 0.3 >= risks["cool"]


def test_a_node_is_needed_while_a_pod_the_autoscaler_would_move_is_refused_on_every_other_node() -> None:
    """needed_nodes: 'keep' (1.5 of 4 cores requested: under the autoscaler's 50%) holds P, refused on 'hot' and on
    'warm' and 'busy' (55% used + P > U*): needed. 'warm' holds a DaemonSet pod and a placeholder only (the drain
    moves neither): not needed. 'busy' is 60% requested (the autoscaler never removes it): not judged, unless kso
    marked it. With a 'cool' node (P and 'b' fit there safely) nothing is needed."""
    from decisions.capacity import moved_by_drain, needed_nodes

    warm = {**HOT, "mean-free-cpu": "1800", "forcasted-free-cpu": "1800"}
    ds = make_pod("ds", cpu="200m", node="warm")
    ds["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": "d",
                                          "controller": True}]
    ph = make_pod("ph", cpu="200m", node="warm")
    ph["metadata"]["ownerReferences"] = [{"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "controller": True,
                                          "name": "kso-capacity-kso-a", "uid": "l"}]
    nodes = [make_node("keep", annotations=warm), make_node("hot", annotations=HOT), make_node("warm", annotations=warm),
             make_node("busy", annotations=warm)]
    pods = [make_pod("p", cpu="1500m", node="keep"), ds, ph, make_pod("b", cpu="2400m", node="busy")]
    agent = SafeAgent(SafeParams())
    state = make_state(nodes, pods)
    assert not moved_by_drain(pod_from_k8s(ds)) and not moved_by_drain(pod_from_k8s(ph))
    assert needed_nodes(agent, state, below=0.5) == {"keep"}
    # a node kso marked, or one under a higher threshold, is judged: 'b' is refused on every other node too
    assert needed_nodes(agent, state, below=0.5, marked={"busy"}) == {"keep", "busy"}
    assert needed_nodes(agent, state, below=0.7) == {"keep", "busy"}
    cooled = make_state([*nodes, make_node("cool", annotations={**HOT, "mean-free-cpu": "3900",
                                                                  "forcasted-free-cpu": "3900"})], pods)
    assert needed_nodes(agent, cooled, below=0.5) == set()


def test_a_mark_stays_hold_s_after_the_node_was_last_needed_and_goes_with_the_node() -> None:
    from decisions.capacity import KeepDecision

    d = KeepDecision(hold_s=60.0)
    assert d.step(0.0, {"a"}, {"a", "b"}) == {"a"}
    assert d.step(30.0, set(), {"a", "b"}) == {"a"}
    assert d.step(60.0, set(), {"a", "b"}) == {"a"}
    assert d.step(61.0, {"b"}, {"a", "b"}) == {"b"}
    assert d.step(62.0, set(), {"a"}) == set(), "a deleted node is forgotten"
    assert KeepDecision(hold_s=0.0).step(5.0, {"a"}, {"a"}) == {"a"}


def test_needed_nodes_judges_each_pod_on_the_other_nodes_as_a_view_without_its_own_would() -> None:
    """needed_nodes leaves the pod's own row out of one view of every node instead of building a view of the others
    per node: the same answer (the safe agent judges each node on its own row) in one pass, on random clusters."""
    import random
    from typing import Any

    from decisions.agents.base import Call
    from decisions.capacity import feasible, moved_by_drain, needed_nodes, requested_share

    def per_node_views(agent: SafeAgent, state: Any, below: float) -> set[str]:
        names = state.node_names()
        share = requested_share(state.view(names))
        out = set()
        for i, name in enumerate(names):
            if share[i] >= below:
                continue
            others = state.view([n for n in names if n != name])
            for pod in (p for p in state.pods_on(name) if moved_by_drain(p)):
                ok = feasible(pod, others)
                if ok.any():
                    failed, _ = agent.inputs(Call(pod, others)).over(agent.eps)
                    if failed.any(axis=1)[ok].all():
                        out.add(name)
                        break
        return out

    rng = random.Random(7)
    agent = SafeAgent(SafeParams())
    seen = set()
    for _ in range(25):
        nodes = [make_node(f"n{i}", cpu=str(rng.choice([2, 4, 8])),
                           annotations={**HOT, "mean-free-cpu": str(rng.randint(100, 3900)),
                                        "forcasted-free-cpu": str(rng.randint(100, 3900))})
                 for i in range(rng.randint(2, 9))]
        pods = [make_pod(f"p{j}", cpu=f"{rng.randint(1, 30) * 100}m", node=f"n{rng.randrange(len(nodes))}")
                for j in range(rng.randint(1, 12))]
        state = make_state(nodes, pods)
        for below in (0.5, 0.9):
            want = per_node_views(agent, state, below)
            assert needed_nodes(agent, state, below) == want
            seen.add(bool(want))
    assert seen == {True, False}  # both answers occurred
