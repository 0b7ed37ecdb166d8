"""Two source trees' request paths measured side by side: one worker process per tree (each importing its own tree,
``benchmarks.latency.inprocess``' extender and calls), built once per cluster size, then asked in turn for short
batches of filter + prioritize pairs (A B B A ...), so that a shared machine's load drifts over both alike.

    python -m benchmarks.latency.paired --before /tmp/base --after . --nodes 100 1000 5000 [--churn]

Each batch: ``--batch`` pods, each asked filter then prioritize with kube-scheduler's lists
(``benchmarks.latency.node_lists``), CPU time of the worker's thread (``time.thread_time``) per call; with
``--churn`` a bind and a deletion after each pod (untimed), as ``inprocess --churn``. Reported per size: the median
over ``--rounds`` batches of each tree, and after / before. The worker (``--worker``) needs of its tree only
``benchmarks.latency.inprocess``' ``build``, ``pods`` and ``POD`` and ``benchmarks.latency.node_lists``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any


def worker(nodes: int, churn: bool, pending_pods: int) -> None:
    """Build the extender over ``nodes`` nodes, then answer each ``run K`` line on stdin with the CPU us per call of
    K filter + prioritize pairs (``filter prioritize``), until stdin closes."""
    import orjson

    from benchmarks.latency.inprocess import POD, build, pods
    from benchmarks.latency.node_lists import node_lists
    from kso.core.objects import pod_from_k8s

    ext, app, names = build(nodes, 5)
    hot = app.state.hot_routes
    pending = pods(pending_pods)
    for pod in pending:
        ext.pod_memo.parse(pod)
    lists = node_lists("kube-scheduler", names, 600)
    bodies = [orjson.dumps({"Pod": pending[i % len(pending)], "Nodes": None, "NodeNames": lists[i]})
              for i in range(len(lists))]
    churn_pod = pod_from_k8s(POD)
    churned: list[str] = []

    async def one(verb: str, body: bytes) -> None:
        scope = {"type": "http", "method": "POST", "path": f"/{verb}", "root_path": "",
                 "headers": [(b"content-length", str(len(body)).encode()), (b"content-type", b"application/json")]}

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            return None

        await hot[f"/{verb}"](scope, receive, send)

    async def batch(start: int, count: int) -> tuple[float, float]:
        spent = {"filter": 0.0, "prioritize": 0.0}
        for i in range(start, start + count):
            body = bodies[i % len(bodies)]  # the same bytes to both verbs, as kube-scheduler sends
            for verb in spent:
                t0 = time.thread_time()
                await one(verb, body)
                spent[verb] += time.thread_time() - t0
            if churn:
                uid = f"churn-{len(churned)}"
                ext.state.upsert_pod(replace(churn_pod, uid=uid, node_name=names[i % len(names)]))
                churned.append(uid)
                if len(churned) > pending_pods:
                    ext.state.remove_pod(churned[-pending_pods - 1])
        return 1e6 * spent["filter"] / count, 1e6 * spent["prioritize"] / count

    async def serve() -> None:
        await batch(0, 300)  # warm
        done = 300
        print("ready", flush=True)
        for line in sys.stdin:
            count = int(line.split()[1])
            f, p = await batch(done, count)
            done += count
            print(f"{f:.2f} {p:.2f}", flush=True)

    asyncio.run(serve())


def start(tree: Path, nodes: int, args: argparse.Namespace) -> subprocess.Popen[str]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--nodes", str(nodes), "--pods", str(args.pods)]
    if args.churn:
        cmd.append("--churn")
    env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.Popen(cmd, cwd=tree, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        raise SystemExit(f"worker for {tree} did not start")
    return proc


def ask(proc: subprocess.Popen[str], count: int) -> tuple[float, float]:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(f"run {count}\n")
    proc.stdin.flush()
    f, p = proc.stdout.readline().split()
    return float(f), float(p)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.latency.paired", description=__doc__.split("\n\n")[0])
    p.add_argument("--before", type=Path, help="the tree measured first in each pair")
    p.add_argument("--after", type=Path, help="the other tree")
    p.add_argument("--nodes", type=int, nargs="+", default=[100])
    p.add_argument("--rounds", type=int, default=20, help="batches per tree, alternated A B B A")
    p.add_argument("--batch", type=int, default=100, help="pods (filter + prioritize pairs) per batch")
    p.add_argument("--pods", type=int, default=50, help="distinct pending pods cycled")
    p.add_argument("--churn", action="store_true", help="a bind and a deletion after each pod")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(args.nodes[0], args.churn, args.pods)
        return 0
    if args.before is None or args.after is None:
        p.error("--before and --after are required")
    print(f"machine: {platform.node()}, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.1f} at start", flush=True)
    for nodes in args.nodes:
        procs = {"before": start(args.before.resolve(), nodes, args), "after": start(args.after.resolve(), nodes, args)}
        taken: dict[str, list[tuple[float, float]]] = {"before": [], "after": []}
        try:
            for r in range(args.rounds):
                for name in (("before", "after") if r % 2 == 0 else ("after", "before")):
                    taken[name].append(ask(procs[name], args.batch))
        finally:
            for proc in procs.values():
                assert proc.stdin is not None
                proc.stdin.close()
                proc.wait(timeout=60)
        med = {name: (statistics.median(f for f, _ in t), statistics.median(q for _, q in t)) for name, t in taken.items()}
        b, a = med["before"], med["after"]
        print(f"{nodes} nodes{', churn' if args.churn else ''}, {args.rounds} x {args.batch} pods per tree, load "
              f"{os.getloadavg()[0]:.1f}: filter {b[0]:.1f} -> {a[0]:.1f} us ({a[0] / b[0]:.2f}x), prioritize "
              f"{b[1]:.1f} -> {a[1]:.1f} us ({a[1] / b[1]:.2f}x), the pair {b[0] + b[1]:.1f} -> {a[0] + a[1]:.1f} us "
              f"({(a[0] + a[1]) / (b[0] + b[1]):.2f}x)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
