"""The matrix: every (nodes, mode, verb, node set) cell measured on one server."""

from __future__ import annotations

import argparse
import math
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from benchmarks.latency.client import Body, RawClient, make_body, validate
from benchmarks.latency.cluster import OPENB_PODS, Cluster, make_cluster, pending_pod, read_csv, sample_size
from benchmarks.latency.measure import HEADER, Row, drive, drive_concurrent, fmt_row, pct
from benchmarks.latency.profiles import py_spy, summarize_profile
from benchmarks.latency.server import DEFAULT_MAX_BODY, HTTP_TIMEOUT_S, Server, server_delta, server_p99
from benchmarks.machine import machine_info


def build_bodies(cluster: Cluster, mode: str, node_set: str, verb: str, pods: list[dict[str, Any]], port: int,
                 max_variants: int) -> list[Body]:
    n = len(cluster.order)
    k = sample_size(n) if node_set == "sample" else n
    by_name = {nd["metadata"]["name"]: nd for nd in cluster.nodes}
    out: list[Body] = []
    probe = RawClient(port, 120.0)
    for v, pod in enumerate(pods[:max_variants]):
        start = (v * k) % n
        names = (cluster.order[start:] + cluster.order[:start])[:k]
        if verb == "prioritize" and node_set == "sample":
            # the nodes of this pod's filter call that passed (kube-scheduler's order)
            status, data = probe.post(make_body("/filter", {"Pod": pod, "NodeNames": names, "Nodes": None}, k))
            assert status == 200, data[:300]
            names = orjson.loads(data)["NodeNames"]
        doc: dict[str, Any] = {"Pod": pod}
        if mode == "names":
            doc["Nodes"], doc["NodeNames"] = None, names
        else:
            doc["Nodes"], doc["NodeNames"] = {"metadata": {}, "items": [by_name[x] for x in names]}, None
        out.append(make_body(f"/{verb}", doc, len(names)))
    probe.close()
    return out


