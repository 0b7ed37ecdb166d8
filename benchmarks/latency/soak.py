"""Soak: a paced load of alternating filter / prioritize calls for minutes, and the server's RSS."""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import os
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from benchmarks.latency.client import Body, CallError, RawClient, check_reply, make_body
from benchmarks.latency.cluster import OPENB_PODS, make_cluster, pending_pod, read_csv
from benchmarks.latency.matrix import build_bodies
from benchmarks.latency.measure import drive, pct
from benchmarks.latency.server import DEFAULT_MAX_BODY, Server, server_delta
from benchmarks.machine import machine_info

_SOAK: dict[str, list[Body]] = {}


def _soak_worker(args: tuple[int, float, float, float, float]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                                                        Counter[str]]:
    """Paced loop alternating filter / prioritize. Returns (send offset s, latency s, verb 0/1, failed 0/1, errors)."""
    port, rate, start_at, duration, timeout = args
    client = RawClient(port, timeout)
    interval = 1.0 / rate
    bodies = (_SOAK["filter"], _SOAK["prioritize"])
    t_off: list[float] = []
    lat: list[float] = []
    verbs: list[int] = []
    failed: list[int] = []
    errors: Counter[str] = Counter()
    now = time.monotonic()
    if start_at > now:
        time.sleep(start_at - now)
    next_t = start_at
    end = start_at + duration
    i = 0
    while True:
        now = time.monotonic()
        if now >= end:
            break
        if next_t > now:
            time.sleep(next_t - now)
        next_t += interval
        if next_t < now - 0.1:
            next_t = now  # behind: do not burst to catch up more than 100 ms worth
        v = i & 1
        body = bodies[v][(i >> 1) % len(bodies[v])]
        t0 = time.monotonic()
        try:
            status, data = client.post(body)
            err = check_reply("filter" if v == 0 else "prioritize", status, data)
        except CallError as exc:
            err = exc.kind
        t1 = time.monotonic()
        if t1 - t0 > timeout and not err:
            err = "over_timeout"
        t_off.append(t0 - start_at)
        lat.append(t1 - t0)
        verbs.append(v)
        failed.append(1 if err else 0)
        if err:
            errors[err] += 1
        i += 1
    client.close()
    return np.array(t_off), np.array(lat), np.array(verbs, dtype=np.int8), np.array(failed, dtype=np.int8), errors


def run_soak(args: argparse.Namespace, tmp: Path) -> int:
    n = args.soak_nodes
    cluster = make_cluster(n, args.seed)
    snap = tmp / f"cluster-{n}.json"
    snap.write_bytes(cluster.snapshot())
    rng = random.Random(args.seed + n)
    pod_rows = read_csv(OPENB_PODS)
    pods = [pending_pod(rng, cluster.catalog, k, pod_rows) for k in range(args.variants)]
    server = Server(snap, args.agents, DEFAULT_MAX_BODY, tmp / f"server-soak-{n}.log")
    workers = args.soak_clients
    bucket = args.soak_bucket or (60.0 if args.duration >= 300 else 10.0)
    try:
        server.wait_ready()
        _SOAK["filter"] = build_bodies(cluster, "names", "all", "filter", pods, server.port, args.variants)
        # prioritize: the nodes that passed each pod's filter over all N (kube-scheduler's shape)
        pri = []
        probe = RawClient(server.port, 60.0)
        for fb in _SOAK["filter"]:
            status, data = probe.post(fb)
            pri.append(orjson.loads(data)["NodeNames"])
        probe.close()
        _SOAK["prioritize"] = [make_body("/prioritize", {"Pod": p, "Nodes": None, "NodeNames": names}, len(names))
                               for p, names in zip(pods, pri, strict=False)]
        # warm-up
        drive(server.port, "filter", _SOAK["filter"], 300, 10, 5)
        drive(server.port, "prioritize", _SOAK["prioritize"], 300, 10, 5)
        m0 = server.metrics()
        rss: list[tuple[float, int]] = [(0.0, server.rss())]
        print(f"soak: {n} nodes, NodeNames mode, alternating filter ({_SOAK['filter'][0].nodes_sent} nodes) / "
              f"prioritize (~{int(np.mean([b.nodes_sent for b in _SOAK['prioritize']]))} nodes that passed), "
              f"target {args.rate:.0f} calls/s total over {workers} client processes, {args.duration:.0f} s, "
              f"timeout {args.timeout:g} s; server pid {server.proc.pid} RSS {rss[0][1] / 2**20:.1f} MiB", flush=True)
        ctx = mp.get_context("fork")
        start_at = time.monotonic() + 1.0
        with ctx.Pool(workers) as pool:
            res = pool.map_async(_soak_worker, [(server.port, args.rate / workers, start_at, args.duration, args.timeout)]
                                 * workers)
            while not res.ready():
                res.wait(min(5.0, max(0.5, args.duration / 20)))
                rss.append((time.monotonic() - start_at, server.rss()))
            parts = res.get()
        m1 = server.metrics()
        rss.append((time.monotonic() - start_at, server.rss()))
    finally:
        server.stop()
    _print_soak_report(args, parts, m0, m1, rss, bucket)
    return 0


