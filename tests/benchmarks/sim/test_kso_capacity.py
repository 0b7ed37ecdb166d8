"""kso's replay policies with the product's mechanisms: ``kso`` is kso's default configuration, the capacity
signal kso sends the autoscaler (placeholders for the demand it refuses, the capacity taint with hysteresis) and a
pod judged by what its Deployment measurably uses."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.sim.engine import Autoscaler, SimPod, SimView, run
from benchmarks.sim.policies import make_policy
from benchmarks.sim.policies.kso_extender import KsoInprocPolicy, owner_usage_ratio
from benchmarks.sim.policies.kso_shipped import SHIPPED, KsoDefaultPolicy
from benchmarks.sim.runner import policy_for
from benchmarks.sim.trace import Scenario

GIB = 1024.0**3


def test_kso_is_the_default_configuration_and_the_other_kso_specs_keep_their_meaning() -> None:
    kso = policy_for("kso", 0)
    assert type(kso) is KsoDefaultPolicy and kso.name == "kso" and not kso.http
    assert (kso.stats, kso.judge, kso.capacity, kso.mark, kso.env) == ("forecast", "request", SHIPPED["capacity"],
                                                                       SHIPPED["mark"], {})
    assert policy_for("kso:capacity=none", 0).capacity == "none"  # the code's defaults, outside deploy/
    assert policy_for("kso-inproc", 0).stats == "window"  # the labelled variant the sweeps have always meant
    assert policy_for("kso:stats=window", 0).stats == "window"
    assert make_policy("kso-http").http
    with pytest.raises(ValueError, match="capacity must be one of none, placeholder, taint, both, not 'bogus'"):
        make_policy("kso", capacity="bogus")
    with pytest.raises(ValueError, match="judge must be one of request, usage"):
        make_policy("kso", judge="limits")


def hot_pool(steps: int = 6) -> Scenario:
    """Two 10-core nodes; R (2 cores requested, 9.5 used) from step 0 on node 'hot'; P (6 cores requested, uses
    half) arrives at step 3. kso refuses P on 'hot' (9.5 + 6 cores > U*); P fits 'hot' by requests (8 of 10)."""
    usage = np.zeros((2, steps, 2), dtype=np.float32)
    usage[0, :, 0], usage[0, :, 1] = 4.75, 0.5
    usage[1, :, 0], usage[1, :, 1] = 0.5, 0.5
    return Scenario("kso-hot", 300.0, steps, ["hot", "spare"], np.array([10000.0, 10000.0]), np.array([16 * GIB] * 2),
                    ["r", "p"], np.array([2000.0, 6000.0]), np.array([GIB, GIB]), np.array([0, 3]),
                    np.array([99, 99]), usage)


class Recording(KsoInprocPolicy):
    def __init__(self, **kw) -> None:  # type: ignore[no-untyped-def]
        super().__init__(seed=0, stats="window", env={"KSO_SAFE_MAX_HOLD_S": "inf"}, **kw)
        self.asked: list[tuple[int, np.ndarray, np.ndarray]] = []

    def capacity_requests(self, sim):  # type: ignore[no-untyped-def]
        req = super().capacity_requests(sim)
        if req is not None:
            self.asked.append((sim.step, req.demands.copy(), req.avoid.copy()))
        return req


def test_a_placeholder_for_the_pod_kso_refuses_everywhere_makes_the_autoscaler_add_the_node() -> None:
    # without the signal: P fits 'hot' by requests, so the autoscaler adds nothing and kso (hold: never) keeps
    # refusing it: P never runs
    quiet = Recording()
    res = run(hot_pool(), quiet, autoscaler=Autoscaler(initial_nodes=1))
    assert res.scale_ups == 0 and not res.pods[1].ever_bound and quiet.asked == []
    # with placeholders: at step 3 kso refuses P on 'hot'; its placeholder (P's requests, avoiding 'hot') fits no
    # other node: 'spare' is ordered at the end of step 3 and P binds there at step 4; no placeholder after that
    signal = Recording(capacity="placeholder")
    res = run(hot_pool(), signal, autoscaler=Autoscaler(initial_nodes=1))
    assert res.scale_ups == 1 and res.capacity["placeholder_scale_ups"] == 1
    assert res.pods[1].node == 1 and res.pods[1].bound_step == 4
    assert len(signal.asked) == 1
    step, demands, avoid = signal.asked[0]
    assert step == 3 and demands.tolist() == [[6000.0, GIB]] and avoid.tolist() == [[True, False]]


def window_view(hot_cpu: list[float]) -> SimView:
    """Two 10-core nodes at step 3: 'hot' used ``hot_cpu`` cores over the last three steps, 'cool' one core."""
    view = SimView(Scenario("kso-taint", 300.0, 8, ["hot", "cool"], np.array([10000.0] * 2), np.array([16 * GIB] * 2),
                            [], np.zeros(0), np.zeros(0), np.zeros(0, np.int64), np.zeros(0, np.int64),
                            np.zeros((0, 8, 2))))
    view.step = 3
    view._usage[0, :3, 0] = hot_cpu
    view._usage[:, :3, 1] = 2 * GIB
    view._usage[1, :3, 0] = 1000
    return view


def taints_after(policy: KsoInprocPolicy, views: list[SimView]) -> list[list[bool]]:
    out = []
    policy.setup(views[0])
    try:
        for view in views:
            policy.observe(view)
            out.append(policy.capacity_taints(view).tolist())
    finally:
        policy.close()
    return out


def test_the_capacity_taint_marks_nodes_over_u_star_and_releases_them_with_hysteresis() -> None:
    # 'hot' at 9.4-9.6 cores: over U* (90%) for certain (risk ~1 > eps 0.3) -> tainted. At 8.6-9.0 cores (mean 88%,
    # std 1.6%: risk P(util > 90%) ~0.11, under eps): a node not tainted stays so; a tainted one keeps the taint while
    # that risk is above exit_ratio x eps (0.2 x 0.3 = 0.06) and loses it below (0.8 x 0.3 = 0.24)
    over, mid = [9400.0, 9500.0, 9600.0], [8600.0, 8800.0, 9000.0]
    risk_mid = _risk(mid)
    assert 0.06 < risk_mid < 0.24
    assert taints_after(KsoInprocPolicy(stats="window", capacity="taint", exit_ratio=0.2),
                        [window_view(over), window_view(mid)]) == [[True, False], [True, False]]
    assert taints_after(KsoInprocPolicy(stats="window", capacity="taint", exit_ratio=0.2),
                        [window_view(mid)]) == [[False, False]]
    assert taints_after(KsoInprocPolicy(stats="window", capacity="taint", exit_ratio=0.8),
                        [window_view(over), window_view(mid)]) == [[True, False], [False, False]]
    # without the capacity signal kso asks for no taint
    policy = KsoInprocPolicy(stats="window")
    view = window_view(over)
    policy.setup(view)
    try:
        policy.observe(view)
        assert policy.capacity_taints(view) is None
    finally:
        policy.close()


def _risk(cpu: list[float]) -> float:
    """P(util > 0.9) of 'hot' for a pod of no size, from the safe rule on the window's mean and std."""
    from kso.core.safety import safe_overload_risk

    mean, std = np.mean(cpu) / 10000.0, np.std(cpu) / 10000.0
    return float(safe_overload_risk(np.array([mean]), np.array([std]), 0.9)[0])


