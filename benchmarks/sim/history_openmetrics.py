"""A replay scenario written as the Prometheus history a cluster running it would have: kube-state-metrics and
cAdvisor series in OpenMetrics text, for ``promtool tsdb create-blocks-from openmetrics`` (the tests and the scale
measurement of ``kso bench --prometheus``). Synthetic in its shape, not in its numbers: every request, lifetime and
usage value is the scenario's (e.g. the Google 2019 join of benchmarks/sim/google.py).

What is written for a scenario on a ``step_s`` grid from ``start``, one scrape every ``scrape_s`` seconds
(``step_s`` a multiple of it):

- nodes: ``kube_node_status_allocatable{node,resource="cpu"|"memory"|"pods"}`` and
  ``kube_node_labels{node,label_kubernetes_io_hostname}`` at every scrape;
- a pod living steps [a, e): kube-state-metrics series (``kube_pod_created``, ``kube_pod_owner`` with a
  ReplicaSet ``<deployment>-<pod-template-hash>``, ``kube_pod_container_resource_requests`` / ``_limits`` of its one
  container ``app``) at scrapes from ``start + a step`` to one scrape before ``start + e step``; its creation time
  is just after the step boundary before ``a`` (pods of one step in the scenario's order; pods at step 0 were
  created before ``start``). Of the pods that end inside the range, one in three reports
  ``kube_pod_deletion_timestamp`` on its last scrape, one in three ``kube_pod_completion_time``, the rest just
  stop being reported (whatever the scrape interval, the end falls in step e - 1);
- cAdvisor: ``container_cpu_usage_seconds_total`` counters (container ``app``, and the pod cgroup's own series
  with ``container=""``, which queries must leave out) rising by the step's usage over each scrape interval, from
  0 at the pod's start to ``start + e step``; ``container_memory_working_set_bytes`` whose sample at a scrape is
  the usage of the interval ending there. So a rate over a window inside step k and the working set at the step's
  end both return the scenario's step-k usage.
"""

from __future__ import annotations

import hashlib
import math
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

import numpy as np

from benchmarks.sim.trace import Scenario

HASH_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # the alphabet of Kubernetes' pod-template-hash


def template_hash(owner: str) -> str:
    digest = hashlib.sha256(owner.encode()).digest()
    return "".join(HASH_ALPHABET[b % len(HASH_ALPHABET)] for b in digest[:10])


def _labels(pairs: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in pairs.items()) + "}"


def creation_times(s: Scenario, start: float) -> np.ndarray:
    """Whole seconds: pods of step 0 before ``start`` in scenario order; pods of step a > 0 in
    (start + (a-1) step, start + a step], in scenario order (so a builder's (arrival, created) sort keeps it)."""
    out = np.zeros(s.n_pods)
    rank: dict[int, int] = {}
    n0 = int((s.pod_arrival == 0).sum())
    for i, a in enumerate(s.pod_arrival.tolist()):
        r = rank.get(a, 0)
        rank[a] = r + 1
        if a == 0:
            out[i] = start - 3600 - n0 + r
        else:
            if r >= s.step_s - 1:
                raise ValueError(f"more than {s.step_s - 1:g} pods arrive at step {a}: no whole second left for each")
            out[i] = start + (a - 1) * s.step_s + 1 + r
    return out