def _print_soak_report(args: argparse.Namespace, parts: list[Any], m0: Any, m1: Any, rss: list[tuple[float, int]],
                       bucket: float) -> None:
    t = np.concatenate([p[0] for p in parts])
    lat = np.concatenate([p[1] for p in parts]) * 1e3
    verb = np.concatenate([p[2] for p in parts])
    bad = np.concatenate([p[3] for p in parts])
    errors: Counter[str] = Counter()
    for p in parts:
        errors.update(p[4])
    _, srv_err_f = server_delta(m0, m1, "filter")
    print("\n" + "\n".join(machine_info()))
    achieved = t.size / args.duration
    print(f"\nachieved {achieved:.0f} calls/s of {args.rate:.0f} targeted ({100 * achieved / args.rate:.0f}%): "
          f"{t.size} calls ({int((verb == 0).sum())} filter, {int((verb == 1).sum())} prioritize); errors: "
          f"{dict(errors) or 0}; server error counters +{srv_err_f:.0f}")
    for v, name in ((0, "filter"), (1, "prioritize")):
        srv, _ = server_delta(m0, m1, name)
        sel = lat[verb == v]
        print(f"  {name:<10} p50 {pct(sel, 50):.3f} ms  p99 {pct(sel, 99):.3f} ms  p99.9 {pct(sel, 99.9):.3f} ms  "
              f"max {sel.max():.1f} ms  ({sel.size / args.duration:.0f} calls/s; server mean {srv:.3f} ms)")
    print(f"\nper {bucket:g} s: {'from':>6} {'calls/s':>8} {'f p50':>7} {'f p99':>7} {'p p50':>7} {'p p99':>7} "
          f"{'max ms':>7} {'errors':>6} {'RSS MiB':>8}")
    idx = np.floor(t / bucket).astype(int)
    for b in range(int(math.ceil(args.duration / bucket))):
        sel = idx == b
        f = lat[sel & (verb == 0)]
        p = lat[sel & (verb == 1)]
        r_at = [r for tt, r in rss if tt <= (b + 1) * bucket]
        print(f"{'':>9}{b * bucket:>6.0f} {sel.sum() / bucket:>8.0f} {pct(f, 50):>7.3f} {pct(f, 99):>7.3f} "
              f"{pct(p, 50):>7.3f} {pct(p, 99):>7.3f} {lat[sel].max() if sel.any() else math.nan:>7.1f} "
              f"{int(bad[sel].sum()):>6} {(r_at[-1] if r_at else rss[0][1]) / 2**20:>8.1f}")
    r0, r1 = rss[0][1], rss[-1][1]
    print(f"\nserver RSS: {r0 / 2**20:.1f} MiB at start -> {r1 / 2**20:.1f} MiB at end ({(r1 - r0) / 2**20:+.1f} MiB; "
          f"max {max(r for _, r in rss) / 2**20:.1f} MiB over {len(rss)} samples)")
    if achieved < 0.95 * args.rate:
        print(f"note: the target rate was not reached with {args.soak_clients} client processes on "
              f"{os.cpu_count()} cores; the server (one process, one core) and the clients share the machine")
