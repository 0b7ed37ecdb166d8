"""Filter latency while the extender builds a plan's problem, in-process, per tree (before/after a change).

    python -m benchmarks.plan_build_stall --before PATH [--after PATH] [--nodes 5000] [--pods-per-node 30]
                                          [--seconds 30] [--gap-s 0.5] [--rounds 2]

For each tree (ABBA order), a fresh Python process with that tree on PYTHONPATH builds the extender as
benchmarks.latency.inprocess does (default configuration, e2e's Node shapes) over ``--nodes`` nodes carrying kube-
safe-scheduler's load annotations (so a plan has statistics to build on) and ``--pods-per-node`` bound pods each,
plus 50 pending pods, with the garbage collector and switch interval set as `kso extender` sets them before it
serves (and, where the tree's watcher freezes its cache after a list, the cache frozen as it would be). A background
thread builds the plan's problem (``problem_from_state``, what the PlanSolver runs in its own process before the
solve goes to a child) again and again, ``--gap-s`` apart, while the main thread makes filter calls back to back
through the hot route's ASGI handler, each with 500 node names sampled at random and shuffled (kube-scheduler never
sends the same list twice). Reported per tree: wall latency of filter calls (p50 / p99 / max) overall and for the
calls that overlapped a build, the builds' seconds, and (where the tree has it) the seconds the build held the
state's lock. Wall time, on a shared machine: the machine's load is printed.
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

CHILD = r"""
import asyncio, gc, json, random, sys, threading, time
from dataclasses import replace

import numpy as np
import orjson

from benchmarks.e2e import bench_nodes
from benchmarks.latency.inprocess import POD, pods
from extender.app import create_app
from extender.config import load_config
from extender.plan_jobs import make_plan_cache
from extender.verbs import Extender
from kso.core.binder import RecordingBinder
from kso.core.cluster import ClusterState
from kso.core.objects import node_from_k8s, pod_from_k8s
from optimizer.plan.cluster_problem import problem_from_state

import inspect
from kso.core.watcher import ClusterWatcher

n_nodes, per_node, seconds, gap = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
# As `kso extender` runs (extender/server.py): the collector set up and the switch interval at 1 ms before serving,
# which is before the watcher's list is in.
gc.collect()
gc.freeze()
gc.set_threshold(100_000, 50, 100)
sys.setswitchinterval(0.001)
config = load_config({})
state = ClusterState()
manifests = bench_nodes(n_nodes)
for i, m in enumerate(manifests):
    m["metadata"]["annotations"] = {"mean-free-cpu": str(1000 + i % 7 * 100), "mean-free-memory": "4096",
                                    "std-free-cpu": "200", "std-free-memory": "512"}
    state.upsert_node(node_from_k8s(m))
names = [m["metadata"]["name"] for m in manifests]
template = pod_from_k8s(POD)
for j in range(n_nodes * per_node):
    state.upsert_pod(replace(template, uid=f"bound-{j}", name=f"b-{j}", node_name=names[j % n_nodes]))
pending = pods(50)
for p in pending:
    state.upsert_pod(pod_from_k8s(p))
if "freeze_after_list" in inspect.signature(ClusterWatcher).parameters:  # what that tree's watcher does after a list
    gc.collect(1)
    gc.freeze()
ext = Extender(config, state, RecordingBinder(), plan=make_plan_cache(config, state), cache_bodies=False)
app = create_app(ext)
hot = app.state.hot_routes["/filter"]
for p in pending:
    ext.pod_memo.parse(p)
rnd = random.Random(7)
bodies = []
for k in range(64):
    sample = rnd.sample(names, min(500, n_nodes))
    bodies.append(orjson.dumps({"Pod": pending[k % len(pending)], "Nodes": None, "NodeNames": sample}))

builds, holds = [], []
stop = threading.Event()
gc_pauses, gc_started = [], [0.0]


def gc_timer(phase, info):  # the collector's pauses (every thread stops for them)
    if phase == "start":
        gc_started[0] = time.perf_counter()
    else:
        gc_pauses.append((info["generation"], time.perf_counter() - gc_started[0]))


def builder():
    while not stop.wait(gap):
        t0 = time.perf_counter()
        if hasattr(state, "plan_copy"):  # the tree that copies under the lock: time the copy too
            c0 = time.perf_counter()
            state.plan_copy()
            holds.append(time.perf_counter() - c0)
            t0 = time.perf_counter()
        problem_from_state(state, None, 0.9, 0.3)
        builds.append((t0, time.perf_counter()))


async def one(body):
    headers = [(b"content-length", str(len(body)).encode()), (b"content-type", b"application/json")]
    scope = {"type": "http", "method": "POST", "path": "/filter", "root_path": "", "headers": headers}
    out = []

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message):
        if message["type"] == "http.response.body":
            out.append(message["body"])

    await hot(scope, receive, send)
    return out[0]


