"""One call's CPU in-process, the call e2e.py makes: 100 Nodes as e2e creates them, no load statistics, a pending
pod as kube-scheduler v1.36 sends it (100m / 128Mi, the admission's tolerations), the node names as kube-scheduler
sends them (``benchmarks.latency.node_lists``: a window of ``numFeasibleNodesToFind`` nodes rotating through the
cluster, in a new order each call; ``--lists fixed``: every node, always the same list), through the bare ASGI
handler of the hot routes (``HotRoutes``' endpoints), on one event loop.

    python -m benchmarks.latency.inprocess                       # filter and prioritize, us of thread CPU per call
    python -m benchmarks.latency.inprocess --nodes 100 1000 5000 --lists kube-scheduler fixed  # each, one run
    python -m benchmarks.latency.inprocess --profile prioritize  # cProfile of one verb (sorted by own time)
    python -m benchmarks.latency.inprocess --churn               # the pods' columns changed between pods, as in e2e
    python -m benchmarks.latency.inprocess --churn --sweep-mb 32 # and the caches cold at each pod, as in e2e

Each pod is pre-parsed into the pod memo, as the watch does in API mode; ``--pods`` different pods cycle, each
asked filter then prioritize (kube-scheduler's order). With ``--churn``, as under kube-scheduler, each pair of calls
is followed by what the watch reports of it: the pod bound to a node, and one bound ``--pods`` pairs earlier
deleted (untimed), so every call sees the pods' columns changed since the last one, where without it every call
after the first finds what the cache and the agents keep for unchanged columns. Reported: the median of ``--reps``
repetitions of ``--calls`` calls, CPU time of this thread (``time.thread_time``), which a loaded machine inflates
little. Call i of a repetition sends list i (as many lists as calls), filter and prioritize the same one.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import cProfile
import pstats
import statistics
import time
import uuid
from dataclasses import replace
from typing import Any

import numpy as np
import orjson

from benchmarks.e2e import bench_nodes
from benchmarks.latency.node_lists import LIST_KINDS, node_lists

POD: dict[str, Any] = {
    "metadata": {"name": "p", "namespace": "bench", "uid": "", "resourceVersion": "217", "generation": 1,
                 "creationTimestamp": "2026-11-21T20:04:35Z", "labels": {"app": "bench"}},
    "spec": {"volumes": [{"name": "kube-api-access-4jkxm", "projected": {"sources": [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}],
        "defaultMode": 420}}],
        "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                        "volumeMounts": [{"name": "kube-api-access-4jkxm", "readOnly": True,
                                          "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
                        "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
                        "imagePullPolicy": "IfNotPresent"}],
        "restartPolicy": "Always", "terminationGracePeriodSeconds": 0, "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default", "serviceAccount": "default", "securityContext": {},
        "schedulerName": "default-scheduler",
        "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                         "tolerationSeconds": 300},
                        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
                         "tolerationSeconds": 300}],
        "priority": 0, "enableServiceLinks": True, "preemptionPolicy": "PreemptLowerPriority"},
    "status": {"phase": "Pending", "qosClass": "Burstable"},
}


def pods(n: int) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        p = copy.deepcopy(POD)
        p["metadata"]["name"] = f"p-{i}"
        p["metadata"]["uid"] = str(uuid.UUID(int=i + 1))
        out.append(p)
    return out


def build(nodes: int, bound_per_node: int) -> Any:
    """The extender (default configuration, its unsolved plan cache) over e2e's nodes with some bound pods."""
    from extender.app import create_app
    from extender.config import load_config
    from extender.plan_jobs import make_plan_cache
    from extender.verbs import Extender
    from kso.core.binder import RecordingBinder
    from kso.core.cluster import ClusterState
    from kso.core.objects import node_from_k8s, pod_from_k8s

    config = load_config({})
    state = ClusterState()
    manifests = bench_nodes(nodes)
    for m in manifests:
        state.upsert_node(node_from_k8s(m))
    for j, p in enumerate(pods(nodes * bound_per_node)):
        p["metadata"]["uid"] = f"bound-{j}"
        p["spec"]["nodeName"] = manifests[j % nodes]["metadata"]["name"]
        state.upsert_pod(pod_from_k8s(p))
    ext = Extender(config, state, RecordingBinder(), plan=make_plan_cache(config, state), cache_bodies=False)
    app = create_app(ext)
    return ext, app, [m["metadata"]["name"] for m in manifests]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.latency.inprocess", description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, nargs="+", default=[100], help="cluster sizes, each measured in turn")
    p.add_argument("--lists", choices=LIST_KINDS, nargs="+", default=["kube-scheduler"],
                   help="the NodeNames lists sent: kube-scheduler's (default) and/or the same full list every call")
    p.add_argument("--bound", type=int, default=5, help="bound pods per node (default 5)")
    p.add_argument("--pods", type=int, default=50, help="distinct pending pods cycled (default 50)")
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--churn", action="store_true", help="a bind and a deletion between pairs of calls (as in e2e)")
    p.add_argument("--sweep-mb", type=int, default=0, metavar="MB",
                   help="with --churn: write over MB of memory between pairs of calls (untimed), so that each pod's "
                        "calls start with the caches as e2e leaves them (kube-scheduler, the API server and etcd "
                        "run between two pods); 32 evicts this machine's caches")
    p.add_argument("--profile", choices=("filter", "prioritize"))
    p.add_argument("--sort", default="tottime", help="--profile's order (pstats: tottime, cumulative, ...)")
    p.add_argument("--only", choices=("filter", "prioritize"),
                   help="warm up, then make --calls calls of this verb once and print nothing: for an instruction "
                        "count (valgrind --tool=callgrind, with --calls 0 and N: the difference / N per call)")
    args = p.parse_args(argv)
    for nodes in args.nodes:
        for kind in args.lists:
            measure_one(args, nodes, kind)
    return 0