def usage_scenario() -> Scenario:
    """'web': w0 bound at step 0 using 0.5 cpu / 0.25 memory of its request, w1 bound at step 3 using 0.8 / 0.25;
    'db': d0 bound at step 3; a new 'web' pod n and a new 'db' pod m. Requests: 2.5 cores, 4 GiB each."""
    steps = 8
    usage = np.zeros((5, steps, 2), dtype=np.float32)
    usage[0, :, 0], usage[1, :, 0], usage[2, :, 0] = 0.5, 0.8, 0.5
    usage[:, :, 1] = 0.25
    return Scenario("kso-usage", 300.0, steps, ["busy"], np.array([10000.0]), np.array([64 * GIB]),
                    ["w0", "w1", "d0", "n", "m"], np.full(5, 2500.0), np.full(5, 4 * GIB), np.array([0, 3, 3, 6, 6]),
                    np.full(5, 99), usage, pod_owner=["web", "web", "db", "web", "db"])


def test_owner_usage_ratio_pools_each_deployments_samples_since_each_pod_was_bound() -> None:
    view = SimView(usage_scenario())
    for i, bound in ((0, 0), (1, 3), (2, 3)):
        pod = SimPod(i, f"p{i}", f"u{i}", 2500.0, 4 * GIB, bound, 99, owner=usage_scenario().pod_owner[i], node=0,
                     bound_step=bound)
        view.running[i] = pod
    view.step = 6
    # web: w0 6 samples at 0.5, w1 3 at 0.8 -> cpu (6 x 0.5 + 3 x 0.8) / 9 = 0.6, memory 0.25; db: 3 samples < 6: none
    got = owner_usage_ratio(view, 12, 6)
    assert set(got) == {"web"} and got["web"] == pytest.approx([0.6, 0.25])
    # a window of the last 2 steps: web 2 + 2 samples -> cpu (2 x 0.5 + 2 x 0.8) / 4 = 0.65
    assert owner_usage_ratio(view, 2, 4)["web"] == pytest.approx([0.65, 0.25])


