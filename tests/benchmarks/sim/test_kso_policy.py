"""The kso policy end to end: the real extender over HTTP on 127.0.0.1 inside the replay, and the CLI."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.sim.cli import main as bench_main
from benchmarks.sim.engine import EngineRules, SimPod, SimView, run
from benchmarks.sim.metrics import compute
from benchmarks.sim.policies import make_policy
from benchmarks.sim.policies.kso_extender import KsoExtenderPolicy
from benchmarks.sim.trace import USAGE_LABEL, Scenario

GIB = 1024.0**3


def two_nodes(n_steps: int = 6) -> Scenario:
    return Scenario("kso-tiny", 300.0, n_steps, ["hot", "cool"], np.array([10000.0, 10000.0]), np.array([16 * GIB] * 2),
                    [], np.zeros(0), np.zeros(0), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, n_steps, 2)))


def test_kso_http_rejects_a_node_its_statistics_say_is_hot() -> None:
    view = SimView(two_nodes())
    # hot: 2 cores requested but 9 of 10 cores used for the last 3 steps; cool: 6 cores requested, 1 core used
    view.requested[:] = [[2000, 2 * GIB], [6000, 2 * GIB]]
    view.step = 3
    view._usage[0, :3] = [9000, 2 * GIB]
    view._usage[1, :3] = [1000, 2 * GIB]
    pod = SimPod(0, "new", "uid-new", 1000, GIB, 3, 6)
    assert make_policy("default", 0).place(pod, view) == "hot"  # LeastAllocated prefers the less requested node
    kso = KsoExtenderPolicy(seed=0, stats="window")
    kso.setup(view)
    try:
        kso.observe(view)
        assert kso.state.node("hot").annotations["mean-free-cpu"] == "1000"
        assert kso.place(pod, view) == "cool"
        assert kso.extra["filtered_out"] == 1
        kso.bound(pod, "cool", view)
        assert kso.state.pods["uid-new"].node_name == "cool"  # bound through /bind: kso's own accounting
        assert set(kso.latencies) == {"filter", "bind"}  # one node left: no prioritize call
    finally:
        kso.close()


def test_kso_http_replay_accounts_every_pod() -> None:
    steps = 6
    pods = [(2000.0, 0, 4), (3000.0, 0, 6), (1000.0, 1, 3), (4000.0, 2, 6), (2500.0, 3, 6), (10500.0, 3, 6)]
    usage = np.full((len(pods), steps, 2), 0.5, dtype=np.float32)
    base = two_nodes(steps)
    s = Scenario("kso-tiny", 300.0, steps, base.node_names, base.node_cpu, base.node_memory,
                 [f"p{i}" for i in range(len(pods))], np.array([p[0] for p in pods]), np.full(len(pods), GIB),
                 np.array([p[1] for p in pods]), np.array([p[2] for p in pods]), usage)
    policy = KsoExtenderPolicy(seed=1)
    res = run(s, policy)
    m = compute(res)
    assert m.scheduled == 5 and m.pending_end == 1  # the 10.5-core pod is bigger than any node
    assert policy.latencies["filter"] and len(policy.latencies["bind"]) == 5
    assert m.latency_ms["filter"][2] == len(policy.latencies["filter"])
    # at the end kso's cache holds exactly the pods still running, on the nodes the engine has them on
    running = {p.uid: s.node_names[p.node] for p in res.pods if p.node >= 0 and p.departure_step > steps - 1}
    assert {uid: pod.node_name for uid, pod in policy.state.pods.items()} == running
    assert policy._server is None  # closed


def test_bench_cli_on_the_embedded_trace(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    rc = bench_main(["--trace", "embedded", "--hours", "1", "--policies", "default,koordinator,kso-inproc",
                     "--kso-stats", "window", "--out", str(tmp_path), "--no-plots"])
    out = capsys.readouterr().out
    assert rc == 0
    assert USAGE_LABEL in out and "kso-inproc" in out and "koordinator" in out
    report = (tmp_path / "report.md").read_text()
    assert USAGE_LABEL in report and "Bitbrains" in report and "openb" in report and "machine:" in report


def test_report_plots(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import pytest

    pytest.importorskip("matplotlib")
    rc = bench_main(["--trace", "embedded", "--hours", "0.5", "--policies", "default,trimaran-tlp",
                     "--out", str(tmp_path)])
    assert rc == 0
    for name in ("heatmap.png", "overloads.png", "nodes_in_use.png"):
        assert (tmp_path / name).stat().st_size > 1000
        assert f"]({name})" in (tmp_path / "report.md").read_text()


def test_kso_plan_replay_follows_cp_sat_plans() -> None:
    """Four 10-core nodes, small pods arriving over time: the plan-driven policy solves plans, the
    prioritize follows them (plan hits), every pod is placed, and binpack leaves nodes empty."""
    steps = 9
    cpu = np.array([10000.0] * 4)
    pods = [(1000.0, s, steps) for s in range(0, 7) for _ in range(2)]
    usage = np.full((len(pods), steps, 2), 0.3, dtype=np.float32)
    s = Scenario("kso-plan-tiny", 300.0, steps, [f"n{i}" for i in range(4)], cpu, np.array([16 * GIB] * 4),
                 [f"p{i}" for i in range(len(pods))], np.array([p[0] for p in pods]), np.full(len(pods), GIB / 4),
                 np.array([p[1] for p in pods]), np.array([p[2] for p in pods]), usage)
    policy = make_policy("kso-plan", 0, replan_steps=1, time_limit_s=2.0)
    res = run(s, policy)
    m = compute(res)
    assert m.scheduled == len(pods) and m.pending_end == 0
    assert policy.extra["solves"] >= 5
    assert policy.extra["plan_hits"] > 0
    # 14 one-core pods fit on two 10-core nodes (U* 90%: 9 cores each): binpack keeps the others empty
    used = {p.node for p in res.pods if p.node >= 0}
    assert len(used) <= 2, used


def test_trend_stats_plan_a_rising_node_higher_and_wider_than_a_flat_one() -> None:
    from benchmarks.sim.policies.kso_extender import trend_stats

    # two nodes, memory over the last hour: flat at 10 GiB; rising by 0.5 GiB a step to the same window mean
    flat = np.full(12, 10.0)
    rising = 10.0 + 0.5 * (np.arange(12) - 10)  # 5.0, 5.5, ..., 10.0, 10.5
    series = np.zeros((2, 12, 2))
    series[0, :, 1], series[1, :, 1] = flat, rising
    window_mean = np.array([[0.0, 10.0], [0.0, 10.0]])
    window_std = np.zeros((2, 2))
    mean, std = trend_stats(window_mean, window_std, series, horizon_steps=3)
    assert mean[0, 1] == 10.0 and std[0, 1] == 0.0  # flat: the window's statistics unchanged
    assert mean[1, 1] == 10.0 + 0.5 * 3  # slope 0.5 per step x 3 steps to the next re-solve
    assert std[1, 1] == np.std(rising) > 1.0
    falling = np.zeros((1, 12, 2))
    falling[0, :, 1] = rising[::-1]
    down_mean, _ = trend_stats(window_mean[:1], window_std[:1], falling, 3)
    assert down_mean[0, 1] == 10.0  # a fall is not planned for


def test_current_pods_usage_does_not_count_a_placement_as_a_rise() -> None:
    # pod 0 on the node since step 0 at 1 GiB; pod 1 bound at step 2 using 2 GiB then 3 GiB; at step 4 the
    # node's current pods summed over steps 0-3: pod 1 stands at its first measured 2 GiB before its binding
    usage = np.zeros((2, 6, 2), dtype=np.float32)
    usage[0, :, 1] = 1.0
    usage[1, :, 1] = [0.0, 0.0, 1.0, 1.5, 1.5, 1.5]
    base = two_nodes(6)
    s = Scenario("kso-tiny", 300.0, 6, base.node_names, base.node_cpu, base.node_memory, ["a", "b"],
                 np.array([100.0, 100.0]), np.array([GIB, 2 * GIB]), np.array([0, 2]), np.array([9, 9]), usage)
    view = SimView(s)
    view.step = 4
    for i, bound in ((0, 0), (1, 2)):
        view.running[i] = SimPod(i, s.pod_names[i], f"u{i}", 100.0, s.pod_memory[i], bound, 9, node=0, bound_step=bound)
    got = view.current_pods_usage(4)
    assert got.shape == (2, 4, 2)
    assert got[0, :, 1].tolist() == [3 * GIB, 3 * GIB, 3 * GIB, 4 * GIB]
    assert not got[1].any()


def test_pooled_prior_plans_a_new_class_at_the_measured_usage_over_request() -> None:
    from benchmarks.sim.policies.kso_extender import pod_object
    from benchmarks.sim.policies.kso_plan import KsoPlanPolicy, pooled_ratio
    from kso.core.objects import pod_from_k8s
    from optimizer.plan.problem import UsageModel, class_key

    # two measured pods, memory only matters here: pod A (request 2) used 2, 2, 2, 2 (ratio 1.0 x4);
    # pod B (request 4) used 6, 6 (ratio 1.5 x2): m = (4 x 1.0 + 2 x 1.5) / 6 = 7/6
    n = np.array([[4, 4], [2, 2]])
    s1 = np.array([[4.0, 8.0], [4.0, 12.0]])
    s2 = np.array([[4.0, 16.0], [8.0, 72.0]])
    req = np.array([[1.0, 2.0], [2.0, 4.0]])
    got = pooled_ratio(n, s1, s2, req)
    assert got is not None
    m, sd = got
    assert np.isclose(m[1], 7 / 6) and np.isclose(sd[1], np.std([1.0] * 4 + [1.5] * 2))
    assert pooled_ratio(n[:1, :] * 0 + 1, s1[:1], s2[:1], req[:1]) is None  # 1 sample: too few to trust

    policy = KsoPlanPolicy(seed=0, prior="pooled")
    assert "new classes: a class with no measured usage counts at request x" in policy.mode
    policy._ratio = got
    new = pod_from_k8s(pod_object(SimPod(0, "new-0", "u-new", 1000.0, 8 * GIB, 0, 9, owner="fresh")))
    seen = pod_from_k8s(pod_object(SimPod(1, "old-0", "u-old", 1000.0, 8 * GIB, 0, 9, owner="known")))
    usage = {class_key(seen): UsageModel({"cpu": 1.0, "memory": 1.0}, {"cpu": 0.0, "memory": 0.0}, "history")}
    assert policy.add_prior(usage, [new, seen]) == 1
    model = usage[class_key(new)]
    assert model.source == "prior" and np.isclose(model.mean["memory"], 8 * GIB * 7 / 6)
    assert np.isclose(model.std["memory"], 8 * GIB * sd[1]) and usage[class_key(seen)].mean["memory"] == 1.0


@pytest.mark.parametrize("hold", ["inf", "300"])
def test_a_repeated_rejection_is_reused_and_changes_no_outcome(monkeypatch, hold: str) -> None:  # type: ignore[no-untyped-def]
    """Two 10-core nodes each run a hog using 9 cores (90% > U*) until step 4, then 1 core; four replicas of one
    Deployment queue from step 2: without bounded holding (KSO_SAFE_MAX_HOLD_S = inf) kso rejects them on both
    nodes until the statistics cool down (no bind or release in between: only new statistics change the answer);
    with the default hold (300 s, one step) they are released at step 3, held 300 s. In-process, a replica asked
    again with nothing changed reuses the rejection (never a held one): the replay is the same as asking every
    time, with fewer calls."""
    from benchmarks.sim.policies import kso_extender
    from benchmarks.sim.policies.kso_extender import KsoInprocPolicy

    steps = 12
    pods = [(2000.0, 0, steps, "")] * 2 + [(1000.0, 2, steps, "web")] * 4
    usage = np.full((len(pods), steps, 2), 0.5, dtype=np.float32)
    usage[:2, :4, 0] = 4.5  # the hogs: 9 of 10 cores, then 1 core from step 4
    base = two_nodes(steps)
    s = Scenario("kso-repeat", 300.0, steps, base.node_names, base.node_cpu, base.node_memory,
                 [f"p{i}" for i in range(len(pods))], np.array([p[0] for p in pods]), np.full(len(pods), GIB),
                 np.array([p[1] for p in pods]), np.array([p[2] for p in pods]), usage,
                 pod_owner=[p[3] for p in pods])

    def replay() -> tuple[KsoInprocPolicy, dict[str, object]]:
        policy = KsoInprocPolicy(seed=0, stats="window", env={"KSO_SAFE_MAX_HOLD_S": hold})
        res = run(s, policy)
        placed = {p.name: (s.node_names[p.node] if p.node >= 0 else None, p.bound_step) for p in res.pods}
        m = compute(res)
        metrics = {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in m.__dict__.items()
                   if k not in ("wall_s", "extra", "latency_ms")}
        return policy, {"placed": placed, "metrics": metrics}

    reused, got = replay()
    monkeypatch.setattr(kso_extender, "PURE_FILTERS", frozenset())  # every call made
    asked, want = replay()
    assert got == want
    replicas = list(got["placed"].values())[2:]  # type: ignore[union-attr]
    if hold == "inf":
        assert all(node is not None and step >= 5 for node, step in replicas)
        assert reused.extra["filter_repeats"] >= 6 and "filter_repeats" not in asked.extra
    else:  # queued at step 2, refused (3 of the 4 calls reused, and the 4 of each retry round of the step), released
        # at step 3
        assert [step for _, step in replicas] == [3] * 4 and reused.extra["safe_released"] >= 1
        retries = EngineRules().retry_rounds(300.0) - 1
        assert reused.extra["filter_repeats"] == 3 + 4 * retries and "filter_repeats" not in asked.extra
    assert reused.extra["filter_calls"] == asked.extra["filter_calls"]
    assert reused.extra["filtered_out"] == asked.extra["filtered_out"]
    assert len(asked.latencies["filter"]) - len(reused.latencies["filter"]) == reused.extra["filter_repeats"]


def test_rejections_are_reused_over_the_rotating_node_sample(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """120 hot nodes: kube-scheduler's sampling offers each call 100 of them, a different window each time.
    Once a replica's rejections cover a call's nodes, that call is answered without asking (same answers,
    same sampling); new statistics (observe) end the reuse and the next replica is placed."""
    from benchmarks.sim.policies import kso_extender
    from benchmarks.sim.policies.kso_extender import KsoInprocPolicy

    n = 120
    s = Scenario("kso-hot-120", 300.0, 8, [f"n{i}" for i in range(n)], np.full(n, 10000.0), np.full(n, 16 * GIB),
                 [], np.zeros(0), np.zeros(0), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, 8, 2)))
    replicas = [SimPod(i, f"web-{i}", f"uid-web-{i}", 1000, GIB, 3, 8, owner="web") for i in range(6)]

    def ask(reuse: bool) -> tuple[list[str | None], KsoInprocPolicy]:
        if not reuse:
            monkeypatch.setattr(kso_extender, "PURE_FILTERS", frozenset())
        view = SimView(s)
        view.step = 3
        view._usage[:, :3] = [9500, 2 * GIB]  # every node at 95% cpu
        policy = KsoInprocPolicy(seed=0, stats="window")
        policy.setup(view)
        policy.observe(view)
        out = [policy.place(p, view) for p in replicas]
        view._usage[:, :3] = [1000, 2 * GIB]  # cooled down: the next statistics pass the nodes
        policy.observe(view)
        out.append(policy.place(replicas[0], view))
        out.append(str(policy.framework.next_start))
        return out, policy

    got, reused = ask(True)
    want, asked = ask(False)
    assert got == want and got[:6] == [None] * 6 and got[6] is not None
    assert reused.extra["filter_repeats"] >= 3  # 100-node windows of 120 nodes: covered after two calls
    # 6 refused attempts, each with the step's retry over the 20 nodes it did not offer, and the placed one
    assert reused.extra["filter_calls"] == asked.extra["filter_calls"] == 13
    assert reused.extra["filtered_out"] == asked.extra["filtered_out"]


def test_kso_releases_a_held_pod_on_the_replay_clock() -> None:
    """Both nodes hot (the safe rule refuses a pod on each): a pod queued at step 3 is refused at step 3, also from
    the replay's reuse of refusals, and at step 4 (held 300 s >= KSO_SAFE_MAX_HOLD_S, simulated time) it goes to
    the node of least risk; with the hold at inf it is never placed."""
    from benchmarks.sim.policies.kso_extender import KsoInprocPolicy

    def setup(env: dict[str, str]) -> tuple[KsoInprocPolicy, SimView]:
        view = SimView(Scenario("kso-tiny", 300.0, 6, ["hot", "warm"], np.array([10000.0] * 2), np.array([16 * GIB] * 2),
                                [], np.zeros(0), np.zeros(0), np.zeros(0, np.int64), np.zeros(0, np.int64),
                                np.zeros((0, 6, 2))))
        view.requested[:] = [[2000, 2 * GIB], [2000, 2 * GIB]]
        view.step = 3
        # cpu used over the last 3 steps: hot ~9.5 cores (with the pod ~96%: P(util > 90%) ~ 1), warm ~8.9 (~90%: ~0.5)
        view._usage[0, :3] = [[9400, 2 * GIB], [9500, 2 * GIB], [9600, 2 * GIB]]
        view._usage[1, :3] = [[8800, 2 * GIB], [8900, 2 * GIB], [9000, 2 * GIB]]
        kso = KsoInprocPolicy(seed=0, stats="window", env=env)
        kso.setup(view)
        kso.observe(view)
        return kso, view

    pod = SimPod(0, "held", "uid-held", 100, 64 * 1024 * 1024, 3, 6, queued_step=3)
    kso, view = setup({})
    try:
        assert kso.place(pod, view) is None
        assert kso.place(pod, view) is None and kso.extra["filter_repeats"] == 1  # the refusal reused
        view.step = 4  # one step later, nothing else changed (the refusals are still remembered)
        assert kso.place(pod, view) == "warm"
    finally:
        kso.close()
    assert kso.extra["safe_released"] == 1
    never, view = setup({"KSO_SAFE_MAX_HOLD_S": "inf"})
    try:
        view.step = 5
        assert never.place(pod, view) is None
    finally:
        never.close()
    assert never.extra["safe_released"] == 0


def test_a_pod_the_statistics_window_has_not_fully_seen_counts_at_its_request() -> None:
    from benchmarks.sim.policies.kso_extender import KsoInprocPolicy

    # one 16 GiB node; A (4 GiB request, uses 4 GiB) from step 0; B (6 GiB request, uses 3 GiB) arrives and binds
    # at step 3. kso's memory statistics at each step (15-minute window = the last 3 steps):
    #   step 4: node usage 4, 4, 7 GiB; B is in one sample of three -> settled 4, 4, 4 + B's request 6 = 10 GiB
    #           used (the plain window mean, 5 GiB, under-counted B by 2 of its 3 GiB and ignored its request)
    #   step 5: 4, 7, 7 -> still not fully seen: 4 + 6 = 10 GiB
    #   step 6: 7, 7, 7 -> fully seen: its measured usage, 7 GiB
    usage = np.zeros((2, 7, 2), dtype=np.float32)
    usage[:, :, 0] = 0.5
    usage[0, :, 1] = 1.0
    usage[1, :, 1] = 0.5
    s = Scenario("kso-one", 300.0, 7, ["only"], np.array([10000.0]), np.array([16 * GIB]), ["a", "b"],
                 np.array([100.0, 100.0]), np.array([4 * GIB, 6 * GIB]), np.array([0, 3]), np.array([9, 9]), usage)

    class Recording(KsoInprocPolicy):
        def __init__(self) -> None:
            super().__init__(seed=0, stats="window")
            self.free: list[tuple[str, str]] = []

        def observe(self, sim: SimView) -> None:
            super().observe(sim)
            ann = self.state.node("only").annotations
            self.free.append((ann.get("mean-free-memory", ""), ann.get("std-free-memory", "")))

    policy = Recording()
    res = run(s, policy)
    assert res.pods[1].bound_step == 3
    mib = 1024
    assert policy.free[4] == (str(6 * mib), "0") and policy.free[5] == (str(6 * mib), "0")
    assert policy.free[6] == (str(9 * mib), "0")
    assert policy.free[3] == (str(12 * mib), "0")  # before B: A alone, fully seen


def test_kso_node_cache_carries_the_memory_pressure_taint_while_the_node_does() -> None:
    from benchmarks.sim.policies.kso_extender import KsoInprocPolicy

    view = SimView(two_nodes())
    kso = KsoInprocPolicy(seed=0, stats="window")
    kso.setup(view)
    try:
        def taints(name: str) -> list[tuple[str, str]]:
            return [(t.key, t.effect) for t in kso.state.node(name).taints]

        kso.observe(view)
        assert taints("hot") == [] and taints("cool") == []
        view.memory_pressure[0] = True
        kso.observe(view)
        assert taints("hot") == [("node.kubernetes.io/memory-pressure", "NoSchedule")] and taints("cool") == []
        view.memory_pressure[0] = False
        kso.observe(view)
        assert taints("hot") == []
    finally:
        kso.close()
