"""Helpers shared by the views' and the extender's tests: stores in lock step, random events."""

from __future__ import annotations

import random
from typing import Any

from kso.core.cluster import ClusterState
from kso.core.objects import node_from_k8s, pod_from_k8s
from kso.core.views import NodeView
from tests.support.fixtures import make_node, make_pod


class FreshState(ClusterState):
    """The reference path: views without the store-wide view, so every agent computes from the call's columns alone
    (nothing kept from one call to the next, nothing taken by rows)."""

    def view(self, names: Any) -> NodeView:
        view = super().view(names)
        view.whole = None
        return view


def random_node(rng: random.Random, name: str) -> dict[str, Any]:
    ann: dict[str, str] = {}
    if rng.random() < 0.5:  # load statistics, some partial or unusable
        ann["mean-free-cpu"] = str(rng.choice([0, 50, 900, 3900, 4000]))
        if rng.random() < 0.8:
            ann["mean-free-memory"] = str(rng.choice([10, 2000, 8000, "x"]))
        ann["std-free-cpu"] = str(rng.choice([0, 10, 400, 2000]))
        ann["std-free-memory"] = str(rng.choice([0, 30, 900]))
        if rng.random() < 0.4:
            ann["forcasted-free-cpu"] = str(rng.choice([100, 3000]))
    if rng.random() < 0.3:
        ann["congestion-factor"] = str(rng.choice([0, 20, 99, 150]))
    extra = {"example.com/gpu": "2"} if rng.random() < 0.15 else {}
    return make_node(name, cpu=rng.choice(["4", "8", "0"]) if rng.random() < 0.1 else rng.choice(["4", "8"]),
                     memory=rng.choice(["8Gi", "16Gi"]), annotations=ann, **extra)


def random_event(rng: random.Random, states: list[ClusterState], names: list[str], step: int) -> None:
    """One change, applied to every state alike."""
    kind = rng.choice(["node", "node", "remove", "bind", "bind", "bind", "unbind", "assume", "nothing"])
    name = rng.choice(names)
    pod = make_pod(f"p{step}", cpu=rng.choice(["100m", "1", "3"]), memory=rng.choice(["64Mi", "4Gi"]),
                   node=name, uid=f"u{step}")
    if kind == "bind" and rng.random() < 0.2:
        pod["spec"]["containers"][0]["resources"]["requests"]["example.com/fpga"] = "1"  # a new column
    made = random_node(rng, name)
    victims = {uid for s in states for uid in s.pods}
    victim = rng.choice(sorted(victims)) if victims else None
    for s in states:
        if kind == "node":
            s.upsert_node(node_from_k8s(made))
        elif kind == "remove":
            s.remove_node(name)
        elif kind == "bind":
            s.upsert_pod(pod_from_k8s(pod), observed_binding=True)
        elif kind == "unbind" and victim is not None:
            s.remove_pod(victim)
        elif kind == "assume":
            s.assume(pod_from_k8s({**pod, "spec": {**pod["spec"], "nodeName": ""}}), name)