def test_judged_by_use_kso_admits_a_pod_its_request_would_refuse_and_accounts_it_at_that_size() -> None:
    # 'busy' (10 cores) used 6.9-7.1 cores over the last 3 steps. The new 'web' pod requests 2.5 cores: at its
    # request the node would be at ~95% (over U* 90%: refused); its Deployment uses 0.6 of its request, 1.5 cores:
    # ~85%, admitted. The 'db' pod (no usage known) is judged at its request: refused.
    s = usage_scenario()
    view = SimView(s)
    for i, bound in ((0, 0), (1, 3), (2, 3)):
        view.running[i] = SimPod(i, f"p{i}", f"u{i}", 2500.0, 4 * GIB, bound, 99, owner=s.pod_owner[i], node=0,
                                 bound_step=bound)
    view.requested[0] = [7500.0, 12 * GIB]
    view.step = 6
    view._usage[0, 3:6, 0] = [6900.0, 7000.0, 7100.0]
    view._usage[0, :6, 1] = 3 * GIB
    new = SimPod(3, "n", "u3", 2500.0, 4 * GIB, 6, 99, owner="web", queued_step=6)
    other = SimPod(4, "m", "u4", 2500.0, 4 * GIB, 6, 99, owner="db", queued_step=6)
    for judge, admitted in (("request", []), ("usage", ["n"])):
        kso = KsoInprocPolicy(stats="window", judge=judge, env={"KSO_SAFE_MAX_HOLD_S": "inf"})
        kso.setup(view)
        try:
            kso.observe(view)
            placed = [p.name for p in (new, other) if kso.place(p, view) == "busy"]
            assert placed == admitted, judge
            if judge == "usage":
                assert kso.size(new) == pytest.approx((1500.0, 4 * GIB * 0.25))
                assert kso.size(other) == (2500.0, 4 * GIB)
                kso.bound(new, "busy", view)
                assert kso.state.pods["u3"].requests["cpu"] == pytest.approx(1500.0)  # kso's own accounting of it
        finally:
            kso.close()


def test_kso_plan_takes_the_same_mechanisms() -> None:
    # kso-plan (and kso-plan+reopt) inherit the kso policy: judged by use, with placeholders; its own pooled prior
    # (self._ratio) and the Deployments' usage ratios are different things
    from benchmarks.sim.policies.kso_plan import KsoPlanPolicy

    policy = KsoPlanPolicy(seed=0, stats="window", judge="usage", capacity="placeholder", prior="pooled",
                           env={"KSO_SAFE_MAX_HOLD_S": "inf"})
    res = run(hot_pool(), policy, autoscaler=Autoscaler(initial_nodes=1))
    assert res.scale_ups == 1 and res.pods[1].node == 1 and res.pods[1].bound_step == 4


def sampled_hot_pool(n_hot: int = 200, steps: int = 6) -> Scenario:
    """``n_hot`` ready 10-core nodes, each holding one resident (6 cores requested: one fits a node, 9.5 used) from
    step 0, and one spare node of the pool; P (3 cores requested, fits any resident's node by requests) arrives at
    step 3. kso refuses P everywhere (9.5 + 3 cores > U*); kube-scheduler offers it 100 of the nodes per attempt."""
    n = n_hot + 1
    usage = np.zeros((n, steps, 2), dtype=np.float32)
    usage[:n_hot, :, 0], usage[:, :, 1] = 9.5 / 6, 0.5
    usage[n_hot, :, 0] = 0.5
    return Scenario("kso-sampled", 300.0, steps, [f"n{i}" for i in range(n)], np.full(n, 10000.0),
                    np.full(n, 16 * GIB), [f"r{i}" for i in range(n_hot)] + ["p"],
                    np.array([6000.0] * n_hot + [3000.0]), np.full(n, GIB), np.array([0] * n_hot + [3]),
                    np.full(n, 99), usage)


