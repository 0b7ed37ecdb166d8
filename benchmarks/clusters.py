"""Generated clusters of the kind users run, as Kubernetes objects (a ``kubectl get nodes,pods -o json``
List), for the solver benchmark and the optimizer's property tests.

What one holds (every count scales with the node and pod numbers asked for):
  * nodes of 3-4 shapes (general 4x16 and 8x32, compute 16x32, GPU 8x64 with 4 ``nvidia.com/gpu``,
    tainted ``nvidia.com/gpu=present:NoSchedule``), spread over 3 zones, labelled with instance type,
    zone, hostname and a cpu generation (for ``Gt`` affinity); one node cordoned, one NotReady;
  * bound pods (ReplicaSets) on about 60% of the nodes, those nodes annotated with kube-safe-scheduler's
    load (mean-free / std-free), a few of them already over the safe bound;
  * pending pods: ReplicaSets (some with a zone nodeSelector, some with required node affinity: ORed
    terms, ``In``, ``NotIn``, ``Gt``), Jobs, GPU pods (toleration + selector), BestEffort pods (no
    requests), one DaemonSet whose pods for a few nodes are pinned by matchFields metadata.name, and
    (``singleton_share``) owners with a single replica (StatefulSets of one, each its own class);
  * ``bound_pods``: a cluster at its running size, that many pods already bound (small web / sidecar
    shapes, spread by node size within 85% of each node's cpu, memory and pods), the pending pods on top.
Deterministic for a seed. Nothing here reads optimizer code: the objects are what an API server returns.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

GPU = "nvidia.com/gpu"
GPU_TAINT = {"key": GPU, "value": "present", "effect": "NoSchedule"}
ZONE = "topology.kubernetes.io/zone"
ZONES = ("zone-a", "zone-b", "zone-c")
CPU_GEN = "example.com/cpu-generation"


@dataclass(frozen=True)
class Shape:
    name: str
    cpu: int  # cores
    mem_gib: int
    pods: int
    gpus: int
    weight: float  # share of the nodes


SHAPES = (Shape("m5.xlarge", 4, 16, 58, 0, 0.35), Shape("m5.2xlarge", 8, 32, 58, 0, 0.35),
          Shape("c5.4xlarge", 16, 32, 110, 0, 0.2), Shape("p3.2xlarge", 8, 64, 58, 4, 0.1))
# (cpu millicores, memory MiB) of the containers the generated workloads request
REQUESTS = ((100, 128), (250, 256), (250, 512), (500, 512), (500, 1024), (1000, 1024), (1000, 2048), (2000, 4096),
            (1500, 3072), (200, 256))


def _node(name: str, shape: Shape, zone: str, gen: int) -> dict[str, Any]:
    alloc = {"cpu": f"{shape.cpu * 1000 - 100}m", "memory": f"{shape.mem_gib * 1024 - 512}Mi", "pods": str(shape.pods)}
    labels = {"kubernetes.io/hostname": name, ZONE: zone, "node.kubernetes.io/instance-type": shape.name,
              CPU_GEN: str(gen)}
    spec: dict[str, Any] = {}
    if shape.gpus:
        alloc[GPU] = str(shape.gpus)
        labels["example.com/gpu"] = "true"
        spec["taints"] = [dict(GPU_TAINT)]
    return {"kind": "Node", "apiVersion": "v1", "metadata": {"name": name, "uid": f"uid-{name}", "labels": labels,
                                                             "annotations": {}},
            "spec": spec, "status": {"allocatable": alloc, "capacity": dict(alloc),
                                     "conditions": [{"type": "Ready", "status": "True"}]}}


def _pod(ns: str, name: str, owner: tuple[str, str] | None, cpu: int | None, mem_mib: int | None,
         node: str = "", spec_extra: dict[str, Any] | None = None, gpus: int = 0) -> dict[str, Any]:
    requests: dict[str, str] = {}
    if cpu:
        requests["cpu"] = f"{cpu}m"
    if mem_mib:
        requests["memory"] = f"{mem_mib}Mi"
    if gpus:
        requests[GPU] = str(gpus)
    container: dict[str, Any] = {"name": "main", "image": "registry.example.com/app:1"}
    if requests:
        container["resources"] = {"requests": requests, **({"limits": {GPU: str(gpus)}} if gpus else {})}
    meta: dict[str, Any] = {"name": name, "namespace": ns, "uid": f"uid-{ns}-{name}"}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner[0], "name": owner[1], "uid": f"uid-{owner[1]}",
                                    "controller": True}]
    spec: dict[str, Any] = {"containers": [container], "schedulerName": "default-scheduler", **(spec_extra or {})}
    if node:
        spec["nodeName"] = node
    return {"kind": "Pod", "apiVersion": "v1", "metadata": meta, "spec": spec,
            "status": {"phase": "Running" if node else "Pending"}}


def _affinity(terms: list[dict[str, Any]]) -> dict[str, Any]:
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}}


def _rules(rng: random.Random) -> dict[str, Any]:
    """Placement rules of one pending workload: none mostly, else a zone selector or required affinity."""
    roll = rng.random()
    if roll < 0.6:
        return {}
    if roll < 0.75:
        return {"nodeSelector": {ZONE: rng.choice(ZONES)}}
    if roll < 0.85:  # ORed terms: one zone, or a compute-optimised node
        return _affinity([{"matchExpressions": [{"key": ZONE, "operator": "In", "values": [rng.choice(ZONES)]}]},
                          {"matchExpressions": [{"key": "node.kubernetes.io/instance-type", "operator": "In",
                                                 "values": ["c5.4xlarge"]}]}])
    if roll < 0.93:  # a newer cpu generation, not in one zone
        return _affinity([{"matchExpressions": [{"key": CPU_GEN, "operator": "Gt", "values": ["2"]},
                                                {"key": ZONE, "operator": "NotIn", "values": [rng.choice(ZONES)]}]}])
    return _affinity([{"matchExpressions": [{"key": "node.kubernetes.io/instance-type", "operator": "In",
                                             "values": ["m5.xlarge", "m5.2xlarge"]}]}])


def _split(total: int, parts: int, rng: random.Random) -> list[int]:
    cuts = sorted(rng.sample(range(1, total), parts - 1)) if 1 < parts < total else []
    sizes = [b - a for a, b in zip([0, *cuts], [*cuts, total], strict=True)]
    return sizes or [total]


def generate(n_nodes: int, n_pods: int, seed: int = 0, *, daemonset_pods: int | None = None,
             best_effort_share: float = 0.05, gpu_share: float = 0.03, job_share: float = 0.2,
             over_bound_nodes: int | None = None, bound_pods: int | None = None,
             singleton_share: float = 0.0) -> dict[str, Any]:
    """A cluster of ``n_nodes`` nodes and ``n_pods`` pending pods (plus the bound ones), as a v1 List."""
    rng = random.Random(seed)
    nodes: list[dict[str, Any]] = []
    weights = [s.weight for s in SHAPES]
    for i in range(n_nodes):
        shape = SHAPES[3] if i == n_nodes - 1 and n_nodes >= 4 else rng.choices(SHAPES, weights)[0]  # >= 1 GPU node
        nodes.append(_node(f"node-{i:04d}", shape, ZONES[i % len(ZONES)], rng.choice((1, 2, 3, 4))))
    shape_of = {n["metadata"]["name"]: next(s for s in SHAPES if s.name == n["metadata"]["labels"][
        "node.kubernetes.io/instance-type"]) for n in nodes}
    if n_nodes >= 3:
        nodes[1]["spec"]["unschedulable"] = True
        nodes[2]["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    pods: list[dict[str, Any]] = []
    # Bound pods and load annotations on ~60% of the nodes; a few nodes already over their safe bound.
    over = max(1, n_nodes // 100) if over_bound_nodes is None else over_bound_nodes
    busy = [n for n in nodes if rng.random() < 0.6 and not n["spec"].get("unschedulable")]
    for k, n in enumerate(busy):
        name, shape = n["metadata"]["name"], shape_of[n["metadata"]["name"]]
        used_cpu = used_mem = 0
        for j in range(0 if bound_pods else rng.randint(1, 6)):  # with bound_pods, those are the bound ones
            cpu, mem = rng.choice(REQUESTS)
            if used_cpu + cpu > shape.cpu * 600 or used_mem + mem > shape.mem_gib * 600:
                break
            pods.append(_pod("prod", f"{name}-web-{j}", ("ReplicaSet", f"web-{k % 7}"), cpu, mem, node=name))
            used_cpu, used_mem = used_cpu + cpu, used_mem + mem
        hot = k < over
        share = 0.97 if hot else rng.uniform(0.1, 0.6)
        cap_cpu, cap_mem = shape.cpu * 1000 - 100, shape.mem_gib * 1024 - 512
        n["metadata"]["annotations"].update({
            "mean-free-cpu": f"{cap_cpu * (1 - share):.0f}", "std-free-cpu": f"{cap_cpu * rng.uniform(0.02, 0.08):.0f}",
            "mean-free-memory": f"{cap_mem * (1 - share * 0.8):.0f}",
            "std-free-memory": f"{cap_mem * rng.uniform(0.01, 0.05):.0f}"})
    if bound_pods:
        pods += _bound_volume(nodes, shape_of, bound_pods, rng)
    # Pending pods.
    n_ds = (max(1, n_nodes // 60) if daemonset_pods is None else daemonset_pods) if n_nodes else 0
    n_be = int(n_pods * best_effort_share)
    n_gpu = int(n_pods * gpu_share)
    n_job = int(n_pods * job_share)
    n_one = int(n_pods * singleton_share)
    n_rs = max(n_pods - n_ds - n_be - n_gpu - n_job - n_one, 0)
    ready = [n for n in nodes if n["status"]["conditions"][0]["status"] == "True"]
    for i, n in enumerate(rng.sample(ready, min(n_ds, len(ready)))):
        target = n["metadata"]["name"]
        spec = {**_affinity([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [target]}]}]),
                "tolerations": [{"operator": "Exists"}]}
        pods.append(_pod("kube-system", f"log-agent-{i:04d}", ("DaemonSet", "log-agent"), 100, 200, spec_extra=spec))
    for w, size in enumerate(_split(n_rs, max(1, min(n_rs, n_pods // 40 + 1)), rng) if n_rs else []):
        cpu, mem = rng.choice(REQUESTS)
        rules = _rules(rng)
        for j in range(size):
            pods.append(_pod(f"team-{w % 5}", f"app-{w}-{j}", ("ReplicaSet", f"app-{w}"), cpu, mem, spec_extra=rules))
    for w, size in enumerate(_split(n_job, max(1, min(n_job, n_pods // 200 + 1)), rng) if n_job else []):
        cpu, mem = rng.choice(REQUESTS[:6])
        for j in range(size):
            pods.append(_pod("batch", f"job-{w}-{j}", ("Job", f"etl-{w}"), cpu, mem, spec_extra={"restartPolicy": "Never"}))
    gpu_rules = {"nodeSelector": {"example.com/gpu": "true"},
                 "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}]}
    for j in range(n_gpu):
        pods.append(_pod("ml", f"train-{j}", ("Job", f"train-{j % 3}"), 2000, 8192, spec_extra=gpu_rules, gpus=1))
    for j in range(n_be):
        pods.append(_pod("dev", f"scratch-{j}", ("ReplicaSet", f"scratch-{j % 4}"), None, None))
    for j in range(n_one):
        cpu, mem = rng.choice(REQUESTS)
        pods.append(_pod("data", f"db-{j}-0", ("StatefulSet", f"db-{j}"), cpu, mem, spec_extra=_rules(rng)))
    return {"apiVersion": "v1", "kind": "List", "items": nodes + pods}


# (cpu millicores, memory MiB) of the pods a cluster at its running size already runs: small services and agents
BOUND_REQUESTS = ((50, 64), (100, 128), (100, 256), (200, 256), (250, 512), (150, 192))


def _bound_volume(nodes: list[dict[str, Any]], shape_of: dict[str, Shape], count: int,
                  rng: random.Random) -> list[dict[str, Any]]:
    """``count`` bound pods (fewer if the nodes are full), on Ready schedulable nodes in proportion to their cpu,
    each node kept within 85% of its cpu, memory and pods by requests."""
    ready = [n for n in nodes if n["status"]["conditions"][0]["status"] == "True" and not n["spec"].get("unschedulable")]
    if not ready:
        return []
    names = [n["metadata"]["name"] for n in ready]
    room = {name: [shape_of[name].cpu * 850, shape_of[name].mem_gib * 870, int(shape_of[name].pods * 0.85)]
            for name in names}
    weights = [shape_of[name].cpu for name in names]
    out: list[dict[str, Any]] = []
    picks = rng.choices(range(len(names)), weights, k=count)
    for j, i in enumerate(picks):
        cpu, mem = BOUND_REQUESTS[j % len(BOUND_REQUESTS)]
        for k in range(len(names)):  # the picked node, else the next one with room
            name = names[(i + k) % len(names)]
            left = room[name]
            if left[0] >= cpu and left[1] >= mem and left[2] >= 1:
                left[0], left[1], left[2] = left[0] - cpu, left[1] - mem, left[2] - 1
                out.append(_pod("svc", f"svc-{j}", ("ReplicaSet", f"svc-{j % 500}"), cpu, mem, node=name))
                break
        else:
            break
    return out


def cluster_state(doc: dict[str, Any]) -> Any:
    """The generated objects as kso reads a cluster (kso.core.cluster.ClusterState), via the snapshot parser."""
    import orjson

    from kso.core.cluster import ClusterState
    from kso.core.snapshot import parse_snapshot

    nodes, pods = parse_snapshot(orjson.dumps(doc), "generated cluster")
    state = ClusterState(pending_pod_memory=max(len(pods), 1))
    for node in nodes:
        state.upsert_node(node)
    for pod in pods:
        state.upsert_pod(pod)
    state.mark_synced("generated")
    return state
