"""Latency and throughput of the real extender server over loopback, as kube-scheduler drives it.

    python -m benchmarks.latency [--nodes 100,500,5000] [--modes names,full] [--verbs filter,prioritize]
                                 [--node-sets sample,all] [--requests N] [--max-cell-seconds S]
                                 [--concurrency C] [--agents safe,pigeon,...] [--py-spy DIR]
    python -m benchmarks.latency --duration 600 [--rate 2000] [--soak-nodes 500] [--soak-clients 4]
    python -m benchmarks.latency --compare-tree DIR [--nodes 500,5000] [--modes names] [--rounds 6] ...

Before / after in one run (``--compare-tree DIR``, e.g. a ``git worktree add DIR <commit>``): the same
cluster is served by two servers at once, this checkout's and DIR's (each ``python -m kso.cli extender``
run from its own tree), and every cell is measured on both, alternating in ABBA rounds so that the
machine's noise falls on both alike. Reported: the median over rounds of p50 / p99 / calls/s, per tree.
Before that, both trees answer the same sequence of requests in-process (their ASGI apps, the plan
switched off so that no background solve can change a score) and the status, headers and body of every
reply are compared byte for byte: every cell's bodies, the per-agent routes, /preempt, /debug/explain,
and a set of malformed requests.

What runs where
  * The server is the real thing, in its own process (no shared GIL with the client):
    ``python -m kso.cli extender --snapshot <tmp> --host 127.0.0.1 --port <free>`` with
    ``LOG_LEVEL=WARNING`` and one uvicorn worker; the benchmark waits for ``/readyz``.
  * The snapshot is a generated cluster of N nodes shaped as the API server returns them (labels with
    topology / instance type, 10-40 images with digests and sizes, conditions, managedFields, addresses,
    nodeInfo, kube-safe-scheduler's ``mean-free-*`` / ``std-free-*`` annotations, ``congestion-factor`` on
    some), capacities drawn from the Alibaba openb trace (``openb-nodes.csv``), and up to 10 bound pods per
    node (~8 on average: the trace pods are large) with requests from ``openb-pods-cpu.csv`` (first fit).
    Load statistics in the annotations are a synthetic join (utilisation drawn around the requested
    share): the trace has no usage.
  * Requests carry realistic pending Pods (init container, three containers, requests and limits, env,
    volume mounts, probes, tolerations, node and pod affinity, topology spread), each call with a fresh
    UID, in both modes: ``NodeNames`` (nodeCacheCapable: true) and full ``Nodes.items`` (false; the same
    Node objects as the snapshot, so the node cache is not rewritten).
  * Node sets: ``all`` sends every node; ``sample`` sends kube-scheduler's sample of feasible nodes
    (numFeasibleNodesToFind: all below 100 nodes, else max(100, N * max(5, 50 - N/125) / 100); 5000 -> 500),
    from a rotating start. Prioritize bodies carry the nodes that passed the server's own filter of
    that set (as kube-scheduler does); ``all`` for prioritize is the worst case, every node.
  * The client is a raw-socket HTTP/1.1 keep-alive client, one in-flight call per connection, like
    kube-scheduler's single scheduling loop (``--concurrency`` adds client processes).

Reported per cell: p50 / p99 / max client-side latency, calls/s, the server's own mean from its
``kso_extender_request_duration_seconds`` histogram, calls over kube-scheduler's default 5 s
httpTimeout, errors (non-200, timeouts, a non-empty ``Error``, server error counters), and the
server's RSS before and after. The aims (from the issue) are checked, not asserted: NodeNames at 500
nodes p99 < 1.5 ms and > 1,000 calls/s for filter and prioritize; at 5,000 nodes p99 < 10 ms.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import importlib.metadata
import math
import multiprocessing as mp
import os
import platform
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import psutil

DATA = Path(os.environ.get("KSO_TRACE_DIR", "/work/shared/data"))
OPENB_NODES = DATA / "openb-nodes.csv"
OPENB_PODS = DATA / "openb-pods-cpu.csv"
REPO = Path(__file__).resolve().parents[1]

HTTP_TIMEOUT_S = 5.0  # kube-scheduler's default extender httpTimeout
DEFAULT_MAX_BODY = 1024 * 1024  # the server's KSO_MAX_BODY_BYTES default (extender/config.py)
UID_PLACEHOLDER = "ffffffff-ffff-4fff-bfff-ffffffffffff"
AIM_500 = (1.5, 1000.0)  # p99 ms, calls/s (NodeNames, 500 nodes)
AIM_5000_P99 = 10.0
CREATED = "2026-03-02T08:14:51Z"
HEARTBEAT = "2026-05-11T09:31:07Z"
ZONES = ("eu-west-1a", "eu-west-1b", "eu-west-1c")
REGION = "eu-west-1"


# ---- machine ------------------------------------------------------------------------------------------

def machine_info() -> list[str]:
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = []
    for pkg in ("uvicorn", "fastapi", "starlette", "orjson", "numpy", "uvloop", "httptools"):
        try:
            versions.append(f"{pkg} {importlib.metadata.version(pkg)}")
        except importlib.metadata.PackageNotFoundError:
            versions.append(f"{pkg} -")
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = os.cpu_count() or 0
    load = os.getloadavg()
    mem = psutil.virtual_memory()
    return [
        f"platform  {platform.platform()}",
        f"cpu       {cpu}; {os.cpu_count()} logical cores ({affinity} usable); "
        f"{mem.total / 2**30:.1f} GiB RAM",
        f"python    {platform.python_version()} ({platform.python_implementation()}); " + ", ".join(versions),
        f"load avg  {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at start: a shared, noisy machine "
        "(other jobs run beside this one); read the numbers as indicative, p99/max especially",
    ]


# ---- the generated cluster ---------------------------------------------------------------------------

@dataclass(slots=True)
class Image:
    repo: str
    tag: str
    size: int

    @property
    def ref(self) -> str:
        return f"{self.repo}:{self.tag}"

    @property
    def digest(self) -> str:
        return f"{self.repo}@sha256:{hashlib.sha256(self.ref.encode()).hexdigest()}"


SYSTEM_IMAGES = (
    Image("registry.k8s.io/pause", "3.10", 320_368),
    Image("registry.k8s.io/kube-proxy", "v1.36.2", 30_112_447),
    Image("docker.io/calico/node", "v3.29.1", 146_823_014),
    Image("docker.io/calico/cni", "v3.29.1", 94_535_301),
    Image("quay.io/prometheus/node-exporter", "v1.8.2", 11_728_443),
    Image("public.ecr.aws/ebs-csi-driver/aws-ebs-csi-driver", "v1.37.0", 32_998_117),
    Image("cr.fluentbit.io/fluent/fluent-bit", "3.1.9", 38_012_330),
)
SIDECAR = Image("docker.io/istio/proxyv2", "1.24.2", 97_458_012)
INIT = Image("docker.io/library/busybox", "1.36", 2_159_993)


def app_catalog(rng: random.Random, n: int = 160) -> list[Image]:
    base = [("docker.io/library/nginx", "1.27.3"), ("docker.io/library/redis", "7.4.1"),
            ("docker.io/library/postgres", "16.6"), ("docker.io/bitnami/kafka", "3.9.0"),
            ("docker.io/library/python", "3.12-slim"), ("gcr.io/distroless/java21-debian12", "nonroot"),
            ("docker.io/grafana/grafana", "11.4.0"), ("quay.io/jetstack/cert-manager-controller", "v1.16.2"),
            ("docker.io/library/busybox", "1.36"), ("docker.io/istio/proxyv2", "1.24.2")]
    out = [Image(r, t, int(math.exp(rng.uniform(math.log(8e6), math.log(9e8))))) for r, t in base]
    for i in range(n - len(base)):
        team, svc = i % 23, i
        out.append(Image(f"123456789012.dkr.ecr.{REGION}.amazonaws.com/team-{team:02d}/svc-{svc:03d}",
                         f"v{rng.randint(1, 4)}.{rng.randint(0, 40)}.{rng.randint(0, 9)}-{rng.getrandbits(28):07x}",
                         int(math.exp(rng.uniform(math.log(5e6), math.log(1.6e9))))))
    return out


def read_csv(path: Path) -> list[dict[str, str]]:
    lines = path.read_text().splitlines()
    header = lines[0].split(",")
    return [dict(zip(header, ln.split(","), strict=False)) for ln in lines[1:] if ln]


def _managed_fields(name: str, stat_keys: Sequence[str]) -> list[dict[str, Any]]:
    conditions: dict[str, Any] = {f'k:{{"type":"{t}"}}': {".": {}, "f:lastHeartbeatTime": {}, "f:lastTransitionTime": {},
                                          "f:message": {}, "f:reason": {}, "f:status": {}, "f:type": {}}
                  for t in ("DiskPressure", "MemoryPressure", "PIDPressure", "Ready")}
    return [
        {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": CREATED, "fieldsType": "FieldsV1",
         "fieldsV1": {"f:metadata": {"f:annotations": {".": {}, "f:alpha.kubernetes.io/provided-node-ip": {},
                                                       "f:volumes.kubernetes.io/controller-managed-attach-detach": {}},
                                     "f:labels": {".": {}, "f:beta.kubernetes.io/arch": {}, "f:beta.kubernetes.io/os": {},
                                                  "f:kubernetes.io/arch": {}, "f:kubernetes.io/hostname": {},
                                                  "f:kubernetes.io/os": {}, "f:node.kubernetes.io/instance-type": {},
                                                  "f:topology.kubernetes.io/region": {},
                                                  "f:topology.kubernetes.io/zone": {}}},
                      "f:spec": {"f:providerID": {}}}},
        {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1", "time": CREATED,
         "fieldsType": "FieldsV1",
         "fieldsV1": {"f:metadata": {"f:annotations": {"f:node.alpha.kubernetes.io/ttl": {}}},
                      "f:spec": {"f:podCIDR": {}, "f:podCIDRs": {".": {}, 'v:"10.244.0.0/24"': {}}}}},
        {"manager": "kube-safe-scheduler-annotator", "operation": "Update", "apiVersion": "v1", "time": HEARTBEAT,
         "fieldsType": "FieldsV1",
         "fieldsV1": {"f:metadata": {"f:annotations": {f"f:{k}": {} for k in stat_keys}}}},
        {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": HEARTBEAT, "fieldsType": "FieldsV1",
         "subresource": "status",
         "fieldsV1": {"f:status": {"f:allocatable": {"f:ephemeral-storage": {}, "f:memory": {}},
                                   "f:capacity": {"f:ephemeral-storage": {}, "f:memory": {}},
                                   "f:conditions": conditions, "f:daemonEndpoints": {"f:kubeletEndpoint": {"f:Port": {}}},
                                   "f:images": {}, "f:nodeInfo": {"f:bootID": {}, "f:kubeletVersion": {}},
                                   "f:addresses": {}}}},
    ]


def _node_name(i: int) -> str:
    return f"ip-10-{16 + i // 65536}-{(i // 256) % 256}-{i % 256}.{REGION}.compute.internal"


@dataclass
class Cluster:
    nodes: list[dict[str, Any]]
    pods: list[dict[str, Any]]
    order: list[str]  # node names in the order kube-scheduler lists them (zone-interleaved, shuffled)
    catalog: list[Image]

    def snapshot(self) -> bytes:
        return orjson.dumps({"nodes": self.nodes, "pods": self.pods})


def make_cluster(n: int, seed: int, pods_per_node: int = 10) -> Cluster:
    rng = random.Random(seed * 1_000_003 + n)
    node_rows = read_csv(OPENB_NODES)
    pod_rows = read_csv(OPENB_PODS)
    catalog = app_catalog(random.Random(seed))
    weights = [1.0 / (r + 1) ** 0.8 for r in range(len(catalog))]
    nodes: list[dict[str, Any]] = []
    pods: list[dict[str, Any]] = []
    for i in range(n):
        row = rng.choice(node_rows)
        name = _node_name(i)
        cpu_m, mem_mi, gpu = int(row["cpu_milli"]), int(row["memory_mib"]), int(row["gpu"] or 0)
        zone = ZONES[i % len(ZONES)]
        itype = {0: "m6i", 2: "g5", 4: "g5", 8: "p4d"}.get(gpu, "g5")
        itype = f"{itype}.{ {16000: '4xlarge', 32000: '8xlarge', 64000: '16xlarge', 96000: '24xlarge'}.get(cpu_m, 'metal')}"
        alloc_cpu = cpu_m - 100 - cpu_m // 100
        alloc_mem_ki = mem_mi * 1024 - 1_048_576 - mem_mi * 10
        capacity = {"cpu": str(cpu_m // 1000), "ephemeral-storage": "524275692Ki", "hugepages-1Gi": "0",
                    "hugepages-2Mi": "0", "memory": f"{mem_mi * 1024}Ki", "pods": "110"}
        allocatable = {**capacity, "cpu": f"{alloc_cpu}m", "ephemeral-storage": "483173140299",
                       "memory": f"{alloc_mem_ki}Ki"}
        if gpu:
            capacity["nvidia.com/gpu"] = allocatable["nvidia.com/gpu"] = str(gpu)
        # ~10 bound pods, first fit on requests
        used_cpu = used_mem = 0.0
        bound = 0
        for _ in range(pods_per_node * 8):
            if bound >= pods_per_node:
                break
            pr = rng.choice(pod_rows)
            pc, pm = int(pr["cpu_milli"] or 0), int(pr["memory_mib"] or 0)
            if used_cpu + pc > alloc_cpu or used_mem + pm * 1024 > alloc_mem_ki:
                continue
            used_cpu += pc
            used_mem += pm * 1024
            pods.append(_bound_pod(pr["name"], i, bound, name, pc, pm, catalog[int(rng.paretovariate(1.2)) % len(catalog)]))
            bound += 1
        # kube-safe-scheduler annotations: a synthetic join of load around the requested share
        annotations = {"alpha.kubernetes.io/provided-node-ip": f"10.{16 + i // 65536}.{(i // 256) % 256}.{i % 256}",
                       "csi.volume.kubernetes.io/nodeid": f'{{"ebs.csi.aws.com":"i-0{rng.getrandbits(64):016x}"}}',
                       "node.alpha.kubernetes.io/ttl": "0",
                       "volumes.kubernetes.io/controller-managed-attach-detach": "true"}
        stat_keys: list[str] = []
        if rng.random() > 0.04:  # a few nodes the annotator has not reached yet
            u_cpu = min(0.97, max(0.02, used_cpu / alloc_cpu * rng.uniform(0.3, 0.85) + rng.gauss(0.03, 0.05)))
            u_mem = min(0.97, max(0.02, used_mem / alloc_mem_ki * rng.uniform(0.5, 1.0) + rng.gauss(0.05, 0.05)))
            stats = {"mean-free-cpu": f"{alloc_cpu * (1 - u_cpu):.2f}",
                     "std-free-cpu": f"{alloc_cpu * rng.uniform(0.01, 0.09):.2f}",
                     "mean-free-memory": f"{alloc_mem_ki / 1024 * (1 - u_mem):.2f}",
                     "std-free-memory": f"{alloc_mem_ki / 1024 * rng.uniform(0.005, 0.05):.2f}"}
            if rng.random() < 0.3:
                stats["congestion-factor"] = str(rng.randint(0, 100))
            annotations.update(stats)
            stat_keys = list(stats)
        images = list(SYSTEM_IMAGES)
        for img in rng.choices(catalog, weights=weights, k=rng.randint(3, 33)):
            if img not in images:
                images.append(img)
        labels = {"beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/instance-type": itype,
                  "beta.kubernetes.io/os": "linux", "failure-domain.beta.kubernetes.io/region": REGION,
                  "failure-domain.beta.kubernetes.io/zone": zone, "kubernetes.io/arch": "amd64",
                  "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                  "node.kubernetes.io/instance-type": itype, "topology.kubernetes.io/region": REGION,
                  "topology.kubernetes.io/zone": zone, "topology.ebs.csi.aws.com/zone": zone,
                  "eks.amazonaws.com/nodegroup": f"ng-{itype.replace('.', '-')}",
                  "eks.amazonaws.com/capacityType": "SPOT" if i % 5 == 0 else "ON_DEMAND",
                  "k8s.io/cloud-provider-aws": "3b3c8f1d2e6a4b0c9d7e5f1a2b3c4d5e"}
        spec: dict[str, Any] = {"podCIDR": f"10.244.{i % 256}.0/24", "podCIDRs": [f"10.244.{i % 256}.0/24"],
                                "providerID": f"aws:///{zone}/i-0{rng.getrandbits(64):016x}"}
        if gpu:
            spec["taints"] = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
        conditions = [
            {"type": t, "status": "False", "lastHeartbeatTime": HEARTBEAT, "lastTransitionTime": CREATED,
             "reason": r, "message": m}
            for t, r, m in (("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                            ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                            ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"))
        ] + [{"type": "Ready", "status": "True", "lastHeartbeatTime": HEARTBEAT, "lastTransitionTime": CREATED,
              "reason": "KubeletReady", "message": "kubelet is posting ready status"}]
        nodes.append({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "uid": f"{rng.getrandbits(128):032x}", "resourceVersion": str(100_000 + i),
                         "creationTimestamp": CREATED, "labels": labels, "annotations": annotations,
                         "managedFields": _managed_fields(name, stat_keys)},
            "spec": spec,
            "status": {
                "capacity": capacity, "allocatable": allocatable, "conditions": conditions,
                "addresses": [{"type": "InternalIP", "address": annotations["alpha.kubernetes.io/provided-node-ip"]},
                              {"type": "InternalDNS", "address": name}, {"type": "Hostname", "address": name}],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                "nodeInfo": {"machineID": f"{rng.getrandbits(128):032x}", "systemUUID": f"ec2{rng.getrandbits(100):025x}",
                             "bootID": f"{rng.getrandbits(128):032x}", "kernelVersion": "6.1.119-129.201.amzn2023.x86_64",
                             "osImage": "Amazon Linux 2023.6.20241212", "containerRuntimeVersion": "containerd://1.7.23",
                             "kubeletVersion": "v1.36.2", "kubeProxyVersion": "", "operatingSystem": "linux",
                             "architecture": "amd64"},
                "images": [{"names": [img.digest, img.ref], "sizeBytes": img.size} for img in images],
            },
        })
    order = [str(nd["metadata"]["name"]) for nd in nodes]
    rng.shuffle(order)
    return Cluster(nodes, pods, order, catalog)


def _bound_pod(trace_name: str, node_i: int, j: int, node: str, cpu_m: int, mem_mi: int, image: Image) -> dict[str, Any]:
    requests: dict[str, str] = {}
    if cpu_m:
        requests["cpu"] = f"{cpu_m}m"
    if mem_mi:
        requests["memory"] = f"{mem_mi}Mi"
    app = trace_name.replace("openb-pod-", "job-")
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{app}-{node_i:05d}{j:02d}", "namespace": f"team-{node_i % 17:02d}",
                     "uid": f"{node_i:08x}-{j:04x}-4000-8000-{hashlib.md5(node.encode()).hexdigest()[:12]}",
                     "resourceVersion": str(200_000 + node_i * 16 + j), "labels": {"app": app},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{app}-7d9f8b6c5",
                                          "uid": f"{node_i:08x}-0000-4000-8000-000000000000", "controller": True,
                                          "blockOwnerDeletion": True}]},
        "spec": {"nodeName": node, "schedulerName": "default-scheduler", "priority": 0,
                 "containers": [{"name": "main", "image": image.ref, "resources": {"requests": requests}}]},
        "status": {"phase": "Running", "qosClass": "Burstable"},
    }


def pending_pod(rng: random.Random, catalog: Sequence[Image], k: int, pod_rows: Sequence[dict[str, str]]) -> dict[str, Any]:
    """A pending Pod as kube-scheduler sends it (like the captured fixtures' ``multi`` pod, larger)."""
    row = rng.choice([r for r in pod_rows if 0 < int(r["cpu_milli"] or 0) <= 16000])
    cpu_m, mem_mi = int(row["cpu_milli"]), max(int(row["memory_mib"] or 0), 256)
    app_img = catalog[int(rng.paretovariate(1.0)) % 30]
    app = f"svc-{k:03d}"
    rs = f"{rng.getrandbits(40):010x}"[:10]
    name = f"{app}-{rs}-{rng.getrandbits(25):05x}"[:40]
    token = f"kube-api-access-{rng.getrandbits(20):05x}"
    mounts = [{"name": token, "readOnly": True, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]
    common = {"terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
              "imagePullPolicy": "IfNotPresent"}
    env = [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
           {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}},
           {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "spec.nodeName"}}},
           {"name": "LOG_LEVEL", "value": "info"}, {"name": "JAVA_TOOL_OPTIONS", "value": "-XX:MaxRAMPercentage=75"},
           {"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": f"{app}-db", "key": "password"}}},
           {"name": "FEATURE_FLAGS", "valueFrom": {"configMapKeyRef": {"name": f"{app}-config", "key": "flags"}}}]
    probe = {"httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"}, "initialDelaySeconds": 5,
             "timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3}
    return {
        "metadata": {
            "name": name, "generateName": f"{app}-{rs}-", "namespace": f"team-{k % 17:02d}", "uid": UID_PLACEHOLDER,
            "resourceVersion": str(900_000 + k), "generation": 1, "creationTimestamp": HEARTBEAT,
            "labels": {"app": app, "app.kubernetes.io/name": app, "pod-template-hash": rs, "version": "v2",
                       "security.istio.io/tlsMode": "istio"},
            "annotations": {"kubectl.kubernetes.io/default-container": "app", "prometheus.io/scrape": "true",
                            "prometheus.io/port": "9090", "sidecar.istio.io/status": '{"initContainers":null,'
                            '"containers":["istio-proxy"],"volumes":["istio-envoy","istio-data"],"revision":"default"}'},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{app}-{rs}",
                                 "uid": f"{rng.getrandbits(128):032x}", "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": {
            "volumes": [
                {"name": "istio-envoy", "emptyDir": {"medium": "Memory"}},
                {"name": "config", "configMap": {"name": f"{app}-config", "defaultMode": 420}},
                {"name": token, "projected": {"defaultMode": 420, "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1",
                                                                                   "fieldPath": "metadata.namespace"}}]}}]}},
            ],
            "initContainers": [{"name": "migrate", "image": INIT.ref,
                                "command": ["sh", "-c", "until nc -z db 5432; do sleep 1; done"],
                                "resources": {"requests": {"cpu": "1", "memory": "64Mi"},
                                              "limits": {"cpu": "1", "memory": "128Mi"}},
                                "volumeMounts": mounts, **common}],
            "containers": [
                {"name": "app", "image": app_img.ref, "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"},
                                                                {"name": "metrics", "containerPort": 9090, "protocol": "TCP"}],
                 "env": env, "resources": {"requests": {"cpu": f"{cpu_m}m", "memory": f"{mem_mi}Mi"},
                                           "limits": {"cpu": f"{cpu_m * 2}m", "memory": f"{mem_mi}Mi"}},
                 "volumeMounts": [{"name": "config", "mountPath": "/etc/app"}, *mounts],
                 "livenessProbe": probe, "readinessProbe": {**probe, "initialDelaySeconds": 2}, **common},
                {"name": "istio-proxy", "image": SIDECAR.ref,
                 "args": ["proxy", "sidecar", "--domain", "$(POD_NAMESPACE).svc.cluster.local"],
                 "env": env[:3], "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                                               "limits": {"cpu": "2", "memory": "1Gi"}},
                 "volumeMounts": [{"name": "istio-envoy", "mountPath": "/etc/istio/proxy"}, *mounts], **common},
                {"name": "log-shipper", "image": SYSTEM_IMAGES[6].ref, "resources": {"requests": {"cpu": "50m", "memory": "32Mi"},
                                                                                    "limits": {"memory": "64Mi"}},
                 "volumeMounts": mounts, **common},
            ],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "serviceAccountName": app, "serviceAccount": app, "securityContext": {"runAsNonRoot": True, "fsGroup": 2000},
            "schedulerName": "default-scheduler", "priority": 0, "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
            "affinity": {
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": list(ZONES)},
                                          {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}]}},
                "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 100, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": app}},
                                                        "topologyKey": "kubernetes.io/hostname"}}]},
            },
            "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                           "whenUnsatisfiable": "ScheduleAnyway",
                                           "labelSelector": {"matchLabels": {"app": app}}}],
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "dedicated", "operator": "Equal", "value": "batch", "effect": "NoSchedule"},
            ],
        },
        "status": {"phase": "Pending", "qosClass": "Burstable"},
    }


