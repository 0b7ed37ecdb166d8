"""seed-behaviours.md test vectors, reproduced through HTTP on kube-safe-scheduler's routes."""

from __future__ import annotations

import logging

import pytest

from extender.config import load_config
from kso.core.settings import ALERT, TRACE, ConfigError, parse_log_level
from tests.support.fixtures import make_node, make_pod, running_extender

# (mean free cpu, std free cpu, pod cpu) -> (mu, sigma, risk, passes, balance, overload)
SAFE_VECTORS = [
    (2500, 400, "200m", 0.425, 0.1, 8.5e-9, True, 6, 9),
    (600, 300, "200m", 0.9, 0.075, 0.592, False, 4, 0),
    (1000, 200, "500m", 0.875, 0.05, 0.3425, False, 5, 0),
]


@pytest.mark.parametrize("free,std,cpu,mu,sigma,risk,passes,balance,overload", SAFE_VECTORS)
def test_safe_agent_vectors(free, std, cpu, mu, sigma, risk, passes, balance, overload) -> None:
    node = make_node("n1", cpu="4000m", annotations={"mean-free-cpu": str(free), "std-free-cpu": str(std)})
    pod = make_pod("p", cpu=cpu, memory=None)
    with running_extender([node]) as c:
        body = {"Pod": pod, "NodeNames": ["n1"]}
        status, flt = c.post("/scheduler/predicates/safe-overload", body)
        assert status == 200
        assert (flt["NodeNames"] == ["n1"]) is passes
        if not passes:
            assert "P(util > 90%)" in flt["FailedNodes"]["n1"]
        _, bal = c.post("/scheduler/priorities/safe-balance", body)
        _, ovl = c.post("/scheduler/priorities/safe-overload", body)
        assert bal == [{"Host": "n1", "Score": balance}]
        assert ovl == [{"Host": "n1", "Score": overload}]
        _, ex = c.post("/debug/explain", body)
        d = ex["nodes"][0]["details"]["safe"]
        assert d["cpu_mu"] == pytest.approx(mu, abs=1e-6)
        assert d["cpu_sigma"] == pytest.approx(sigma, abs=1e-6)
        assert d["cpu_risk"] == pytest.approx(risk, rel=0.01, abs=1e-10)
        assert d["memory_risk"] is None  # no memory statistics: memory is not judged


def test_safe_forecast_weight_and_missing_stats() -> None:
    # With a forecast of free cpu, freeAvg = 0.8 * 2500 + 0.2 * 500 = 2100 -> mu = (1900 + 200) / 4000.
    fc = make_node("fc", cpu="4000m", annotations={"mean-free-cpu": "2500", "std-free-cpu": "400",
                                                    "forcasted-free-cpu": "500"})
    bare = make_node("bare", cpu="4000m")
    with running_extender([fc, bare]) as c:
        body = {"Pod": make_pod("p", cpu="200m", memory=None), "NodeNames": ["fc", "bare"]}
        _, ex = c.post("/debug/explain", body)
        by = {n["node"]: n for n in ex["nodes"]}
        assert by["fc"]["details"]["safe"]["cpu_mu"] == pytest.approx(0.525)
        assert by["bare"]["passed"] and "no load statistics" in by["bare"]["notes"][0]
        _, bal = c.post("/scheduler/priorities/safe-balance", body)
        assert {s["Host"]: s["Score"] for s in bal}["bare"] == 0  # none valid -> 0


def test_safe_env_settings_change_the_bound() -> None:
    node = make_node("n1", cpu="4000m", annotations={"mean-free-cpu": "1000", "std-free-cpu": "200"})
    body = {"Pod": make_pod("p", cpu="500m", memory=None), "NodeNames": ["n1"]}
    with running_extender([node], env={"SAFEPERCENTILE": "50"}) as c:  # eps 0.5 > risk 0.3425
        assert c.post("/scheduler/predicates/safe-overload", body)[1]["NodeNames"] == ["n1"]
    with running_extender([node]) as c:  # the default eps 0.3 < risk 0.3425
        assert c.post("/scheduler/predicates/safe-overload", body)[1]["NodeNames"] == []


