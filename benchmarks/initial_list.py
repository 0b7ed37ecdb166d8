"""The watcher's initial list against the real API server: peak RSS and CPU of a process that lists N pods, per tree.

    python -m benchmarks.initial_list [--nodes 300] [--pods 15000] [--rounds 2] [--before PATH] [--after PATH]

A real control plane (benchmarks.controlplane: etcd + kube-apiserver) holds ``--nodes`` fake Nodes (e2e's shapes)
and ``--pods`` pods created already bound to them (spec.nodeName set, as e2e's pods look once kube-scheduler has
placed them, with the server's defaults and managedFields; no kubelet, so they stay Pending and in kso's field
selector). Then, for each tree (``--before``: a checkout of the code before the change, ``--after``: this one) in
ABBA order, a fresh Python process with that tree on PYTHONPATH runs kso's ClusterWatcher (page size 500, kso's
default) until it is synced and reports, of its own: the peak RSS (VmHWM) less its RSS before the list (after the
imports), the RSS once synced, CPU seconds (user + system, every thread) and wall seconds of the list. The API
server and etcd share the machine, so wall time is noisy; RSS and CPU are the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

# Runs in the child, with only the tree under test on PYTHONPATH (the tree before the change has no copy of this
# module, so the child's code is this text).
CHILD = r"""
import gc, json, resource, sys, time

def status(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024  # MiB

def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime

from kubernetes import config
from kso.core.cluster import ClusterState
from kso.core.watcher import ClusterWatcher

api = config.new_client_from_config(config_file=sys.argv[1])
gc.collect()
rss0, cpu0, t0 = status("VmRSS"), cpu(), time.perf_counter()
state = ClusterState()
watcher = ClusterWatcher(state, api, page_size=500, request_timeout_s=120)
fetch = [0.0, 0]  # seconds in the pod list's requests (until the body is read), pages


class Timed:
    def __init__(self, resp, t):
        self.resp, self.t = resp, t

    @property
    def data(self):
        data = self.resp.data
        fetch[0] += time.perf_counter() - self.t
        fetch[1] += 1
        return data

    def release_conn(self):
        self.resp.release_conn()


list_fn = watcher._pods.list_fn


def timed(*args, **kwargs):
    if kwargs.get("watch"):
        return list_fn(*args, **kwargs)
    t = time.perf_counter()
    return Timed(list_fn(*args, **kwargs), t)


watcher._pods.list_fn = timed
watcher.start()
ok = watcher.wait_synced(900)
wall, cpu1 = time.perf_counter() - t0, cpu()
out = {"synced": ok, "pods": len(state.pods), "nodes": len(state), "wall_s": wall, "cpu_s": cpu1 - cpu0,
       "rss_before_mib": rss0, "fetch_s": fetch[0], "pages": fetch[1],
       "hwm_mib": status("VmHWM"), "rss_synced_mib": status("VmRSS")}
watcher.stop(5)
print(json.dumps(out))
"""


def populate(api: Any, nodes: int, pods: int, namespace: str = "list-bench", threads: int = 16) -> float:
    """Creates the nodes and the bound pods (benchmarks.e2e_cluster, as e2e's --bound-pods); returns the seconds the
    pods took."""
    from benchmarks.e2e_cluster import bench_nodes, create_bound_pods, create_nodes

    manifests = bench_nodes(nodes, prefix="list-node")
    create_nodes(api, manifests)
    return create_bound_pods(api, [m["metadata"]["name"] for m in manifests], pods, namespace, threads=threads,
                             progress=lambda line: print(line, flush=True))


def measure(tree: Path, kubeconfig: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.run([sys.executable, "-c", CHILD, str(kubeconfig)], env=env, cwd=str(tree), capture_output=True,
                          text=True, timeout=1200)
    if proc.returncode != 0:
        raise RuntimeError(f"child in {tree} failed: {proc.stderr[-2000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.initial_list", description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=300)
    p.add_argument("--pods", type=int, default=15000)
    p.add_argument("--rounds", type=int, default=2, help="ABBA rounds (default 2: before, after, after, before)")
    p.add_argument("--before", type=Path, required=True, help="a checkout of the tree before the change")
    p.add_argument("--after", type=Path, default=REPO)
    args = p.parse_args(argv)

    from benchmarks.controlplane import ControlPlane
    from benchmarks.machine import machine_line

    load = os.getloadavg()
    with ControlPlane() as cp:
        api = cp.api_client()
        took = populate(api, args.nodes, args.pods)
        print(f"{args.nodes} nodes, {args.pods} bound pods created in {took:.0f} s", flush=True)
        trees = {"before": args.before, "after": args.after}
        order = [name for r in range(args.rounds) for name in (("before", "after") if r % 2 == 0 else ("after", "before"))]
        results: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
        for name in order:
            res = measure(trees[name], cp.kubeconfig)
            res["load1"] = os.getloadavg()[0]
            results[name].append(res)
            print(f"  {name:<6} synced={res['synced']} {res['pods']} pods {res['nodes']} nodes: peak RSS "
                  f"+{res['hwm_mib'] - res['rss_before_mib']:.0f} MiB (VmHWM {res['hwm_mib']:.0f}, before the list "
                  f"{res['rss_before_mib']:.0f}, synced {res['rss_synced_mib']:.0f}), CPU {res['cpu_s']:.1f} s, wall "
                  f"{res['wall_s']:.1f} s (of which waiting for the {res['pages']} pages of pods {res['fetch_s']:.1f} "
                  f"s), load {res['load1']:.1f}", flush=True)
    print(f"\nmachine: {machine_line(load)}; load at the end {'/'.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"initial list of {args.pods} bound pods on {args.nodes} nodes, page size 500, medians of {args.rounds} "
          "per tree (ABBA):")
    print("| tree | peak RSS over pre-list MiB | RSS synced MiB | CPU s | wall s |")
    print("|---|---|---|---|---|")
    for name, rs in results.items():
        def med(key: str, rs: list[dict[str, Any]] = rs) -> float:
            return statistics.median(r[key] for r in rs)

        print(f"| {name} | {statistics.median(r['hwm_mib'] - r['rss_before_mib'] for r in rs):.0f} | "
              f"{med('rss_synced_mib'):.0f} | {med('cpu_s'):.2f} | {med('wall_s'):.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
