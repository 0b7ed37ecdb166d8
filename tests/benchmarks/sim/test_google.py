"""The Google real-join scenario: the series rules (job clock, gaps, right-sizing from the history third),
Deployments split at task gaps, and the embedded excerpt's labels."""

from __future__ import annotations

import numpy as np
import pandas as pd

from benchmarks.sim.google import (
    CPU_UNIT_MILLI,
    GOOGLE_LABEL,
    MEMORY_UNIT_BYTES,
    PodRows,
    _deployment_pods,
    build_embedded_google_scenario,
    load_jobs,
)

US = 300_000_000  # one 5-minute bin in microseconds


def tiny_trace(tmp_path):  # type: ignore[no-untyped-def]
    """One job, two tasks on bins 0..8 of the job's clock (the job starts at t = 7 bins of the trace).
    Task 0: bins 0-8 except bin 3 (a 1-bin gap: carried) ; task 1: bins 0-2 and 6-8 (a 3-bin gap: not running)."""
    rows = []
    for task, bins in ((0, [0, 1, 2, 4, 5, 6, 7, 8]), (1, [0, 1, 2, 6, 7, 8])):
        for b in bins:
            rows.append({"time": (7 + b) * US, "collection_id": 42, "instance_index": task, "cpu_limit": 0.01,
                         "memory_limit": 0.002, "avg_cpu_usage": 0.001 * (b + 1), "avg_memory_usage": 0.001})
    path = tmp_path / "g.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_job_clock_gaps_and_right_sizing(tmp_path) -> None:  # type: ignore[no-untyped-def]
    job = load_jobs(tiny_trace(tmp_path))["42"]
    assert job.cpu.shape == (2, 9)  # bin 0 = the job's first window, not the trace's
    assert job.cpu[0, 3] == job.cpu[0, 2] == 0.003  # a 1-bin gap carries the previous value
    assert np.isnan(job.cpu[1, 5]) and job.cpu[1, 3] == job.cpu[1, 4] == 0.003  # up to 2 bins carried, the 3rd not
    # history = first third (bins 0-2): cpu samples 0.001..0.003 of both tasks -> p90 (linear) = 0.003
    cpu, mem = job.right_sized()
    assert abs(cpu - 0.003) < 1e-12 and abs(mem - 0.001) < 1e-12


def test_a_task_gap_splits_its_pod_and_requests_follow_the_rule(tmp_path) -> None:  # type: ignore[no-untyped-def]
    job = load_jobs(tiny_trace(tmp_path))["42"]
    job.cpu[1, 3:5] = np.nan  # make task 1 stop for bins 3-5 in the replayed part
    rows = PodRows([], [], [], [], [], [], [], [], [])
    req = _deployment_pods(rows, job, "d0", 3, 0, 6, 6, "limit")
    # replay bins 3..8: task 0 runs throughout (one pod), task 1 only in bins 6-8 -> replay steps 3-5 (one pod)
    assert rows.arrival == [0, 3] and rows.departure == [6, 6]
    assert rows.cpu == [0.01 * CPU_UNIT_MILLI] * 2 and rows.memory == [0.002 * MEMORY_UNIT_BYTES] * 2
    assert req[:, 0].tolist() == [1280.0] * 3 + [2560.0] * 3
    assert rows.usage[0][0, 0] == job.cpu[0, 3] * CPU_UNIT_MILLI and rows.usage[1][2, 0] == 0.0
    sized = PodRows([], [], [], [], [], [], [], [], [])
    _deployment_pods(sized, job, "d1", 3, 0, 6, 6, "p90")
    assert sized.cpu[0] == job.right_sized()[0] * CPU_UNIT_MILLI and sized.cpu_limit[0] == 0.01 * CPU_UNIT_MILLI


def test_embedded_excerpt_is_labelled_and_burstable() -> None:
    s = build_embedded_google_scenario(hours=1)
    assert s.n_steps == 12 and s.n_nodes == 40 and GOOGLE_LABEL in s.describe()
    text = " ".join(s.notes)
    for rule in ("units:", "clock:", "gaps:", "synthetic:", "p90", "first 4 h of seed 0"):
        assert rule in text, rule
    alive = s.pod_usage[:, :, 0] > 0
    assert (s.pod_usage[:, :, 0][alive] > 1.0).any()  # usage above request exists (right-sized, burstable)
    assert len(set(s.pod_owner)) < s.n_pods  # replicas share a Deployment (a kso workload class)


def test_kso_plan_class_usage_equals_the_optimizer_pooled_history() -> None:
    """kso-plan's vectorised class usage (per-pod sums) gives optimizer.plan.cluster_problem.class_usage_from_history's models."""
    from benchmarks.sim.engine import run
    from benchmarks.sim.policies.kso_plan import HISTORY_STEPS, KsoPlanPolicy
    from optimizer.plan.cluster_problem import class_usage_from_history

    checked: list[int] = []

    class Checked(KsoPlanPolicy):
        def observe(self, sim):  # type: ignore[no-untyped-def]
            if sim.step in (1, 5, 14):
                bound, usage = [], {}
                for pod in sim.running.values():
                    samples = sim.pod_usage(pod, HISTORY_STEPS)
                    if len(samples):
                        info = self.info(pod)
                        bound.append(info)
                        usage[info.key] = {"cpu": samples[:, 0], "memory": samples[:, 1]}
                want, got = class_usage_from_history(bound, usage), self.class_usage(sim)
                assert want and set(got) == set(want)
                for key, model in want.items():
                    for r in ("cpu", "memory"):
                        assert np.isclose(got[key].mean[r], model.mean[r], rtol=1e-9), (key, r)
                        assert np.isclose(got[key].std[r], model.std[r], rtol=1e-6, atol=1e-6 * model.mean[r]), (key, r)
                checked.append(sim.step)
            super().observe(sim)

        def place(self, pod, sim):  # type: ignore[no-untyped-def]
            return super(KsoPlanPolicy, self).place(pod, sim)  # the extender alone: no plan solves needed here

    policy = Checked(replan_steps=10**6)
    run(build_embedded_google_scenario(hours=1.25), policy)
    assert checked == [1, 5, 14]
