"""The extender under the worst requests its bounds allow, over loopback only: a real `kso extender`
process (demo cluster, admin port) is sent, from a few threads, the biggest bodies it accepts (NodeNames
at KSO_MAX_NODES, full Node lists near KSO_MAX_BODY_BYTES, /debug/explain over them, bodies nested to
KSO_MAX_JSON_DEPTH) and ones past the bounds, plus slow clients sending a byte at a time, while /healthz
on the admin port is probed every 50 ms and the process's memory (RSS, children included) is sampled.

    python -m benchmarks.adversarial --seconds 20

Self-stopping: every client has a deadline and the server is stopped (SIGTERM) at the end.
tests/extender/test_adversarial.py runs a short version with CI's margins.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import psutil

from extender.config import ExtenderSettings
from kso.core.net import free_port
from kso.core.settings import load_settings

# A Node as the API server sends it (~1.4 KB of JSON): full-node bodies are lists of these.
NODE_TEMPLATE: dict[str, Any] = {
    "apiVersion": "v1", "kind": "Node",
    "metadata": {"name": "", "resourceVersion": "1",
                 "labels": {"kubernetes.io/hostname": "", "kubernetes.io/os": "linux",
                            "node.kubernetes.io/instance-type": "m5.xlarge",
                            "topology.kubernetes.io/zone": "zone-a"},
                 "annotations": {"mean-free-cpu": "2500", "std-free-cpu": "400", "mean-free-memory": "4000",
                                 "std-free-memory": "500"}},
    "spec": {"podCIDR": "10.0.0.0/24"},
    "status": {"capacity": {"cpu": "4", "memory": "16Gi", "pods": "110", "ephemeral-storage": "100Gi"},
               "allocatable": {"cpu": "3900m", "memory": "15Gi", "pods": "110", "ephemeral-storage": "90Gi"},
               "images": [{"names": [f"registry.example.com/team/app-{k}:1.{k}"], "sizeBytes": 100_000_000 + k}
                          for k in range(4)],
               "conditions": [{"type": "Ready", "status": "True"}]},
}
POD = {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"name": "adversary", "namespace": "default", "uid": "uid-adversary"},
       "spec": {"containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]},
       "status": {"phase": "Pending"}}


def full_node_body(max_bytes: int, max_nodes: int) -> bytes:
    """{"Pod", "Nodes": {"items": [...]}} with as many distinct nodes as fit in max_bytes and max_nodes."""
    one = len(orjson.dumps(NODE_TEMPLATE)) + 40
    n = min(max_nodes, (max_bytes - 4096) // one)
    items = []
    for i in range(n):
        node = json.loads(json.dumps(NODE_TEMPLATE))
        node["metadata"]["name"] = node["metadata"]["labels"]["kubernetes.io/hostname"] = f"adv-{i:06d}"
        items.append(node)
    body = orjson.dumps({"Pod": POD, "Nodes": {"items": items}})
    assert len(body) <= max_bytes, (len(body), max_bytes)
    return body


def names_body(n: int) -> bytes:
    return orjson.dumps({"Pod": POD, "NodeNames": [f"adv-{i:06d}" for i in range(n)]})


def deep_body(depth: int) -> bytes:
    """A valid filter body whose Pod carries a value nested so that the whole body is ``depth`` deep."""
    inner = depth - 2  # {"Pod": {"x": ...}}
    return b'{"Pod":{"metadata":{"name":"deep"},"x":' + b"[" * inner + b"0" + b"]" * inner + b'},"NodeNames":["n"]}'


@dataclass
class ExtenderProcess:
    """`kso extender --demo` in a child process on loopback, with an admin port."""

    env: dict[str, str] = field(default_factory=dict)
    args: list[str] = field(default_factory=list)
    port: int = 0
    admin_port: int = 0
    log_path: Path | None = None
    proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> ExtenderProcess:
        self.port = self.port or free_port()
        self.admin_port = self.admin_port or free_port()
        env = {**os.environ, "KSO_PLAN_POLICY": "none", "LOG_LEVEL": "WARNING", **self.env}
        self.log_path = self.log_path or Path(f"/tmp/kso-adversarial-{os.getpid()}-{self.port}.log")
        log = open(self.log_path, "wb")  # noqa: SIM115 - the child writes to it until stop()
        self.proc = subprocess.Popen([sys.executable, "-m", "kso.cli", "extender", "--demo", "--port", str(self.port),
                                      "--admin-port", str(self.admin_port), *self.args],
                                     env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"kso extender exited with {self.proc.returncode}: {self.log()[-2000:]}")
            try:
                if get(self.admin_port, "/healthz", timeout=1)[0] == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError("kso extender did not start within 90 s")

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path and self.log_path.exists() else ""

    def rss_mib(self) -> float:
        """Resident memory of the server and its children, MiB."""
        try:
            p = psutil.Process(self.proc.pid)  # type: ignore[union-attr]
            procs = [p, *p.children(recursive=True)]
            return sum(q.memory_info().rss for q in procs if q.is_running()) / 2**20
        except psutil.Error:
            return 0.0

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)


def get(port: int, path: str, timeout: float = 5) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def post(port: int, path: str, body: bytes, timeout: float = 60) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", path, body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def slow_client(port: int, deadline: float, results: list[float]) -> None:
    """Send a request's header a byte every 0.5 s; record how long the server kept the connection."""
    start = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            for b in b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n":
                if time.monotonic() > deadline:
                    break
                s.sendall(bytes([b]))
                time.sleep(0.5)
    except OSError:
        pass
    results.append(time.monotonic() - start)