def sample_size(n: int) -> int:
    """kube-scheduler's numFeasibleNodesToFind with the default percentageOfNodesToScore (adaptive)."""
    if n < 100:
        return n
    pct = max(5, 50 - n // 125)
    return min(n, max(100, n * pct // 100))


# ---- the server ---------------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tree_env(tree: Path, **extra: str) -> dict[str, str]:
    """The environment of a process that must import kso from ``tree`` (run with cwd=tree)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **extra}
    env["PYTHONPATH"] = os.pathsep.join([str(tree), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
    return env


class Server:
    """``python -m kso.cli extender`` in its own process, on a snapshot file, from ``tree`` (this checkout
    by default)."""

    def __init__(self, snapshot: Path, agents: str | None, max_body: int, log: Path, tree: Path = REPO) -> None:
        self.port = free_port()
        env = tree_env(tree, LOG_LEVEL="WARNING")
        if max_body > DEFAULT_MAX_BODY:
            env["KSO_MAX_BODY_BYTES"] = str(max_body)
        cmd = [sys.executable, "-m", "kso.cli", "extender", "--snapshot", str(snapshot), "--host", "127.0.0.1",
               "--port", str(self.port)]
        if agents:
            cmd += ["--agents", agents]
        self.cmd = cmd
        self.tree = tree
        self.log_path = log
        self._log = log.open("wb")
        self.proc = subprocess.Popen(cmd, cwd=tree, env=env, stdout=self._log, stderr=subprocess.STDOUT)
        self.ps = psutil.Process(self.proc.pid)

    def wait_ready(self, timeout: float = 300.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}: {self.log_path.read_text()[-2000:]}")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                conn.request("GET", "/readyz")
                resp = conn.getresponse()
                body = resp.read()
                conn.close()
                if resp.status == 200:
                    return dict(orjson.loads(body))
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError("server not ready in time")

    def rss(self) -> int:
        return int(self.ps.memory_info().rss)

    def metrics(self) -> dict[str, float]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
        conn.close()
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line.startswith("kso_extender_request_duration_seconds_sum") or \
               line.startswith("kso_extender_request_duration_seconds_count") or \
               line.startswith("kso_extender_errors_total"):
                key, _, value = line.rpartition(" ")
                out[key] = float(value)
        return out

    def stop(self) -> None:
        try:
            children = self.ps.children(recursive=True)
        except psutil.Error:
            children = []
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        # The extender's plan solver pool (a spawned process) outlives a SIGTERMed server, idle but forever:
        # end this server's own children so repeated runs do not pile them up.
        for child in children:
            try:
                child.terminate()
            except psutil.Error:
                pass
        _, alive = psutil.wait_procs(children, timeout=5)
        for child in alive:
            try:
                child.kill()
            except psutil.Error:
                pass
        self._log.close()


def server_delta(before: dict[str, float], after: dict[str, float], verb: str) -> tuple[float, float]:
    """(server mean ms for the verb, server-side error count) between two /metrics scrapes."""
    s_key = f'kso_extender_request_duration_seconds_sum{{verb="{verb}"}}'
    c_key = f'kso_extender_request_duration_seconds_count{{verb="{verb}"}}'
    n = after.get(c_key, 0.0) - before.get(c_key, 0.0)
    mean = (after.get(s_key, 0.0) - before.get(s_key, 0.0)) / n * 1e3 if n else math.nan
    errors = sum(v - before.get(k, 0.0) for k, v in after.items() if k.startswith("kso_extender_errors_total"))
    return mean, errors


# ---- the client ---------------------------------------------------------------------------------------

@dataclass(slots=True)
class Body:
    """One request body with the pod UID left out, so every call can send a fresh UID."""

    path: str
    head: bytes
    tail: bytes
    nodes_sent: int

    def __len__(self) -> int:
        return len(self.head) + len(self.tail) + len(UID_PLACEHOLDER)


def make_body(path: str, doc: dict[str, Any], nodes_sent: int) -> Body:
    raw = orjson.dumps(doc)
    marker = UID_PLACEHOLDER.encode()
    at = raw.index(marker)
    assert raw.count(marker) == 1
    return Body(path, raw[:at], raw[at + len(marker):], nodes_sent)


class CallError(Exception):
    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


class RawClient:
    """A minimal HTTP/1.1 keep-alive client on a raw socket: one request in flight, Content-Length
    framed replies (what uvicorn sends for these routes). Far less client overhead than http.client."""

    _status = re.compile(rb"HTTP/1\.[01] (\d{3})")

    def __init__(self, port: int, timeout: float) -> None:
        self.port = port
        self.timeout = timeout
        self.sock: socket.socket | None = None
        self.seq = 0
        self.prefix = f"{os.getpid() & 0xFFFF:04x}"

    def connect(self) -> socket.socket:
        s = socket.create_connection(("127.0.0.1", self.port), timeout=self.timeout)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = s
        return s

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def next_uid(self) -> bytes:
        self.seq += 1
        h = f"{self.prefix}{self.seq:028x}"
        return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-8{h[17:20]}-{h[20:32]}".encode()

    def post(self, body: Body) -> tuple[int, bytes]:
        s = self.sock or self.connect()
        uid = self.next_uid()
        header = (f"POST {body.path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\nContent-Type: application/json\r\n"
                  f"Accept: application/json\r\nUser-Agent: kube-scheduler/v1.36.2 (benchmark)\r\n"
                  f"Content-Length: {len(body)}\r\n\r\n").encode()
        try:
            if len(body) < 1 << 20:
                s.sendall(b"".join((header, body.head, uid, body.tail)))
            else:
                for part in (header, body.head, uid, body.tail):
                    s.sendall(part)
            return self._read(s)
        except TimeoutError:
            self.close()
            raise CallError("timeout") from None
        except OSError:
            self.close()
            raise CallError("connection") from None

    def _read(self, s: socket.socket) -> tuple[int, bytes]:
        buf = b""
        while True:
            end = buf.find(b"\r\n\r\n")
            if end >= 0:
                break
            chunk = s.recv(65536)
            if not chunk:
                raise OSError("connection closed")
            buf += chunk
        head = buf[:end]
        m = self._status.match(head)
        if m is None:
            raise OSError("bad status line")
        length = -1
        close = False
        for line in head.split(b"\r\n")[1:]:
            k, _, v = line.partition(b":")
            k = k.strip().lower()
            if k == b"content-length":
                length = int(v)
            elif k == b"connection" and v.strip().lower() == b"close":
                close = True
        if length < 0:
            raise OSError("reply without Content-Length")
        rest = buf[end + 4:]
        if len(rest) < length:
            parts = [rest]
            got = len(rest)
            while got < length:
                chunk = s.recv(min(1 << 22, length - got))
                if not chunk:
                    raise OSError("connection closed mid-body")
                parts.append(chunk)
                got += len(chunk)
            rest = b"".join(parts)
        if close:
            self.close()
        return int(m.group(1)), rest


def check_reply(verb: str, status: int, data: bytes) -> str | None:
    """An error kind for a reply kube-scheduler would treat as a failure, else None."""
    if status != 200:
        return f"http_{status}"
    if verb == "filter" and b'"Error":""' not in data:
        return "error_field"
    return None


def validate(verb: str, data: bytes, sent: int) -> str:
    """Full check of one reply (done once per cell); returns a one-line summary."""
    doc = orjson.loads(data)
    if verb == "prioritize":
        assert isinstance(doc, list) and len(doc) == sent, f"prioritize: {len(doc)} scores for {sent} nodes"
        assert all(isinstance(x["Score"], int) and 0 <= x["Score"] <= 10 for x in doc)
        return f"{len(doc)} scores"
    passed = doc["NodeNames"] if doc.get("NodeNames") is not None else doc["Nodes"]["items"]
    assert doc["Error"] == "", doc["Error"]
    return f"{len(passed)} passed, {len(doc['FailedNodes'])} failed"


# ---- measuring ----------------------------------------------------------------------------------------

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
          f"{'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'calls/s':>8} {'srv ms':>7} {'>5s':>4}  {'errors':<8} aim")


def fmt_row(r: Row) -> str:
    return (f"{r.nodes:>5} {r.mode:<5} {r.verb:<10} {r.node_set:<6} {r.sent:>5} {r.req_kb:>8.1f} {r.resp_kb:>8.1f} "
            f"{r.calls:>6} {r.p50:>8.3f} {r.p99:>8.3f} {r.max:>8.2f} {r.rate:>8.0f} {r.server_mean:>7.3f} "
            f"{r.over_timeout:>4}  {r.errors or '0':<8} {r.aim()}")


# ---- py-spy -------------------------------------------------------------------------------------------

@contextmanager
def py_spy(pid: int, out: Path | None, rate: int = 500) -> Iterator[None]:
    if out is None:
        yield
        return
    exe = shutil.which("py-spy")
    if exe is None:
        print("  (py-spy not found: pip install py-spy)")
        yield
        return
    proc = subprocess.Popen([exe, "record", "--pid", str(pid), "--rate", str(rate), "--format", "raw",
                             "--output", str(out), "--nonblocking", "--gil"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(1.0)
    try:
        yield
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        if not out.exists():
            print(f"  (py-spy wrote nothing: {err.decode(errors='replace')[-300:]})")


CATEGORIES = (
    ("JSON parse (orjson.loads)", ("loads (extender/protocol.py", "loads (orjson", "parse_extender_args")),
    ("pod parse (pod_from_k8s)", ("pod_from_k8s", "parse_pod")),
    ("resolve full nodes (knows/lock)", ("resolve (extender/service.py",)),
    ("NodeView gather (ClusterState.view)", ("view (kso/cluster.py",)),
    ("agents", ("extender/agents/",)),
    ("filter/prioritize bookkeeping", ("_judge (extender", "_scores (extender", "filter (extender/service.py",
                                       "prioritize (extender/service.py")),
    ("response encode (orjson.dumps)", ("dumps (extender/protocol.py",)),
    ("body read (request.stream)", ("read_body (extender/app.py",)),
    ("metrics (prometheus_client)", ("prometheus_client",)),
)


def summarize_profile(path: Path, top: int = 14) -> list[str]:
    """Top functions (self and inclusive share of samples) and a breakdown by stage, from py-spy raw output."""
    self_c: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    cats: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, n_s = line.rpartition(" ")
        if not stack or not n_s.isdigit():
            continue
        n = int(n_s)
        frames = [re.sub(r":\d+\)$", ")", f) for f in stack.split(";")]
        frames = [f for f in frames if not f.startswith("process ") and not f.startswith("thread ")]
        if not frames:
            continue
        total += n
        self_c[frames[-1]] += n
        for f in set(frames):
            incl[f] += n
        best, depth = "other (event loop, Starlette/FastAPI routing, uvicorn/httptools)", -1
        for cat, needles in CATEGORIES:
            for d, f in enumerate(frames):
                if any(nd in f for nd in needles) and d > depth:
                    best, depth = cat, d
        cats[best] += n
    if not total:
        return ["  (no samples)"]
    out = [f"  {total} samples; by stage (innermost kso stage on the stack):"]
    out += [f"    {100 * c / total:5.1f}%  {cat}" for cat, c in cats.most_common()]
    out.append("  top functions by self time:")
    out += [f"    {100 * c / total:5.1f}%  {f[:150]}" for f, c in self_c.most_common(top)]
    out.append("  top kso/starlette/uvicorn functions by inclusive time:")
    keep = [(f, c) for f, c in incl.most_common() if any(k in f for k in ("extender/", "kso/", "starlette/", "fastapi/",
                                                                           "uvicorn/", "prometheus_client/"))]
    out += [f"    {100 * c / total:5.1f}%  {f[:150]}" for f, c in keep[:top]]
    return out


# ---- the matrix ---------------------------------------------------------------------------------------

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
                        big = mode == "full" and n * node_kb > 4096
                        variants = 2 if big else args.variants
                        bodies = build_bodies(cluster, mode, node_set, verb, pods, server.port, variants)
                        per_call_s = None
                        # warm-up: a few calls, also to size the cell
                        warm = drive(server.port, verb, bodies, max(3, min(args.warmup, args.requests // 10)),
                                     args.max_cell_seconds / 4, 120.0)
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
                        prof = None
                        if args.py_spy:
                            prof = Path(args.py_spy) / f"{n}-{mode}-{verb}-{node_set}.txt"
                        with py_spy(server.proc.pid, prof):
                            s = drive_concurrent(server.port, verb, bodies, count, args.max_cell_seconds * 2,
                                                 120.0, args.concurrency)
                        m1 = server.metrics()
                        srv_mean, srv_err = server_delta(m0, m1, verb)
                        lat = np.array(s.lat) * 1e3
                        errs = dict(s.errors)
                        if srv_err:
                            errs["server"] = int(srv_err)
                        row = Row(n, mode, verb, node_set, int(np.mean([b.nodes_sent for b in bodies])),
                                  float(np.mean([len(b) for b in bodies])) / 1024, len(data) / 1024, lat.size,
                                  pct(lat, 50), pct(lat, 99), float(lat.max()) if lat.size else math.nan,
                                  lat.size / s.wall if s.wall else math.nan, srv_mean,
                                  int((lat > HTTP_TIMEOUT_S * 1e3).sum()),
                                  ",".join(f"{k}:{v}" for k, v in errs.items()), summary)
                        rows.append(row)
                        print("   " + fmt_row(row) + f"   [{summary}]", flush=True)
                        if prof is not None and prof.exists():
                            for line in summarize_profile(prof):
                                print("   " + line)
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
    print("srv ms = mean of the server's own kso_extender_request_duration_seconds (body read .. reply built)\n")
    print(HEADER)
    for r in rows:
        print(fmt_row(r))
    print()
    for line in rss_lines:
        print(line)
    return 0


# ---- before / after: --compare-tree ---------------------------------------------------------------------

# Run in each tree (cwd and PYTHONPATH = the tree) with only APIs both have: build the extender on the
# snapshot, then answer every request of the list through the ASGI app, in order, and write
# [status, headers, body] per request.
REPLAY = r"""
import asyncio, sys
import orjson
from extender.app import create_app
from extender.config import load_config
from extender.server import build

running = build(load_config())
app = create_app(running.extender)
requests = orjson.loads(open(sys.argv[1], "rb").read())

async def call(path, body):
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
             "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"),
                         (b"content-length", str(len(body)).encode())],
             "client": ("127.0.0.1", 40000), "server": ("127.0.0.1", 8888)}
    sent = False
    async def receive():
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}
    out = {"status": None, "headers": [], "body": b""}
    async def send(message):
        if message["type"] == "http.response.start":
            out["status"] = message["status"]
            out["headers"] = [[k.decode(), v.decode()] for k, v in message.get("headers", [])]
        elif message["type"] == "http.response.body":
            out["body"] += message.get("body", b"")
    await app(scope, receive, send)
    return [out["status"], out["headers"], out["body"].decode("utf-8", "replace")]

