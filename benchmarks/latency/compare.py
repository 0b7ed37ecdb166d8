"""Before / after (``--compare-tree DIR``): the same replies byte for byte, then both trees measured
in alternating (ABBA) rounds."""

from __future__ import annotations

import argparse
import math
import random
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from benchmarks.e2e import tree_env
from benchmarks.latency.client import Body
from benchmarks.latency.cluster import (
    OPENB_PODS,
    REPO,
    UID_PLACEHOLDER,
    Cluster,
    make_cluster,
    pending_pod,
    read_csv,
    sample_size,
)
from benchmarks.latency.matrix import build_bodies
from benchmarks.latency.measure import Row, drive, pct
from benchmarks.latency.server import DEFAULT_MAX_BODY, Server, server_delta, server_p99
from benchmarks.machine import machine_info

# Run in each tree compared (see its docstring): answers a list of requests through that tree's ASGI app.
REPLAY_SCRIPT = Path(__file__).with_name("replay.py")


def reply_check_requests(cluster: Cluster, pods: list[dict[str, Any]], modes: Sequence[str],
                         full_limit: int = 600) -> list[tuple[str, str]]:
    """(path, body) of the reply check: each pod on every node and on a sample, in both modes (full
    mode only for clusters up to ``full_limit`` nodes: the bodies are ~10 KiB per node), every route,
    unknown nodes, and malformed bodies."""
    n = len(cluster.order)
    k = sample_size(n)
    by_name = {nd["metadata"]["name"]: nd for nd in cluster.nodes}
    out: list[tuple[str, str]] = []

    def add(path: str, doc: Any) -> None:
        out.append((path, orjson.dumps(doc).decode()))

    for v, pod in enumerate(pods):
        pod = orjson.loads(orjson.dumps(pod).replace(UID_PLACEHOLDER.encode(), f"{v:08x}-0000-4000-8000-{v:012x}".encode()))
        start = (v * k) % n
        sets = [cluster.order, (cluster.order[start:] + cluster.order[:start])[:k]]
        for names in sets:
            for mode in modes:
                if mode == "full" and n > full_limit:
                    continue
                doc: dict[str, Any] = {"Pod": pod}
                if mode == "names":
                    doc["Nodes"], doc["NodeNames"] = None, names
                else:
                    # as kube-scheduler sends them: its informer's Nodes carry no kind / apiVersion
                    items = [{k: v for k, v in by_name[x].items() if k not in ("apiVersion", "kind")} for x in names]
                    doc["Nodes"], doc["NodeNames"] = {"metadata": {}, "items": items}, None
                for verb in ("filter", "prioritize"):
                    add(f"/{verb}", doc)
        names = sets[1]
        body = {"Pod": pod, "NodeNames": names}
        for route in ("/scheduler/predicates/safe-overload", "/scheduler/priorities/safe-overload",
                      "/scheduler/priorities/safe-balance", "/scheduler/priorities/pigeon-holing",
                      "/scheduler/priorities/congestion", "/scheduler/priorities/image_score",
                      "/scheduler/priorities/image-locality", "/my_scheduler_extension/my_new_priorities/image_score",
                      "/debug/explain"):
            add(route, {**body, "NodeNames": names[:40]})
        mixed = [*names[:20], "no-such-node-a", *names[20:40], "no-such-node-b"]
        add("/filter", {"pod": pod, "nodenames": mixed})
        add("/prioritize", {"Pod": pod, "NodeNames": mixed})
        add("/preempt", {"Pod": pod, "NodeNameToMetaVictims": {x: {"Pods": [{"UID": f"uid-{j}"}], "NumPDBViolations": 0}
                                                               for j, x in enumerate(names[:30])}})
    # One workload's pods (one demand), 120 in a row, each to filter then prioritize: pigeon's running average of
    # demand settles (after 100), which a shortcut of the extender's relies on.
    for v in range(120):
        pod = orjson.loads(orjson.dumps(pods[0]).replace(UID_PLACEHOLDER.encode(), f"{v:08x}-0000-4000-9000-{v:012x}".encode()))
        for verb in ("filter", "prioritize"):
            add(f"/{verb}", {"Pod": pod, "Nodes": None, "NodeNames": cluster.order})
    pod = orjson.loads(orjson.dumps(pods[0]).replace(UID_PLACEHOLDER.encode(), b"bad-input"))
    for path in ("/filter", "/prioritize"):
        for doc in ({"Pod": pod, "NodeNames": [cluster.order[0], 7]}, {"Pod": pod, "NodeNames": [cluster.order[0], ""]},
                    {"Pod": pod, "NodeNames": "x"}, {"Pod": pod}, {"NodeNames": cluster.order[:3]}, {"Pod": {}},
                    {"Pod": pod, "Nodes": {"items": [{"metadata": {}}]}}, [1, 2],
                    {"Pod": {**pod, "spec": {"containers": [{"resources": {"requests": {"cpu": "-1"}}}]}},
                     "NodeNames": cluster.order[:3]}):
            add(path, doc)
        out.append((path, "{not json"))
        out.append((path, ""))
    return out


