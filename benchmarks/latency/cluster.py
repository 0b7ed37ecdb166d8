"""The generated cluster: N nodes shaped as the API server returns them, bound pods from the openb
trace, and realistic pending pods."""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from forecasting.traces import DATA_DIR

OPENB_NODES = DATA_DIR / "openb-nodes.csv"
OPENB_PODS = DATA_DIR / "openb-pods-cpu.csv"
REPO = Path(__file__).resolve().parents[2]  # the checkout this package is in

UID_PLACEHOLDER = "ffffffff-ffff-4fff-bfff-ffffffffffff"
CREATED = "2026-03-02T08:14:51Z"
HEARTBEAT = "2026-05-11T09:31:07Z"
ZONES = ("eu-west-1a", "eu-west-1b", "eu-west-1c")
REGION = "eu-west-1"


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


STAT_ANNOTATIONS = frozenset({"mean-free-cpu", "std-free-cpu", "mean-free-memory", "std-free-memory", "congestion-factor"})


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

    def snapshot_without_statistics(self) -> bytes:
        """The same cluster before any load statistics exist (no kube-safe-scheduler annotations on any node,
        as a new install starts): the safe agent then judges no node."""
        nodes = [{**nd, "metadata": {**nd["metadata"], "annotations": {
            k: v for k, v in nd["metadata"].get("annotations", {}).items() if k not in STAT_ANNOTATIONS}}}
            for nd in self.nodes]
        return orjson.dumps({"nodes": nodes, "pods": self.pods})


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
        annotations = {"alpha.kubernetes.io/provided-node-ip": f"10.{16 + i // 65536}.{(i // 256) % 256}.{i % 256}",
                       "csi.volume.kubernetes.io/nodeid": f'{{"ebs.csi.aws.com":"i-0{rng.getrandbits(64):016x}"}}',
                       "node.alpha.kubernetes.io/ttl": "0",
                       "volumes.kubernetes.io/controller-managed-attach-detach": "true"}
        stats = _node_statistics(rng, alloc_cpu, alloc_mem_ki, used_cpu, used_mem)
        annotations.update(stats)
        stat_keys = list(stats)
        images = list(SYSTEM_IMAGES)
        for img in rng.choices(catalog, weights=weights, k=rng.randint(3, 33)):
            if img not in images:
                images.append(img)
        labels = _node_labels(name, itype, zone, i)
        spec: dict[str, Any] = {"podCIDR": f"10.244.{i % 256}.0/24", "podCIDRs": [f"10.244.{i % 256}.0/24"],
                                "providerID": f"aws:///{zone}/i-0{rng.getrandbits(64):016x}"}
        if gpu:
            spec["taints"] = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
        nodes.append({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "uid": f"{rng.getrandbits(128):032x}", "resourceVersion": str(100_000 + i),
                         "creationTimestamp": CREATED, "labels": labels, "annotations": annotations,
                         "managedFields": _managed_fields(name, stat_keys)},
            "spec": spec,
            "status": {
                "capacity": capacity, "allocatable": allocatable, "conditions": _node_conditions(),
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


def _node_statistics(rng: random.Random, alloc_cpu: float, alloc_mem_ki: float, used_cpu: float,
                     used_mem: float) -> dict[str, str]:
    """kube-safe-scheduler annotations: a synthetic join of load around the requested share (none on a few
    nodes the annotator has not reached yet). Draws from ``rng`` in make_cluster's order."""
    if rng.random() <= 0.04:
        return {}
    u_cpu = min(0.97, max(0.02, used_cpu / alloc_cpu * rng.uniform(0.3, 0.85) + rng.gauss(0.03, 0.05)))
    u_mem = min(0.97, max(0.02, used_mem / alloc_mem_ki * rng.uniform(0.5, 1.0) + rng.gauss(0.05, 0.05)))
    stats = {"mean-free-cpu": f"{alloc_cpu * (1 - u_cpu):.2f}",
             "std-free-cpu": f"{alloc_cpu * rng.uniform(0.01, 0.09):.2f}",
             "mean-free-memory": f"{alloc_mem_ki / 1024 * (1 - u_mem):.2f}",
             "std-free-memory": f"{alloc_mem_ki / 1024 * rng.uniform(0.005, 0.05):.2f}"}
    if rng.random() < 0.3:
        stats["congestion-factor"] = str(rng.randint(0, 100))
    return stats


def _node_labels(name: str, itype: str, zone: str, i: int) -> dict[str, str]:
    return {"beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/instance-type": itype,
              "beta.kubernetes.io/os": "linux", "failure-domain.beta.kubernetes.io/region": REGION,
              "failure-domain.beta.kubernetes.io/zone": zone, "kubernetes.io/arch": "amd64",
              "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
              "node.kubernetes.io/instance-type": itype, "topology.kubernetes.io/region": REGION,
              "topology.kubernetes.io/zone": zone, "topology.ebs.csi.aws.com/zone": zone,
              "eks.amazonaws.com/nodegroup": f"ng-{itype.replace('.', '-')}",
              "eks.amazonaws.com/capacityType": "SPOT" if i % 5 == 0 else "ON_DEMAND",
              "k8s.io/cloud-provider-aws": "3b3c8f1d2e6a4b0c9d7e5f1a2b3c4d5e"}


def _node_conditions() -> list[dict[str, str]]:
    """A ready node's conditions (the same for every node: no randomness here)."""
    return [
        {"type": t, "status": "False", "lastHeartbeatTime": HEARTBEAT, "lastTransitionTime": CREATED,
         "reason": r, "message": m}
        for t, r, m in (("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                        ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                        ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"))
    ] + [{"type": "Ready", "status": "True", "lastHeartbeatTime": HEARTBEAT, "lastTransitionTime": CREATED,
          "reason": "KubeletReady", "message": "kubelet is posting ready status"}]


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
    """A pending Pod as kube-scheduler sends it (like the captured fixtures' ``multi`` pod, larger).

    Over 80 lines on purpose: one literal Pod, kept whole so that it reads like the captured request it
    imitates, and so that its random draws stay in the order the recorded benchmark bodies depend on."""
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