async def main():
    return [await call(path, body.encode("utf-8", "surrogateescape")) for path, body in requests]

replies = asyncio.run(main())
running.close()
open(sys.argv[2], "wb").write(orjson.dumps(replies))
"""


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
                    doc["Nodes"], doc["NodeNames"] = {"metadata": {}, "items": [by_name[x] for x in names]}, None
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
        done = subprocess.run([sys.executable, "-c", REPLAY, str(req_path), str(out)], cwd=tree, env=env,
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
    stats: dict[str, tuple[float, float, float, float]]  # tree label -> (p50, p99, calls/s, srv ms), medians over rounds


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
            verdict = check_replies([other, REPO], snap, reply_check_requests(cluster, pods, args.modes), tmp,
                                    args.agents)
            print(f"   {verdict} ({time.perf_counter() - t0:.0f} s)", flush=True)
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
                        per_round: dict[str, list[tuple[float, float, float, float]]] = {lb: [] for lb in servers}
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
                                smp = drive(server.port, verb, bodies, count, args.max_cell_seconds, 120.0)
                                srv_mean, srv_err = server_delta(m0, server.metrics(), verb)
                                if smp.errors or srv_err:
                                    print(f"   {label}: errors {dict(smp.errors)} server {srv_err}")
                                lat = np.array(smp.lat) * 1e3
                                per_round[label].append((pct(lat, 50), pct(lat, 99), lat.size / smp.wall, srv_mean))
                        stats = {lb: tuple(float(np.median([x[i] for x in v])) for i in range(4))
                                 for lb, v in per_round.items()}
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
          "calls/s, and of the server's own mean (srv ms); one call in flight (closed loop)\n")
    print(COMPARE_HEADER)
    for row in rows:
        print(fmt_compare(row))
    return 0


COMPARE_HEADER = (f"{'nodes':>5} {'mode':<5} {'verb':<10} {'set':<6} {'sent':>5} | {'base p50':>8} {'p99':>6} {'calls/s':>7} "
                  f"{'srv':>6} | {'this p50':>8} {'p99':>6} {'calls/s':>7} {'srv':>6} | aim (this)")


def fmt_compare(r: CompareRow) -> str:
    b, t = r.stats["base"], r.stats["this"]
    aim = Row(r.nodes, r.mode, r.verb, r.node_set, r.sent, 0, 0, 0, t[0], t[1], 0, t[2], t[3], 0, "").aim()
    return (f"{r.nodes:>5} {r.mode:<5} {r.verb:<10} {r.node_set:<6} {r.sent:>5} | {b[0]:>8.3f} {b[1]:>6.3f} {b[2]:>7.0f} "
            f"{b[3]:>6.3f} | {t[0]:>8.3f} {t[1]:>6.3f} {t[2]:>7.0f} {t[3]:>6.3f} | {aim}")


def _git_head(tree: Path) -> str:
    done = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or "?"


def _dirty(tree: Path) -> str:
    done = subprocess.run(["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=no", "--", "kso",
                           "extender"], capture_output=True, text=True)
    return " + uncommitted changes in kso/ or extender/" if done.stdout.strip() else ""


# ---- soak ---------------------------------------------------------------------------------------------

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
        print(f"note: the target rate was not reached with {workers} client processes on "
              f"{os.cpu_count()} cores; the server (one process, one core) and the clients share the machine")
    return 0


# ---- main ---------------------------------------------------------------------------------------------

def _csv(kind: type, allowed: Sequence[str] | None = None) -> Any:
    def parse(text: str) -> list[Any]:
        items = [kind(x.strip()) for x in text.split(",") if x.strip()]
        if allowed is not None:
            bad = [x for x in items if x not in allowed]
            if bad:
                raise argparse.ArgumentTypeError(f"unknown {bad}; choose from {','.join(allowed)}")
        return items
    return parse


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.latency", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=_csv(int), default=[100, 500, 5000], help="node counts (default 100,500,5000)")
    p.add_argument("--modes", type=_csv(str, ("names", "full")), default=["names", "full"],
                   help="names = NodeNames (nodeCacheCapable), full = Nodes.items")
    p.add_argument("--verbs", type=_csv(str, ("filter", "prioritize")), default=["filter", "prioritize"])
    p.add_argument("--node-sets", type=_csv(str, ("sample", "all")), default=["all", "sample"],
                   help="all = every node; sample = kube-scheduler's feasible-node sample")
    p.add_argument("--requests", type=int, default=3000, help="measured calls per cell (default 3000)")
    p.add_argument("--warmup", type=int, default=200, help="warm-up calls per cell (default 200)")
    p.add_argument("--max-cell-seconds", type=float, default=20.0,
                   help="cap on a cell's measuring time; slow cells (5,000 full nodes) get fewer calls (default 20)")
    p.add_argument("--concurrency", type=int, default=1, help="client processes, one call in flight each (default 1)")
    p.add_argument("--variants", type=int, default=8, help="distinct pending pods / sample windows per cell")
    p.add_argument("--agents", help="KSO_AGENTS for the server (default: the server's default)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--py-spy", metavar="DIR", help="record each cell's server with py-spy (raw stacks) into DIR and "
                                                   "print where the time goes (slows the server a little)")
    p.add_argument("--duration", type=float, help="soak mode: run for this many seconds (the issue asks 600)")
    p.add_argument("--rate", type=float, default=2000.0, help="soak: target calls/s in total (default 2000: twice "
                                                              "1,000/s, alternating filter and prioritize)")
    p.add_argument("--soak-nodes", type=int, default=500)
    p.add_argument("--soak-clients", type=int, default=4, help="soak: client processes (default 4)")
    p.add_argument("--soak-bucket", type=float, default=0.0,
                   help="soak: seconds per reported interval (default 60, or 10 for runs under 5 minutes)")
    p.add_argument("--timeout", type=float, default=HTTP_TIMEOUT_S, help="soak: per-call timeout (default 5 s)")
    p.add_argument("--compare-tree", metavar="DIR", help="before/after: also serve the cluster from the kso checkout DIR "
                                                         "(e.g. a git worktree of the commit before a change) and "
                                                         "measure both trees in alternating rounds")
    p.add_argument("--rounds", type=int, default=6, help="compare: rounds per cell and tree (default 6)")
    p.add_argument("--no-reply-check", action="store_true", help="compare: skip the byte-for-byte reply comparison")
    args = p.parse_args(argv)
    if args.py_spy:
        Path(args.py_spy).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kso-latency-") as d:
        tmp = Path(d)
        print("\n".join(machine_info()), flush=True)
        if args.duration:
            return run_soak(args, tmp)
        if args.compare_tree:
            return run_compare(args, tmp)
        return run_matrix(args, tmp)


if __name__ == "__main__":
    sys.exit(main())