def check_replies(trees: Sequence[Path], snapshot: Path, requests: list[tuple[str, str]], tmp: Path,
                  agents: str | None) -> str:
    """Replay ``requests`` in each tree in-process; a one-line verdict (raises on a difference)."""
    req_path = tmp / "replay-requests.json"
    req_path.write_bytes(orjson.dumps(requests))
    outs = []
    for i, tree in enumerate(trees):
        out = tmp / f"replay-{i}.json"
        env = tree_env(tree, LOG_LEVEL="ERROR", KSO_CLUSTER_SOURCE="SNAPSHOT", KSO_SNAPSHOT=str(snapshot),
                       KSO_PLAN_POLICY="NONE", KSO_MAX_BODY_BYTES=str(1 << 30))
        if agents:
            env["KSO_AGENTS"] = agents
        done = subprocess.run([sys.executable, "-P", str(REPLAY_SCRIPT), str(req_path), str(out)], cwd=tree, env=env,
                              capture_output=True, timeout=1800)
        if done.returncode:
            raise RuntimeError(f"reply replay in {tree} failed: {done.stderr.decode(errors='replace')[-2000:]}")
        outs.append(orjson.loads(out.read_bytes()))
    for out in outs:  # /debug/explain says when it answered and how old the cache was: not compared
        for (path, _), reply in zip(requests, out, strict=True):
            if path == "/debug/explain" and reply[0] == 200:
                doc = orjson.loads(reply[2])
                doc.pop("at", None)
                doc.get("cache", {}).pop("age_s", None)
                reply[1] = [h for h in reply[1] if h[0] != "content-length"]
                reply[2] = orjson.dumps(doc).decode()
    differ = [i for i, (a, b) in enumerate(zip(*outs, strict=True)) if a != b]
    for i in differ[:3]:
        print(f"   DIFFERENT reply to {requests[i][0]} (request {i}):\n     {trees[0]}: {str(outs[0][i])[:600]}\n"
              f"     {trees[1]}: {str(outs[1][i])[:600]}")
    statuses = Counter(r[0] for r in outs[0])
    verdict = (f"{len(requests) - len(differ)} of {len(requests)} replies identical (status, headers, body; "
               f"statuses {dict(statuses)})")
    if differ:
        raise AssertionError(verdict)
    return verdict


@dataclass
class CompareRow:
    nodes: int
    mode: str
    verb: str
    node_set: str
    sent: int
    # tree label -> (p50, p99, calls/s, srv mean, srv p99, cpu) ms, medians over rounds; cpu = the server's event-loop
    # thread's CPU time per call (Server.cpu_seconds): what a busy machine inflates least
    stats: dict[str, tuple[float, ...]]


def run_compare(args: argparse.Namespace, tmp: Path) -> int:
    other = Path(args.compare_tree).resolve()
    if not (other / "kso" / "cli.py").exists():
        print(f"--compare-tree {other}: not a kso checkout (no kso/cli.py)")
        return 2
    labels = {"base": other, "this": REPO}
    print(f"compare: base = {other} ({_git_head(other)}), this = {REPO} ({_git_head(REPO)}{_dirty(REPO)})")
    rows: list[CompareRow] = []
    pod_rows = read_csv(OPENB_PODS)
    for n in args.nodes:
        cluster = make_cluster(n, args.seed)
        snap = tmp / f"cluster-{n}.json"
        snap.write_bytes(cluster.snapshot())
        rng = random.Random(args.seed + n)
        pods = [pending_pod(rng, cluster.catalog, k, pod_rows) for k in range(args.variants)]
        print(f"\n== {n} nodes, {len(cluster.pods)} bound pods", flush=True)
        if not args.no_reply_check:
            t0 = time.perf_counter()
            requests = reply_check_requests(cluster, pods, args.modes)
            verdict = check_replies([other, REPO], snap, requests, tmp, args.agents)
            print(f"   {verdict} ({time.perf_counter() - t0:.0f} s)", flush=True)
            bare = tmp / f"cluster-{n}-no-statistics.json"
            bare.write_bytes(cluster.snapshot_without_statistics())
            verdict = check_replies([other, REPO], bare, requests, tmp, args.agents)
            print(f"   no load statistics on any node: {verdict}", flush=True)
        node_kb = sum(len(orjson.dumps(x)) for x in cluster.nodes[:50]) / min(50, n) / 1024
        est_full = int(n * node_kb * 1024 * 1.1) + (1 << 20)
        max_body = est_full * 2 if "full" in args.modes else DEFAULT_MAX_BODY
        servers = {label: Server(snap, args.agents, max_body, tmp / f"server-{label}-{n}.log", tree)
                   for label, tree in labels.items()}
        try:
            for server in servers.values():
                server.wait_ready()
            for mode in args.modes:
                for verb in args.verbs:
                    for node_set in args.node_sets:
                        if node_set == "sample" and sample_size(n) >= n:
                            continue
                        big = mode == "full" and n * node_kb > 4096
                        bodies = build_bodies(cluster, mode, node_set, verb, pods, servers["this"].port,
                                              2 if big else args.variants)
                        stats = measure_abba(servers, verb, bodies, args)
                        row = CompareRow(n, mode, verb, node_set, int(np.mean([b.nodes_sent for b in bodies])),
                                         stats)  # type: ignore[arg-type]
                        rows.append(row)
                        print("   " + fmt_compare(row), flush=True)
        finally:
            for server in servers.values():
                server.stop()
    print("\n" + "\n".join(machine_info()))
    print(f"base = {other} ({_git_head(other)}); this = {REPO} ({_git_head(REPO)}{_dirty(REPO)})")
    print(f"each cell: {args.rounds} rounds per tree, alternating ABBA; medians over rounds of p50 / p99 (ms) and "
          "calls/s, and of the server's own mean (srv) and p99 bucket (srv99); cpu = the server's event-loop thread's CPU "
          "ms per call (/proc/PID/schedstat); one call in flight (closed loop)\n")
    print(COMPARE_HEADER)
    for row in rows:
        print(fmt_compare(row))
    return 0


