"""scheduler.feasibility: kube-scheduler's reasons and message, and Hightower's fit and choice."""

from __future__ import annotations

from typing import Any

from kso.core.objects import node_from_k8s, pod_from_k8s
from scheduler.feasibility import (
    failed_message,
    hightower_choice,
    hightower_fit,
    kube_reason,
    resource_reasons,
    rule_reasons,
)
from tests.support.fixtures import make_node, make_pod, make_state


def _nodes(*prices: str | None) -> list[Any]:
    return [node_from_k8s(make_node(f"n{i}", annotations={} if p is None else {"hightower.com/cost": p}))
            for i, p in enumerate(prices)]


def test_reasons_and_deduplicated_message() -> None:
    nodes = [make_node("small", cpu="1"), make_node("gpu", cpu="8", **{"nvidia.com/gpu": "1"}),
             make_node("tainted", cpu="8"), make_node("cordoned", cpu="8"), make_node("other", cpu="8")]
    nodes[2]["spec"]["taints"] = [{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]
    nodes[3]["spec"]["unschedulable"] = True
    nodes[4]["metadata"]["labels"]["zone"] = "b"
    for n in nodes[:4]:
        n["metadata"]["labels"]["zone"] = "a"
    state = make_state(nodes)
    pod = make_pod("p", cpu="2")
    pod["spec"]["nodeSelector"] = {"zone": "a"}
    pod["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "1"}
    info = pod_from_k8s(pod)
    names = [n["metadata"]["name"] for n in nodes]
    view = state.view(names)
    rules = rule_reasons(info, view.nodes)
    assert rules == {2: "node(s) had untolerated taint {dedicated: db}", 3: "node(s) were unschedulable",
                     4: "node(s) didn't match Pod's node affinity/selector"}
    res = resource_reasons(info, view)
    assert res[0] in ("Insufficient cpu", "Insufficient nvidia.com/gpu") and 1 not in res
    assert failed_message(5, {**res, **rules, 1: "Insufficient cpu"}) == (
        "0/5 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) had untolerated taint "
        "{dedicated: db}, 1 node(s) were unschedulable, 2 Insufficient cpu.")  # Go: sort.Strings of "n reason"
    assert kube_reason("P(util > 90%) = 0.5 > eps") == "P(util > 90%) = 0.5 > eps"  # agents' reasons pass through


def test_too_many_pods() -> None:
    state = make_state([make_node("n", pods="1")], [make_pod("on", node="n")])
    assert resource_reasons(pod_from_k8s(make_pod("p")), state.view(["n"])) == {0: "Too many pods"}


def test_hightower_cheapest_first_on_ties_first_if_none_priced() -> None:
    assert hightower_choice(_nodes("5", "3", "3", "4")) == 1
    assert hightower_choice(_nodes(None, None)) == 0
    assert hightower_choice(_nodes(None, "9", None, "2")) == 3
    # ParseFloat(s, 32): prices equal as float32 are a tie, so the first wins
    assert hightower_choice(_nodes("0.100000001", "0.1")) == 0
    assert hightower_choice(_nodes("0.1001", "0.1")) == 1
    assert hightower_choice(_nodes("cheap", "7")) == 1  # unparsable: logged and treated as unpriced


def test_hightower_fit_is_free_cpu_only() -> None:
    state = make_state([make_node("a", cpu="1"), make_node("b", cpu="2", memory="1Ki")], [make_pod("x", cpu="600m", node="a")])
    fits, failures = hightower_fit(pod_from_k8s(make_pod("p", cpu="500m", memory="4Gi")), state.view(["a", "b"]))
    assert fits == [1] and failures == {0: "fit failure on node (a): Insufficient CPU"}


def test_seed_choice_prices_nodes_by_the_configured_cost_key() -> None:
    nodes = [node_from_k8s(make_node(f"n{i}", annotations={"hightower.com/cost": h, "example.com/price": p}))
             for i, (h, p) in enumerate((("1", "7"), ("9", "3"), ("5", "4")))]
    assert hightower_choice(nodes) == 0  # Hightower's annotation by default
    assert hightower_choice(nodes, "example.com/price") == 1