async def run():
    for k in range(200):
        await one(bodies[k % len(bodies)])
    calls = []
    gc.callbacks.append(gc_timer)
    thread = threading.Thread(target=builder, daemon=True)
    thread.start()
    end = time.perf_counter() + seconds
    k = 0
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        await one(bodies[k % len(bodies)])
        calls.append((t0, time.perf_counter()))
        k += 1
    stop.set()
    thread.join()
    gc.callbacks.remove(gc_timer)
    return calls

calls = asyncio.run(run())
spans = sorted(builds)
during = []
for a, b in calls:
    if any(s < b and a < e for s, e in spans):
        during.append(b - a)
print(json.dumps({"all_ms": [1e3 * (b - a) for a, b in calls], "during_ms": [1e3 * d for d in during],
                  "build_s": [e - s for s, e in builds], "hold_s": holds,
                  "gc2_s": [d for g, d in gc_pauses if g == 2], "gc_max_s": max((d for _, d in gc_pauses), default=0.0),
                  "pods": len(state.pods), "nodes": len(state)}))
"""


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    vals = sorted(values)
    return vals[min(len(vals) - 1, int(q * len(vals)))]


def measure(tree: Path, args: argparse.Namespace) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.run([sys.executable, "-c", CHILD, str(args.nodes), str(args.pods_per_node), str(args.seconds),
                           str(args.gap_s)], env=env, cwd=str(tree), capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"child in {tree} failed: {proc.stderr[-3000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def summary(ms: list[float]) -> str:
    return f"{pct(ms, 0.5):.2f} / {pct(ms, 0.99):.1f} / {max(ms, default=float('nan')):.1f}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.plan_build_stall", description=__doc__.split("\n\n")[0])
    p.add_argument("--before", type=Path, required=True, help="a checkout of the tree before the change")
    p.add_argument("--after", type=Path, default=REPO)
    p.add_argument("--nodes", type=int, default=5000)
    p.add_argument("--pods-per-node", type=int, default=30)
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--gap-s", type=float, default=0.5, help="pause between two builds (default 0.5 s)")
    p.add_argument("--rounds", type=int, default=2, help="ABBA rounds (default 2)")
    p.add_argument("--trees", default="before,after", help="which trees to run (default before,after)")
    args = p.parse_args(argv)

    from benchmarks.machine import machine_line

    load = os.getloadavg()
    trees = {"before": args.before, "after": args.after}
    results: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    wanted = args.trees.split(",")
    order = [n for r in range(args.rounds) for n in (("before", "after") if r % 2 == 0 else ("after", "before"))
             if n in wanted]
    for name in order:
        res = measure(trees[name], args)
        res["load1"] = os.getloadavg()[0]
        results[name].append(res)
        holds = res["hold_s"]
        print(f"  {name:<6} {res['nodes']} nodes {res['pods']} pods: {len(res['all_ms'])} filter calls, "
              f"{len(res['during_ms'])} during {len(res['build_s'])} builds of {statistics.median(res['build_s']):.2f} s "
              f"(median); filter p50/p99/max ms all {summary(res['all_ms'])}, during builds {summary(res['during_ms'])}"
              + (f"; lock held {1e3 * statistics.median(holds):.1f} ms median, {1e3 * max(holds):.1f} max" if holds
                 else "; lock held for the whole build") + f"; {len(res['gc2_s'])} full collections, longest "
              f"{1e3 * max(res['gc2_s'], default=0.0):.0f} ms, longest collection {1e3 * res['gc_max_s']:.0f} ms; "
              f"load {res['load1']:.1f}", flush=True)
    print(f"\nmachine: {machine_line(load)}; load at the end {'/'.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{args.nodes} nodes x {args.pods_per_node} bound pods, builds {args.gap_s} s apart, {args.seconds:.0f} s of "
          f"back-to-back filter calls (500 random names each) per run, {args.rounds} runs per tree (ABBA), pooled:")
    print("| tree | build s (median) | state lock held per build ms (median / max) | filter p50 / p99 / max ms, all | "
          "filter p50 / p99 / max ms, during builds |")
    print("|---|---|---|---|---|")
    for name, rs in results.items():
        if not rs:
            continue
        every = [x for r in rs for x in r["all_ms"]]
        during = [x for r in rs for x in r["during_ms"]]
        build = statistics.median(x for r in rs for x in r["build_s"])
        holds = [x for r in rs for x in r["hold_s"]]
        held = (f"{1e3 * statistics.median(holds):.1f} / {1e3 * max(holds):.1f}" if holds
                else f"the whole build ({build * 1e3:.0f})")
        print(f"| {name} | {build:.2f} | {held} | {summary(every)} | {summary(during)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