def test_on_a_sampled_cluster_the_placeholder_avoids_every_node_kso_refuses_not_only_the_offered_ones() -> None:
    from benchmarks.sim.policies.framework import feasible_nodes_to_find

    assert feasible_nodes_to_find(201) == 100  # P is offered half of the 200 hot nodes per attempt
    signal = Recording(capacity="placeholder")
    res = run(sampled_hot_pool(), signal, autoscaler=Autoscaler(initial_nodes=200, scale_down_unneeded_steps=9))
    # the step's retries offer P the 100 nodes the first attempt did not, kso refuses those too, so the placeholder
    # avoids every hot node and fits none of them: the spare node is ordered at the end of step 3, P binds there at
    # step 4 (scale-down slowed so the drain rule does not move P back by requests)
    step, demands, avoid = signal.asked[0]
    assert step == 3 and demands.tolist() == [[3000.0, GIB]]
    assert avoid[0, :200].all() and not avoid[0, 200]
    assert res.scale_ups == 1 and res.capacity["placeholder_scale_ups"] == 1
    assert (res.pods[200].node, res.pods[200].bound_step) == (200, 4)


def marking_pool(steps: int = 14) -> Scenario:
    """Two 10-core nodes: R (6 cores requested: 60%, not underused) on 'hot', using 9.5 cores until step 6 and 1 core
    after; S (1 core: 10%, underused; uses 0.5) on 'small'. S fits 'hot' by requests (7 of 10), where kso refuses it
    while R's 9.5 cores are in the statistics (9.5 + 1 > U*)."""
    usage = np.zeros((2, steps, 2), dtype=np.float32)
    usage[0, :6, 0], usage[0, 6:, 0], usage[1, :, 0] = 9.5 / 6, 1 / 6, 0.5
    usage[:, :, 1] = 0.5
    return Scenario("kso-mark", 300.0, steps, ["hot", "small"], np.array([10000.0, 10000.0]),
                    np.array([16 * GIB] * 2), ["r", "s"], np.array([6000.0, 1000.0]), np.array([GIB, GIB]),
                    np.array([0, 0]), np.array([99, 99]), usage)


class PinnedMarks(KsoInprocPolicy):
    """R on 'hot', S on 'small' at step 0 (kso decides later placements); records the marks of every step."""

    def __init__(self, **kw) -> None:  # type: ignore[no-untyped-def]
        super().__init__(seed=0, stats="window", env={"KSO_SAFE_MAX_HOLD_S": "inf"}, **kw)
        self.marks: list[list[bool]] = []

    def place(self, pod, sim):  # type: ignore[no-untyped-def]
        return sim.node_names[pod.index] if sim.step == 0 else super().place(pod, sim)

    def scale_down_disabled(self, sim):  # type: ignore[no-untyped-def]
        marked = super().scale_down_disabled(sim)
        self.marks.append([] if marked is None else marked.tolist())
        return marked


def test_kso_marks_the_node_whose_pod_it_would_refuse_everywhere_else_and_unmarks_it_when_that_ends() -> None:
    # without the mark the autoscaler drains 'small' at the end of step 2 (10% requested for 10 minutes; S fits
    # 'hot' by requests), and S, refused on 'hot', waits until R's load has left the window
    res = run(marking_pool(), PinnedMarks(), autoscaler=Autoscaler())
    assert res.scale_downs == 1 and res.provisioned[1, 3:].sum() == 0
    assert res.pods[1].queued_step == 3 and res.pods[1].bound_step > 6 and res.pods[1].waits[1] > 4
    # with it: no statistics at step 0 (nothing is judged); from step 1 kso refuses S on 'hot': 'small' is marked and
    # stays. R's use falls at step 6; once the window shows it, kso would place S on 'hot': the mark goes and
    # the autoscaler drains 'small' three evaluations later (S moves to 'hot'). 'hot' is never marked (not underused).
    policy = PinnedMarks(mark="refused")
    res = run(marking_pool(), policy, autoscaler=Autoscaler())
    small = [m[1] for m in policy.marks]
    assert small[0] is False and all(small[1:7]) and small[-1] is False
    last = max(k for k, m in enumerate(small) if m)
    assert not any(m[0] for m in policy.marks)
    assert res.scale_downs == 1 and res.provisioned[1].tolist() == [True] * (last + 4) + [False] * (10 - last)
    assert res.pods[1].node == 0 and res.capacity["scale_down_disabled_marks"] == 1
    # mark_hold keeps the mark that many steps after the rule last held
    held = PinnedMarks(mark="refused", mark_hold=2)
    run(marking_pool(), held, autoscaler=Autoscaler())
    assert [m[1] for m in held.marks][: last + 3] == [False] + [True] * (last + 2)
    with pytest.raises(ValueError, match="mark must be one of none, refused"):
        make_policy("kso", mark="always")
    with pytest.raises(ValueError, match="mark_hold must be a whole number"):
        make_policy("kso", mark="refused", mark_hold=-1)
