"""``kso demo``: the extender on the embedded demo cluster, driven over real HTTP on 127.0.0.1 the way
kube-scheduler drives it (filter -> prioritize -> bind, NodeNames mode), for every pending pod."""

from __future__ import annotations

import platform
import statistics
import threading
import time
from importlib import resources
from typing import Any

import orjson
import uvicorn

from extender.app import create_app
from extender.client import ExtenderClient as Client  # the one extender client (tests import it from here too)
from extender.config import load_config
from extender.server import build
from kso.core.net import free_port
from kso.core.objects import pod_from_k8s
from kso.core.snapshot import DEMO_SNAPSHOT


class BackgroundServer:
    """uvicorn in a thread, for demos, tests and benchmarks on loopback."""

    def __init__(self, app: Any, port: int = 0) -> None:
        self.port = port or free_port()
        cfg = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", access_log=False,
                             loop="uvloop", http="httptools")
        self.server = uvicorn.Server(cfg)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> BackgroundServer:
        self.thread.start()
        deadline = time.time() + 20
        while not self.server.started:
            if time.time() > deadline or not self.thread.is_alive():
                raise RuntimeError("extender did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def _req(pod: dict[str, Any]) -> tuple[str, str]:
    req = pod["spec"]["containers"][0]["resources"]["requests"]
    return req["cpu"], req["memory"]


def run_demo(port: int = 0, plan_file: str | None = None) -> int:
    doc = orjson.loads(resources.files("kso.data").joinpath(DEMO_SNAPSHOT).read_bytes())
    pending = [o for o in doc["items"] if o.get("kind") == "Pod" and not o["spec"].get("nodeName")]
    env = {"KSO_CLUSTER_SOURCE": "DEMO", "LOG_LEVEL": "WARNING"}
    if plan_file:
        env["KSO_PLAN_FILE"] = plan_file  # build() loads it: prioritize ranks the plan's nodes first
    config = load_config(env)
    running = build(config)
    names = running.extender.state.node_names()
    print("kso demo: the extender on the embedded demo cluster "
          f"({len(names)} nodes; {doc['metadata']['annotations']['kso.io/source']})")
    print(f"agents {list(running.extender.agents)}, weights {running.extender.weights}\n")
    rows = []
    with BackgroundServer(create_app(running.extender), port) as srv:
        client = Client(srv.port)
        state = running.extender.state
        for pod in pending:
            # kube-scheduler's in-tree NodeResourcesFit runs before any extender: only nodes where the
            # requests fit reach kso.
            info = pod_from_k8s(pod)
            view = state.view(names)
            free = view.alloc - view.requested
            fits = [n for i, n in enumerate(names)
                    if all(free[i, view.columns[r]] >= v for r, v in info.requests.items() if r in view.columns)]
            if not fits:
                rows.append((pod["metadata"]["name"], *_req(pod), 0, 0, "(none)", "", "", "no node fits its requests"))
                continue
            _, flt = client.post("/filter", {"Pod": pod, "NodeNames": fits})
            passed = flt["NodeNames"]
            scores: list[dict[str, Any]] = []
            if len(passed) > 1:
                _, scores = client.post("/prioritize", {"Pod": pod, "NodeNames": passed})
            best: dict[str, Any] | None = max(scores, key=lambda s: s["Score"]) if scores else None
            if best is None and passed:
                best = {"Host": passed[0], "Score": "-"}  # one feasible node: the scheduler skips prioritize
            bound = ""
            if best:
                _, b = client.post("/bind", {"PodName": pod["metadata"]["name"], "PodNamespace": "demo",
                                             "PodUID": pod["metadata"]["uid"], "Node": best["Host"]})
                bound = "recorded" if not b["Error"] else b["Error"]
            why = next(iter(flt["FailedNodes"].values()), "")
            rows.append((pod["metadata"]["name"], *_req(pod), len(passed), len(flt["FailedNodes"]),
                         best["Host"] if best else "(none)", best["Score"] if best else "", bound, why))
        last = pending[-1]
        _, explain = client.post("/debug/explain", {"Pod": last, "NodeNames": names})
        _, metrics = client.get("/metrics")
        lat = {p: statistics.median(v) * 1e3 for p, v in client.latencies.items()}
    print(f"{'pod':<16}{'cpu':>8}{'memory':>10}{'pass':>6}{'fail':>6}  {'node':<9}{'score':>6}  bind"
          "   (pass/fail: of the nodes where the requests fit)")
    for r in rows:
        print(f"{r[0]:<16}{r[1]:>8}{r[2]:>10}{r[3]:>6}{r[4]:>6}  {r[5]:<9}{r[6]!s:>6}  {r[7]}")
        if r[8]:
            print(f"{'':<16}e.g. {r[8][:110]}")
    print(f"\nkso's ranking of all nodes for {explain['pod']} (GET/POST /debug/explain; in-tree filters not applied),"
          " top 3:")
    for n in explain["nodes"][:3]:
        verdict = "passed" if n["passed"] else "rejected"
        print(f"  {n['node']}: {verdict}, score {n['score']} (weighted mean {n['weighted_mean']}), {n['scores']}")
    print("\nmedian latency over loopback, client side (ms): "
          + ", ".join(f"{p} {v:.2f}" for p, v in lat.items()))
    print(f"machine: {platform.machine()} {platform.processor() or ''} python {platform.python_version()}")
    failed_lines = [ln for ln in metrics.decode().splitlines()
                    if ln.startswith(("kso_extender_nodes_filtered_total", "kso_plan_decisions_total"))]
    print("metrics: " + "; ".join(failed_lines))
    print("\nbindings were recorded in kso's cache only (no API server in demo mode)")
    return 0
