"""benchmarks.public_clusters: clusters of public trace shapes (openb nodes and pods, Google 2019 tasks, Alibaba 2018
machine cpu), the solver's tuning set, as the objects an API server lists."""

from __future__ import annotations

import pandas as pd
from kubernetes.utils import parse_quantity

from benchmarks.public_clusters import data_dir, generate, trace_shapes


def test_nodes_and_pods_have_the_traces_shapes() -> None:
    shapes = trace_shapes()
    nodes = pd.read_csv(data_dir() / "openb-nodes.csv")
    assert len(shapes.nodes) == len(nodes) and shapes.cpu_pods and shapes.gpu_pods and shapes.google and shapes.usage
    doc = generate(60, 400, seed=3)
    items = doc["items"]
    node_objs = [o for o in items if o["kind"] == "Node"]
    pods = [o for o in items if o["kind"] == "Pod"]
    assert len(node_objs) == 60 and sum(1 for p in pods if not p["spec"].get("nodeName")) == 400
    known_cpu = {c for c, _, _, _ in shapes.nodes}
    for n in node_objs:  # allocatable = a trace node's cpu less the reserve
        assert int(parse_quantity(n["status"]["allocatable"]["cpu"]) * 1000) + 100 in known_cpu
    requested = {int(parse_quantity(p["spec"]["containers"][0]["resources"]["requests"]["cpu"]) * 1000) for p in pods}
    trace_cpu = {c for c, _, _ in shapes.cpu_pods + shapes.gpu_pods + shapes.google}
    assert requested <= trace_cpu
    assert any(n["metadata"]["annotations"].get("mean-free-cpu") for n in node_objs)
    assert generate(60, 400, seed=3) == doc and generate(60, 400, seed=4) != doc  # seeded