def attack_bodies(env: dict[str, str]) -> dict[str, tuple[str, bytes, int]]:
    """name -> (path, body, expected status): bodies at the server's bounds (its defaults, or what env sets)
    and one past each."""
    bounds = load_settings(ExtenderSettings, env)
    max_body, max_nodes, max_depth = bounds.max_body_bytes, bounds.max_nodes, bounds.max_json_depth
    return {
        "filter full nodes": ("/filter", full_node_body(max_body, max_nodes), 200),
        "prioritize full nodes": ("/prioritize", full_node_body(max_body, max_nodes), 200),
        "explain full nodes": ("/debug/explain", full_node_body(max_body, max_nodes), 200),
        "filter max names": ("/filter", names_body(max_nodes), 200),
        "filter max depth": ("/filter", deep_body(max_depth), 200),
        "filter too deep": ("/filter", deep_body(max_depth + 1), 400),
        "filter too many names": ("/filter", names_body(max_nodes + 1), 400),
        "filter too big": ("/filter", b" " * (max_body + 1), 400),
    }


@dataclass
class Attack:
    """What one run saw: request latencies per body, wrong answers, /healthz times and RSS during the attack."""

    bodies: dict[str, tuple[str, bytes, int]]
    latencies: dict[str, list[float]] = field(default_factory=dict)
    wrong: list[str] = field(default_factory=list)
    health: list[float] = field(default_factory=list)
    idle: list[float] = field(default_factory=list)  # /healthz before the attack: what the machine gives anyway
    rss: list[float] = field(default_factory=list)
    slow: list[float] = field(default_factory=list)
    idle_rss: float = 0.0
    exit_code: int | None = None

    def attacker(self, port: int, offset: int, deadline: float) -> None:
        kinds = list(self.bodies)
        k = offset
        while time.monotonic() < deadline:
            name = kinds[k % len(kinds)]
            k += 1
            path, body, expect = self.bodies[name]
            t0 = time.perf_counter()
            try:
                status, _ = post(port, path, body)
            except OSError as exc:
                self.wrong.append(f"{name}: {exc}")
                continue
            self.latencies.setdefault(name, []).append(time.perf_counter() - t0)
            if status != expect:
                self.wrong.append(f"{name}: {status}")

    def prober(self, srv: ExtenderProcess, stop: threading.Event) -> None:
        while not stop.is_set():
            t0 = time.perf_counter()
            try:
                get(srv.admin_port, "/healthz", timeout=10)
                self.health.append(time.perf_counter() - t0)
            except OSError:
                self.health.append(10.0)
            self.rss.append(srv.rss_mib())
            time.sleep(0.05)

    def summary(self, seconds: float, heavy_clients: int) -> dict[str, Any]:
        health = sorted(self.health)
        latencies = {k: self.latencies.get(k, []) for k in self.bodies}
        return {
            "seconds": seconds, "heavy_clients": heavy_clients,
            "healthz_ms": {"n": len(health), "p50": 1000 * statistics.median(health) if health else None,
                           "p99": 1000 * health[int(0.99 * (len(health) - 1))] if health else None,
                           "max": 1000 * health[-1] if health else None},
            "healthz_idle_ms": {"p50": 1000 * statistics.median(self.idle), "max": 1000 * max(self.idle)},
            "rss_mib": {"idle": round(self.idle_rss, 1), "peak": round(max(self.rss, default=0.0), 1)},
            "slow_client_held_s": round(max(self.slow, default=0.0), 2),
            "requests": {k: {"n": len(v), "median_ms": round(1000 * statistics.median(v), 1) if v else None}
                         for k, v in latencies.items()},
            "body_bytes": {k: len(b) for k, (_, b, _) in self.bodies.items()},
            "wrong": self.wrong[:20],
            "exit_code": self.exit_code,
        }


def run(seconds: float = 20.0, heavy_clients: int = 2, env: dict[str, str] | None = None,
        report: Callable[[str], None] = print) -> dict[str, Any]:
    """Start the server, attack it for ``seconds``, return the figures."""
    env = {"KSO_HEADER_TIMEOUT_S": "2", "KSO_BODY_TIMEOUT_S": "5", **(env or {})}
    attack = Attack(attack_bodies(env))
    with ExtenderProcess(env=env) as srv:
        attack.idle_rss = srv.rss_mib()
        for _ in range(40):
            t0 = time.perf_counter()
            get(srv.admin_port, "/healthz")
            attack.idle.append(time.perf_counter() - t0)
            time.sleep(0.05)
        deadline = time.monotonic() + seconds
        stop = threading.Event()
        threads = [threading.Thread(target=attack.attacker, args=(srv.port, i * 3, deadline)) for i in range(heavy_clients)]
        threads += [threading.Thread(target=slow_client, args=(srv.port, deadline, attack.slow)) for _ in range(4)]
        probe = threading.Thread(target=attack.prober, args=(srv, stop))
        probe.start()
        for t in threads:
            t.start()
        for t in threads:
            t.join(seconds + 120)
        stop.set()
        probe.join(15)
        attack.exit_code = srv.stop()
    out = attack.summary(seconds, heavy_clients)
    report(json.dumps(out, indent=1))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--heavy-clients", type=int, default=2)
    a = p.parse_args(argv)
    run(a.seconds, a.heavy_clients)
    return 0


if __name__ == "__main__":
    sys.exit(main())
