"""The HTTP layer's CPU per request: the extender's server process answering filter and prioritize over a keep-alive
connection (as kube-scheduler calls it), served three ways, each in its own child process, alternated:

- ``fast``: what ``kso extender`` serves (extender/server.py's ``timed_protocol`` with ``answer_now``: small filter
  and prioritize bodies answered by the HTTP protocol itself, without uvicorn's per-request cycle and ASGI messages);
- ``timed``: the same protocol without ``answer_now`` (its deadlines and bounded headers only: uvicorn's ASGI path);
- ``plain``: uvicorn's own httptools protocol.

    python -m benchmarks.latency.http_path --nodes 100 --calls 3000 --rounds 2

The extender is ``benchmarks.latency.inprocess``' (e2e's nodes, no load statistics, 50 pods pre-parsed), the lists
kube-scheduler's (``benchmarks.latency.node_lists``). Reported: the child's own CPU (user + system, psutil) per
request over ``--calls`` filter + prioritize pairs, per mode and round, and the client's wall time per request
(which the load inflates: CPU is the figure).
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import orjson
import psutil

from kso.core.net import free_port

MODES = ("fast", "timed", "plain")
REPO = Path(__file__).resolve().parents[2]


def serve(mode: str, port: int, nodes: int) -> None:
    """The child: the extender's app on uvicorn, served ``mode``'s way, until killed."""
    import uvicorn

    from benchmarks.latency.inprocess import build, pods
    from extender.server import answer_now_routes, timed_protocol

    ext, app, _ = build(nodes, 5)
    for pod in pods(50):
        ext.pod_memo.parse(pod)
    if mode == "plain":
        http: object = "httptools"
    else:
        http = timed_protocol(10.0, 10.0, answer_now_routes(app) if mode == "fast" else None, 256 << 10)
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", log_config=None, access_log=False,
                            loop="uvloop", http=http, timeout_keep_alive=5, server_header=False, proxy_headers=False)
    uvicorn.Server(config).run()


def requests(nodes: int, count: int) -> list[bytes]:
    """``count`` filter + prioritize pairs as kube-scheduler sends them (each pod asked both with the same list)."""
    from benchmarks.e2e import bench_nodes
    from benchmarks.latency.inprocess import pods
    from benchmarks.latency.node_lists import node_lists

    names = [m["metadata"]["name"] for m in bench_nodes(nodes)]
    pending = pods(50)
    out = []
    for i, listed in enumerate(node_lists("kube-scheduler", names, count)):
        body = orjson.dumps({"Pod": pending[i % len(pending)], "Nodes": None, "NodeNames": listed})
        for verb in ("filter", "prioritize"):
            out.append(f"POST /{verb} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                       f"Accept: application/json\r\nUser-Agent: kube-scheduler/v1.36.2\r\n"
                       f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    return out


def call(sock: socket.socket, request: bytes) -> None:
    """Send one request and read its whole reply (Content-Length framed); raises unless it is a 200."""
    sock.sendall(request)
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, rest = data.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"unexpected reply {head[:60]!r}")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
    while len(rest) < length:
        rest += sock.recv(65536)


def measure(mode: str, nodes: int, reqs: list[bytes]) -> tuple[float, float]:
    """(child CPU us, client wall us) per request of ``mode``."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen([sys.executable, "-m", "benchmarks.latency.http_path", "--serve", mode, "--port",
                              str(port), "--nodes", str(nodes)], env=env)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=10)
                break
            except OSError:
                if time.monotonic() > deadline or child.poll() is not None:
                    raise RuntimeError(f"the {mode} server did not start") from None
                time.sleep(0.1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for request in reqs[:400]:  # warm
            call(sock, request)
        proc = psutil.Process(child.pid)
        before, t0 = proc.cpu_times(), time.perf_counter()
        for request in reqs:
            call(sock, request)
        after, wall = proc.cpu_times(), time.perf_counter() - t0
        sock.close()
        cpu = (after.user - before.user) + (after.system - before.system)
        return 1e6 * cpu / len(reqs), 1e6 * wall / len(reqs)
    finally:
        child.terminate()
        child.wait(30)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.latency.http_path", description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=100)
    p.add_argument("--calls", type=int, default=3000, help="filter + prioritize pairs per measurement")
    p.add_argument("--rounds", type=int, default=2, help="rounds of the modes, alternated")
    p.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    p.add_argument("--serve", choices=MODES, help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve:
        serve(args.serve, args.port, args.nodes)
        return 0
    reqs = requests(args.nodes, args.calls)
    print(f"load {os.getloadavg()[0]:.1f}; {args.nodes} nodes, {len(reqs)} requests per measurement", flush=True)
    for r in range(args.rounds):
        for mode in args.modes if r % 2 == 0 else list(reversed(args.modes)):
            cpu, wall = measure(mode, args.nodes, reqs)
            print(f"round {r + 1} {mode}: server CPU {cpu:.1f} us/request, client wall {wall:.1f} us/request, "
                  f"load {os.getloadavg()[0]:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