@pytest.mark.parametrize("value,factor_max,score", [
    (None, "100", 10), ("0", "100", 10), ("50", "100", 5), ("25", "100", 8), ("150", "100", 0),
    ("-5", "100", 10), ("abc", "100", 10), ("10", "40", 8), ("2.5", "100", 10), ("95", "100", 1),
])
def test_congestion_vectors(value, factor_max, score) -> None:
    node = make_node("n1", annotations={} if value is None else {"congestion-factor": value})
    with running_extender([node], env={"CONGESTION_FACTOR_MAX": factor_max}) as c:
        _, r = c.post("/scheduler/priorities/congestion", {"Pod": make_pod("p"), "NodeNames": ["n1"]})
        assert r == [{"Host": "n1", "Score": score}]


def test_image_score_example() -> None:
    # seed 001: nginx:1.7.9 present only on worker-node2 -> [0, 0, 1], on its own route.
    nodes = [make_node("master-node", images=[(["k8s.gcr.io/pause:3.1"], 700_000)]),
             make_node("worker-node1", images=[(["busybox:latest"], 1_000_000)]),
             make_node("worker-node2", images=[(["nginx:1.7.9"], 109_000_000)])]
    pod = make_pod("pod-nginx", images=["nginx:1.7.9"])
    with running_extender(nodes) as c:
        body = {"Pod": pod, "Nodes": {"items": nodes}}
        _, r = c.post("/my_scheduler_extension/my_new_priorities/image_score", body)
        assert r == [{"Host": "master-node", "Score": 0}, {"Host": "worker-node1", "Score": 0},
                     {"Host": "worker-node2", "Score": 1}]
        assert c.post("/scheduler/priorities/image_score", body)[1] == r
        # Substring match, no cap: two containers of the same image count twice.
        two = make_pod("two", images=["nginx:1.7.9", "nginx:1.7.9"])
        assert c.post("/scheduler/priorities/image_score", {"Pod": two, "NodeNames": ["worker-node2"]})[1] == [
            {"Host": "worker-node2", "Score": 2}]


def test_image_locality_prefers_nodes_with_big_images() -> None:
    big = (["docker.io/library/python:3.11"], 1_000 * 1024 * 1024)
    nodes = [make_node(f"n{i}", images=[big] if i < 2 else []) for i in range(4)]
    pod = make_pod("py", images=["python:3.11"])  # normalised: docker.io/library/python:3.11
    with running_extender(nodes) as c:
        _, r = c.post("/scheduler/priorities/image-locality", {"Pod": pod, "NodeNames": [f"n{i}" for i in range(4)]})
        # 1000 MiB * 2/4 spread = 500 MiB: (500 - 23) * 100 // (1000 - 23) = 48 -> 4 on 0..10.
        assert [s["Score"] for s in r] == [4, 4, 0, 0]


def test_foo_template() -> None:
    nodes = [make_node("a"), make_node("b")]
    with running_extender(nodes) as c:
        body = {"Pod": make_pod("p"), "NodeNames": ["a", "b"]}
        assert c.post("/scheduler/predicates/foo", body)[1]["NodeNames"] == ["a", "b"]
        assert [s["Score"] for s in c.post("/scheduler/priorities/foo", body)[1]] == [1, 1]


def test_version_route() -> None:
    with running_extender([make_node("a")]) as c:
        status, body = c.get("/version")
        assert status == 200 and body.decode()


@pytest.mark.parametrize("raw,level", [("trace", TRACE), ("DEBUG", logging.DEBUG), ("Info", logging.INFO),
                                       ("WARNING", logging.WARNING), ("error", logging.ERROR), ("ALERT", ALERT),
                                       ("verbose", logging.INFO), ("", logging.INFO)])
def test_log_levels(raw, level) -> None:
    assert parse_log_level(raw) == level


def test_percent_settings_are_read_and_bad_ones_are_errors() -> None:
    # kube-safe-scheduler fell back to the default on a bad value; kso's one rule is an error naming each one.
    cfg = load_config({"SAFEFORECASTWEIGHT": "35", "HTTP_PORT": "5401", "POLICY_OBJECTIVE": "load_balance"})
    assert cfg.agent_params["safe"].forecast_weight == 35
    assert cfg.settings.http_port == 5401
    assert cfg.agent_params["pigeon"].policy_objective == "LOAD_BALANCE"
    with pytest.raises(ConfigError) as bad:
        load_config({"SAFEUTILIZATION": "150", "SAFEPERCENTILE": "x", "NUM_RESOURCES": "9"})
    for name in ("SAFEUTILIZATION='150'", "SAFEPERCENTILE='x'", "NUM_RESOURCES='9'"):
        assert name in str(bad.value)
