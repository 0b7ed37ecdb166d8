"""Closed-loop drivers (one call in flight per connection), percentiles and the result rows."""

from __future__ import annotations

import math
import multiprocessing as mp
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from benchmarks.latency.client import Body, CallError, RawClient, check_reply

AIM_500 = (1.5, 1000.0)  # p99 ms, calls/s (NodeNames, 500 nodes)
AIM_5000_P99 = 10.0


@dataclass
class Samples:
    lat: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    wall: float = 0.0


def drive(port: int, verb: str, bodies: Sequence[Body], count: int, max_seconds: float, timeout: float) -> Samples:
    """Closed loop: one call in flight on one keep-alive connection."""
    client = RawClient(port, timeout)
    out = Samples()
    t_start = time.perf_counter()
    deadline = t_start + max_seconds
    i = 0
    while i < count:
        body = bodies[i % len(bodies)]
        t0 = time.perf_counter()
        try:
            status, data = client.post(body)
            err = check_reply(verb, status, data)
        except CallError as exc:
            err = exc.kind
        t1 = time.perf_counter()
        out.lat.append(t1 - t0)
        if err:
            out.errors[err] += 1
        i += 1
        if t1 > deadline:
            break
    out.wall = time.perf_counter() - t_start
    client.close()
    return out


_BODIES: dict[str, list[Body]] = {}  # inherited by forked client processes


def _drive_worker(args: tuple[int, str, int, float, float]) -> Samples:
    port, verb, count, max_seconds, timeout = args
    return drive(port, verb, _BODIES[verb], count, max_seconds, timeout)


def drive_concurrent(port: int, verb: str, bodies: list[Body], count: int, max_seconds: float, timeout: float,
                     concurrency: int) -> Samples:
    if concurrency <= 1:
        return drive(port, verb, bodies, count, max_seconds, timeout)
    _BODIES[verb] = bodies
    ctx = mp.get_context("fork")
    t0 = time.perf_counter()
    with ctx.Pool(concurrency) as pool:
        parts = pool.map(_drive_worker, [(port, verb, max(1, count // concurrency), max_seconds, timeout)] * concurrency)
    out = Samples(wall=time.perf_counter() - t0)
    for p in parts:
        out.lat.extend(p.lat)
        out.errors.update(p.errors)
    out.wall = max(p.wall for p in parts)
    return out


def pct(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if values.size else math.nan


@dataclass
class Row:
    nodes: int
    mode: str
    verb: str
    node_set: str
    sent: int
    req_kb: float
    resp_kb: float
    calls: int
    p50: float
    p99: float
    max: float
    rate: float
    server_mean: float
    server_p99: float
    over_timeout: int
    errors: str
    note: str = ""

    def aim(self) -> str:
        if self.mode != "names":
            return "-"
        if self.nodes == 500 and self.node_set == "all":
            ok = self.p99 < AIM_500[0] and self.rate > AIM_500[1]
            return "ok" if ok else f"MISS (p99<{AIM_500[0]}, >{AIM_500[1]:.0f}/s)"
        if self.nodes == 5000:
            return "ok" if self.p99 < AIM_5000_P99 else f"MISS (p99<{AIM_5000_P99:.0f})"
        return "-"


HEADER = (f"{'nodes':>5} {'mode':<5} {'verb':<10} {'set':<6} {'sent':>5} {'req KB':>8} {'resp KB':>8} {'calls':>6} "
          f"{'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'calls/s':>8} {'srv ms':>7} {'srv p99':>7} {'>5s':>4}  {'errors':<8} aim")


def fmt_row(r: Row) -> str:
    return (f"{r.nodes:>5} {r.mode:<5} {r.verb:<10} {r.node_set:<6} {r.sent:>5} {r.req_kb:>8.1f} {r.resp_kb:>8.1f} "
            f"{r.calls:>6} {r.p50:>8.3f} {r.p99:>8.3f} {r.max:>8.2f} {r.rate:>8.0f} {r.server_mean:>7.3f} {r.server_p99:>7.3f} "
            f"{r.over_timeout:>4}  {r.errors or '0':<8} {r.aim()}")
