"""Write kso/data/demo-cluster.json: the embedded demo cluster.

Node shapes and pod requests are real rows of Alibaba cluster-trace-gpu-v2023 ("openb", openb-*.csv in the folder
given as the first argument, else KSO_TRACE_DIR, else ../shared/data beside the checkout: forecasting.trace_dir); the
load statistics in the kube-safe-scheduler annotations are a synthetic join (seeded random utilisations), labelled as
such in the file. Re-run to regenerate.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

from forecasting.trace_dir import TraceFileMissing
from forecasting.traces import DATA_DIR
from optimizer.plan.openb import read_openb

DATA = Path(sys.argv[1]) if len(sys.argv) > 1 else DATA_DIR
OUT = Path(__file__).resolve().parents[1] / "kso" / "data" / "demo-cluster.json"
IMAGES = [("docker.io/library/nginx:1.27", 67_000_000), ("docker.io/library/redis:7.2", 117_000_000),
          ("docker.io/library/python:3.11", 1_020_000_000), ("registry.k8s.io/pause:3.10", 320_368),
          ("docker.io/library/busybox:1.36", 4_270_000)]


def main() -> None:
    rng = random.Random(2026)
    try:
        node_frame, pod_frame = read_openb(DATA)
    except TraceFileMissing as exc:
        sys.exit(f"make_demo_snapshot: {exc}")
    nodes_csv, pods_csv = node_frame.to_dict("records"), pod_frame.to_dict("records")
    picks = [r for r in nodes_csv if r["gpu"] == 0][:6] + [r for r in nodes_csv if r["gpu"] != 0][:10]
    items = []
    for i, r in enumerate(picks):
        name = f"demo-{i:02d}"
        cpu, mem_mib = int(r["cpu_milli"]), int(r["memory_mib"])
        ann = {"kso.io/source": f"openb {r['sn']}; load statistics: synthetic join"}
        if i not in (3, 11):  # two nodes without statistics: the safe agent must pass them unjudged
            u_cpu, u_mem = rng.uniform(0.15, 0.9), rng.uniform(0.2, 0.85)
            ann.update({
                "mean-free-cpu": str(round(cpu * (1 - u_cpu))), "std-free-cpu": str(round(cpu * rng.uniform(0.01, 0.12))),
                "mean-free-memory": str(round(mem_mib * (1 - u_mem))),
                "std-free-memory": str(round(mem_mib * rng.uniform(0.01, 0.08))),
            })
        if i % 4 == 1:
            ann["congestion-factor"] = str(rng.randint(5, 90))
        images = [{"names": [n], "sizeBytes": s} for n, s in IMAGES if rng.random() < 0.5 or "pause" in n]
        alloc = {"cpu": f"{cpu}m", "memory": f"{mem_mib}Mi", "pods": "110", "ephemeral-storage": "100Gi"}
        if r["gpu"] != 0:
            alloc["nvidia.com/gpu"] = str(r["gpu"])
        items.append({"apiVersion": "v1", "kind": "Node",
                      "metadata": {"name": name, "resourceVersion": "1", "annotations": ann,
                                   "labels": {"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": f"zone-{i % 3}"}},
                      "spec": {}, "status": {"allocatable": alloc, "capacity": alloc, "images": images}})
    for j, p in enumerate(pods_csv[:60]):
        node = items[j % len(picks)]["metadata"]["name"] if j < 24 else None
        spec = {"containers": [{"name": "main", "image": IMAGES[j % 3][0],
                                "resources": {"requests": {"cpu": f"{p['cpu_milli']}m", "memory": f"{p['memory_mib']}Mi"}}}]}
        if node:
            spec["nodeName"] = node
        items.append({"apiVersion": "v1", "kind": "Pod",
                      "metadata": {"name": p["name"], "namespace": "demo", "uid": f"demo-uid-{j:04d}",
                                   "ownerReferences": [{"kind": "ReplicaSet", "name": f"rs-{j % 7}", "controller": True}]},
                      "spec": spec, "status": {"phase": "Running" if node else "Pending"}})
    doc = {"apiVersion": "v1", "kind": "List",
           "metadata": {"annotations": {"kso.io/source": "nodes and pod requests: Alibaba cluster-trace-gpu-v2023 "
                                        "(openb, USENIX ATC 2023); load statistics: synthetic join"}},
           "items": items}
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {OUT}: {len(picks)} nodes, {len(items) - len(picks)} pods")


if __name__ == "__main__":
    main()