def write_openmetrics(s: Scenario, path: Path, start: float, scrape_s: float = 60.0, namespace: str = "default",
                      pod_cgroup: bool = True, scrapes: tuple[int, int] | None = None,
                      pod_node: Sequence[int] | None = None, oom_kills: Sequence[tuple[int, int]] = ()) -> dict[str, int]:
    """Write the history of ``s`` (see the module docstring); returns samples per family. ``scrapes``: only the
    scrapes [first, last) of it (a long history in several files, each backfilled on its own; counters and
    identities continue from one file to the next). ``pod_node``: each pod's node index, written as
    ``kube_pod_info{node}`` over its life (where the cluster ran it); ``oom_kills``: (pod, step) of each OOM kill of
    its container, written as kube-state-metrics does: ``kube_pod_container_status_restarts_total`` +1 from that step's
    end and ``kube_pod_container_status_last_terminated_reason{reason="OOMKilled"}`` from then on."""
    step = float(s.step_s)
    per = int(round(step / scrape_s))
    if per < 1 or abs(per * scrape_s - step) > 1e-6:
        raise ValueError(f"step {step:g} s is not a whole number of {scrape_s:g} s scrapes")
    T = s.n_steps
    n_scrapes = T * per + 1  # start .. start + T step
    ts = [f" {int(round(start + j * scrape_s))}\n" for j in range(n_scrapes)]
    lo, hi = scrapes if scrapes is not None else (0, n_scrapes)
    created = creation_times(s, start)
    counts: dict[str, int] = {}
    # a pod's KSM scrapes [j0, j1), its cAdvisor scrapes [j0, jc]; how it ends
    life = []
    for i in range(s.n_pods):
        a, d = int(s.pod_arrival[i]), int(s.pod_departure[i])
        e = min(d, T)
        ends = d < T  # google.py / trace.py: departure >= n_steps means "outlives the replay"
        j0, jc = a * per, e * per
        how = ("deleted", "completed", "gone")[i % 3] if ends else "running"
        # a deleted or completed pod is still reported at the step boundary (terminating, or Succeeded), with the
        # time it ended; one that is just gone was last reported one scrape before the boundary
        j1 = n_scrapes if not ends else (jc + 1 if how != "gone" else jc)
        life.append((j0, j1, jc, how))
    usage = s.pod_usage.astype(np.float64) * np.stack([s.pod_cpu / 1000.0, s.pod_memory], axis=1)[:, None, :]

    with path.open("w") as f:
        def family(name: str, kind: str = "gauge") -> None:
            f.write(f"# TYPE {name} {kind}\n")

        def const(metric: str, labels: dict[str, str], value: float, j0: int, j1: int) -> None:
            j0, j1 = max(j0, lo), min(j1, hi)
            if j1 <= j0:
                return
            prefix = f"{metric}{_labels(labels)} {value!r}"
            f.write("".join(prefix + t for t in ts[j0:j1]))
            counts[metric] = counts.get(metric, 0) + max(0, j1 - j0)

        family("kube_node_status_allocatable")
        for x, node in enumerate(s.node_names):
            for res, unit, v in (("cpu", "core", s.node_cpu[x] / 1000.0), ("memory", "byte", float(s.node_memory[x])),
                                 ("pods", "integer", 110.0)):
                const("kube_node_status_allocatable", {"node": node, "resource": res, "unit": unit}, float(v), 0, n_scrapes)
        family("kube_node_labels")
        for node in s.node_names:
            const("kube_node_labels", {"node": node, "label_kubernetes_io_hostname": node}, 1.0, 0, n_scrapes)

        def pod_labels(i: int) -> dict[str, str]:
            return {"namespace": namespace, "pod": s.pod_names[i], "uid": f"uid-{i:07d}"}

        family("kube_pod_created")
        for i in range(s.n_pods):
            const("kube_pod_created", pod_labels(i), float(created[i]), life[i][0], life[i][1])
        family("kube_pod_owner")
        owners = s.pod_owner or [""] * s.n_pods
        for i in range(s.n_pods):
            kind, name = ("ReplicaSet", f"{owners[i]}-{template_hash(owners[i])}") if owners[i] else ("<none>", "<none>")
            const("kube_pod_owner", {**pod_labels(i), "owner_kind": kind, "owner_name": name,
                                     "owner_is_controller": "true" if owners[i] else "false"}, 1.0, life[i][0], life[i][1])
        for metric, values in (("kube_pod_container_resource_requests", (s.pod_cpu, s.pod_memory)),
                               ("kube_pod_container_resource_limits", (s.pod_cpu_limit, s.pod_memory_limit))):
            family(metric)
            for i in range(s.n_pods):
                for res, unit, arr, scale in (("cpu", "core", values[0], 1000.0), ("memory", "byte", values[1], 1.0)):
                    if arr is None or arr[i] <= 0:
                        continue
                    const(metric, {**pod_labels(i), "container": "app", "node": "", "resource": res, "unit": unit},
                          float(arr[i]) / scale, life[i][0], life[i][1])
        for metric, how in (("kube_pod_deletion_timestamp", "deleted"), ("kube_pod_completion_time", "completed")):
            family(metric)
            for i in range(s.n_pods):
                j0, j1, jc, h = life[i]
                if h == how:
                    const(metric, pod_labels(i), start + jc * scrape_s - min(30.0, scrape_s / 2), j1 - 1, j1)

        if pod_node is not None:
            family("kube_pod_info")
            for i in range(s.n_pods):
                const("kube_pod_info", {**pod_labels(i), "node": s.node_names[pod_node[i]]}, 1.0, life[i][0], life[i][1])
        kills: dict[int, list[int]] = {}
        for i, k in oom_kills:
            kills.setdefault(i, []).append(k)
        for metric in ("kube_pod_container_status_restarts_total", "kube_pod_container_status_last_terminated_reason")[
                :2 if kills else 0]:
            family(*((metric.removesuffix("_total"), "counter") if metric.endswith("_total") else (metric,)))
            for i, steps in sorted(kills.items()):
                j0, j1 = life[i][0], life[i][1]
                marks = [j0, *sorted((k + 1) * per for k in steps), j1]  # the count rises at the killed step's end
                for n_, (a, b) in enumerate(zip(marks, marks[1:], strict=False)):
                    labels = {**pod_labels(i), "container": "app"}
                    if metric.endswith("_total"):
                        const(metric, labels, float(n_), a, b)
                    elif n_ > 0:
                        const(metric, {**labels, "reason": "OOMKilled"}, 1.0, a, b)

        containers = [("app", "registry.example/app:1")] + ([("", "")] if pod_cgroup else [])
        family("container_cpu_usage_seconds", "counter")
        for i in range(s.n_pods):
            j0, _, jc, _ = life[i]
            if jc <= j0:
                continue
            # the interval ending at scrape j (j0 < j <= jc) lies in step (j - 1) // per
            inc = usage[i, (np.arange(j0 + 1, jc + 1) - 1) // per, 0] * scrape_s
            counter = np.concatenate([[0.0], np.cumsum(inc)])
            a, b = max(j0, lo), min(jc + 1, hi)  # scrapes j0..jc, counter[j - j0]
            if b <= a:
                continue
            for c, image in containers:
                prefix = "container_cpu_usage_seconds_total" + _labels(
                    {"namespace": namespace, "pod": s.pod_names[i], "container": c, "image": image, "node": ""}) + " "
                f.write("".join(prefix + repr(float(v)) + t for v, t in zip(counter[a - j0:b - j0], ts[a:b], strict=True)))
                counts["container_cpu_usage_seconds_total"] = counts.get("container_cpu_usage_seconds_total", 0) + b - a
        family("container_memory_working_set_bytes")
        for i in range(s.n_pods):
            j0, _, jc, _ = life[i]
            if jc <= j0:
                continue
            a, b = max(j0 + 1, lo), min(jc + 1, hi)  # scrapes j0+1..jc
            if b <= a:
                continue
            mem = usage[i, (np.arange(a, b) - 1) // per, 1]
            for c, image in containers:
                prefix = "container_memory_working_set_bytes" + _labels(
                    {"namespace": namespace, "pod": s.pod_names[i], "container": c, "image": image, "node": ""}) + " "
                f.write("".join(prefix + repr(float(v)) + t for v, t in zip(mem, ts[a:b], strict=True)))
                counts["container_memory_working_set_bytes"] = counts.get("container_memory_working_set_bytes", 0) + b - a
        f.write("# EOF\n")
    return counts


def backfill(openmetrics: Path, tsdb: Path, promtool: str = "promtool", max_block_duration: str = "",
             log: IO[str] | None = None, timeout_s: float = 3600.0) -> float:
    """``promtool tsdb create-blocks-from openmetrics`` into ``tsdb``; returns the seconds it took."""
    t0 = time.perf_counter()
    cmd = [promtool, "tsdb", "create-blocks-from", "openmetrics"]
    if max_block_duration:
        cmd.append(f"--max-block-duration={max_block_duration}")
    res = subprocess.run([*cmd, str(openmetrics), str(tsdb)], capture_output=True, text=True, timeout=timeout_s)
    if res.returncode != 0:
        raise RuntimeError(f"promtool backfill failed: {res.stderr[-2000:]}")
    if log is not None:
        log.write(res.stdout[-2000:])
    return time.perf_counter() - t0


def aligned_start(step_s: float, days_ago: float = 2.0, now: float | None = None) -> float:
    """A start ``days_ago`` before now, on a whole hour (and the step's grid)."""
    now = time.time() if now is None else now
    t = now - days_ago * 86400
    return float(math.floor(t / 3600) * 3600 // step_s * step_s)