def measure_abba(servers: dict[str, Server], verb: str, bodies: list[Body],
                 args: argparse.Namespace) -> dict[str, tuple[float, ...]]:
    """One cell on every server in alternating (ABBA) rounds: per server label, the medians over rounds of
    (p50, p99, calls/s, srv mean, srv p99, cpu per call), in ms where a time."""
    per_round: dict[str, list[tuple[float, ...]]] = {lb: [] for lb in servers}
    for server in servers.values():  # warm-up, and size the rounds
        warm = drive(server.port, verb, bodies, max(3, min(args.warmup, args.requests // 10)),
                     args.max_cell_seconds / 4, 120.0)
    per_call = float(np.median(warm.lat)) if warm.lat else 0.01
    count = args.requests
    if per_call * count > args.max_cell_seconds:
        count = max(10 * args.rounds, int(args.max_cell_seconds / per_call))
    count = max(1, count // args.rounds)
    for r in range(args.rounds):
        order = list(servers) if r % 2 == 0 else list(servers)[::-1]
        for label in order:
            server = servers[label]
            m0 = server.metrics()
            c0 = server.cpu_seconds()
            smp = drive(server.port, verb, bodies, count, args.max_cell_seconds, 120.0)
            c1 = server.cpu_seconds()
            m1 = server.metrics()
            srv_mean, srv_err = server_delta(m0, m1, verb)
            if smp.errors or srv_err:
                print(f"   {label}: errors {dict(smp.errors)} server {srv_err}")
            lat = np.array(smp.lat) * 1e3
            per_round[label].append((pct(lat, 50), pct(lat, 99), lat.size / smp.wall, srv_mean,
                                     server_p99(m0, m1, verb), (c1 - c0) / max(lat.size, 1) * 1e3))
    return {lb: tuple(float(np.median([x[i] for x in v])) for i in range(6)) for lb, v in per_round.items()}


COMPARE_HEADER = (f"{'nodes':>5} {'mode':<5} {'verb':<10} {'set':<6} {'sent':>5} | {'base p50':>8} {'p99':>6} {'calls/s':>7} "
                  f"{'srv':>6} {'srv99':>6} {'cpu':>6} | {'this p50':>8} {'p99':>6} {'calls/s':>7} {'srv':>6} {'srv99':>6} "
                  f"{'cpu':>6} | cpu this/base | aim (this)")


def fmt_compare(r: CompareRow) -> str:
    b, t = r.stats["base"], r.stats["this"]
    aim = Row(r.nodes, r.mode, r.verb, r.node_set, r.sent, 0, 0, 0, t[0], t[1], 0, t[2], t[3], t[4], 0, "").aim()
    return (f"{r.nodes:>5} {r.mode:<5} {r.verb:<10} {r.node_set:<6} {r.sent:>5} | {b[0]:>8.3f} {b[1]:>6.3f} {b[2]:>7.0f} "
            f"{b[3]:>6.3f} {b[4]:>6.3f} {b[5]:>6.3f} | {t[0]:>8.3f} {t[1]:>6.3f} {t[2]:>7.0f} {t[3]:>6.3f} {t[4]:>6.3f} "
            f"{t[5]:>6.3f} | {t[5] / b[5] if b[5] else math.nan:>13.2f} | {aim}")


def _git_head(tree: Path) -> str:
    done = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or "?"


def _dirty(tree: Path) -> str:
    done = subprocess.run(["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=no", "--", "kso",
                           "extender"], capture_output=True, text=True)
    return " + uncommitted changes in kso/ or extender/" if done.stdout.strip() else ""
