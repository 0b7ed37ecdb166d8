"""A burst of binds through ``kso shadow`` at scale: NODES nodes of 4 cpus on the real control plane (etcd +
kube-apiserver), PODS pods bound with the Binding API at a target RATE binds/s, spread round-robin as
kube-scheduler's LeastAllocated spreads identical pods. The shadow runs in this process (kso's settings, no
Prometheus: node annotations, no outcomes) with its default judging queue; measured: binds judged and skipped, the
judge's time per bind, how long the queue took to drain, and kso's schedule (the most a node requested of its
allocatable, nodes past it, the nodes kso used).

    python -m benchmarks.shadow_burst --nodes 320 --pods 600 --rate 50
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from benchmarks.controlplane import ControlPlane
from benchmarks.e2e import create_nodes, node_manifest, pod_manifest


def main(argv: list[str] | None = None) -> int:
    from kubernetes import client

    from shadow.run import start

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=320)
    p.add_argument("--pods", type=int, default=600)
    p.add_argument("--rate", type=float, default=50.0, help="target binds per second")
    p.add_argument("--cpu", default="500m", help="each pod's cpu request")
    p.add_argument("--queue", type=int, default=0, help="KSO_SHADOW_QUEUE (default: the setting's default)")
    args = p.parse_args(argv)
    cp = ControlPlane().start()
    running = None
    try:
        api = cp.api_client()
        core = client.CoreV1Api(api)
        names = [f"node-{i:04d}" for i in range(args.nodes)]
        create_nodes(api, [node_manifest(n, "4", "16Gi") for n in names])
        core.create_namespace({"metadata": {"name": "burst"}})
        env = {"KSO_FORECAST_SOURCE": "NONE", "KSO_SHADOW_ADDRESS": "", "KSO_SHADOW_REPORT": os.devnull,
               **({"KSO_SHADOW_QUEUE": str(args.queue)} if args.queue else {})}
        running = start(env, api_client=cp.api_client(), sync_timeout_s=60)
        shadow = running.shadow
        pods = [f"p{i:05d}" for i in range(args.pods)]
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda n: core.create_namespaced_pod("burst", pod_manifest(
                n, cpu=args.cpu, memory="256Mi", scheduler="default-scheduler")), pods))
        deadline = time.monotonic() + 60
        while len(shadow.state.pending_pods()) < args.pods and time.monotonic() < deadline:
            time.sleep(0.2)
        cpu0 = time.process_time()
        t0 = time.monotonic()
        lock = threading.Lock()
        sent = [0]

        def bind(i: int) -> None:
            delay = t0 + i / args.rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            core.create_namespaced_binding("burst", {
                "apiVersion": "v1", "kind": "Binding", "metadata": {"name": pods[i]},
                "target": {"apiVersion": "v1", "kind": "Node", "name": names[i % len(names)]}}, _preload_content=False)
            with lock:
                sent[0] += 1

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(bind, range(args.pods)))
        bound_s = time.monotonic() - t0
        judged_all = shadow.wait_judged(args.pods - shadow.tally.skipped, 300)
        drained_s = time.monotonic() - t0
        cpu_s = time.process_time() - cpu0
        t = shadow.tally
        cf = shadow.counterfactual
        used = sum(1 for n in cf.nodes.values() if n.picked)
        peak = max((n.peak_share for n in cf.nodes.values()), default=0.0)
        seconds = t.judge_seconds / max(1, t.judged)
        print(f"queue {shadow.settings.queue}: {args.nodes} nodes, {args.pods} binds of {args.cpu} sent in {bound_s:.1f} s "
              f"({args.pods / bound_s:.1f} binds/s; target {args.rate:g}): seen {t.seen}, judged {t.judged}, "
              f"skipped {t.skipped} ({100 * t.skipped / max(1, t.seen):.1f} %), all judged: {judged_all}, queue "
              f"drained {drained_s:.1f} s after the first bind; judge {1000 * seconds:.1f} ms a bind (mean wall); "
              f"this process {cpu_s:.1f} s CPU (the binding client included); kso's schedule: {used} nodes used, "
              f"largest share of allocatable requested {peak:.0%}, nodes past allocatable {len(cf.over_alloc)}; "
              f"held {t.held}; load average {os.getloadavg()[0]:.1f}")
        return 0
    finally:
        if running is not None:
            running.close()
        cp.stop()


if __name__ == "__main__":
    sys.exit(main())