def measure_cell(args: argparse.Namespace, server: Server, cluster: Cluster, pods: list[dict[str, Any]], mode: str,
                 verb: str, node_set: str, variants: int) -> Row:
    """One (mode, verb, node set) cell on a running server: warm up, size the cell, check one reply, measure (under
    py-spy with --py-spy), print and return its row."""
    n = len(cluster.order)
    bodies = build_bodies(cluster, mode, node_set, verb, pods, server.port, variants)
    per_call_s = None
    # warm-up: a few calls, also to size the cell
    warm = drive(server.port, verb, bodies, max(3, min(args.warmup, args.requests // 10)), args.max_cell_seconds / 4, 120.0)
    if warm.lat:
        per_call_s = float(np.median(warm.lat))
    count = args.requests
    if per_call_s and per_call_s * count > args.max_cell_seconds:
        count = max(10, int(args.max_cell_seconds / per_call_s))
    # one full check of a reply
    probe = RawClient(server.port, 120.0)
    status, data = probe.post(bodies[0])
    probe.close()
    summary = validate(verb, data, bodies[0].nodes_sent) if status == 200 else f"HTTP {status}"
    m0 = server.metrics()
    prof = Path(args.py_spy) / f"{n}-{mode}-{verb}-{node_set}.txt" if args.py_spy else None
    with py_spy(server.proc.pid, prof):
        s = drive_concurrent(server.port, verb, bodies, count, args.max_cell_seconds * 2, 120.0, args.concurrency)
    m1 = server.metrics()
    srv_mean, srv_err = server_delta(m0, m1, verb)
    lat = np.array(s.lat) * 1e3
    errs = dict(s.errors)
    if srv_err:
        errs["server"] = int(srv_err)
    row = Row(n, mode, verb, node_set, int(np.mean([b.nodes_sent for b in bodies])),
              float(np.mean([len(b) for b in bodies])) / 1024, len(data) / 1024, lat.size,
              pct(lat, 50), pct(lat, 99), float(lat.max()) if lat.size else math.nan,
              lat.size / s.wall if s.wall else math.nan, srv_mean, server_p99(m0, m1, verb),
              int((lat > HTTP_TIMEOUT_S * 1e3).sum()), ",".join(f"{k}:{v}" for k, v in errs.items()), summary)
    print("   " + fmt_row(row) + f"   [{summary}]", flush=True)
    if prof is not None and prof.exists():
        for line in summarize_profile(prof):
            print("   " + line)
    return row


def run_matrix(args: argparse.Namespace, tmp: Path) -> int:
    rows: list[Row] = []
    rss_lines: list[str] = []
    pod_rows = read_csv(OPENB_PODS)
    for n in args.nodes:
        t0 = time.perf_counter()
        cluster = make_cluster(n, args.seed)
        snap = tmp / f"cluster-{n}.json"
        raw = cluster.snapshot()
        snap.write_bytes(raw)
        node_kb = sum(len(orjson.dumps(x)) for x in cluster.nodes[:50]) / min(50, n) / 1024
        rng = random.Random(args.seed + n)
        pods = [pending_pod(rng, cluster.catalog, k, pod_rows) for k in range(args.variants)]
        pod_kb = len(orjson.dumps(pods[0])) / 1024
        est_full = int(n * node_kb * 1024 * 1.1) + (1 << 20)
        print(f"\n== {n} nodes, {len(cluster.pods)} bound pods: snapshot {len(raw) / 2**20:.1f} MiB, a Node is "
              f"~{node_kb:.1f} KiB of JSON, the pending Pod {pod_kb:.1f} KiB (generated in {time.perf_counter() - t0:.1f} s)")
        del raw
        max_body = est_full * 2 if "full" in args.modes else DEFAULT_MAX_BODY
        if max_body > DEFAULT_MAX_BODY:
            print(f"   note: a full-nodes body of all {n} nodes is ~{est_full / 2**20:.0f} MiB; the server runs with "
                  f"KSO_MAX_BODY_BYTES={max_body} (default {DEFAULT_MAX_BODY}) so it is not refused with 400")
        server = Server(snap, args.agents, max_body, tmp / f"server-{n}.log")
        try:
            t1 = time.perf_counter()
            ready = server.wait_ready()
            rss0 = server.rss()
            print(f"   server pid {server.proc.pid} ready in {time.perf_counter() - t1:.1f} s ({ready}); "
                  f"RSS {rss0 / 2**20:.1f} MiB")
            for mode in args.modes:
                for verb in args.verbs:
                    for node_set in args.node_sets:
                        if node_set == "sample" and sample_size(n) >= n:
                            continue  # the sample is every node: same as "all"
                        row = measure_cell(args, server, cluster, pods, mode, verb, node_set,
                                           2 if mode == "full" and n * node_kb > 4096 else args.variants)
                        rows.append(row)
            rss1 = server.rss()
            rss_lines.append(f"{n:>5} nodes: server RSS {rss0 / 2**20:.1f} MiB after load -> {rss1 / 2**20:.1f} MiB "
                             f"after all cells ({(rss1 - rss0) / 2**20:+.1f} MiB)")
        finally:
            server.stop()
    print("\n" + "\n".join(machine_info()))
    print(f"client: raw-socket HTTP/1.1 keep-alive, concurrency {args.concurrency} (closed loop, one call in flight "
          "per connection); latency = send first byte .. last reply byte; calls/s = calls / wall time")
    print("set: all = every node; sample = kube-scheduler's numFeasibleNodesToFind (100 -> 100, 500 -> 230, "
          "5000 -> 500); prioritize sends the nodes that passed the filter of that set, except 'all' (worst case)")
    print("srv ms = mean of the server's own kso_extender_request_duration_seconds (body read .. reply built); "
          "srv p99 = the upper bound of its bucket holding the 99th percentile\n")
    print(HEADER)
    for r in rows:
        print(fmt_row(r))
    print()
    for line in rss_lines:
        print(line)
    return 0