def measure_one(args: argparse.Namespace, nodes: int, kind: str) -> None:
    """Build the extender over ``nodes`` nodes and measure (or profile) it with lists of ``kind``."""
    ext, app, names = build(nodes, args.bound)
    hot = app.state.hot_routes
    pending = pods(args.pods)
    for pod in pending:
        ext.pod_memo.parse(pod)
    lists = node_lists(kind, names, max(args.calls, 300) if kind != "fixed" else 1)
    # kube-scheduler's layout: {"Pod":...,"Nodes":null,"NodeNames":[...]}; body i: pod i, list i (cycled)
    count = max(len(pending), len(lists))
    bodies = {v: [orjson.dumps({"Pod": pending[i % len(pending)], "Nodes": None, "NodeNames": lists[i % len(lists)]})
                  for i in range(count)] for v in ("filter", "prioritize")}
    headers = {len(b): [(b"content-length", str(len(b)).encode()), (b"content-type", b"application/json")]
               for bs in bodies.values() for b in bs}

    async def one(verb: str, body: bytes) -> bytes:
        scope = {"type": "http", "method": "POST", "path": f"/{verb}", "root_path": "", "headers": headers[len(body)]}
        out: list[bytes] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.body":
                out.append(message["body"])

        await hot[f"/{verb}"](scope, receive, send)
        return out[0]

    async def run(verb: str, calls: int) -> float:
        bs = bodies[verb]
        t0 = time.thread_time()
        for i in range(calls):
            await one(verb, bs[i % len(bs)])
        return (time.thread_time() - t0) / calls

    from kso.core.objects import pod_from_k8s

    churned: list[str] = []
    churn_pod = pod_from_k8s(POD)  # parsed once: --profile --churn then profiles the calls, not this

    def churn(i: int) -> None:
        """The watch's report of a Binding (a pod of ``pending``'s kind on a node) and of a deletion."""
        uid = f"churn-{len(churned)}"
        ext.state.upsert_pod(replace(churn_pod, uid=uid, node_name=names[i % len(names)]))
        churned.append(uid)
        if len(churned) > args.pods:
            ext.state.remove_pod(churned[-args.pods - 1])

    sweep = np.zeros(args.sweep_mb * 2**20 // 8) if args.sweep_mb > 0 else None

    async def run_pairs(calls: int, changes: bool) -> dict[str, float]:
        """CPU per call of filter and of prioritize, each pod asked both with the same list (kube-scheduler asks
        prioritize about the nodes filter passed, in that order: here all of them); with ``changes``, the state
        changed after each pair (and the caches swept with --sweep-mb)."""
        spent = {"filter": 0.0, "prioritize": 0.0}
        for i in range(calls):
            for verb in spent:
                t0 = time.thread_time()
                await one(verb, bodies[verb][i % count])
                spent[verb] += time.thread_time() - t0
            if not changes:
                continue
            churn(i)
            if sweep is not None:
                np.add(sweep, 1.0, out=sweep)
        return {v: s / calls for v, s in spent.items()}

    per_call = len(lists[0])
    label = f"{nodes} nodes, {kind} lists of {per_call}"

    async def measure() -> None:
        for verb in ("filter", "prioritize"):
            await run(verb, 300)  # warm
        if args.only:
            await run(args.only, args.calls) if args.calls else None
            return
        if args.profile:
            prof = cProfile.Profile()
            prof.enable()
            await (run_pairs(args.calls, True) if args.churn else run(args.profile, args.calls))  # churn: both verbs
            prof.disable()
            pstats.Stats(prof).sort_stats(args.sort).print_stats(30)
            return
        taken: dict[str, list[float]] = {"filter": [], "prioritize": []}
        for _ in range(args.reps):
            for verb, sec in (await run_pairs(args.calls, args.churn)).items():
                taken[verb].append(1e6 * sec)
        swept = f", {args.sweep_mb} MB swept" if sweep is not None else ""
        churned_ = f", a bind and a deletion{swept} between pods" if args.churn else ""
        print(f"{label}{churned_}, CPU per call (median of {args.reps} x {args.calls}): "
              + ", ".join(f"{v} {statistics.median(us):.1f} us" for v, us in taken.items()), flush=True)

    asyncio.run(measure())


if __name__ == "__main__":
    raise SystemExit(main())
