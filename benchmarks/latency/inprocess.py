"""One call's CPU in-process, the call e2e.py makes: 100 Nodes as e2e creates them, no load statistics, a pending
pod as kube-scheduler v1.36 sends it (100m / 128Mi, the admission's tolerations), every node named, through the
bare ASGI handler of the hot routes (``HotRoutes``' endpoints), on one event loop.

    python -m benchmarks.latency.inprocess                       # filter and prioritize, us of thread CPU per call
    python -m benchmarks.latency.inprocess --profile prioritize  # cProfile of one verb (sorted by own time)
    python -m benchmarks.latency.inprocess --churn               # the pods' columns changed between pods, as in e2e
    python -m benchmarks.latency.inprocess --churn --sweep-mb 32 # and the caches cold at each pod, as in e2e

Each pod is pre-parsed into the pod memo, as the watch does in API mode; ``--pods`` different pods cycle, each
asked filter then prioritize (kube-scheduler's order). With ``--churn``, as under kube-scheduler, each pair of calls
is followed by what the watch reports of it: the pod bound to a node, and one bound ``--pods`` pairs earlier
deleted (untimed), so every call sees the pods' columns changed since the last one, where without it every call
after the first finds what the cache and the agents keep for unchanged columns. Reported: the least of ``--reps`` repetitions of
``--calls`` calls, CPU time of this thread (``time.thread_time``), which a loaded machine inflates little.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import cProfile
import pstats
import time
import uuid
from dataclasses import replace
from typing import Any

import numpy as np
import orjson

from benchmarks.e2e import bench_nodes

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
    p.add_argument("--nodes", type=int, default=100)
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
    p.add_argument("--only", choices=("filter", "prioritize"),
                   help="warm up, then make --calls calls of this verb once and print nothing: for an instruction "
                        "count (valgrind --tool=callgrind, with --calls 0 and N: the difference / N per call)")
    args = p.parse_args(argv)
    ext, app, names = build(args.nodes, args.bound)
    hot = app.state.hot_routes
    pending = pods(args.pods)
    for pod in pending:
        ext.pod_memo.parse(pod)
    # kube-scheduler's layout: {"Pod":...,"Nodes":null,"NodeNames":[...]}
    bodies = {v: [orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": names}) for pod in pending]
              for v in ("filter", "prioritize")}
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

    async def run_pairs(calls: int) -> dict[str, float]:
        """CPU per call of filter and of prioritize, each pod asked both, the state changed after each pair (and
        the caches swept with --sweep-mb)."""
        spent = {"filter": 0.0, "prioritize": 0.0}
        for i in range(calls):
            for verb in spent:
                t0 = time.thread_time()
                await one(verb, bodies[verb][i % len(pending)])
                spent[verb] += time.thread_time() - t0
            churn(i)
            if sweep is not None:
                np.add(sweep, 1.0, out=sweep)
        return {v: s / calls for v, s in spent.items()}

    async def measure() -> None:
        for verb in ("filter", "prioritize"):
            await run(verb, 300)  # warm
        if args.churn and not (args.only or args.profile):
            best: dict[str, float] = {}
            for _ in range(args.reps):
                for verb, sec in (await run_pairs(args.calls)).items():
                    best[verb] = min(best.get(verb, 1e6 * sec), 1e6 * sec)
            swept = f", {args.sweep_mb} MB swept" if sweep is not None else ""
            print(f"{args.nodes} nodes, a bind and a deletion{swept} between pods, CPU per call (least of {args.reps} x "
                  f"{args.calls}): " + ", ".join(f"{v} {us:.1f} us" for v, us in best.items()))
            return
        if args.only:
            await run(args.only, args.calls) if args.calls else None
            return
        if args.profile:
            prof = cProfile.Profile()
            prof.enable()
            await (run_pairs(args.calls) if args.churn else run(args.profile, args.calls))  # churn: both verbs
            prof.disable()
            pstats.Stats(prof).sort_stats("tottime").print_stats(30)
            return
        best: dict[str, float] = {}
        for _ in range(args.reps):
            for verb in ("filter", "prioritize"):
                us = 1e6 * await run(verb, args.calls)
                best[verb] = min(best.get(verb, us), us)
        print(f"{args.nodes} nodes, CPU per call (least of {args.reps} x {args.calls}): "
              + ", ".join(f"{v} {us:.1f} us" for v, us in best.items()))

    asyncio.run(measure())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
