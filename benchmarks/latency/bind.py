"""The extender's /bind route end to end, as kube-scheduler drives it with kso binding.

    python -m benchmarks.latency.bind [--binds 400] [--in-flight 32] [--rounds 3] [TREE[:KEY=VALUE;...] ...]

A real control plane (benchmarks.controlplane) with benchmarks.e2e's 100 nodes; one ``kso extender`` process per
TREE (a checkout, as e2e's KSO_BENCH_TREE; default this one; ``:KEY=VALUE;...`` adds settings, e.g.
``.:KSO_BIND_THREADS=8``). Each round creates ``--binds`` pending pods per tree, lets the extender's watch see them,
then posts /bind for every one from ``--in-flight`` keep-alive clients at once (kube-scheduler binds each pod in
its own goroutine) and prints the extender process's CPU per bind (all its threads, the watch's share of each
bound pod included), binds per second and the client's p50 / p99. Rounds alternate the trees' order (ABBA);
the medians close the output. The client runs beside the extender on the same cores: compare trees within a run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from benchmarks.controlplane import ControlPlane
from benchmarks.e2e import (
    REPO,
    ExtenderProcess,
    bench_nodes,
    create_nodes,
    create_pods,
    kso_process,
    pod_manifest,
    process_cpu_s,
)
from extender.client import ExtenderClient


def _spec(text: str) -> dict[str, str]:
    tree, _, settings = text.partition(":")
    env = dict(kv.split("=", 1) for kv in settings.split(";") if "=" in kv)
    return {**env, "KSO_BENCH_TREE": tree or str(REPO)}


def bind_round(ext: ExtenderProcess, api: object, ns: str, nodes: list[str], binds: int,
               in_flight: int) -> tuple[float, float, float, float]:
    """(extender CPU ms per bind, binds/s, p50 ms, p99 ms) of one round of ``binds`` binds into namespace ``ns``."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": ns}})
    create_pods(api, ns, [pod_manifest(f"p{i}") for i in range(binds)])
    pods = [(p.metadata.name, p.metadata.uid) for p in core.list_namespaced_pod(ns).items]
    time.sleep(2)  # the extender's watch has them: a bind then counts a known pod, as under kube-scheduler
    local, lat = threading.local(), []

    def one(i: int) -> None:
        client = getattr(local, "client", None)
        if client is None:
            client = local.client = ExtenderClient(ext.port, timeout=30)
        name, uid = pods[i]
        body = {"PodName": name, "PodNamespace": ns, "PodUID": uid, "Node": nodes[i % len(nodes)]}
        t0 = time.perf_counter()
        status, reply = client.post("/bind", body)
        lat.append(time.perf_counter() - t0)
        if status != 200 or reply["Error"]:
            raise RuntimeError(f"bind {ns}/{name}: {status} {reply!r}")

    cpu0, t0 = process_cpu_s(ext), time.perf_counter()
    with ThreadPoolExecutor(in_flight) as pool:
        list(pool.map(one, range(len(pods))))
    wall, cpu = time.perf_counter() - t0, process_cpu_s(ext) - cpu0
    core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
    lat.sort()
    return cpu / len(pods) * 1e3, len(pods) / wall, lat[len(lat) // 2] * 1e3, lat[int(len(lat) * 0.99)] * 1e3


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.latency.bind", description=__doc__.split("\n")[0])
    ap.add_argument("trees", nargs="*", default=["."], help="TREE[:KEY=VALUE;...] (default: this checkout)")
    ap.add_argument("--binds", type=int, default=400, help="binds per tree per round")
    ap.add_argument("--in-flight", type=int, default=32, help="binds posted at once")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    print(f"bind: {args.binds} binds x {args.rounds} rounds, {args.in_flight} in flight, cpu count {os.cpu_count()}, "
          f"load avg at start {os.getloadavg()[0]:.1f}", flush=True)
    results: dict[str, list[tuple[float, float, float, float]]] = {t: [] for t in args.trees}
    with ControlPlane() as cp:
        api = cp.api_client()
        manifests = bench_nodes(100)
        create_nodes(api, manifests)
        nodes = [n["metadata"]["name"] for n in manifests]
        assert cp.workdir is not None
        exts = {t: kso_process(cp.kubeconfig, cp.workdir / f"bind-{i}.log", **_spec(t)).start()
                for i, t in enumerate(args.trees)}
        try:
            for rnd in range(args.rounds):
                for t in args.trees if rnd % 2 == 0 else args.trees[::-1]:
                    r = bind_round(exts[t], api, f"bind-r{rnd}-{args.trees.index(t)}", nodes, args.binds,
                                   args.in_flight)
                    results[t].append(r)
                    print(f"  round {rnd} {t}: extender CPU {r[0]:.3f} ms/bind, {r[1]:.0f} binds/s, p50 {r[2]:.1f} ms, "
                          f"p99 {r[3]:.1f} ms, load {os.getloadavg()[0]:.1f}", flush=True)
        finally:
            for ext in exts.values():
                ext.stop()
    for t, rs in results.items():
        med = [statistics.median(r[k] for r in rs) for k in range(4)]
        print(f"median {t}: extender CPU {med[0]:.3f} ms/bind, {med[1]:.0f} binds/s, p50 {med[2]:.1f} ms, "
              f"p99 {med[3]:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
